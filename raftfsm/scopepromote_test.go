package raftfsm

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A node admitted by an idem cluster join by hand before it was started
// (nothing to ask its scope of), then started with another --scope than
// the cluster's nodes, had its own join refused (scope_mismatch) but was
// promoted once caught up; leading the cluster's first write, it pinned
// its mode for every node: three nodes started with --scope principal
// took p/e1/k and p/e2/k as two winners. It now stays a non-voter, saying
// why, until it runs with the cluster's scope.
func TestNodeWithAnotherScopeIsNotPromoted(t *testing.T) {
	c := newMemCluster(t)
	open := func(id string, i int, bootstrap bool, scope string) *Node {
		cfg := DefaultConfig()
		cfg.NodeID, cfg.DataDir, cfg.Bootstrap = id, t.TempDir(), bootstrap
		cfg.RaftAddr, cfg.HTTPAdvertise, cfg.Scope = "127.0.0.1:0", "mem-"+id, scope
		return c.start(cfg)
	}
	n1 := open("n1", 0, true, "principal")
	c.leader(n1)
	n2 := open("n2", 1, false, "endpoint")
	m := joinKept(t, n1, n2)
	require.Contains(t, m.NotPromoted, "--scope endpoint and this cluster's scope is principal")
	_, pinned := n1.ScopeMode()
	require.False(t, pinned, "no write yet: the scope is not pinned, and n2 could have pinned its own")

	// Started again with the cluster's --scope, it is promoted.
	c.stop(n2)
	n3 := open("n3", 2, false, "principal")
	_, err := n1.Join(n3.Self(), false, false)
	require.NoError(t, err)
	c.waitSuffrage(n1, "n3", "Voter")
	require.Empty(t, member(t, n1, "n3").NotPromoted)
}

// joinKept joins n through leader as a non-voter, waits until the leader
// names why it keeps it one, and for rounds in which a healthy, caught-up
// node would have been promoted: it returns n's member, healthy and still
// a non-voter.
func joinKept(t *testing.T, leader, n *Node) Member {
	t.Helper()
	res, err := leader.Join(n.Self(), false, false)
	require.NoError(t, err)
	require.Equal(t, "nonvoter", res.Suffrage)
	id := n.Self().ID
	require.Eventually(t, func() bool { return member(t, leader, id).NotPromoted != "" }, 10*time.Second, 20*time.Millisecond)
	time.Sleep(4 * promoteStable)
	m := member(t, leader, id)
	require.Equal(t, "Nonvoter", m.Suffrage)
	require.True(t, m.Healthy, "%+v", m)
	return m
}
