package api_test

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idem-store/idem/api"
)

// Refusals decided from the leader's applied state add nothing to the raft
// log: the commit index and the whole state (applied index and cluster
// time included) are unchanged after a flood of them. The principal bound
// answers its own 429.
func TestRefusalsCommitNothing(t *testing.T) {
	t.Parallel()
	n := mustNode(t, withLimits(func(l *api.Limits) { l.MaxKeysPerPrincipal, l.MaxPrincipals = 1, 2 }))
	c := n.mustClaim(sc("q1"), fp1)
	n.mustClaim(scope{"cus_43", "POST /payments", "q1"}, fp1)

	commit := func() int64 {
		t.Helper()
		r := n.do("GET", "/v1/cluster", nil)
		require.Equal(t, http.StatusOK, r.status, "%s", r)
		return num(t, r.obj(t)["commit_index"])
	}
	before, hash := commit(), n.stateHash()
	for range 20 {
		r := n.claim(sc("q2"), fp1)
		requireProblem(t, r, http.StatusTooManyRequests, "quota_exceeded")
		require.Equal(t, 60, retryAfter(t, r))

		r = n.claim(scope{"cus_44", "POST /payments", "q1"}, fp1)
		p := requireProblem(t, r, http.StatusTooManyRequests, "principal_limit")
		require.Contains(t, p["detail"], "--max-principals")
		require.Equal(t, 60, retryAfter(t, r))

		requireProblem(t, n.claim(sc("q1"), fp2), http.StatusUnprocessableEntity, "fingerprint_mismatch")
		requireProblem(t, n.claim(sc("q1"), fp1), http.StatusConflict, "in_progress")
		requireProblem(t, n.complete(sc("nothing"), c["token"].(string), okResponse), http.StatusNotFound, "not_found")
		requireProblem(t, n.do("DELETE", sc("nothing").query(), nil), http.StatusNotFound, "not_found")
	}
	require.Equal(t, before, commit(), "a refusal went through the raft log")
	require.Equal(t, hash, n.stateHash())

	r := n.do("GET", "/v1/config", nil)
	require.Equal(t, http.StatusOK, r.status, "%s", r)
	require.Equal(t, int64(2), num(t, r.obj(t)["limits"].(map[string]any)["max_principals"]))

	// A change still commits, and frees what the bound counted.
	require.Equal(t, http.StatusOK, n.do("DELETE", scope{"cus_43", "POST /payments", "q1"}.query(), nil).status)
	require.Greater(t, commit(), before)
	n.mustClaim(scope{"cus_44", "POST /payments", "q1"}, fp1)
}
