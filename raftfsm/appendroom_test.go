package raftfsm

import (
	"bytes"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"

	"github.com/hashicorp/raft"
	"github.com/stretchr/testify/require"

	"github.com/idem-store/idem/engine"
)

// A follower catching up took the leader's entries while its disk was
// above the storage-full threshold: they cost little in the raft log's
// preallocated segment, but about twice again once applied (Pebble's WAL,
// then its tables), and a disk-full walk on real processes saw such a
// follower go from 180 MB to 0 bytes free within two seconds of its
// restart. It now takes an append only while its disk has room, above the
// threshold, to apply it with the entries it holds and has not applied,
// says so in its status, and goes on by itself as its applies catch up.
// Raft's own entries are taken throughout.
func TestNearlyFullFollowerTakesNoMoreThanItCanApply(t *testing.T) {
	mnt := smallTmpfs(t, "160m")
	dir := filepath.Join(mnt, logStoreDir)
	require.NoError(t, os.MkdirAll(dir, 0o700))
	ls, err := openWAL(dir, nil) // its first 64 MiB segment is made here
	require.NoError(t, err)
	t.Cleanup(func() { ls.Close() })
	free, err := engine.DiskFree(mnt)
	require.NoError(t, err)
	var logs bytes.Buffer
	// 12 MiB above the threshold: room to apply 6 MiB of entries.
	g := &diskGuard{dir: mnt, minFree: 1 << 20, fullBelow: free - 12<<20, log: slog.New(slog.NewTextHandler(&logs, nil))}
	s := guardedLogStore{ls, g, func() bool { return false }, newLogCache()}

	var last uint64
	for i := uint64(1); i <= 10; i++ {
		if err := s.StoreLogs(entries(1, i, i, 1<<20)); err != nil {
			require.ErrorIs(t, err, errLogNoRoomToApply)
			break
		}
		last = i
	}
	require.Less(t, last, uint64(10), "the follower took 10 MiB of entries it has 12 MiB of room to store and apply (about twice their bytes)")
	require.GreaterOrEqual(t, last, uint64(4), "it refused entries it had room for")
	require.Contains(t, logs.String(), "takes no more raft entries from the leader until it has applied those it holds")
	require.NoError(t, g.read())
	require.GreaterOrEqual(t, g.free.Load(), g.fullBelow, "the entries themselves took the disk under the threshold")

	st := g.fullStatus()
	require.NotNil(t, st, "its status says why it stays behind, though above the threshold")
	require.Equal(t, uint64(last)<<20, st.UnappliedBytes)
	require.Contains(t, st.String(), "takes no more raft entries from the leader, as applying them")
	require.Contains(t, st.String(), "bytes of entries it holds and has not applied yet")

	// Raft's own entries (a new leader's first of its term, a
	// configuration) are still taken: elections go on.
	require.NoError(t, s.StoreLogs([]*raft.Log{{Index: last + 1, Term: 2, Type: raft.LogNoop}}))
	last++

	// Its applies catch up: it takes entries again, by itself.
	g.applied.Store(last)
	require.NoError(t, s.StoreLogs(entries(2, last+1, last+1, 1<<20)))
	require.Nil(t, g.fullStatus(), "an append went through: the status no longer says the disk is full")
}

// A follower stopped while it caught up holds entries it has not applied;
// applying them after its start writes about twice their bytes again, so
// its admission of appends counts them from the start.
func TestNearlyFullFollowerCountsTheEntriesItHeldAtStart(t *testing.T) {
	dir := t.TempDir()
	ls, err := openWAL(dir, nil)
	require.NoError(t, err)
	t.Cleanup(func() { ls.Close() })
	require.NoError(t, ls.StoreLogs(entries(1, 1, 700, 1000)))

	g := &diskGuard{minFree: 1 << 20, log: slog.New(slog.DiscardHandler)}
	g.seedBacklog(ls, 100) // the store applied 1..100
	require.Equal(t, uint64(600*1000), g.unapplied())
	g.applied.Store(612) // the first 512 held, 101..612
	require.Equal(t, uint64(88*1000), g.unapplied(), "counted until applied, not longer")
	g.applied.Store(700)
	require.Zero(t, g.unapplied())

	g = &diskGuard{minFree: 1 << 20, log: slog.New(slog.DiscardHandler)}
	g.seedBacklog(ls, 700)
	require.Zero(t, g.unapplied(), "all applied: nothing held")
}

// Raft hands the FSM only its commands and configurations: a no-op (a new
// leader's first entry) or a barrier (which idem's leader proposes at the
// start of its term) is applied without the FSM. A batch ending in one was
// counted until a later command was applied, so a nearly full follower
// refused the appends that held that command: it stayed behind for good.
func TestNearlyFullFollowerCountsABatchEndingInABarrierOnceItsCommandsApply(t *testing.T) {
	g := &diskGuard{minFree: 1 << 20, log: slog.New(slog.DiscardHandler)}
	batch := append(entries(1, 1, 2, 1<<20), &raft.Log{Index: 3, Term: 2, Type: raft.LogNoop}, &raft.Log{Index: 4, Term: 2, Type: raft.LogBarrier})
	g.stored(batch)
	g.stored([]*raft.Log{{Index: 5, Term: 2, Type: raft.LogBarrier}})
	require.Equal(t, uint64(2<<20), g.unapplied())
	g.applied.Store(2) // gatedFSM saw 1 and 2, the last it is given
	require.Zero(t, g.unapplied(), "the FSM applied all it will be given of those batches")
}

// A batch stored again after a conflict is counted twice, as the doc says,
// but the first (a tail the new leader's entries replaced, with a higher
// last index) kept every batch stored after it counted once applied.
func TestNearlyFullFollowerForgetsAppliedBatchesStoredAfterAReplacedTail(t *testing.T) {
	g := &diskGuard{minFree: 1 << 20, log: slog.New(slog.DiscardHandler)}
	g.stored(entries(1, 1, 10, 1000)) // a leader's tail, never committed
	g.stored(entries(2, 1, 4, 1000))  // the new leader's entries replace it
	g.applied.Store(4)
	require.Equal(t, uint64(10*1000), g.unapplied(), "the replaced tail is counted until its index is applied")
	g.stored(entries(2, 5, 6, 1000))
	g.applied.Store(6)
	require.Equal(t, uint64(10*1000), g.unapplied(), "the applied batches stored after the replaced tail are not counted")
}

// A follower learns that the entries it stored are committed only from an
// append the leader sends after them; raft drops that commit index when
// the append's StoreLogs fails. Counting the entries it has not learned
// are committed refused the very append that would have let it apply
// them: under load (every append brings new entries) it stayed behind,
// with room to spare, until the leader's retries backed off to entries it
// held (hundreds of tries with a 512-entry MaxAppendEntries).
func TestNearlyFullFollowerCountsOnlyEntriesItKnowsAreCommitted(t *testing.T) {
	// Room to apply 2.5 MiB of entries.
	s, commit := nearlyFullFollower(t, 5<<20)
	g := s.g

	require.NoError(t, s.StoreLogs(entries(1, 1, 2, 1<<20))) // the leader's commit index is 0 yet
	// The next append carries 3 and the commit index 2: the follower does
	// not know 1 and 2 are committed, and applies them only if it takes 3.
	require.NoError(t, s.StoreLogs(entries(1, 3, 3, 1<<20)), "refused the append that lets it apply what it holds")
	commit.Store(3)
	require.ErrorIs(t, s.StoreLogs(entries(1, 4, 4, 1<<20)), errLogNoRoomToApply, "the committed entries it has not applied are counted")
	g.applied.Store(3)
	require.NoError(t, s.StoreLogs(entries(1, 4, 4, 1<<20)))
}

// raftAppend does what raft v1.8.0's appendEntries does with an append's
// entries on a follower (raft.go, "Process any new entries"): lastIdx is
// raft's idea of its log's end, set only once StoreLogs went through.
func raftAppend(s raft.LogStore, lastIdx *uint64, logs []*raft.Log) error {
	var newEntries []*raft.Log
	for i, e := range logs {
		if e.Index > *lastIdx {
			newEntries = logs[i:]
			break
		}
		var stored raft.Log
		if err := s.GetLog(e.Index, &stored); err != nil {
			return fmt.Errorf("failed to get log entry %d: %w", e.Index, err)
		}
		if e.Term != stored.Term {
			if err := s.DeleteRange(e.Index, *lastIdx); err != nil {
				return err
			}
			newEntries = logs[i:]
			break
		}
	}
	if len(newEntries) == 0 {
		return nil
	}
	if err := s.StoreLogs(newEntries); err != nil {
		return err // raft's TODO: lastIdx left past the log's end
	}
	*lastIdx = newEntries[len(newEntries)-1].Index
	return nil
}

// Raft deletes a follower's conflicting tail (entries of a leader that
// lost its term) before it stores the new leader's entries, and when that
// StoreLogs fails it keeps its idea of the log's end where the deleted
// tail ended: every later append then fails at "failed to get log entry"
// for the first deleted index, whatever room comes back, until the node
// restarts (the leader steps back one entry per try, backing off to 10 s,
// before it would send a snapshot). A nearly full follower refused that
// append for room. The batch that replaces a tail just deleted is taken.
func TestNearlyFullFollowerTakesTheEntriesThatReplaceATailItDeleted(t *testing.T) {
	// Room to apply 4 MiB of entries.
	s, _ := nearlyFullFollower(t, 8<<20)
	g := s.g
	g.commitIndex = nil // every stored batch counted

	var lastIdx uint64
	require.NoError(t, raftAppend(s, &lastIdx, entries(1, 1, 5, 1000)))
	g.applied.Store(5)
	require.NoError(t, raftAppend(s, &lastIdx, entries(1, 6, 8, 1000))) // a tail never committed
	// The new leader's entries from 6 on, more than the room left.
	err := raftAppend(s, &lastIdx, entries(2, 6, 12, 1<<20))
	// Room comes back (the applies caught up, space was freed).
	g.fullBelow = 0
	if err != nil {
		require.ErrorIs(t, err, errLogNoRoomToApply)
		err = raftAppend(s, &lastIdx, entries(2, 6, 12, 1<<20))
	}
	require.NoError(t, err, "the follower takes no append again until it restarts")
	last, err := s.LastIndex()
	require.NoError(t, err)
	require.Equal(t, uint64(12), last)
	require.Equal(t, last, lastIdx)
}

// The entries of a tail raft deleted were counted until the FSM applied
// an entry at or past the tail's last index. A new leader's first entries
// are a no-op and a barrier, which raft never hands the FSM: when they took
// the deleted tail's indexes and the follower then learned they were
// committed (raft sends the commit index on its own), the deleted entries
// were counted as committed and unapplied for good, and a nearly full
// follower refused every client write after them, the only entries that
// could move its applied index past them, until it restarted.
func TestNearlyFullFollowerForgetsTheTailRaftDeleted(t *testing.T) {
	// Room to apply 4 MiB of entries.
	s, commit := nearlyFullFollower(t, 8<<20)
	g := s.g

	var lastIdx uint64
	require.NoError(t, raftAppend(s, &lastIdx, entries(1, 1, 5, 1000)))
	commit.Store(5)
	g.applied.Store(5)
	// A leader's tail it never committed: 3 MiB, as much as the room allows.
	require.NoError(t, raftAppend(s, &lastIdx, entries(1, 6, 8, 1<<20)))
	// The new leader's no-op and barrier replace it, and are committed.
	require.NoError(t, raftAppend(s, &lastIdx, []*raft.Log{
		{Index: 6, Term: 2, Type: raft.LogNoop},
		{Index: 7, Term: 2, Type: raft.LogBarrier},
		{Index: 8, Term: 2, Type: raft.LogBarrier},
	}))
	commit.Store(8)
	require.Zero(t, g.unapplied(), "the deleted tail is counted as committed entries to apply")
	require.NoError(t, raftAppend(s, &lastIdx, entries(2, 9, 9, 3<<19)), "refused a write it has room for")
}

// nearlyFullFollower is a follower's guarded raft log on a 64 MiB tmpfs
// whose storage-full threshold is room bytes under its free space (room
// to apply half of that), and the commit index it has learned, which the
// test sets.
func nearlyFullFollower(t *testing.T, room uint64) (guardedLogStore, *atomic.Uint64) {
	t.Helper()
	mnt := smallTmpfs(t, "64m")
	free, err := engine.DiskFree(mnt)
	require.NoError(t, err)
	commit := new(atomic.Uint64)
	g := &diskGuard{dir: mnt, minFree: 1 << 20, fullBelow: free - room, log: slog.New(slog.DiscardHandler), commitIndex: commit.Load}
	ls, err := openWAL(t.TempDir(), nil)
	require.NoError(t, err)
	t.Cleanup(func() { ls.Close() })
	return guardedLogStore{ls, g, func() bool { return false }, newLogCache()}, commit
}
