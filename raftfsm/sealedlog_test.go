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

// sealedLog is a raft log on a real tmpfs, with raft-wal's real 64 MiB
// segments, whose next segment could not be made: another process took
// all but 8 MiB of the disk (filler) and the log filled its first segment
// with 1 MiB entries, 1..stored. It is sealed by the failed rotation
// itself (raft-wal runs it in the background after the append that filled
// the segment), before any append has failed: a follower's appends are
// refused on a full disk before they reach raft-wal.
func sealedLog(t *testing.T, size string) (s guardedLogStore, dir, filler string, stored uint64, logs *bytes.Buffer) {
	mnt := smallTmpfs(t, size)
	dir = filepath.Join(mnt, logStoreDir)
	require.NoError(t, os.MkdirAll(dir, 0o700))
	ls, err := openWAL(dir, nil)
	require.NoError(t, err)
	t.Cleanup(func() { ls.Close() })
	logs = &bytes.Buffer{}
	g := &diskGuard{dir: mnt, minFree: 1 << 20, fullBelow: 1 << 20, log: slog.New(slog.NewTextHandler(logs, nil))}
	s = guardedLogStore{ls, g, func() bool { return true }, newLogCache()}

	filler = filepath.Join(mnt, "filler")
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

	for i := uint64(1); !ls.sealed.Load(); i++ {
		require.Less(t, i, uint64(200), "the log never filled its segment")
		require.NoError(t, s.StoreLogs(entries(1, i, i, 1<<20)))
		stored = i
		ls.awaitRotation()
	}
	return s, dir, filler, stored, logs
}

// checkLog checks that st holds exactly the entries first..last, each as
// entries made it.
func checkLog(t *testing.T, st raft.LogStore, first, last uint64) {
	t.Helper()
	got, err := st.FirstIndex()
	require.NoError(t, err)
	require.Equal(t, first, got)
	got, err = st.LastIndex()
	require.NoError(t, err)
	require.Equal(t, last, got)
	for i := first; i <= last; i++ {
		var l raft.Log
		require.NoError(t, st.GetLog(i, &l), "entry %d", i)
		require.Equal(t, entries(1, i, i, 1<<20)[0].Data, l.Data, "entry %d", i)
	}
}

// raft-wal seals a full segment before it makes the next one; when the
// disk has no room for that (another process filled it), every append
// after fails with "segment is sealed", whatever space comes back, until
// the log is opened again. The node used to need a restart there; it
// reopens the log itself once there is room, and loses no entry.
func TestSealedLogReopensOnceThereIsRoom(t *testing.T) {
	s, dir, filler, stored, logs := sealedLog(t, "160m")

	// Nor does it truncate meanwhile (raft's compaction after a snapshot):
	// raft-wal would write its metadata again from the failed rotation's
	// view, and the log would then stay sealed through any reopen or
	// restart.
	require.ErrorIs(t, s.DeleteRange(1, 10), errLogSealed)
	// Still no room: appends fail, and it says what it needs.
	require.ErrorIs(t, s.StoreLogs(entries(1, stored+1, stored+1, 1<<20)), waltypes.ErrSealed)
	require.Contains(t, logs.String(), "the raft log could not make its next segment file")

	// Space comes back: the next call reopens the log, the truncation and
	// the appends go through, with no restart, and every entry is there.
	require.NoError(t, os.Remove(filler))
	require.NoError(t, s.DeleteRange(1, 10))
	require.NoError(t, s.StoreLogs(entries(1, stored+1, stored+3, 1<<20)))
	require.Contains(t, logs.String(), "reopened the raft log")
	require.NotContains(t, logs.String(), "still refuses entries")
	checkLog(t, s, 11, stored+3)
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
	require.NoError(t, s.LogStore.Close())
	again, err := openWAL(dir, nil)
	require.NoError(t, err)
	defer again.Close()
	checkLog(t, again, 11, stored+3)
}

// After a snapshot install raft removes the whole log once and appends
// above the snapshot; it never asks for that removal again. Refused while
// the log was sealed, it is made when the log reopens, before the append,
// which raft-wal would otherwise refuse as not following its last entry.
func TestSealedLogMakesTheRemovalAfterAnInstallWhenItReopens(t *testing.T) {
	// Removing the whole log makes a new segment before it deletes the
	// old ones: this disk has room for that too.
	s, dir, filler, stored, _ := sealedLog(t, "256m")
	require.ErrorIs(t, s.DeleteRange(1, stored), errLogSealed) // raft's removeOldLogs
	require.NoError(t, os.Remove(filler))
	snap := stored + 100
	require.NoError(t, s.StoreLogs(entries(1, snap+1, snap+2, 1<<20)))
	checkLog(t, s, snap+1, snap+2)
	require.NoError(t, s.LogStore.Close())
	again, err := openWAL(dir, nil)
	require.NoError(t, err)
	defer again.Close()
	checkLog(t, again, snap+1, snap+2)
}
