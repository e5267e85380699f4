package raftfsm

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idem-store/idem/engine"
)

// reopen closes n and opens a node on the same data dir and config.
func reopen(t *testing.T, n *Node) *Node {
	t.Helper()
	cfg := n.cfg
	require.NoError(t, n.Close())
	m, err := Open(cfg)
	require.NoError(t, err, "a clean restart must never be refused")
	t.Cleanup(func() { m.Close() })
	require.Eventually(t, m.IsLeader, 10*time.Second, 10*time.Millisecond)
	return m
}

// Bug: raft counts no-op and barrier entries in a snapshot's index, which
// the FSM never sees, so the state's applied index can be below the index
// of the node's own snapshot marker. A clean restart then refused to start
// (and advised deleting the data dir). The marker records the applied index
// of the state it stands for; that is what the state is compared with.
func TestRestartAfterSnapshotAtBarrierIndex(t *testing.T) {
	n := mustNode(t, func(c *Config) { c.TickInterval, c.SweepInterval = time.Hour, time.Hour })
	s := engine.Scope{Principal: "p", Endpoint: "e", Key: "k"}
	res, _, err := n.Claim(engine.ClaimArgs{Scope: s, Fingerprint: "aa", LeaseMs: 1000, RetentionMs: 3_600_000})
	require.NoError(t, err)
	require.Equal(t, engine.OutcomeClaimed, res.Outcome)
	n.barrierTerm.Store(0) // force the term's Barrier entry after the claim
	_, found, err := n.Lookup(context.Background(), s, false, true)
	require.NoError(t, err)
	require.True(t, found)
	require.NoError(t, n.Snapshot())
	list, err := n.snaps.List()
	require.NoError(t, err)
	require.Greater(t, list[0].Index, n.db.Meta().Applied, "the test needs a snapshot above the applied index")

	m := reopen(t, n)
	r, found, err := m.Lookup(context.Background(), s, false, true)
	require.NoError(t, err)
	require.True(t, found)
	require.Equal(t, res.Record.Token, r.Token)
	// And again, with the snapshot now the newest thing on disk.
	m = reopen(t, m)
	_, found, err = m.Lookup(context.Background(), s, false, true)
	require.NoError(t, err)
	require.True(t, found)
}
