package raftfsm

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Raft's transport pools the connections a node opened to each peer and
// hands the next RPC one of them without checking it: one to a peer that
// has restarted since fails at once (EOF, a reset) and is dropped, and the
// RPC fails with it. A follower opens connections only when it campaigns
// or leads, so its pool to every peer restarted since it last did is
// stale; handed the leadership, its vote requests to them failed (no
// retry within an election), and in a five-node cluster with three of
// them restarted it got two votes of five: the leader that had handed
// over stepped down for its term, the hand-off's election had no winner,
// and a later one was won by the old leader again (a chaos soak's
// quiet-restart: "no leader other than n3 within 10s" after an accepted
// transfer, the target's vote requests to both other nodes failed with
// EOF). foreignGuard asks again on a fresh connection.
func TestTransferTargetWinsWithStaleConnectionsToRestartedPeers(t *testing.T) {
	c := newMemCluster(t)
	addrs := testRaftAddrs(t, 5)
	n1 := c.open("n1", addrs[0], true)
	c.leader(n1)
	nodes := []*Node{n1}
	for i := 2; i <= 5; i++ {
		n := c.open("n"+string(rune('0'+i)), addrs[i-1], false)
		c.join(n, nodes...)
		nodes = append(nodes, n)
	}
	n2 := nodes[1]
	// n2 leads for a while: its transport pools connections to every peer.
	c.handOver(c.leader(nodes...), n2)
	require.NoError(t, claim(n2, "k1"))
	c.handOver(n2, n1)
	// n3, n4 and n5 restart: n1 reaches them again on new connections,
	// n2, a follower, keeps its pooled ones to their old processes.
	for i := 2; i < 5; i++ {
		nodes[i] = c.restart(nodes[i])
	}
	require.NoError(t, claim(n1, "k2"))
	require.Eventually(t, func() bool {
		for _, n := range nodes[2:] {
			if l, ok := n.Leader(); !ok || l.ID != "n1" || n.raft.AppliedIndex() < n1.raft.AppliedIndex() {
				return false
			}
		}
		return true
	}, 20*time.Second, 20*time.Millisecond, "the restarted nodes follow n1 again")
	term := n1.term()
	err := n1.TransferLeadershipTo("n2")
	require.NoError(t, err)
	l := c.leader(nodes...)
	require.Equal(t, "n2", l.self.ID, "the hand-off's target lost its election")
	require.Equal(t, term+1, l.term(), "the hand-off's own election had no winner")
}
