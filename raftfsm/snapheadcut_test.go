package raftfsm

import (
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"
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
	open := historyOpener(c)
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
		if res, err = l.Join(n.Self(), false, true); err == nil || time.Now().After(end) || !errors.Is(err, ErrUnknownOutcome) && !errors.Is(err, ErrNotProposed) {
			break
		}
	}
	require.NoError(t, err)
	require.NoError(t, n.Admitted(res.AdmittedIndex))
	c.waitSuffrage(l, n.self.ID, "Voter")
}

// historyOpener opens nodes that take snapshots only when the test does,
// keep 4 entries behind them and tick never, so that no entry lands after
// a snapshot unasked; each logs at debug to its buffer.
func historyOpener(c *memCluster) func(id, dir, addr string, bootstrap bool, lb *logBuffer) *Node {
	return func(id, dir, addr string, bootstrap bool, lb *logBuffer) *Node {
		cfg := DefaultConfig()
		cfg.NodeID, cfg.DataDir, cfg.Bootstrap, cfg.RaftAddr, cfg.HTTPAdvertise = id, dir, bootstrap, addr, "mem-"+id
		cfg.SnapshotThreshold, cfg.TrailingLogs, cfg.SnapshotInterval, cfg.TickInterval = 1<<30, 4, time.Hour, time.Hour
		cfg.Logger = slog.New(slog.NewTextHandler(lb, &slog.HandlerOptions{Level: slog.LevelDebug}))
		return c.start(cfg)
	}
}

// The same old copy, stopped right after the install, before any entry
// above the snapshot reached it: the leader's stream held its state as of
// the send, past the snapshot's index, and the log was empty up to there.
// Nothing is cut then: the recovered cluster's leader, matched at the
// snapshot's index, appends its entries after it, and the state skipped
// them as applied (a review of the tail-cut check: a cut when the log is
// empty after an install). Their terms, later than any the old state's
// entries had, tell them apart.
//
// Five nodes: n5 is the old copy; n4, stopped at the snapshot, is the
// survivor idem recover makes the cluster; n1-n3 go on past it.
func TestEntriesOverAStateAheadOfAnEmptyLogAreDiverged(t *testing.T) {
	c := newMemCluster(t)
	prev := afterRestore
	t.Cleanup(func() { afterRestore = prev })
	keep := spareKeep // the stream n5 gets holds the leader's state as of its send
	spareKeep = 0
	t.Cleanup(func() { spareKeep = keep })
	addrs := testRaftAddrs(t, 5)
	var logs [7]logBuffer
	open := historyOpener(c)
	var dirs [5]string
	var n [5]*Node
	for i := range n {
		dirs[i] = t.TempDir()
		n[i] = open(fmt.Sprint("n", i+1), dirs[i], addrs[i], i == 0, &logs[i])
		if i == 0 {
			c.leader(n[0])
		} else {
			c.join(n[i], n[0])
		}
	}
	claimFresh(t, n[0], "a-0")
	c.stop(n[4])
	for i := range 10 {
		claimFresh(t, n[0], fmt.Sprint("a-", i+1))
	}
	require.NoError(t, n[0].Snapshot())
	snap, err := strconv.ParseUint(n[0].raft.Stats()["last_snapshot_index"], 10, 64)
	require.NoError(t, err)
	waitAppliedIndex(t, n[3], snap)
	require.Equal(t, snap, n[3].raft.LastIndex(), "the window this test is about: n4 ends at the snapshot")
	c.stop(n[3])
	for i := range 5 {
		claimFresh(t, n[0], fmt.Sprint("b-", i)) // n1-n3, a quorum of five
	}

	// n5 installs the leader's snapshot, its state past it, and stops
	// before the leader sends it anything more: held in the install
	// (raft sends nothing more before it answers) until n1-n3 stopped.
	var once sync.Once
	restored, release := make(chan struct{}), make(chan struct{})
	afterRestore = func() {
		once.Do(func() {
			close(restored)
			select {
			case <-release:
			case <-time.After(30 * time.Second):
			}
		})
	}
	n5 := open("n5", dirs[4], addrs[4], false, &logs[4])
	select {
	case <-restored:
	case <-time.After(20 * time.Second):
		t.Fatal("n5 installed no snapshot")
	}
	c.stop(n[1])
	c.stop(n[2])
	stopped := make(chan struct{})
	go func() { c.stop(n[0]); close(stopped) }() // its send to n5 waits for n5's answer
	require.Eventually(t, func() bool { return n[0].raft.State() == raft.Shutdown }, 20*time.Second, 5*time.Millisecond)
	close(release)
	require.Eventually(t, func() bool { last, err := n5.logStore.LastIndex(); return err == nil && last == 0 }, 20*time.Second, 5*time.Millisecond,
		"raft never dropped n5's log after the install")
	c.stop(n5)
	<-stopped
	afterRestore = func() {}
	st, err := ReadOfflineState(dirs[4])
	require.NoError(t, err)
	ls, err := openWAL(filepath.Join(dirs[4], logStoreDir), nil)
	require.NoError(t, err)
	last, err := ls.LastIndex()
	require.NoError(t, err)
	require.NoError(t, ls.Close())
	require.Greater(t, st.Applied, snap, "the window this test is about: n5's state past the snapshot")
	require.Zero(t, last, "the window this test is about: n5's log empty")

	// n4 recovered alone; an empty n5 joins it, then n5's old copy is back.
	_, err = Recover(dirs[3], "n4", []Peer{{ID: "n4", RaftAddr: addrs[3]}}, nil)
	require.NoError(t, err)
	n4 := open("n4", dirs[3], addrs[3], false, &logs[5])
	c.leader(n4)
	claimFresh(t, n4, "e-0")
	n5 = open("n5", t.TempDir(), addrs[4], false, &logs[5])
	joinEmpty(t, c, n4, n5)
	c.stop(n5)
	n5 = open("n5", dirs[4], addrs[4], false, &logs[6])
	require.Eventually(t, func() bool { return n5.Superseded() != "" }, 30*time.Second, 20*time.Millisecond,
		"n5's old copy, its state at %d of another history over an empty log, was not stopped; its log:\n%s", st.Applied, tail(logs[6].String(), 30))
	require.Contains(t, n5.Superseded(), "this node's state holds entries its cluster does not")
	require.Contains(t, n5.Superseded(), fmt.Sprintf("from index %d on", snap+1))
}
