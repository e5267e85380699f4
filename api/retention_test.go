package api_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idem-store/idem/api"
)

// The cluster's retention is replicated state (pinned by the first claim)
// and PUT /v1/admin/retention changes it for records claimed from then
// on; records already stored keep the expires_at they were given.
func TestSetRetention(t *testing.T) {
	t.Parallel()
	n := mustNode(t)
	span := func(m map[string]any) time.Duration {
		return ts(t, m, "expires_at").Sub(ts(t, m, "created_at"))
	}
	require.Equal(t, 24*time.Hour, span(n.mustClaim(sc("before"), fp1)))

	r := n.do("PUT", "/v1/admin/retention", map[string]any{"retention": "48h"})
	require.Equal(t, http.StatusOK, r.status, "%s", r)
	got := r.obj(t)
	require.Equal(t, "set", got["outcome"])
	require.Equal(t, "48h0m0s", got["retention"])
	require.Equal(t, int64(172800), num(t, got["retention_seconds"]))
	require.Equal(t, "24h0m0s", got["previous_retention"])

	cfg := n.do("GET", "/v1/config", nil).obj(t)
	require.Equal(t, "48h0m0s", cfg["retention"])
	require.Equal(t, int64(172800), num(t, cfg["retention_seconds"]))
	require.Equal(t, 48*time.Hour, span(n.mustClaim(sc("after"), fp1)))
	require.Equal(t, 24*time.Hour, span(n.record(sc("before"))), "a stored record keeps its expiry")
	require.Contains(t, string(n.do("GET", "/metrics", nil).raw), "\nidem_retention_seconds 172800\n")

	// Refused, changing nothing.
	for _, c := range []struct {
		body any
		want string
	}{
		{map[string]any{}, "retention is required"},
		{map[string]any{"retention": ""}, "retention is required"},
		{map[string]any{"retention": "two days"}, `retention "two days" is not a duration`},
		{map[string]any{"retention": 48}, "retention"},
		{map[string]any{"retention": "-1h"}, "must be positive"},
		{map[string]any{"retention": "0s"}, "must be positive"},
		{map[string]any{"retention": "30s"}, `send "allow_short_retention": true`},
		{map[string]any{"retention": "500us", "allow_short_retention": true}, "under a millisecond"},
		{map[string]any{"retention": "100000h"}, "over the 10000 a claim may probe"},
		{map[string]any{"retention": "48h", "retentoin": "1h"}, "retentoin"},
		{nil, ""},
	} {
		before := n.stateHash()
		r := n.do("PUT", "/v1/admin/retention", c.body)
		p := requireProblem(t, r, http.StatusBadRequest, "invalid_request")
		require.Contains(t, p["detail"], c.want, "%v", c.body)
		require.Equal(t, before, n.stateHash(), "%v", c.body)
	}
	requireProblem(t, n.do("POST", "/v1/admin/retention", map[string]any{"retention": "1h"}), http.StatusMethodNotAllowed, "method_not_allowed")
	require.Equal(t, "48h0m0s", n.do("GET", "/v1/config", nil).obj(t)["retention"])

	// Short retentions only when asked for, as serve's flag.
	r = n.do("PUT", "/v1/admin/retention", map[string]any{"retention": "30s", "allow_short_retention": true})
	require.Equal(t, http.StatusOK, r.status, "%s", r)
	require.Equal(t, 30*time.Second, span(n.mustClaim(sc("short"), fp1)))
	require.True(t, strings.HasPrefix(r.obj(t)["previous_retention"].(string), "48h"))
}

// A member of an older version would skip the retention's entry and go on
// giving each claim the retention its command carries: while a member does
// not list cluster-retention on its /healthz (or does not answer), a change
// is refused with 503 naming it, and nothing is written.
func TestSetRetentionWaitsForEveryMember(t *testing.T) {
	t.Parallel()
	n := mustNode(t)
	require.Contains(t, strings.Split(n.do("GET", "/healthz", nil).header.Get("X-Idem-Features"), ","), "cluster-retention")
	upgraded := joinOlderMember(t, n, "cluster-secret,batch-entry,header-lists", "cluster-retention")

	before := n.stateHash()
	p := requireProblem(t, n.do("PUT", "/v1/admin/retention", map[string]any{"retention": "48h"}), http.StatusServiceUnavailable, "unavailable")
	require.Contains(t, p["detail"], "n-old not yet")
	require.Equal(t, before, n.stateHash(), "nothing written")
	require.Equal(t, "24h0m0s", n.do("GET", "/v1/config", nil).obj(t)["retention"])

	upgraded.Store(true)
	r := n.do("PUT", "/v1/admin/retention", map[string]any{"retention": "48h"})
	require.Equal(t, http.StatusOK, r.status, "%s", r)
	require.Equal(t, "48h0m0s", n.do("GET", "/v1/config", nil).obj(t)["retention"])
}

// The span a retention may cover is counted in the cluster's bucket width
// (fixed by its first command), not in this node's --bucket-width: a node
// that joined with another flag, or a leader that did, measured 9000h in
// its own 1h buckets and let every claim of a 1m-wide cluster probe
// 540,000 of them.
func TestSetRetentionSpanInTheClustersWidth(t *testing.T) {
	t.Parallel()
	n := mustNode(t, func(c *nodeConfig) { c.raft.BucketWidth = time.Minute })
	n.mustClaim(sc("pins-the-width"), fp1)
	other := api.New(n.node, api.Config{Retention: 24 * time.Hour, DefaultLease: 30 * time.Second,
		Limits: api.DefaultLimits(), BucketWidth: time.Hour})
	srv := httptest.NewServer(other)
	defer srv.Close()
	req, err := http.NewRequest(http.MethodPut, srv.URL+"/v1/admin/retention", strings.NewReader(`{"retention":"9000h"}`))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Equal(t, http.StatusBadRequest, resp.StatusCode, "%s", body)
	require.Contains(t, string(body), "540000 buckets of width 1m0s")
	ret, _ := n.node.Retention()
	require.Equal(t, 24*time.Hour, ret, "nothing changed")
}

// The state holds whole milliseconds: "1.5ms" was answered "set", 1.5ms,
// and stored as 1ms (the next change's previous_retention said 1ms).
func TestSetRetentionRefusesAFractionOfAMillisecond(t *testing.T) {
	t.Parallel()
	n := mustNode(t)
	before := n.stateHash()
	p := requireProblem(t, n.do("PUT", "/v1/admin/retention", map[string]any{"retention": "1.5ms", "allow_short_retention": true}), http.StatusBadRequest, "invalid_request")
	require.Contains(t, p["detail"], "whole number of milliseconds")
	requireProblem(t, n.do("PUT", "/v1/admin/retention", map[string]any{"retention": "90000001us"}), http.StatusBadRequest, "invalid_request")
	require.Equal(t, before, n.stateHash(), "nothing written")
	r := n.do("PUT", "/v1/admin/retention", map[string]any{"retention": "90001ms"})
	require.Equal(t, http.StatusOK, r.status, "%s", r)
	require.Equal(t, "1m30.001s", r.obj(t)["retention"])
}

// Before any claim, PUT /v1/admin/retention pins the cluster's retention
// (what a refused first claim's 503 asks an operator to do). Its
// previous_retention is then the leader's --retention, which the first
// claim would have pinned: given the same value, the CLI said "nothing
// changed" when the retention had just been pinned. first_pin says it.
func TestSetRetentionSaysItPinnedTheFirst(t *testing.T) {
	t.Parallel()
	n := mustNode(t)
	r := n.do("PUT", "/v1/admin/retention", map[string]any{"retention": "24h"})
	require.Equal(t, http.StatusOK, r.status, "%s", r)
	got := r.obj(t)
	require.Equal(t, "24h0m0s", got["previous_retention"])
	require.Equal(t, true, got["first_pin"], "%s", r)

	r = n.do("PUT", "/v1/admin/retention", map[string]any{"retention": "24h"})
	require.Equal(t, http.StatusOK, r.status, "%s", r)
	require.NotContains(t, r.obj(t), "first_pin", "pinned already")
}
