package raftfsm

import (
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A leader whose log was compacted up to its newest snapshot's own index
// (raft cuts to the snapshot's index when more than --trailing-logs entries
// were appended while it was written: a large state under writes, or a low
// --trailing-logs) holds no entry at that index: the log answers it from the
// snapshot (snapshotHead) while that snapshot is the newest. Sending it to a
// joiner, the leader kept its log from there (keepLogFrom), but once it took
// a newer snapshot during the install, nothing answered the entry at the
// sent snapshot's index, which raft reads to send the entries above it: the
// joiner was sent the whole state again.
func TestSlowInstallFromALogCutAtTheSnapshotIsSentOnce(t *testing.T) {
	installs := slowInstalls(t)

	c := newMemCluster(t)
	var logs [2]logBuffer
	open := func(id string, bootstrap bool, l *logBuffer) *Node {
		cfg := DefaultConfig()
		cfg.NodeID, cfg.DataDir, cfg.Bootstrap, cfg.RaftAddr, cfg.HTTPAdvertise = id, t.TempDir(), bootstrap, "127.0.0.1:0", "mem-"+id
		// One trailing entry: every compaction under writes reaches the
		// snapshot's own index.
		cfg.SnapshotThreshold, cfg.TrailingLogs, cfg.SnapshotInterval = 1, 1, 200*time.Millisecond
		cfg.Logger = slog.New(slog.NewTextHandler(l, &slog.HandlerOptions{Level: slog.LevelDebug}))
		return c.start(cfg)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("n1's log:\n%s\nn2's log:\n%s", logs[0].String(), logs[1].String())
		}
	})
	n1 := open("n1", true, &logs[0])
	c.leader(n1)
	for i := range 50 {
		claimFresh(t, n1, fmt.Sprint("before-", i))
	}

	claimed := n1.raft.AppliedIndex()

	stopWriters, _ := writeLoad(t, n1)
	// The log goes on right after the newest snapshot, one past the claims
	// above: the first snapshot, at the configuration entry, is cut at its
	// own index too, and a joiner admitted while it was the newest was sent
	// the log from there, no snapshot (on a loaded machine, the claims
	// came before the next snapshot: "n2 installed nothing").
	require.Eventually(t, func() bool {
		first, err := n1.logStore.FirstIndex()
		idx, _, ok := n1.snaps.newest()
		return err == nil && ok && idx >= claimed && first == idx+1
	}, 10*time.Second, time.Millisecond)

	n2 := open("n2", false, &logs[1])
	res, err := n1.Join(n2.Self(), false, false)
	require.NoError(t, err)
	require.NoError(t, n2.Admitted(res.AdmittedIndex))
	// 60 s: with three test suites on two cores, 30 s passed once.
	require.Eventually(t, func() bool { return installs.Load() > 0 && n2.fsm.db.Meta().Applied > 0 }, 60*time.Second, 20*time.Millisecond, "n2 installed nothing (its log is printed below)")
	time.Sleep(time.Second)
	stopWriters()
	want := n1.raft.AppliedIndex()
	require.Eventually(t, func() bool { return n2.fsm.db.Meta().Applied >= want }, 30*time.Second, 20*time.Millisecond,
		"n2 never caught up (%d installs, applied %d of %d)", installs.Load(), n2.fsm.db.Meta().Applied, want)
	require.Equal(t, int32(1), installs.Load(), "the joiner was sent the state more than once")
}
