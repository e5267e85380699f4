package main

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A --store node that accepts connections but never answers (a leader
// under SIGSTOP, a stalled disk) kept every store call of the proxy: each
// waited out its deadline on it and the caller got 503, for as long as the
// node stayed stopped, though the next node answered (a walk of the proxy
// under faults: 20 s of SIGSTOP, every keyed request 503 after 5 s). After
// one call times out there, the next starts at the next node.
func TestProxyStoreLeavesANodeThatDoesNotAnswer(t *testing.T) {
	stop := make(chan struct{})
	stuck := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-stop:
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(stuck.Close)
	t.Cleanup(func() { close(stop) })
	live := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(live.Close)
	var nodes []*url.URL
	for _, s := range []string{stuck.URL, live.URL} {
		u, err := url.Parse(s)
		require.NoError(t, err)
		nodes = append(nodes, u)
	}
	f := newStoreFailover(nodes, nil)
	call := func(d time.Duration) (*http.Response, error) {
		ctx, cancel := context.WithTimeout(context.Background(), d)
		defer cancel()
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, f.base()+"/v1/claim", nil)
		require.NoError(t, err)
		resp, err := f.RoundTrip(req)
		if err == nil {
			resp.Body.Close()
		}
		return resp, err
	}
	_, err := call(200 * time.Millisecond)
	require.Error(t, err, "the stuck node answered")
	for i := 0; i < 3; i++ {
		resp, err := call(2 * time.Second)
		require.NoError(t, err, "call %d after a call timed out on the stuck node went to it again", i)
		require.Equal(t, http.StatusOK, resp.StatusCode)
	}

	// A caller that goes away says nothing of the node: it stays first.
	f.cur.Store(1)
	ctx, cancel := context.WithCancel(context.Background())
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, f.base()+"/v1/claim", nil)
	require.NoError(t, err)
	f.cur.Store(0)
	go func() { time.Sleep(100 * time.Millisecond); cancel() }()
	_, err = f.RoundTrip(req)
	require.Error(t, err)
	require.Equal(t, int64(0), f.cur.Load(), "a cancelled call moved the proxy off its node")
}
