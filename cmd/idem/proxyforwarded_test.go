package main

import (
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestProxyForwardingHeadersAreThisHops: an upstream behind the proxy
// learns the caller's address and scheme from the forwarding headers, and
// the proxy says what it saw there (docs/API.md: "as the proxy saw
// them"). It replaced X-Forwarded-For, -Host, -Proto, X-Real-IP and
// dropped Forwarded, but passed the caller's X-Forwarded-Port, -Ssl,
// -Scheme, -Prefix and -Server on as written: Rack takes X-Forwarded-Ssl:
// on for https before X-Forwarded-Proto, Spring and Express build URLs from
// X-Forwarded-Port and -Prefix, so a caller on plain http was taken for
// one on https, or had the service's redirects point where it liked. So
// did every spelling with '_' for '-' (X_Forwarded_For,
// Idempotency_Attempt), which CGI, WSGI and Rack servers read as the
// proxy's own header, and one that keeps the last (Puma before 6.4.3,
// CVE-2024-45614) took the caller's. Every such header a caller sends is
// dropped now, keyed or not, and the proxy's own are there once; not
// X-Forwarded-User or -Email, by which a gateway in front says who the
// caller is. A retry from another address with other such headers is
// still replayed: they are no part of the fingerprint.
func TestProxyForwardingHeadersAreThisHops(t *testing.T) {
	var seen atomic.Pointer[http.Header]
	var runs atomic.Int64
	up := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs.Add(1)
		h := r.Header.Clone()
		seen.Store(&h)
		w.WriteHeader(http.StatusCreated)
	}))
	ln, err := net.Listen("tcp", freePort(t)) // the test's own address (IDEM_TEST_IP)
	require.NoError(t, err)
	up.Listener.Close()
	up.Listener = ln
	up.Start()
	defer up.Close()
	store := startStore(t)
	px := startProxy(t, "--upstream", up.URL, "--store", store.http)

	forged := []string{
		"X-Forwarded-For", "203.0.113.8", "X-Forwarded-Host", "evil.example", "X-Forwarded-Proto", "https",
		"X-Forwarded-Port", "443", "X-Forwarded-Ssl", "on", "X-Forwarded-Scheme", "https",
		"X-Forwarded-Prefix", "/evil", "X-Forwarded-Server", "evil.example", "Forwarded", "for=203.0.113.9;proto=https",
		"X-Real-IP", "203.0.113.7",
		// The same with '_' for '-': one variable to a CGI, WSGI or Rack
		// server (HTTP_X_FORWARDED_FOR), which may keep the caller's.
		"X_Forwarded_For", "203.0.113.10", "x_real_ip", "203.0.113.11", "X_Forwarded_Proto", "https",
		"Idempotency_Attempt", "99",
		// Who the caller is, as a gateway in front says it
		// (oauth2-proxy): not where it came from, passed on.
		"X-Forwarded-User", "alice", "X-Forwarded-Email", "alice@example.com",
	}
	host := strings.TrimPrefix(px.url, "http://")
	check := func(method, key string) {
		t.Helper()
		a := pxSend(t, method, px.url+"/pay", key, `{}`, forged...)
		require.Contains(t, []int{http.StatusCreated, http.StatusOK}, a.status, "%+v", a)
		h := *seen.Load()
		for name, vs := range h {
			if strings.Contains(name, "_") {
				t.Errorf("%s: %q reached the upstream", name, vs)
			}
			if forwardingHeader(name) {
				require.Len(t, vs, 1, "%s: %q", name, vs)
			}
		}
		require.True(t, net.ParseIP(h.Get("X-Real-IP")).IsLoopback(), "X-Real-IP %q", h.Get("X-Real-IP"))
		require.Equal(t, h.Get("X-Real-IP"), h.Get("X-Forwarded-For"))
		require.Equal(t, host, h.Get("X-Forwarded-Host"))
		require.Equal(t, "http", h.Get("X-Forwarded-Proto"))
		require.Equal(t, "alice", h.Get("X-Forwarded-User"))
		require.Equal(t, "alice@example.com", h.Get("X-Forwarded-Email"))
		for _, name := range []string{"X-Forwarded-Port", "X-Forwarded-Ssl", "X-Forwarded-Scheme", "X-Forwarded-Prefix", "X-Forwarded-Server", "Forwarded"} {
			require.Empty(t, h.Values(name), "%s: the caller's value reached the upstream (%s %s)", name, method, key)
		}
	}
	check(http.MethodPost, "fwd-1")
	check(http.MethodGet, "")
	require.Equal(t, int64(2), runs.Load())

	// A retry with other forwarding headers is the same request.
	a := pxSend(t, http.MethodPost, px.url+"/pay", "fwd-1", `{}`, "X-Forwarded-For", "198.51.100.1", "X-Forwarded-Port", "8443", "Forwarded", "for=198.51.100.2")
	require.Equal(t, http.StatusCreated, a.status, "%+v", a)
	require.Equal(t, "true", a.header.Get("Idempotency-Replayed"))
	require.Equal(t, int64(2), runs.Load())
}
