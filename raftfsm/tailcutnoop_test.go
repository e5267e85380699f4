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

// Which deletions are conflicting tails, at each boundary of the log. A
// deletion of the whole log is a conflict only when raft goes on to store
// the leader's entries from its first index: after an install, or in a
// compaction that raced a cut, it stores them from elsewhere.
func TestTailCutAtEachBoundaryOfTheLog(t *testing.T) {
	for _, tc := range []struct {
		name      string
		installed bool
		del       [2]uint64 // of a log 11-20, its snapshot at 10
		next      uint64    // the first index raft stores next
		want      [][2]uint64
	}{
		{"a tail past the head", false, [2]uint64{15, 20}, 15, [][2]uint64{{15, 20}}},
		{"a tail from the second entry", false, [2]uint64{12, 20}, 12, [][2]uint64{{12, 20}}},
		// The bug: a leader matched at the snapshot's index (snapshotHead),
		// its entries conflicting from the log's first on.
		{"the whole log, from its first entry", false, [2]uint64{11, 20}, 11, [][2]uint64{{11, 20}}},
		{"the whole log, from the snapshot's index below it", false, [2]uint64{10, 20}, 10, [][2]uint64{{10, 20}}},
		{"the whole log after an install", true, [2]uint64{11, 20}, 31, nil},
		{"the whole log after an install, entries from its old head", true, [2]uint64{11, 20}, 11, nil},
		{"a compaction that reached the end of a log a cut had shortened", false, [2]uint64{11, 20}, 21, nil},
		{"the last entry", false, [2]uint64{20, 20}, 20, [][2]uint64{{20, 20}}},
		{"a head compaction", false, [2]uint64{11, 16}, 21, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := cachedStore(t)
			var cuts [][2]uint64
			s.LogStore.tailCut = func(min, max uint64) { cuts = append(cuts, [2]uint64{min, max}) }
			require.NoError(t, s.StoreLogs(entries(1, 11, 20, 32)))
			s.LogStore.installed.Store(tc.installed)
			require.NoError(t, s.DeleteRange(tc.del[0], tc.del[1]))
			last, err := s.LastIndex()
			require.NoError(t, err)
			if tc.next == last+1 || last == 0 {
				require.NoError(t, s.StoreLogs(entries(2, tc.next, tc.next+2, 32)))
			}
			require.Equal(t, tc.want, cuts)
			if tc.want != nil {
				require.Zero(t, s.g.tailCut.Load(), "the replacing entries were taken as such (StoreLogs)")
			}
		})
	}
}

// An empty log (just after an install) holds nothing raft can find in
// conflict: a deletion reaches no entry, and the entries after the
// snapshot are no replacement.
func TestEmptyLogHasNoTailToCut(t *testing.T) {
	s := cachedStore(t)
	var cuts [][2]uint64
	s.LogStore.tailCut = func(min, max uint64) { cuts = append(cuts, [2]uint64{min, max}) }
	require.NoError(t, s.DeleteRange(11, 20))
	require.NoError(t, s.StoreLogs(entries(2, 11, 13, 32)))
	require.Empty(t, cuts)
}

// An entry the leader sends at an index the state applied, of a term later
// than the entries the state applied (appliedBound), is another history's
// even where the log holds nothing to compare (an empty log after an
// install whose state is past the snapshot). The cluster's own entries
// there, and entries past the state, are not.
func TestEntryOfALaterTermAtAnAppliedIndexIsAnotherHistory(t *testing.T) {
	for _, tc := range []struct {
		name  string
		first uint64 // the entries stored, from first to first+4, of term
		term  uint64
		want  [][2]uint64
	}{
		{"the cluster's entries up to the state", 11, 3, nil},
		{"another history's, from the snapshot on", 11, 1 << 21, [][2]uint64{{11, 1 << 21}}},
		{"another history's, past the state", 21, 1 << 21, nil},
		{"another history's, reaching past the state", 18, 1 << 21, [][2]uint64{{18, 1 << 21}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := cachedStore(t)
			s.isLeader = func() bool { return false }
			var got [][2]uint64
			s.LogStore.unverified = func(index, term uint64) { got = append(got, [2]uint64{index, term}) }
			s.LogStore.appliedBound.Store(&[2]uint64{20, 3}) // state applied 20, in terms up to 3; the log is empty
			require.NoError(t, s.StoreLogs(entries(tc.term, tc.first, tc.first+4, 32)))
			require.Equal(t, tc.want, got)
		})
	}
}
