package api_test

import (
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idem-store/idem/api"
)

// withLowerLimits serves n's node through a second handler whose
// --max-scope-bytes and --max-fingerprint-chars are lower: a node restarted
// with lowered limits, or a leader started with other flags than the node
// that took the record.
func withLowerLimits(t *testing.T, n *testNode, scopeBytes, fpChars int) *testNode {
	t.Helper()
	l := api.DefaultLimits()
	l.MaxScopeBytes, l.MaxFingerprintChars = scopeBytes, fpChars
	srv := httptest.NewServer(api.New(n.node, api.Config{
		Retention: 24 * time.Hour, DefaultLease: 30 * time.Second, BucketWidth: time.Hour,
		Limits: l, Logger: slog.New(slog.DiscardHandler),
	}))
	t.Cleanup(srv.Close)
	return &testNode{tb: t, node: n.node, srv: srv, url: srv.URL, client: &http.Client{Timeout: 20 * time.Second}}
}

// A record taken under higher limits was answered 400 to its every retry
// by a node whose --max-scope-bytes or --max-fingerprint-chars were lower
// (lowered in a rolling restart, or another leader's flags: a walk of
// mixed settings): a client takes a 400 for a permanent failure of work
// that was done. A request naming a stored record is not refused for its
// sizes; a new claim of the same sizes still is.
func TestRetryOfARecordTakenUnderHigherLimitsGetsItsAnswer(t *testing.T) {
	n := mustNode(t)
	s := scope{"cus_42", "POST /payments", "order-" + strings.Repeat("k", 40)}
	fp := strings.Repeat("ab", 16)
	c := n.mustClaim(s, fp)
	require.Equal(t, "completed", n.complete(s, c["token"].(string), map[string]any{"status": 201, "body": "b2s="}).obj(t)["outcome"])
	open := n.mustClaim(scope{"cus_42", "POST /payments", "open-" + strings.Repeat("k", 40)}, fp)

	low := withLowerLimits(t, n, 16, 8)
	r := low.claim(s, fp)
	require.Equal(t, http.StatusOK, r.status, "%s", r)
	require.Equal(t, "replay", r.obj(t)["outcome"])
	require.Equal(t, http.StatusOK, low.lookup(s).status)

	// Token routes act on the stored record whatever its size.
	held := scope{"cus_42", "POST /payments", "open-" + strings.Repeat("k", 40)}
	r = low.post("/v1/extend", held.body("token", open["token"], "lease_ms", 60_000))
	require.Equal(t, http.StatusOK, r.status, "%s", r)
	r = low.post("/v1/release", held.body("token", open["token"]))
	require.Equal(t, http.StatusOK, r.status, "%s", r)

	// A batch's claim and get of it too.
	r = low.post("/v1/batch", map[string]any{"ops": []any{
		map[string]any{"op": "claim", "principal": s.principal, "endpoint": s.endpoint, "key": s.key, "fingerprint": fp},
		map[string]any{"op": "get", "principal": s.principal, "endpoint": s.endpoint, "key": s.key},
	}})
	require.Equal(t, http.StatusOK, r.status, "%s", r)
	require.Contains(t, string(r.raw), `"outcome":"replay"`)
	require.NotContains(t, string(r.raw), "invalid_request")

	// New scopes of those sizes are refused as before: the limits hold for
	// what is stored anew.
	requireProblem(t, low.claim(scope{"cus_42", "POST /payments", "new-" + strings.Repeat("k", 40)}, fp), http.StatusBadRequest, "invalid_request")
	requireProblem(t, low.claim(scope{"cus_42", "POST /payments", "short"}, fp), http.StatusBadRequest, "invalid_request")
	// The stored record's key with another fingerprint is the same
	// record: 422 as any mismatch, from the node that holds it.
	r = low.claim(s, strings.Repeat("cd", 16))
	require.Equal(t, http.StatusUnprocessableEntity, r.status, "%s", r)
}

// The record a claim over the limits was forgiven for is looked up at the
// applied log's time, and the claim is applied later: a record that
// expires in between (on an idle cluster, the log's time stands still
// until the claim) is gone when the claim applies, and the claim stores a
// new record. Its sizes must not exceed the record's it was forgiven for:
// a fingerprint larger than the stored one's is refused as before, or any
// app could store a fingerprint of any size (up to the body limit) under
// a key it once claimed.
func TestClaimForgivenForAStoredRecordStoresNothingLargerThanIt(t *testing.T) {
	n := mustNode(t, withRetention(time.Second))
	s := scope{"cus_42", "POST /payments", "order-1"}
	n.mustClaim(s, strings.Repeat("ab", 8))
	time.Sleep(1500 * time.Millisecond) // the record expires; nothing is applied meanwhile

	low := withLowerLimits(t, n, 64, 8)
	huge := strings.Repeat("cd", 20_000)
	requireProblem(t, low.claim(s, huge), http.StatusBadRequest, "invalid_request")
	r := n.lookup(s)
	require.NotContains(t, string(r.raw), huge[:100], "a claim over the limits stored a new record")
	// A fingerprint as long as the stored one's is still forgiven: the
	// record it may replace is no larger than the one that was there.
	r = low.claim(s, strings.Repeat("ab", 8))
	require.NotEqual(t, http.StatusBadRequest, r.status, "%s", r)
}

// In principal scope a record is found by principal and key alone: a claim
// naming another, longer endpoint was forgiven its size, and stored it
// when the record had expired by the time the claim applied.
func TestClaimForgivenInPrincipalScopeStoresNoLongerEndpoint(t *testing.T) {
	n := mustNode(t, withRetention(time.Second), principalScope())
	s := scope{"cus_42", "POST /payments", "order-1"}
	fp := strings.Repeat("ab", 4)
	n.mustClaim(s, fp)
	time.Sleep(1500 * time.Millisecond) // the record expires; nothing is applied meanwhile

	low := withLowerLimits(t, n, 32, 8)
	long := scope{s.principal, "POST /" + strings.Repeat("e", 5000), s.key}
	requireProblem(t, low.claim(long, fp), http.StatusBadRequest, "invalid_request")
}
