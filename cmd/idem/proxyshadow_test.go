package main

import (
	"net"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestProxyKeyedHeadersSpeltWithUnderscoresDoNotReachTheUpstream: the
// proxy keys a request by --principal-header X-Tenant and fingerprints it
// by --fingerprint-header X-Account, but a caller's X_Tenant and X_Account
// went on to the upstream, where CGI, WSGI and Rack servers read them as
// the same headers (HTTP_X_TENANT), and one that keeps the last (Puma
// before 6.4.3, CVE-2024-45614) acted on the caller's: a gateway that sets
// X-Tenant seldom touches X_Tenant, so the upstream acted for a tenant the
// caller named under the key of its own; and a retry with another
// X_Account, not counted in the fingerprint, was replayed the first one's
// answer. Such spellings are dropped on the way to the upstream now.
func TestProxyKeyedHeadersSpeltWithUnderscoresDoNotReachTheUpstream(t *testing.T) {
	var seen atomic.Pointer[http.Header]
	up := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
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
	px := startProxy(t, "--upstream", up.URL, "--store", store.http, "--principal-header", "X-Tenant", "--fingerprint-header", "X-Account")

	for _, method := range []string{http.MethodPost, http.MethodGet} {
		key := ""
		if method == http.MethodPost {
			key = "shadow-1"
		}
		a := pxSend(t, method, px.url+"/pay", key, `{}`, "X-Tenant", "tenant-a", "X_Tenant", "victim",
			"X-Account", "acct_1", "x_account", "acct_9", "Idempotency_Key", "other", "Content_Type", "text/plain")
		require.Equal(t, http.StatusCreated, a.status, "%+v", a)
		h := *seen.Load()
		for name, vs := range h {
			require.NotContains(t, name, "_", "%s %s: %q reached the upstream", method, name, vs)
		}
		require.Equal(t, "tenant-a", h.Get("X-Tenant"))
		require.Equal(t, "acct_1", h.Get("X-Account"))
		if key != "" {
			require.Equal(t, key, h.Get("Idempotency-Key"))
		}
	}
	// Other headers with '_' pass: only those read as a keyed one go.
	pxSend(t, http.MethodGet, px.url+"/pay", "", "", "X-Tenant", "tenant-a", "X_Trace_Id", "t1")
	require.Equal(t, "t1", (*seen.Load()).Get("X_Trace_Id"))
}
