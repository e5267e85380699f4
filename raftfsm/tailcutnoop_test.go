package raftfsm

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// Only a truncation that removes a tail is a tail cut. The snapshot
// goroutine's compaction reads the log's first index, then deletes from
// it; a follower installing the leader's snapshot meanwhile (raft's main
// goroutine) empties the log. The compaction's range then starts past the
// empty log's first index (0) and raft-wal removes nothing, yet the node
// took it for a cut of entries its state had applied (the snapshot's
// index is at or above the range) and stopped serving for good: a healthy
// follower made superseded by a race of raft's own.
func TestDeleteRangeThatRemovesNothingIsNoTailCut(t *testing.T) {
	s := cachedStore(t)
	var cuts [][2]uint64
	s.LogStore.tailCut = func(min, max uint64) { cuts = append(cuts, [2]uint64{min, max}) }
	require.NoError(t, s.StoreLogs(entries(1, 1, 10, 32)))

	require.NoError(t, s.DeleteRange(11, 20), "a range past the log's end")
	require.Empty(t, cuts, "nothing was removed")

	require.NoError(t, s.DeleteRange(1, 10), "installing a snapshot: the whole log")
	require.NoError(t, s.DeleteRange(1, 8), "the compaction that read first index 1 before")
	require.Empty(t, cuts, "the compaction of an emptied log cut no tail")

	require.NoError(t, s.StoreLogs(entries(2, 11, 20, 32)))
	require.NoError(t, s.DeleteRange(15, 20))
	require.Equal(t, [][2]uint64{{15, 20}}, cuts, "a conflicting tail is still one")
}
