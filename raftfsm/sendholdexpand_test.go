package raftfsm

import (
	"io"
	"testing"

	"github.com/stretchr/testify/require"
)

// A marker is expanded from the current state when it is opened to be
// sent: the whole state written out, seconds for a large one. The log was
// kept from the snapshot's index only once the expanded stream was
// returned, so a compaction during the expansion (the leader snapshotting
// under writes) could cut the entries above it, and the follower, once it
// had installed the stream, was sent the whole state again.
func TestLogIsKeptWhileASnapshotBeingSentIsExpanded(t *testing.T) {
	logs := genLog(7, 200)
	src, srcDB := mustFSM(t, t.TempDir())
	defer srcDB.Close()
	store := mustStore(t, src, t.TempDir())
	applyInBatches(src, logs[:100], 1, 16)
	meta := takeSnapshot(t, src, store)

	prev := duringExpand
	t.Cleanup(func() { duringExpand = prev })
	var during struct {
		index uint64
		ok    bool
	}
	duringExpand = func() { during.index, during.ok = store.keepLogFrom() }
	_, rc, err := store.Open(meta.ID)
	require.NoError(t, err)
	require.True(t, during.ok, "the log was not kept while the snapshot was expanded")
	require.Equal(t, meta.Index, during.index)
	_, err = io.Copy(io.Discard, rc)
	require.NoError(t, err)
	require.NoError(t, rc.Close())
	keep, ok := store.keepLogFrom()
	require.True(t, ok, "kept for sendHoldAfter after the close")
	require.Equal(t, meta.Index, keep)

	// A snapshot that does not open holds nothing.
	store2 := mustStore(t, src, t.TempDir())
	_, _, err = store2.Open("no-such-snapshot")
	require.Error(t, err)
	_, ok = store2.keepLogFrom()
	require.False(t, ok)
}
