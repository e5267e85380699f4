package client

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// countingServer is an HTTP server that counts the connections it accepted
// and the requests it served.
type countingServer struct {
	*httptest.Server
	conns, reqs atomic.Int64
}

func newCountingServer(t *testing.T, h http.HandlerFunc) *countingServer {
	t.Helper()
	s := &countingServer{}
	s.Server = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.reqs.Add(1)
		h(w, r)
	}))
	s.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		if st == http.StateNew {
			s.conns.Add(1)
		}
	}
	s.Start()
	t.Cleanup(s.Close)
	return s
}

func echo(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	w.Header().Set("Content-Type", "application/json")
	w.Write(b)
}

// The Client's own transport keeps connections alive: many requests, at
// most as many connections as were in flight at once.
func TestDefaultTransportKeepsConnectionsAlive(t *testing.T) {
	forEachScheme(t, func(t *testing.T, sch testScheme) {
		s := sch.countingServer(t, echo)
		c := sch.client(t, s.URL)
		if _, ok := c.hc.Transport.(*syncTransport); !ok {
			t.Fatalf("default transport is %T", c.hc.Transport)
		}
		ctx := context.Background()
		for i := 0; i < 50; i++ {
			raw, err := c.Do(ctx, http.MethodPost, "/x", nil, map[string]int{"i": i})
			if err != nil || !bytes.Contains(raw, []byte(`"i"`)) {
				t.Fatalf("request %d: %s, %v", i, raw, err)
			}
		}
		if n := s.conns.Load(); n != 1 {
			t.Fatalf("50 requests one after the other opened %d connections, want 1", n)
		}
		var wg sync.WaitGroup
		for round := 0; round < 3; round++ {
			for g := 0; g < 16; g++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					if _, err := c.Do(ctx, http.MethodPost, "/x", nil, map[string]int{"g": g}); err != nil {
						t.Error(err)
					}
				}()
			}
			wg.Wait()
		}
		if n := s.conns.Load(); n > 17 {
			t.Fatalf("3 rounds of 16 concurrent requests opened %d connections, want at most 17", n)
		}
	})
}

// A connection the node closed while it sat idle (a restart, its
// --idle-timeout) is never written to: the next claim goes on a new
// connection and succeeds, and the node sees it once. With a transport
// that wrote to it, the write succeeds and the answer is lost: an unknown
// outcome for a claim that never arrived.
func TestIdleConnectionClosedByTheNodeIsNotUsed(t *testing.T) {
	forEachScheme(t, func(t *testing.T, sch testScheme) {
		s := sch.countingServer(t, echo)
		c := sch.client(t, s.URL)
		ctx := context.Background()
		for i := 0; i < 20; i++ {
			if _, err := c.Do(ctx, http.MethodPost, "/x", nil, map[string]int{"i": i}); err != nil {
				t.Fatal(err)
			}
			s.CloseClientConnections() // the node drops its idle connections
			time.Sleep(5 * time.Millisecond)
		}
		if got := s.reqs.Load(); got != 20 {
			t.Fatalf("the node served %d requests, want 20 (one each)", got)
		}
		if got := s.conns.Load(); got != 20 {
			t.Fatalf("%d connections for 20 requests with the node closing each: a closed one was reused", got)
		}
	})
}

// A context that ends mid-request fails it with the context's error, and
// the connection, whose answer may still come, is not reused.
func TestTransportHonoursContext(t *testing.T) {
	forEachScheme(t, func(t *testing.T, sch testScheme) {
		release := make(chan struct{})
		s := sch.countingServer(t, func(w http.ResponseWriter, r *http.Request) {
			switch r.URL.Path {
			case "/slow":
				<-release
			case "/partial": // the answer's head, then part of its body
				w.Write([]byte(`{"partial":`))
				w.(http.Flusher).Flush()
				<-release
				return
			}
			echo(w, r)
		})
		defer close(release)
		c := sch.client(t, s.URL)
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		_, err := c.Do(ctx, http.MethodPost, "/slow", nil, map[string]int{})
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("got %v, want context.DeadlineExceeded", err)
		}
		raw, err := c.Do(context.Background(), http.MethodPost, "/x", nil, map[string]int{"after": 1})
		if err != nil || !bytes.Contains(raw, []byte("after")) {
			t.Fatalf("after a timeout: %s, %v", raw, err)
		}
		if n := s.conns.Load(); n != 2 {
			t.Fatalf("%d connections, want 2: the timed-out one must not be reused", n)
		}

		// Ending while the answer's body is read: the context's error too.
		ctx3, cancel3 := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel3()
		if _, err := c.Do(ctx3, http.MethodPost, "/partial", nil, map[string]int{}); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("deadline while reading the answer: got %v, want context.DeadlineExceeded", err)
		}

		cancelled, cancel2 := context.WithCancel(context.Background())
		cancel2()
		if _, err := c.Do(cancelled, http.MethodPost, "/x", nil, map[string]int{}); !errors.Is(err, context.Canceled) {
			t.Fatalf("cancelled before sending: got %v", err)
		}
	})
}

// A token holding a line break would add headers of the caller's choosing
// to the request (or a second request): refused, nothing sent. New refuses
// such a token (ErrToken); the transport refuses it too, should one reach
// it.
func TestTransportRefusesHeaderInjection(t *testing.T) {
	forEachScheme(t, func(t *testing.T, sch testScheme) {
		s := sch.countingServer(t, echo)
		c := sch.client(t, s.URL, WithToken("t"))
		c.token = "t\r\nX-Role: admin"
		if _, err := c.Do(context.Background(), http.MethodPost, "/x", nil, map[string]int{}); err == nil || !strings.Contains(err.Error(), "invalid value for header") {
			t.Fatalf("got %v, want a refusal", err)
		}
		if n := s.reqs.Load(); n != 0 {
			t.Fatalf("the node saw %d requests", n)
		}
	})
}

// Answers of every shape: chunked and larger than the buffers, no body,
// "Connection: close" (not reused), and a body closed before its end (the
// connection is dropped, the next request still works).
func TestTransportAnswerShapes(t *testing.T) {
	forEachScheme(t, func(t *testing.T, sch testScheme) {
		big := bytes.Repeat([]byte("0123456789abcdef"), 1<<16) // 1 MiB
		s := sch.countingServer(t, func(w http.ResponseWriter, r *http.Request) {
			switch r.URL.Path {
			case "/chunked":
				for i := 0; i < len(big); i += 100_000 {
					w.Write(big[i:min(i+100_000, len(big))])
					w.(http.Flusher).Flush()
				}
			case "/empty":
				w.WriteHeader(http.StatusNoContent)
			case "/close":
				w.Header().Set("Connection", "close")
				w.Write([]byte("bye"))
			default:
				echo(w, r)
			}
		})
		tr := NewTransport(sch.clientTLS())
		hc := &http.Client{Transport: tr}
		get := func(path string) []byte {
			t.Helper()
			resp, err := hc.Get(s.URL + path)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			b, err := io.ReadAll(resp.Body)
			if err != nil {
				t.Fatal(err)
			}
			return b
		}
		if b := get("/chunked"); !bytes.Equal(b, big) {
			t.Fatalf("chunked answer: %d bytes, want %d", len(b), len(big))
		}
		if b := get("/empty"); len(b) != 0 {
			t.Fatalf("204 with %d bytes", len(b))
		}
		conns := s.conns.Load()
		if b := get("/close"); string(b) != "bye" {
			t.Fatalf("close: %q", b)
		}
		get("/x")
		if n := s.conns.Load(); n != conns+1 {
			t.Fatalf("after a Connection: close answer %d new connections, want 1", n-conns)
		}

		resp, err := hc.Get(s.URL + "/chunked")
		if err != nil {
			t.Fatal(err)
		}
		io.ReadFull(resp.Body, make([]byte, 10))
		resp.Body.Close() // before its end
		if b := get("/chunked"); !bytes.Equal(b, big) {
			t.Fatal("the request after a body closed early got a wrong answer")
		}
	})
}

// A connection that could not be made is a *net.OpError "dial": the
// Client then tries its next node, which it must never do for a request
// that may have arrived.
func TestTransportDialErrorIsNeverDelivered(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	for _, scheme := range []string{"http", "https"} {
		_, err = (&http.Client{Transport: NewTransport(nil)}).Post(scheme+"://"+addr+"/v1/claim", "application/json", strings.NewReader("{}"))
		if err == nil || !neverDelivered(err) {
			t.Fatalf("%s: got %v, want a dial error", scheme, err)
		}
	}
}

// A node (or whatever answers on its address) that sends headers without
// end gets an error once they pass 10 MiB, not the caller's memory.
func TestTransportBoundsAnswerHeaders(t *testing.T) {
	forEachScheme(t, func(t *testing.T, sch testScheme) {
		url := sch.rawServer(t, func(c net.Conn) {
			defer c.Close()
			if readHead(bufio.NewReader(c)) != nil {
				return
			}
			c.Write([]byte("HTTP/1.1 200 OK\r\n"))
			line := []byte("X-Pad: " + strings.Repeat("a", 1000) + "\r\n")
			for i := 0; i < 20_000; i++ { // ~20 MB
				if _, err := c.Write(line); err != nil {
					return
				}
			}
		})
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url+"/", nil)
		_, err := (&http.Client{Transport: NewTransport(sch.clientTLS())}).Do(req)
		if err == nil || !strings.Contains(err.Error(), "headers are larger than") {
			t.Fatalf("got %v, want the headers refused", err)
		}
	})
}
