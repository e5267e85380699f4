package api_test

import (
	"net/http"
	"testing"

	"github.com/idem-store/idem/api"
	"github.com/stretchr/testify/require"
)

// A query string on a route that takes its request as a JSON body was
// ignored: the claim below was decided for the body's principal, while the
// client meant the query's. It is refused and nothing is written.
func TestPostRouteRefusesQueryString(t *testing.T) {
	n := mustNode(t)
	s := sc("query-1")
	for _, path := range []string{"/v1/claim?principal=cus_9", "/v1/claim?x", "/v1/batch?dry_run=1"} {
		var body any = s.body("fingerprint", fp1)
		if path == "/v1/batch?dry_run=1" {
			body = map[string]any{"ops": []any{s.body("op", "claim", "fingerprint", fp1)}}
		}
		p := requireProblem(t, n.post(path, body), http.StatusBadRequest, "invalid_request")
		require.Contains(t, p["detail"], "takes no query parameters", path)
	}
	r := n.lookup(s)
	requireProblem(t, r, http.StatusNotFound, "not_found")
	for _, p := range []string{"/v1/complete?a=1", "/v1/release?a=1", "/v1/extend?a=1"} {
		pr := requireProblem(t, n.post(p, s.body("token", "1")), http.StatusBadRequest, "invalid_request")
		require.Contains(t, pr["detail"], "takes no query parameters", p)
	}
	for _, p := range []string{"/v1/cluster/join?id=n9", "/v1/cluster/remove?id=n9", "/v1/cluster/transfer-leadership?id=n9"} {
		pr := requireProblem(t, n.post(p, map[string]any{"id": "n9"}), http.StatusBadRequest, "invalid_request")
		require.Contains(t, pr["detail"], "takes no query parameters", p)
	}
	pr := requireProblem(t, n.do("PUT", "/v1/admin/retention?retention=1h", map[string]any{"retention": "48h"}), http.StatusBadRequest, "invalid_request")
	require.Contains(t, pr["detail"], "takes no query parameters")
	require.Equal(t, "24h0m0s", n.do("GET", "/v1/config", nil).obj(t)["retention"])
	// An empty query ("?" alone) is no query: still taken.
	r = n.post("/v1/claim?", s.body("fingerprint", fp1))
	require.Equal(t, http.StatusCreated, r.status, "%s", r)
}

// docs/openapi.yaml's Limits, and docs/API.md's limits table ("GET
// /v1/config publishes the values in force"), include --max-batch-ops;
// /v1/config left it out, so a client could not size its batches by it.
func TestConfigPublishesMaxBatchOps(t *testing.T) {
	n := mustNode(t, withAPI(func(c *api.Config) { c.MaxBatchOps = 7 }))
	r := n.do("GET", "/v1/config", nil)
	require.Equal(t, http.StatusOK, r.status, "%s", r)
	limits, _ := r.obj(t)["limits"].(map[string]any)
	require.Equal(t, int64(7), num(t, limits["max_batch_ops"]), "%s", r)
	require.NotContains(t, api.DefaultLimits().Published(), "max_batch_ops")
}

// docs/API.md: "GET routes also answer HEAD", and a 405's Allow header
// lists what the route takes; it named GET alone.
func TestAllowListsHeadOfGetRoutes(t *testing.T) {
	n := mustNode(t)
	for path, want := range map[string]string{
		"/v1/config": "GET, HEAD", "/healthz": "GET, HEAD", "/v1/cluster": "GET, HEAD",
		sc("allow").query(): "GET, HEAD, DELETE", "/v1/claim": "POST",
	} {
		r := n.do("PUT", path, nil)
		requireProblem(t, r, http.StatusMethodNotAllowed, "method_not_allowed")
		require.Equal(t, want, r.header.Get("Allow"), path)
		if want == "GET, HEAD" {
			require.Equal(t, http.StatusOK, n.do("GET", path, nil).status, path)
			require.Equal(t, http.StatusOK, n.do("HEAD", path, nil).status, path)
		}
	}
}
