package api_test

import (
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idem-store/idem/api"
	"github.com/idem-store/idem/raftfsm"
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

// A transfer may name its target: an unknown id is 404 naming the
// members, a non-voter 409, the leader itself 200 "unchanged"; a body
// that is not {"id": …} is 400. None of them moves the leadership.
func TestTransferToANamedNode(t *testing.T) {
	t.Parallel()
	n := mustNode(t)
	_, err := n.node.Join(raftfsm.NodeInfo{ID: "n-absent", RaftAddr: "127.0.0.1:1", HTTPAddr: "127.0.0.1:2"}, true, false)
	require.NoError(t, err)
	self := n.node.Self().ID

	p := requireProblem(t, n.post("/v1/cluster/transfer-leadership", map[string]any{"id": "nobody"}), http.StatusNotFound, "not_found")
	require.Contains(t, p["detail"], "nobody is not in the cluster (members: n-absent, "+self+")")
	p = requireProblem(t, n.post("/v1/cluster/transfer-leadership", map[string]any{"id": "n-absent"}), http.StatusConflict, "no_transfer_target")
	require.Contains(t, p["detail"], "n-absent is a non-voter")
	requireProblem(t, n.post("/v1/cluster/transfer-leadership", map[string]any{"node": "n-absent"}), http.StatusBadRequest, "invalid_request")
	requireProblem(t, n.post("/v1/cluster/transfer-leadership", "n-absent"), http.StatusBadRequest, "invalid_request")
	// An id no node can have is refused before it is echoed anywhere.
	long := strings.Repeat("a", 100_000)
	for _, path := range []string{"/v1/cluster/transfer-leadership", "/v1/cluster/remove"} {
		r := n.post(path, map[string]any{"id": long})
		p := requireProblem(t, r, http.StatusBadRequest, "invalid_request")
		require.Less(t, len(r.raw), 1000, "%s echoed the id", path)
		require.Contains(t, p["detail"], "a node id is at most 64")
	}
	p = requireProblem(t, n.post("/v1/cluster/join", map[string]any{"id": "n 4/../x", "raft_addr": "127.0.0.1:9", "http_addr": "127.0.0.1:8"}), http.StatusBadRequest, "invalid_request")
	require.Contains(t, p["detail"], "must be 1-64 letters, digits")

	r := n.post("/v1/cluster/transfer-leadership", map[string]any{"id": self})
	require.Equal(t, http.StatusOK, r.status, "%s", r)
	require.Equal(t, map[string]any{"outcome": "unchanged", "from": self, "leader": self}, r.obj(t))
	require.True(t, n.node.IsLeader())

	// "from" naming another member than the leader hands nothing over (it
	// would otherwise go to n-absent's check and answer 409).
	r = n.post("/v1/cluster/transfer-leadership", map[string]any{"id": "n-absent", "from": "n-absent"})
	require.Equal(t, http.StatusOK, r.status, "%s", r)
	require.Equal(t, map[string]any{"outcome": "unchanged", "from": self, "leader": self}, r.obj(t))
	requireProblem(t, n.post("/v1/cluster/transfer-leadership", map[string]any{"from": long}), http.StatusBadRequest, "invalid_request")
	require.True(t, n.node.IsLeader())
}

// A from naming no member (a typo at 3 am: --from n22 for n2) answered
// "unchanged", and the CLI "n2 leads, not n22: nothing was handed over",
// exit 0, as for a transfer run twice: the operator went on to restart
// the leader without a hand-over. It is a 404 naming from and the
// members, and the leadership stays.
func TestTransferFromAnUnknownNodeIsRefused(t *testing.T) {
	t.Parallel()
	n := mustNode(t)
	self := n.node.Self().ID
	p := requireProblem(t, n.post("/v1/cluster/transfer-leadership", map[string]any{"from": self + "2"}), http.StatusNotFound, "not_found")
	require.Contains(t, p["detail"], "from: no such member: "+self+"2 is not in the cluster (members: "+self+")")
	require.True(t, n.node.IsLeader())
}

// A transfer naming no target logged `leadership transferred on request
// to=""`: it says it went to any voter, and which one took it.
func TestTransferToAnyVoterSaysSoInTheLog(t *testing.T) {
	t.Parallel()
	var logs syncBuffer
	leader := mustNode(t, func(c *nodeConfig) { c.raft.TickInterval = 50 * time.Millisecond },
		withAPI(func(c *api.Config) { c.Logger = slog.New(slog.NewTextHandler(&logs, nil)) }))
	require.Eventually(t, leader.node.Registered, 10*time.Second, 10*time.Millisecond)
	leader.node.SetPeerProbe(api.NewPeerProbe("", leader.node.Self().ID, nil)) // as idem serve does: it measures n2, and promotes it
	n2 := mustNode(t, leaderless(time.Hour), func(c *nodeConfig) { c.raft.NodeID = "n2" })
	n2.node.SetPeerProbe(api.NewPeerProbe("", "n2", nil))
	require.NoError(t, n2.node.MarkJoining())
	res, err := leader.node.Join(n2.node.Self(), false, true)
	require.NoError(t, err)
	require.NoError(t, n2.node.Admitted(res.AdmittedIndex)) // as idem serve's join does
	require.Eventually(t, func() bool {
		st, err := leader.node.Status()
		if err != nil {
			return false
		}
		for _, m := range st.Nodes {
			if m.ID == "n2" && m.Suffrage == "Voter" && m.CommittedSuffrage == "" {
				return true
			}
		}
		return false
	}, 30*time.Second, 50*time.Millisecond, "n2 was never promoted: %s", func() string { st, _ := leader.node.Status(); return fmt.Sprintf("%+v", st.Nodes) }())

	r := leader.post("/v1/cluster/transfer-leadership", "")
	require.Equal(t, http.StatusOK, r.status, "%s", r)
	require.Equal(t, "n2", r.obj(t)["leader"], "%s", r)
	require.Contains(t, logs.String(), `msg="leadership transferred on request" to="any voter" leader=n2`)
}
