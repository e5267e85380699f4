package raftfsm

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idem-store/idem/engine"
)

// A node that holds another cluster's state (its data dir was a one-node
// store, a restored backup, or a node of another cluster) must not be
// taken in as a member of this one. Raft cannot tell: the foreign log's
// terms can match this cluster's at the index where their logs meet (both
// start at a bootstrap entry of term 1, and a one-node cluster restarted
// once is at term 3 like a cluster that moved its leadership once), and
// the node's FSM then skips this cluster's entries up to its own applied
// index, keeping the other cluster's records. In the README walkthrough
// (2026-12-02) such a node was promoted to voter within a second; led, it
// gave a second "claimed" for a scope this cluster held in progress, and
// answered linearizable lookups with the other cluster's records.
//
// Expected: the join is refused, or the node is never made a voter; and
// it keeps its own state, taking none of this cluster's entries.
func TestNodeOfAnotherClusterIsNotTakenIn(t *testing.T) {
	t.Parallel()
	c := newMemCluster(t)
	a := c.open("a1", "", true)
	c.leader(a)
	for i := range 20 {
		require.NoError(t, claim(a, fmt.Sprintf("a%d", i)))
	}
	b := c.open("b1", "", true) // another cluster, with records of its own
	c.leader(b)
	for i := range 40 {
		require.NoError(t, claim(b, fmt.Sprintf("b%d", i)))
	}
	// The leader refuses such a join when the node answers (the next
	// test); here it does not answer at its HTTP address at join time (not
	// started yet, a firewall), so the node's own guard must hold.
	c.mu.Lock()
	delete(c.nodes, b.self.HTTPAddr)
	c.mu.Unlock()
	_, err := a.Join(b.Self(), false, false)
	require.NoError(t, err)
	c.mu.Lock()
	c.nodes[b.self.HTTPAddr] = b
	c.mu.Unlock()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		require.NotEqual(t, "Voter", member(t, a, "b1").Suffrage,
			"a node holding another cluster's state (applied index %d) was promoted to voter", b.db.Meta().Applied)
		time.Sleep(50 * time.Millisecond)
	}
	// The node says why it is not ready while the other leader knocks.
	require.Contains(t, b.ForeignLeader(), "a leader of another cluster, a1")
	require.Empty(t, a.ForeignLeader())
	// Both clusters go on deciding, each with its own records.
	require.NoError(t, claim(a, "a-after"))
	require.NoError(t, claim(b, "b-after"))
	_, found, err := b.Lookup(context.Background(), engine.Scope{Principal: "p", Endpoint: "e", Key: "b39"}, false, true)
	require.NoError(t, err)
	require.True(t, found, "the other cluster's node lost its own records")
	_, found, err = b.Lookup(context.Background(), engine.Scope{Principal: "p", Endpoint: "e", Key: "a-after"}, false, false)
	require.NoError(t, err)
	require.False(t, found, "the other cluster's node took this cluster's entries")
}

// The leader refuses the join itself, naming the mistake, for a node that
// answers with a cluster of its own: a one-node store, and a member of a
// cluster of two (whose configuration lists members, none of them this
// cluster's; raft alone would take it in). force does not skip it. A node
// that shares a member with the cluster, as a member removed and joining
// again does, and a node with an empty data dir, are let in.
func TestJoinOfANodeOfAnotherClusterIsRefused(t *testing.T) {
	t.Parallel()
	c := newMemCluster(t)
	a := c.open("a1", "", true)
	c.leader(a)
	require.NoError(t, claim(a, "a"))

	solo := c.open("s1", "", true)
	c.leader(solo)
	require.NoError(t, claim(solo, "s"))
	b1 := c.open("b1", "", true)
	c.leader(b1)
	b2 := c.open("b2", "", false)
	c.join(b2, b1)
	require.NoError(t, claim(b1, "b"))

	for _, n := range []*Node{solo, b1, b2} {
		for _, force := range []bool{false, true} {
			_, err := a.Join(n.Self(), force, false)
			require.ErrorIs(t, err, ErrForeignCluster, "join of %s (force %v)", n.self.ID, force)
			require.Contains(t, err.Error(), "empty data dir")
		}
		require.Empty(t, member(t, a, n.self.ID).ID, "%s was added", n.self.ID)
	}

	// A node that refuses this cluster's node token (another --auth-file,
	// as another cluster's node has) is refused whatever it holds: the
	// leader cannot see its configuration, and could never promote it.
	stranger := c.open("x1", "", false)
	a.SetPeerProbe(func(ctx context.Context, addr string) (Status, error) {
		if addr == stranger.self.HTTPAddr {
			return Status{}, fmt.Errorf("%s answered 401 Unauthorized: %w", addr, ErrTokenRefused)
		}
		return c.probe(ctx, addr)
	})
	_, err := a.Join(stranger.Self(), true, true)
	require.ErrorIs(t, err, ErrTokenRefused)
	require.Contains(t, err.Error(), "--auth-file")
	require.Empty(t, member(t, a, "x1").ID, "x1 was added")
	a.SetPeerProbe(c.probe)

	fresh := c.open("a2", "", false)
	c.join(fresh, a)
	require.NoError(t, a.Remove("a2", false))
	_, err = a.Join(fresh.Self(), false, false) // it was one of us
	require.NoError(t, err)
}
