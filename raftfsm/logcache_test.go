package raftfsm

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/hashicorp/raft"
	"github.com/stretchr/testify/require"
)

func cachedStore(t *testing.T) guardedLogStore {
	t.Helper()
	dir := filepath.Join(t.TempDir(), logStoreDir)
	require.NoError(t, os.MkdirAll(dir, 0o700))
	ls, err := openWAL(dir, nil)
	require.NoError(t, err)
	t.Cleanup(func() { ls.Close() })
	return guardedLogStore{ls, &diskGuard{}, func() bool { return true }, newLogCache()}
}

func entries(term, from, to uint64, size int) []*raft.Log {
	var logs []*raft.Log
	for i := from; i <= to; i++ {
		logs = append(logs, &raft.Log{Index: i, Term: term, Type: raft.LogCommand, Data: fmt.Appendf(make([]byte, 0, size), "%d/%d%0*d", term, i, size, 0)[:size]})
	}
	return logs
}

// Reads through the cache answer as the log does: the entry stored last at
// an index (a conflicting tail is replaced after raft deletes it), nothing
// a head truncation removed, and every entry whatever the cache holds.
func TestLogCacheAnswersAsTheLog(t *testing.T) {
	s := cachedStore(t)
	require.NoError(t, s.StoreLogs(entries(1, 1, 600, 32)))
	check := func(index, term uint64) {
		t.Helper()
		var l raft.Log
		require.NoError(t, s.GetLog(index, &l), "index %d", index)
		var want raft.Log
		require.NoError(t, s.LogStore.GetLog(index, &want))
		require.Equal(t, want.Data, l.Data, "index %d", index)
		require.Equal(t, term, l.Term, "index %d", index)
	}
	for i := uint64(1); i <= 600; i++ {
		check(i, 1) // 345..600 from the cache, the rest from raft-wal
	}
	var l raft.Log
	require.True(t, s.recent.get(600, &l), "the last entries are cached")

	// A follower drops a conflicting tail and takes the new term's entries.
	require.NoError(t, s.DeleteRange(500, 600))
	require.NoError(t, s.StoreLogs(entries(2, 500, 520, 32)))
	check(499, 1)
	check(510, 2)
	require.ErrorIs(t, s.GetLog(530, &l), raft.ErrLogNotFound)

	// A head truncation after a snapshot: the cached entries below the new
	// first index are gone too.
	require.NoError(t, s.StoreLogs(entries(2, 521, 530, 32)))
	require.NoError(t, s.LogStore.DeleteRange(1, 525)) // behind the cache's back
	require.True(t, s.recent.get(522, &l))
	require.ErrorIs(t, s.GetLog(522, &l), raft.ErrLogNotFound)
	check(526, 2)
}

// The cache holds at most logCacheBytes of entries, whatever their size.
func TestLogCacheIsBoundedByBytes(t *testing.T) {
	c := newLogCache()
	big := logCacheBytes / 8
	c.put(entries(1, 1, 20, big))
	require.LessOrEqual(t, c.bytes, logCacheBytes)
	held := 0
	var l raft.Log
	for i := uint64(1); i <= 20; i++ {
		if c.get(i, &l) {
			held++
			require.Equal(t, i, l.Index)
		}
	}
	require.Equal(t, 8, held)
	c.put(entries(1, 21, 21+logCacheSlots, 1)) // small ones replace them
	require.LessOrEqual(t, c.bytes, logCacheSlots)
	c.clear()
	require.Zero(t, c.bytes)
	require.False(t, c.get(21+logCacheSlots, &l))
}
