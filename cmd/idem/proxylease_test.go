package main

import (
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Bug (adoption walk): a proxy that could not extend its lease (the store
// unreachable from it, or answering 503 to extends) let the upstream call
// run on past the lease; a retry through another proxy took the key over
// and ran the upstream a second time beside the first. The middleware now
// cancels the call a tenth of the lease before it runs out, and the proxy
// answers 503, releasing the key.
func TestProxyCancelsTheUpstreamWhenItsLeaseCannotBeKept(t *testing.T) {
	store := startStore(t)
	target, err := url.Parse("http://" + store.http)
	require.NoError(t, err)
	rp := httputil.NewSingleHostReverseProxy(target)
	rp.ModifyResponse = func(resp *http.Response) error {
		resp.Header.Del("Idem-Leader") // the proxy keeps to this front
		return nil
	}
	var extends atomic.Int32
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/extend" {
			extends.Add(1)
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		rp.ServeHTTP(w, r)
	}))
	defer front.Close()
	cancelled := make(chan struct{}, 1)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.ReadAll(r.Body) // then net/http sees the connection close
		select {
		case <-r.Context().Done():
			cancelled <- struct{}{}
		case <-time.After(20 * time.Second):
			w.WriteHeader(http.StatusCreated)
		}
	}))
	defer up.Close()
	px := startProxy(t, "--upstream", up.URL, "--store", front.Listener.Addr().String(), "--lease", "1s") // the default --store-timeout: a loaded machine took over 300 ms for the first claim

	got := make(chan pxAnswer, 1)
	go func() { got <- pxSend(t, "POST", px.url+"/slow", "lease-1", `{}`) }()
	var a pxAnswer
	select {
	case a = <-got:
	case <-time.After(15 * time.Second):
		t.Fatal("the upstream call ran on past its lease")
	}
	require.Equal(t, http.StatusServiceUnavailable, a.status, "%+v", a)
	require.Contains(t, a.body, "could not keep this request's idempotency key")
	require.Equal(t, "1", a.header.Get("Retry-After"))
	require.Positive(t, extends.Load())
	select {
	case <-cancelled:
	case <-time.After(5 * time.Second):
		t.Fatal("the upstream call was not cancelled")
	}
	// The lease goroutine logs while, or after, the handler is cancelled.
	waitForLine(t, px.logs, "lease")
}

// Bug (adoption walk): a --lease outside the store's --min-lease/--max-lease
// was not checked at start; the store refused every claim, and each keyed
// request failed, found only in the first request's log. The proxy now says
// so at start, naming --lease and the store's bounds (as it does of a
// --max-stored-body above the store's --max-response-bytes), and a keyed
// request gets 503 without the upstream running, never the caller's 400.
func TestProxyWarnsOfALeaseOutsideTheStoresBounds(t *testing.T) {
	up := newUpstream(t)
	store := start(t, filepath.Join(t.TempDir(), "data"), freePort(t), freePort(t), "--max-lease", "20s", "--lease", "10s")
	px := startProxy(t, "--upstream", up.srv.URL, "--store", store.http, "--lease", "30s")
	waitForLine(t, px.logs, "--lease is outside the store's --min-lease/--max-lease")
	require.Contains(t, px.logs.String(), "store-max-lease=20s")
	require.NotContains(t, px.logs.String(), "Options.Lease is outside", "said once, naming the proxy's flag")
	a := pxSend(t, "POST", px.url+"/pay", "lease-bounds-1", `{}`)
	require.Equal(t, http.StatusServiceUnavailable, a.status, "%+v", a)
	require.Equal(t, int64(0), up.runs.Load())
	// Each refused request is logged too: naming the proxy's flag, since
	// an operator of idem proxy has no Options.Lease to set.
	waitForLine(t, px.logs, "idempotency store refused the lease")
	require.Contains(t, px.logs.String(), "idem proxy's --lease")
}
