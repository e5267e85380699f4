package api

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idem-store/idem/raftfsm"
)

// A removed node refuses a consistency=stale read (raftfsm's RemovedError):
// the API answers 503 with Retry-After and what to do, as for a kept
// non-voter, not the 500 of an unknown store error.
func TestRemovedNodesStaleReadIs503(t *testing.T) {
	p := storeProblem(&raftfsm.RemovedError{Node: "n3"})
	require.Equal(t, http.StatusServiceUnavailable, p.Status)
	require.Equal(t, codeUnavailable, p.Code)
	require.Contains(t, p.Detail, "this node (n3) is not in the cluster's configuration")
	require.Contains(t, p.Detail, "Send reads to a member")
	require.Equal(t, 5, p.retryAfter)
}
