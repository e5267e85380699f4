package api_test

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"
)

// A leadership transfer with no other voter to take it is a 409 that says
// so (it was an unlogged 500), and changes nothing.
func TestTransferWithoutAnotherVoterIs409(t *testing.T) {
	t.Parallel()
	n := mustNode(t)
	before := n.stateHash()
	p := requireProblem(t, n.post("/v1/cluster/transfer-leadership", ""), http.StatusConflict, "no_transfer_target")
	require.Contains(t, p["detail"], "only voter")
	require.Equal(t, before, n.stateHash())
	require.True(t, n.node.IsLeader())
}
