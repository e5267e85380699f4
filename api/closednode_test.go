package api_test

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"
)

// A request still running when its node's stores close (the drain of a
// stop outlived --shutdown-timeout, or 0 skipped it: a state hash of a
// large store, a stale read) met a closed Pebble. The state hash, which
// the store stops mid-way at a close, answered 500 "internal error", and
// a stale read of a record the cluster holds answered 404 not_found,
// from a store that reads nothing once closed. Both are the stopping
// node's 503 now, with Retry-After: another member answers.
func TestRequestsOnAClosedNodeAreAnsweredAsAStoppingNode(t *testing.T) {
	n := mustNode(t)
	n.mustClaim(sc("held"), fp1)
	require.Equal(t, http.StatusOK, n.lookup(sc("held"), "consistency=stale").status)

	require.NoError(t, n.node.Close()) // the HTTP server still serves, as in a drain past its timeout

	r := n.do("GET", "/v1/admin/state", nil)
	require.Equal(t, http.StatusServiceUnavailable, r.status, "%s", r)
	require.Equal(t, "1", r.header.Get("Retry-After"))
	require.Contains(t, r.String(), "shutting down")

	r = n.lookup(sc("held"), "consistency=stale")
	require.Equal(t, http.StatusServiceUnavailable, r.status, "a record the cluster holds, read on a closed node: %s", r)
	require.Equal(t, "1", r.header.Get("Retry-After"))
}
