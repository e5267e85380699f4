package api_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A removed node waited LeaderWait (3 s by default) for a leader before it
// told a caller it was not in the cluster's configuration: no leader sends
// to a removed node, so every request a load balancer still sent it was
// held for the whole wait. It answers at once. Here LeaderWait is an hour,
// so the node answers only if it does not wait for a leader.
func TestRemovedNodeAnswersWithoutWaitingForALeader(t *testing.T) {
	t.Parallel()
	leader := mustNode(t, func(c *nodeConfig) { c.raft.TickInterval = 50 * time.Millisecond })
	require.Eventually(t, leader.node.Registered, 10*time.Second, 10*time.Millisecond)
	n2 := mustNode(t, leaderless(time.Hour), func(c *nodeConfig) { c.raft.NodeID = "n2" })
	require.NoError(t, n2.node.MarkJoining())
	res, err := leader.node.Join(n2.node.Self(), false, true)
	require.NoError(t, err)
	require.NoError(t, n2.node.Admitted(res.AdmittedIndex)) // as idem serve's join does
	require.Eventually(t, n2.node.IsMember, 20*time.Second, 10*time.Millisecond, "n2 never caught up")
	r := n2.claim(sc("member"), fp1)
	require.Equal(t, http.StatusCreated, r.status, "a member forwards to the leader: %s", r)

	require.NoError(t, leader.node.Remove("n2", false))
	// The leader sends a removed node the configuration that removes it
	// once, and that try can fail; idem serve's membership loop then asks
	// the leader once n2 has heard from no leader for a while
	// (MarkRemovedUnheard). The test does the same.
	term := uint64(num(t, leader.do(http.MethodGet, "/v1/cluster", nil).obj(t)["term"]))
	require.Eventually(t, func() bool {
		_ = n2.node.MarkRemovedUnheard(leader.node.Self().HTTPAddr, term)
		return n2.node.Outside()
	}, 30*time.Second, 100*time.Millisecond, "n2 never learned of its removal")
	n2.client = &http.Client{Timeout: time.Minute} // far below LeaderWait
	for _, do := range []func() reply{
		func() reply { return n2.claim(sc("removed"), fp1) },
		func() reply { return n2.do(http.MethodGet, sc("member").query(), nil) },
	} {
		r = do()
		p := requireProblem(t, r, http.StatusServiceUnavailable, "unavailable")
		require.Contains(t, p["detail"], "not in the cluster's configuration", "%s", r)
		require.Equal(t, "5", r.header.Get("Retry-After"), "%s", r)
	}
}
