package raftfsm

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/idem-store/idem/engine"
	"github.com/stretchr/testify/require"
)

// retentionCluster starts three voters with the given --retention each
// (n1 bootstraps), all with 24h while they join (a node joined with
// another is kept a non-voter), then restarts every node whose retention
// differs with it, as an operator restarting a voter with another flag
// before the cluster's first claim.
func retentionCluster(t *testing.T, c *memCluster, retention map[string]time.Duration) map[string]*Node {
	t.Helper()
	dirs, addrs := map[string]string{}, map[string]string{}
	open := func(id string, d time.Duration) *Node {
		cfg := DefaultConfig()
		if dirs[id] == "" {
			dirs[id], addrs[id] = t.TempDir(), "127.0.0.1:0"
		}
		cfg.NodeID, cfg.DataDir, cfg.Bootstrap = id, dirs[id], id == "n1"
		cfg.RaftAddr, cfg.HTTPAdvertise, cfg.Retention = addrs[id], "mem-"+id, d
		n := c.start(cfg)
		addrs[id] = n.Self().RaftAddr
		return n
	}
	nodes := map[string]*Node{"n1": open("n1", 24*time.Hour)}
	c.leader(nodes["n1"])
	for _, id := range []string{"n2", "n3"} {
		nodes[id] = open(id, 24*time.Hour)
		c.join(nodes[id], nodes["n1"])
	}
	for _, id := range []string{"n1", "n2", "n3"} {
		if retention[id] != 24*time.Hour {
			c.stop(nodes[id])
			nodes[id] = open(id, retention[id])
		}
	}
	return nodes
}

// claimAs decides a claim through n as the API does: stamped with the
// node's own --retention.
func claimAs(n *Node, key string) error {
	_, _, err := n.Claim(engine.ClaimArgs{Scope: engine.Scope{Principal: "p", Endpoint: "e", Key: key}, Fingerprint: "aa", LeaseMs: 1000, RetentionMs: n.cfg.Retention.Milliseconds()})
	return err
}

// leads waits until n leads, moving the leadership there.
func leads(t *testing.T, c *memCluster, n *Node, all map[string]*Node) {
	t.Helper()
	require.Eventually(t, func() bool {
		if n.IsLeader() {
			return true
		}
		for _, o := range all {
			if o.IsLeader() {
				o.TransferLeadershipTo(n.Self().ID)
			}
		}
		return false
	}, 20*time.Second, 100*time.Millisecond, "%s never led", n.Self().ID)
}

// A voter restarted with --retention 1h before the cluster's first claim
// (its peers run with 24h) was neither refused nor held back: leading the
// first claim, it pinned 1h for every node, and every record expired after
// an hour. It now refuses the claim, nothing pinned, and hands the
// leadership to a voter whose --retention most share, which decides it
// with 24h. A leader whose flag most voters share decides even though one
// differs.
func TestUnpinnedLeaderWithTheOddRetentionRefusesClaims(t *testing.T) {
	c := newMemCluster(t)
	nodes := retentionCluster(t, c, map[string]time.Duration{"n1": 24 * time.Hour, "n2": 24 * time.Hour, "n3": time.Hour})
	n3 := nodes["n3"]
	leads(t, c, n3, nodes)

	err := claimAs(n3, "first")
	var held *RetentionHeldError
	require.ErrorAs(t, err, &held, "%v", err)
	require.ErrorIs(t, err, ErrNotProposed)
	require.Equal(t, []string{"n1 24h0m0s", "n2 24h0m0s", "n3 1h0m0s"}, held.Flags)
	require.Contains(t, []string{"n1", "n2"}, held.HandingTo)
	require.Contains(t, held.Detail(), "The leadership is moving to "+held.HandingTo)
	for _, n := range nodes {
		_, pinned := n.Retention()
		require.False(t, pinned, "%s: nothing was pinned", n.Self().ID)
	}

	// The hand-off: the new leader runs with 24h and decides.
	l := c.leader(nodes["n1"], nodes["n2"])
	require.Eventually(t, func() bool { return claimAs(l, "first") == nil }, 10*time.Second, 50*time.Millisecond)
	for _, n := range nodes {
		require.Eventually(t, func() bool {
			d, pinned := n.Retention()
			return pinned && d == 24*time.Hour
		}, 10*time.Second, 20*time.Millisecond, "%s applies the pin", n.Self().ID)
	}
	// Pinned, n3 leads again and decides with the cluster's retention.
	leads(t, c, n3, nodes)
	require.NoError(t, claimAs(n3, "second"))
	d, _ := n3.Retention()
	require.Equal(t, 24*time.Hour, d)
}

// With no --retention most voters share, every leader refuses the first
// claim and hands the leadership to no one, until an operator pins the
// cluster's retention (set-retention), after which claims are decided.
func TestUnpinnedClusterWithoutAMajorityRetentionWaitsForThePin(t *testing.T) {
	c := newMemCluster(t)
	nodes := retentionCluster(t, c, map[string]time.Duration{"n1": 24 * time.Hour, "n2": time.Hour, "n3": 48 * time.Hour})
	l := c.leader(nodes["n1"], nodes["n2"], nodes["n3"])
	// The leader's health round sees the restarted voters' flags (a claim
	// right after the restart is judged by the round before).
	require.Eventually(t, func() bool {
		v := l.retView.Load()
		return v != nil && v.flags["n2"] == time.Hour && v.flags["n3"] == 48*time.Hour
	}, 10*time.Second, 20*time.Millisecond)
	err := claimAs(l, "first")
	var held *RetentionHeldError
	require.ErrorAs(t, err, &held, "%v", err)
	require.Empty(t, held.HandingTo)
	require.Contains(t, held.Detail(), "idem cluster set-retention")
	require.Equal(t, []string{"n1 24h0m0s", "n2 1h0m0s", "n3 48h0m0s"}, held.Flags)

	require.NoError(t, l.SetRetention(24*time.Hour))
	require.NoError(t, claimAs(l, "first"))
	d, pinned := l.Retention()
	require.True(t, pinned)
	require.Equal(t, 24*time.Hour, d)
}

// A view is this term's only when the round behind it measured this term.
// noteVoterRetention stamped the view with the term it read after the
// round: a leader that lost the leadership during the round and won it
// again (or, a candidate by then, won the term it had stamped) stored a
// view of the new term in which no voter's --retention was known, and
// decided the first claim at once with its own, the minority's.
func TestRetentionViewOfAnotherTermIsNotThisTerms(t *testing.T) {
	c := newMemCluster(t)
	nodes := retentionCluster(t, c, map[string]time.Duration{"n1": 24 * time.Hour, "n2": 24 * time.Hour, "n3": time.Hour})
	n3 := nodes["n3"]
	leads(t, c, n3, nodes)
	require.Eventually(t, func() bool {
		v := n3.retView.Load()
		return v != nil && v.term == n3.term() && v.flags["n1"] == 24*time.Hour && v.flags["n2"] == 24*time.Hour
	}, 10*time.Second, 20*time.Millisecond)

	// The health loop's next round waits for this one: the last round
	// measured an earlier term, as after a leadership lost and won again.
	n3.peers.round.Lock()
	n3.peers.mu.Lock()
	n3.peers.term--
	n3.peers.mu.Unlock()
	n3.noteVoterRetention()
	err := claimAs(n3, "first")
	n3.peers.round.Unlock()

	var held *RetentionHeldError
	require.ErrorAs(t, err, &held, "the leader with the odd --retention decided the first claim: %v", err)
	for _, n := range nodes {
		_, pinned := n.Retention()
		require.False(t, pinned, "%s: nothing was pinned", n.Self().ID)
	}
}

// A voter restarted with --retention 1h and without its node token
// (--auth-file, no --node-token-file) cannot read its peers' --retention
// while it leads: their checks refuse it. It took them for not known,
// none known to differ, and leading the first claim it pinned 1h for a
// cluster of 24h nodes. It now refuses, and hands the leadership to
// another voter, which reads them and decides the claim with 24h.
func TestUnpinnedLeaderWhoseNodeTokenIsRefusedRefusesClaims(t *testing.T) {
	c := newMemCluster(t)
	nodes := retentionCluster(t, c, map[string]time.Duration{"n1": 24 * time.Hour, "n2": 24 * time.Hour, "n3": time.Hour})
	n3 := nodes["n3"]
	n3.SetPeerProbe(func(ctx context.Context, addr string) (Status, error) {
		return Status{}, fmt.Errorf("%s answered 401 Unauthorized: it wants a token, and this node has no --node-token-file to send one%w", addr, ErrNoNodeToken)
	})
	leads(t, c, n3, nodes)

	err := claimAs(n3, "first")
	var held *RetentionHeldError
	require.ErrorAs(t, err, &held, "n3 decided the first claim with its 1h: %v", err)
	require.Equal(t, []string{"n1", "n2"}, held.Denied)
	require.True(t, held.HandingOff)
	require.Contains(t, held.Detail(), "cannot read the --retention of n1, n2")
	for _, n := range nodes {
		_, pinned := n.Retention()
		require.False(t, pinned, "%s: nothing was pinned", n.Self().ID)
	}

	l := c.leader(nodes["n1"], nodes["n2"])
	require.Eventually(t, func() bool { return claimAs(l, "first") == nil }, 10*time.Second, 50*time.Millisecond)
	d, pinned := l.Retention()
	require.True(t, pinned)
	require.Equal(t, 24*time.Hour, d)
}
