package main

import (
	"net/http"
	"strings"
	"testing"
	"time"

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
	// Host is the request's, not a header the reverse proxy drops: named
	// in Connection it still reaches the upstream, so nothing is refused.
	host := pxSend(t, "POST", px.url+"/pay", "order-4", `{"amount":1}`, "X-Account", "acct_1", "Connection", "host")
	require.Equal(t, http.StatusCreated, host.status, host.body)
	require.EqualValues(t, 2, up.runs.Load())

	plain := startProxy(t, "--upstream", up.srv.URL, "--store", node.http)
	first = pxSend(t, "POST", plain.url+"/pay", "order-2", `{"amount":1}`, "X-Account", "acct_1")
	require.Equal(t, http.StatusCreated, first.status, first.body)
	other = pxSend(t, "POST", plain.url+"/pay", "order-2", `{"amount":1}`, "X-Account", "acct_2")
	require.Equal(t, "true", other.header.Get("Idempotency-Replayed"), "without the flag the header does not count")
}

// A credential signed for each request (AWS SigV4 here) is hashed whole
// into the principal: a retry its SDK signs anew is another principal and
// ran again, a second charge, with nothing said. The operator is told,
// and what to set; a bearer token says nothing.
func TestProxyWarnsOfACredentialSignedPerRequest(t *testing.T) {
	node := startStore(t)
	up := newUpstream(t)
	px := startProxy(t, "--upstream", up.srv.URL, "--store", node.http)
	bearer := pxSend(t, "POST", px.url+"/pay", "sig-0", `{"amount":1}`, "Authorization", "Bearer tok")
	require.Equal(t, http.StatusCreated, bearer.status, bearer.body)
	sig := func(date, signature string) string {
		return "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/" + date + "/us-east-1/execute-api/aws4_request, SignedHeaders=host;x-amz-date, Signature=" + signature
	}
	first := pxSend(t, "POST", px.url+"/pay", "sig-1", `{"amount":1}`, "Authorization", sig("20261205", "aa11"))
	require.Equal(t, http.StatusCreated, first.status, first.body)
	retry := pxSend(t, "POST", px.url+"/pay", "sig-1", `{"amount":1}`, "Authorization", sig("20261205", "bb22"))
	require.Equal(t, http.StatusCreated, retry.status, retry.body)
	require.Empty(t, retry.header.Get("Idempotency-Replayed"), "a retry signed anew is another principal (documented)")
	require.Eventually(t, func() bool {
		return strings.Contains(px.logs.String(), "AWS4-HMAC-SHA256, which signs each request anew") &&
			strings.Contains(px.logs.String(), "--principal-header")
	}, 5*time.Second, 10*time.Millisecond, "logs: %s", px.logs)
	require.Equal(t, 1, strings.Count(px.logs.String(), "signs each request anew"), "once a minute")
}
