package main

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"
)

// A header that Connection names is for one hop: the reverse proxy drops
// it. Named for Authorization, the upstream ran the request without a
// credential, and its answer was stored under the caller's principal,
// as the answer to the request the proxy had keyed. Such a request is
// refused before anything is claimed or called; other Connection names
// pass.
func TestProxyRefusesConnectionNamingAKeyedHeader(t *testing.T) {
	node := startStore(t)
	up := newUpstream(t)
	px := startProxy(t, "--upstream", up.srv.URL, "--store", node.http)
	for i, name := range []string{"Authorization", "authorization, keep-alive", "Content-Type", "Idempotency-Key"} {
		a := pxSend(t, "POST", px.url+"/pay", "conn-"+string(rune('a'+i)), `{"amount":1}`, "Connection", name)
		require.Equal(t, http.StatusBadRequest, a.status, "Connection: %s: %s", name, a.body)
		require.Contains(t, a.body, "invalid_request")
	}
	require.EqualValues(t, 0, up.runs.Load(), "the upstream ran a request the proxy refused")
	a := pxSend(t, "POST", px.url+"/pay", "conn-ok", `{"amount":1}`, "Connection", "X-Trace")
	require.Equal(t, http.StatusCreated, a.status, a.body)
	require.Contains(t, a.body, `"run":1`)
}

// An upstream that picks the account a request acts on by a header had
// one account's answer replayed to a request for another with the same
// key. With --fingerprint-header the header counts: 422, and the upstream
// runs once. Without it the header does not count (the default, kept).
func TestProxyFingerprintHeader(t *testing.T) {
	node := startStore(t)
	up := newUpstream(t)
	px := startProxy(t, "--upstream", up.srv.URL, "--store", node.http, "--fingerprint-header", "X-Account, host")
	first := pxSend(t, "POST", px.url+"/pay", "order-1", `{"amount":1}`, "X-Account", "acct_1")
	require.Equal(t, http.StatusCreated, first.status, first.body)
	again := pxSend(t, "POST", px.url+"/pay", "order-1", `{"amount":1}`, "X-Account", "acct_1")
	require.Equal(t, "true", again.header.Get("Idempotency-Replayed"))
	other := pxSend(t, "POST", px.url+"/pay", "order-1", `{"amount":1}`, "X-Account", "acct_2")
	require.Equal(t, http.StatusUnprocessableEntity, other.status, other.body)
	require.EqualValues(t, 1, up.runs.Load())
	// The upstream would not see it.
	conn := pxSend(t, "POST", px.url+"/pay", "order-3", `{"amount":1}`, "X-Account", "acct_1", "Connection", "x-account")
	require.Equal(t, http.StatusBadRequest, conn.status, conn.body)
	require.EqualValues(t, 1, up.runs.Load())

	plain := startProxy(t, "--upstream", up.srv.URL, "--store", node.http)
	first = pxSend(t, "POST", plain.url+"/pay", "order-2", `{"amount":1}`, "X-Account", "acct_1")
	require.Equal(t, http.StatusCreated, first.status, first.body)
	other = pxSend(t, "POST", plain.url+"/pay", "order-2", `{"amount":1}`, "X-Account", "acct_2")
	require.Equal(t, "true", other.header.Get("Idempotency-Replayed"), "without the flag the header does not count")
}
