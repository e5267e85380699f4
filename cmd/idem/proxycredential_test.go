package main

import (
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"
)

// Bug (review): idem proxy stored an upstream's 401 and 403 and replayed
// them for the retention: a caller whose token had expired was answered
// 401, and its retry with a fresh token (the same --principal-header
// account) was replayed that 401 for a day; the payment never ran. The
// upstream refused the caller, it did not answer the request: the key is
// released, as for a 5xx or a 429, and the retry runs.
func TestProxyDoesNotStoreAnUpstreamsRefusedCredential(t *testing.T) {
	store := startStore(t)
	var runs atomic.Int32
	up := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs.Add(1)
		io.Copy(io.Discard, r.Body)
		switch r.Header.Get("Authorization") {
		case "Bearer expired":
			w.Header().Set("WWW-Authenticate", `Bearer error="invalid_token"`)
			w.WriteHeader(http.StatusUnauthorized)
		case "Bearer no-refunds":
			w.WriteHeader(http.StatusForbidden)
		default:
			w.WriteHeader(http.StatusCreated)
			io.WriteString(w, `{"charged":true}`)
		}
	}))
	ln, err := net.Listen("tcp", freePort(t)) // the test's own address (IDEM_TEST_IP)
	require.NoError(t, err)
	up.Listener.Close()
	up.Listener = ln
	up.Start()
	defer up.Close()
	px := startProxy(t, "--upstream", up.URL, "--store", store.http, "--principal-header", "X-Account")

	for _, c := range []struct {
		key, token string
		status     int
	}{{"cred-401", "expired", http.StatusUnauthorized}, {"cred-403", "no-refunds", http.StatusForbidden}} {
		runs.Store(0)
		first := pxSend(t, "POST", px.url+"/pay", c.key, `{"amount":1}`, "X-Account", "acct-1", "Authorization", "Bearer "+c.token)
		require.Equal(t, c.status, first.status, first.body)
		again := pxSend(t, "POST", px.url+"/pay", c.key, `{"amount":1}`, "X-Account", "acct-1", "Authorization", "Bearer fresh")
		require.Equal(t, http.StatusCreated, again.status, "the upstream's %d was replayed to the retry with a fresh credential: %s", c.status, again.body)
		require.Empty(t, again.header.Get("Idempotency-Replayed"))
		require.EqualValues(t, 2, runs.Load())
		replay := pxSend(t, "POST", px.url+"/pay", c.key, `{"amount":1}`, "X-Account", "acct-1", "Authorization", "Bearer fresh")
		require.Equal(t, "true", replay.header.Get("Idempotency-Replayed"), "%d %s", replay.status, replay.body)
		require.Equal(t, `{"charged":true}`, replay.body)
		require.EqualValues(t, 2, runs.Load())
	}
}
