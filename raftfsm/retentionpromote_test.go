package raftfsm

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Nodes that bootstrap together compare --retention, but a node joined
// later was not compared: started with --retention 1h beside three nodes
// with 24h, it was promoted once caught up, and leading the cluster's
// first claim it pinned 1h for every node. Until a claim pins the
// cluster's retention it now stays a non-voter, saying why; once the
// retention is pinned its flag changes nothing and it is promoted.
func TestNodeWithAnotherRetentionIsNotPromotedUntilPinned(t *testing.T) {
	c := newMemCluster(t)
	open := func(id string, bootstrap bool, retention time.Duration) *Node {
		cfg := DefaultConfig()
		cfg.NodeID, cfg.DataDir, cfg.Bootstrap = id, t.TempDir(), bootstrap
		cfg.RaftAddr, cfg.HTTPAdvertise, cfg.Retention = "127.0.0.1:0", "mem-"+id, retention
		return c.start(cfg)
	}
	n1 := open("n1", true, 24*time.Hour)
	c.leader(n1)

	// A node that does not say (an earlier release) is promoted.
	n2 := open("n2", false, 0)
	_, err := n1.Join(n2.Self(), false, false)
	require.NoError(t, err)
	c.waitSuffrage(n1, "n2", "Voter")

	n3 := open("n3", false, time.Hour)
	m := joinKept(t, n1, n3)
	require.Contains(t, m.NotPromoted, "--retention 1h0m0s and this leader with --retention 24h0m0s")
	_, pinned := n1.Retention()
	require.False(t, pinned, "no claim yet: the retention is not pinned, and n3 could have pinned its own")

	// The first claim pins the leader's: n3's flag no longer matters.
	require.NoError(t, claim(n1, "k"))
	d, pinned := n1.Retention()
	require.True(t, pinned)
	require.Equal(t, time.Minute, d, "the claim's own retention (the helper's RetentionMs), as the API stamps its node's --retention")
	c.waitSuffrage(n1, "n3", "Voter")
	require.Empty(t, member(t, n1, "n3").NotPromoted)
}
