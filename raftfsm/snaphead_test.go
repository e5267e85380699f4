package raftfsm

import (
	"testing"

	"github.com/hashicorp/raft"
	"github.com/stretchr/testify/require"
)

// A follower that installed the leader's snapshot at S and appended entries
// above it was asked, restarted before the leader heard of those entries,
// to match the entry at S: its log starts at S+1, so raft found none and
// refused, and the leader stepped back one entry per round trip to the
// head of its log, then sent the whole state again, forever (an operator
// walk with 3 M records: a node killed just after its install never caught
// up). The entry at the newest snapshot's index, the log going on right
// after it, is answered with the snapshot's term.
func TestLogAnswersTheEntryOfTheSnapshotItGoesOnFrom(t *testing.T) {
	s := cachedStore(t)
	require.NoError(t, s.StoreLogs(entries(3, 11, 20, 32)))
	snap := struct{ index, term uint64 }{10, 3}
	s.LogStore.snapHead = func() (*raft.SnapshotMeta, bool) {
		return &raft.SnapshotMeta{Index: snap.index, Term: snap.term}, true
	}

	var l raft.Log
	require.NoError(t, s.GetLog(10, &l))
	require.Equal(t, uint64(10), l.Index)
	require.Equal(t, uint64(3), l.Term)
	require.NoError(t, s.GetLog(11, &l))
	require.Equal(t, uint64(11), l.Index)

	// Only that entry: below it nothing is known.
	require.ErrorIs(t, s.GetLog(9, &l), raft.ErrLogNotFound)
	// Nor when the snapshot is not the one the log goes on from.
	snap.index = 8
	require.ErrorIs(t, s.GetLog(10, &l), raft.ErrLogNotFound)
	snap.index = 10
	// Nor when the log's head was cut past it.
	require.NoError(t, s.DeleteRange(11, 12))
	require.ErrorIs(t, s.GetLog(10, &l), raft.ErrLogNotFound)
	// A log holding its own entry at the snapshot's index answers it.
	snap.index, snap.term = 15, 9
	require.NoError(t, s.GetLog(15, &l))
	require.Equal(t, uint64(3), l.Term, "the log's own entry, not the snapshot's")
}
