package e2emiddleware_test

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idem-store/idem/middleware"
)

// HeaderPrincipal's header sent twice is refused, as idem proxy's
// --principal-header is (docs/API.md: "a request without it (or with it
// twice) is 401"). Bug: the first value was taken. A gateway that adds its
// principal header rather than replacing the caller's (Envoy's
// request_headers_to_add appends by default) left the caller's own value
// first: a caller could name another tenant and act in its scope (replays
// of its stored answers included), and the handler ran.
func TestHeaderPrincipalSentTwiceIsRefused(t *testing.T) {
	ran := false
	e := newEnv(t, middleware.Options{Principal: middleware.HeaderPrincipal("X-Tenant")},
		http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { ran = true; io.WriteString(w, "ok") }))
	send := func(tenants ...string) int {
		req, err := http.NewRequest(http.MethodPost, e.url+"/pay", strings.NewReader("{}"))
		require.NoError(t, err)
		req.Header.Set("Idempotency-Key", "k-"+strings.Join(tenants, "-"))
		for _, v := range tenants {
			req.Header.Add("X-Tenant", v)
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		return resp.StatusCode
	}
	require.Equal(t, http.StatusUnauthorized, send("victim", "attacker"))
	require.False(t, ran, "the handler ran for a request with two principals")
	require.Equal(t, http.StatusUnauthorized, send())
	require.Equal(t, http.StatusOK, send("attacker"))
	require.True(t, ran)
}

// HeaderPrincipal's header holding a comma is refused as the header sent
// twice is: it is the same two values joined on one line (RFC 9110 5.3),
// as Apache's RequestHeader append writes them and httpd passes on a
// header sent twice. Bug: "victim, attacker" was the principal, and the
// handler ran; one that reads the first item of the list acted for the
// tenant the caller named.
func TestHeaderPrincipalWithACommaIsRefused(t *testing.T) {
	ran := false
	e := newEnv(t, middleware.Options{Principal: middleware.HeaderPrincipal("X-Tenant")},
		http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { ran = true; io.WriteString(w, "ok") }))
	send := func(tenant string) int {
		req, err := http.NewRequest(http.MethodPost, e.url+"/pay", strings.NewReader("{}"))
		require.NoError(t, err)
		req.Header.Set("Idempotency-Key", "k-comma")
		req.Header.Set("X-Tenant", tenant)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		return resp.StatusCode
	}
	require.Equal(t, http.StatusUnauthorized, send("victim, attacker"))
	require.False(t, ran, "the handler ran for a request with two principals on one line")
	require.Equal(t, http.StatusOK, send("attacker"))
}
