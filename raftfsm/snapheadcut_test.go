package raftfsm

import (
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Bug (a review of the tail-cut check): a follower that installed the
// leader's snapshot at S holds no log entry at S, its log starts at S+1.
// A leader of another history whose entry at S has the snapshot's term
// (the histories forked right after it) is matched there (snapshotHead),
// and its entries from S+1 conflict: raft deletes the log from its very
// first entry. That range was taken for a compaction (it starts at the
// log's head), so a node whose state had applied the other history's
// entries was not marked diverged: it served, its state lacking the
// cluster's claims at the indexes it skipped.
//
// Here: n3 installs n1's snapshot at S; n1 stops; n2 and n3 go on from
// S+1 (history A); idem recover makes n1 the cluster alone (history B,
// from S+1 on); empty n2 and n3 join it, and n3's old data dir comes back
// at n3's address.
func TestConflictRightAfterAnInstalledSnapshotIsDiverged(t *testing.T) {
	c := newMemCluster(t)
	addrs := testRaftAddrs(t, 3)
	var logs [5]logBuffer
	open := func(id, dir, addr string, bootstrap bool, lb *logBuffer) *Node {
		cfg := DefaultConfig()
		cfg.NodeID, cfg.DataDir, cfg.Bootstrap, cfg.RaftAddr, cfg.HTTPAdvertise = id, dir, bootstrap, addr, "mem-"+id
		// Snapshots only when the test takes one, 4 entries kept behind
		// them; no tick, so no entry lands after the snapshot unasked.
		cfg.SnapshotThreshold, cfg.TrailingLogs, cfg.SnapshotInterval, cfg.TickInterval = 1<<30, 4, time.Hour, time.Hour
		cfg.Logger = slog.New(slog.NewTextHandler(lb, &slog.HandlerOptions{Level: slog.LevelDebug}))
		return c.start(cfg)
	}
	d1, d2, d3 := t.TempDir(), t.TempDir(), t.TempDir()
	n1 := open("n1", d1, addrs[0], true, &logs[0])
	c.leader(n1)
	n2 := open("n2", d2, addrs[1], false, &logs[1])
	c.join(n2, n1)
	n3 := open("n3", d3, addrs[2], false, &logs[2])
	c.join(n3, n1)
	claimFresh(t, n1, "a-0")
	c.stop(n3)
	for i := range 10 {
		claimFresh(t, n1, fmt.Sprint("a-", i+1))
	}
	require.NoError(t, n1.Snapshot()) // compacts n1's log past n3's end: n3 is sent the snapshot
	snap, err := strconv.ParseUint(n1.raft.Stats()["last_snapshot_index"], 10, 64)
	require.NoError(t, err)

	n3 = open("n3", d3, addrs[2], false, &logs[2])
	require.Eventually(t, func() bool { return n3.raft.Stats()["last_snapshot_index"] == fmt.Sprint(snap) }, 20*time.Second, 10*time.Millisecond,
		"n3 installed no snapshot at %d", snap)
	waitAppliedIndex(t, n3, snap)
	require.Equal(t, snap, n1.raft.LastIndex(), "the window this test is about: nothing after the snapshot that n3 shares")
	c.stop(n1)

	// History A: n2 and n3 go on without n1.
	l := c.leader(n2, n3)
	for i := range 5 {
		claimFresh(t, l, fmt.Sprint("b-", i))
	}
	waitApplied(t, l, n2, n3)
	first3, err := n3.logStore.FirstIndex()
	require.NoError(t, err)
	require.Equal(t, snap+1, first3, "the window this test is about: n3's log starts right after its snapshot")
	applied3 := n3.db.Meta().Applied
	require.Greater(t, applied3, snap)
	c.stop(n2)
	c.stop(n3)

	// History B: n1 recovered alone, then empty n2 and n3 join it.
	_, err = Recover(d1, "n1", []Peer{{ID: "n1", RaftAddr: addrs[0]}}, nil)
	require.NoError(t, err)
	n1 = open("n1", d1, addrs[0], false, &logs[0])
	c.leader(n1)
	claimFresh(t, n1, "e-0")
	n2 = open("n2", t.TempDir(), addrs[1], false, &logs[3])
	joinEmpty(t, c, n1, n2)
	n3 = open("n3", t.TempDir(), addrs[2], false, &logs[3])
	joinEmpty(t, c, n1, n3)
	c.stop(n3)

	// n3's old data dir, back at n3's address.
	n3 = open("n3", d3, addrs[2], false, &logs[4])
	defer func() {
		if t.Failed() {
			t.Logf("n1: %v\nn3: %v\nn3 full log:\n%s", n1.raft.Stats(), n3.raft.Stats(), logs[4].String())
		}
	}()
	require.Eventually(t, func() bool { return n3.Superseded() != "" }, 30*time.Second, 20*time.Millisecond,
		"n3's old copy, whose state applied entries up to %d of another history, was not stopped; its log:\n%s\nn1's log:\n%s", applied3, tail(logs[4].String(), 30), tail(logs[0].String(), 40))
	require.Contains(t, n3.Superseded(), "this node's state holds entries its cluster does not")
	require.Contains(t, n3.Superseded(), fmt.Sprintf("from index %d on", snap+1))
}

// joinEmpty adds n, which starts with an empty data dir, through the
// leader l and waits until it is a voter (idem serve --join says a node
// is empty; a member a recovery left out is let in only so).
func joinEmpty(t *testing.T, c *memCluster, l, n *Node) {
	t.Helper()
	var res JoinResult
	var err error
	for end := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if res, err = l.Join(n.Self(), false, true); err == nil || time.Now().After(end) || !errors.Is(err, ErrUnknownOutcome) {
			break
		}
	}
	require.NoError(t, err)
	require.NoError(t, n.Admitted(res.AdmittedIndex))
	c.waitSuffrage(l, n.self.ID, "Voter")
}
