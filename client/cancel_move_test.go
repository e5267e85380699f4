package client

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"
)

// slowNode answers every request after delay (or when the caller leaves),
// as a healthy leader under a commit-latency spike does.
func slowNode(t *testing.T, delay time.Duration) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-time.After(delay):
		case <-r.Context().Done():
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{"ok":true}`))
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// silentNode accepts connections and never answers (a stopped process).
// It is idemtest.HungNode, kept here: the client's own tests must not
// reach the store's packages (layout_test.go).
func silentNode(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	return "http://" + ln.Addr().String()
}

// A caller that cancels its own call while the node is working on it
// (a service's request whose caller went away, a hedged call) says nothing
// of the node: later requests stay on it. Bug: the cancel took the "sent,
// not answered" path, which moved the client off a healthy leader, here
// onto a stopped node where the next caller waited out its deadline; and a
// Batcher whose only caller cancelled abandoned its batch and moved too.
// A deadline that runs out on the node still moves them on
// (internal/e2e/client's TestSeveralNodesLeaveANodeThatDoesNotAnswer).
func TestCallerCancelLeavesTheClientOnItsNode(t *testing.T) {
	healthy := slowNode(t, 300*time.Millisecond)
	c, err := New(healthy + "," + silentNode(t))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(50*time.Millisecond, cancel)
	if _, err := c.Do(ctx, http.MethodGet, "/v1/anything", nil, nil); err == nil {
		t.Fatal("a cancelled call succeeded")
	}
	if c.Addr() != healthy {
		t.Fatalf("after the caller cancelled its own call, the client moved to %s, off %s", c.Addr(), healthy)
	}

	b := c.NewBatcher(BatcherConfig{})
	defer b.Close()
	ctx, cancel = context.WithCancel(context.Background())
	time.AfterFunc(50*time.Millisecond, cancel)
	if _, err := b.Get(ctx, "p", "e", "k", ""); err == nil {
		t.Fatal("a cancelled batched call succeeded")
	}
	time.Sleep(100 * time.Millisecond) // the abandoned batch request returns
	if c.Addr() != healthy {
		t.Fatalf("after a batch's only caller cancelled, the client moved to %s, off %s", c.Addr(), healthy)
	}
}
