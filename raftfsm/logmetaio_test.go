package raftfsm

import (
	"log/slog"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	"github.com/stretchr/testify/require"

	"github.com/idem-store/idem/internal/faultfs"
)

// A compaction of the raft log whose metadata write or fsync fails
// (wal-meta.db, the bolt file listing the segments: EIO) stops the node
// with the raft log's line, as a failed append does. Raft logged it
// ("failed to take snapshot: log compaction failed: write …wal-meta.db:
// input/output error") and the node went on, its later metadata commits
// fsynced over pages the OS may have dropped after the failed one (found
// on a FUSE filesystem failing wal-meta.db under a claim load). The disk
// is a real one that fails (faultfs): bolt's writes and fsyncs take no
// injected filesystem.
func TestRaftLogMetadataIOErrorStops(t *testing.T) {
	for _, op := range []faultfs.Op{faultfs.OpWrite, faultfs.OpFsync} {
		t.Run(string(op), func(t *testing.T) {
			ffs := faultfs.Mount(t)
			calls := stopHook(t)
			var logs strings.Builder
			dir := ffs.Dir
			stable, err := raftboltdb.New(raftboltdb.Options{Path: filepath.Join(dir, "raft.db")})
			require.NoError(t, err)
			t.Cleanup(func() { stable.Close() })
			ls, err := openLogStore(dir, stable, slog.New(slog.NewTextHandler(&logs, nil)))
			require.NoError(t, err)
			t.Cleanup(func() { ls.Close() })
			s := guardedLogStore{ls, &diskGuard{}, func() bool { return true }, newLogCache()}
			var entries []*raft.Log
			for i := uint64(1); i <= 20; i++ {
				entries = append(entries, testEntry(i, 1))
			}
			require.NoError(t, s.StoreLogs(entries))
			ffs.Fail(op, "wal-meta.db", false)
			err = s.DeleteRange(1, 10) // a compaction: the head goes
			ffs.Clear()
			require.NotEmpty(t, ffs.Hits(), "the metadata was not written")
			require.Error(t, err)
			require.EqualValues(t, 1, calls.Load(), "a failed %s of the raft log's metadata must stop the node (%v); it logged:\n%s", op, err, logs.String())
			require.Contains(t, logs.String(), "level=ERROR")
			require.Contains(t, logs.String(), "could not be written")
			require.Contains(t, logs.String(), "input/output error")
			require.Contains(t, logs.String(), "wal-meta.db")
			require.Contains(t, logs.String(), "Check the disk")
		})
	}
}
