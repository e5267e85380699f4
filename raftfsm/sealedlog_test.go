package raftfsm

import (
	"bytes"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"github.com/hashicorp/raft"
	waltypes "github.com/hashicorp/raft-wal/types"
	"github.com/stretchr/testify/require"

	"github.com/idem-store/idem/engine"
)

// raft-wal seals a full segment before it makes the next one; when the
// disk has no room for that (another process filled it), every append
// after fails with "segment is sealed", whatever space comes back, until
// the log is opened again. The node used to need a restart there; it
// reopens the log itself at the next append once there is room, and loses
// no entry. On a real tmpfs, with raft-wal's real 64 MiB segments.
func TestSealedLogReopensOnceThereIsRoom(t *testing.T) {
	mnt := smallTmpfs(t, "160m")
	dir := filepath.Join(mnt, logStoreDir)
	require.NoError(t, os.MkdirAll(dir, 0o700))
	ls, err := openWAL(dir, nil)
	require.NoError(t, err)
	defer ls.Close()
	var logs bytes.Buffer
	g := &diskGuard{dir: mnt, minFree: 1 << 20, fullBelow: 1 << 20, log: slog.New(slog.NewTextHandler(&logs, nil))}
	s := guardedLogStore{ls, g, func() bool { return true }, newLogCache()}

	// Another process takes all but 8 MiB: the first segment is already
	// made (preallocated), the next cannot be.
	filler := filepath.Join(mnt, "filler")
	free, err := engine.DiskFree(mnt)
	require.NoError(t, err)
	f, err := os.Create(filler)
	require.NoError(t, err)
	buf := make([]byte, 1<<20)
	for left := int64(free) - 8<<20; left > 0; left -= int64(len(buf)) {
		_, err := f.Write(buf[:min(int64(len(buf)), left)])
		require.NoError(t, err)
	}
	require.NoError(t, f.Close())

	// Fill the segment with 1 MiB entries until an append fails.
	var stored uint64
	for i := uint64(1); ; i++ {
		require.Less(t, i, uint64(200), "the log never filled its segment")
		err = s.StoreLogs(entries(1, i, i, 1<<20))
		if err != nil {
			break
		}
		stored = i
	}
	require.ErrorIs(t, err, waltypes.ErrSealed)
	require.Contains(t, logs.String(), "the raft log could not make its next segment file")
	// Still no room: it stays stopped, and says what it needs.
	require.ErrorIs(t, s.StoreLogs(entries(1, stored+1, stored+1, 1<<20)), waltypes.ErrSealed)
	// Nor does it truncate (raft's compaction after a snapshot): raft-wal
	// would write its metadata again from the failed rotation's view, and
	// the log would then stay sealed through any reopen or restart.
	require.ErrorIs(t, s.DeleteRange(1, 10), errLogSealed)

	// Space comes back: the next call reopens the log, the truncation and
	// the appends go through, with no restart, and every entry is there.
	require.NoError(t, os.Remove(filler))
	require.NoError(t, s.DeleteRange(1, 10))
	require.NoError(t, s.StoreLogs(entries(1, stored+1, stored+3, 1<<20)))
	require.Contains(t, logs.String(), "reopened the raft log")
	require.NotContains(t, logs.String(), "still refuses entries")
	check := func(st raft.LogStore, last uint64) {
		t.Helper()
		first, err := st.FirstIndex()
		require.NoError(t, err)
		require.Equal(t, uint64(11), first)
		got, err := st.LastIndex()
		require.NoError(t, err)
		require.Equal(t, last, got)
		for i := first; i <= last; i++ {
			var l raft.Log
			require.NoError(t, st.GetLog(i, &l), "entry %d", i)
			require.Equal(t, entries(1, i, i, 1<<20)[0].Data, l.Data, "entry %d", i)
		}
	}
	check(s, stored+3)
	// The new segment holds its space, as one made by a rotation does: the
	// failed rotation's empty file was not taken as it.
	segs, err := filepath.Glob(filepath.Join(dir, "*.wal"))
	require.NoError(t, err)
	for _, f := range segs {
		fi, err := os.Stat(f)
		require.NoError(t, err)
		require.GreaterOrEqual(t, uint64(fi.Size()), segmentSize, "%s", f)
	}

	// And from the files, as the next start opens them.
	require.NoError(t, ls.Close())
	again, err := openWAL(dir, nil)
	require.NoError(t, err)
	defer again.Close()
	check(again, stored+3)
}
