package raftfsm

import (
	"bytes"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/stretchr/testify/require"

	"github.com/idem-store/idem/internal/faultfs"
)

// A snapshot whose write the disk fails (EIO) is not left behind: raft's
// cancel could not flush its buffer and kept NAME.tmp, a follower's part
// of its leader's stream (up to the whole state) for each failed install,
// until the next start, and its file open (its blocks taken). A snapshot
// whose rename fails neither. Runs on
// FUSE (root; skipped otherwise); the snapshot store uses plain files, so
// it may run in the process serving them.
func TestSnapshotTheDiskFailedIsNotLeftBehind(t *testing.T) {
	faultfs.Skip(t)
	for _, op := range []faultfs.Op{faultfs.OpWrite, faultfs.OpRename} {
		t.Run(string(op), func(t *testing.T) {
			ffs := faultfs.Mount(t)
			s, err := newSnapshotStore(ffs.Dir, nil, slog.New(slog.NewTextHandler(io.Discard, nil)))
			require.NoError(t, err)
			sink, err := s.Create(raft.SnapshotVersionMax, 10, 2, raft.Configuration{}, 1, nil)
			require.NoError(t, err)
			chunk := bytes.Repeat([]byte{7}, 1<<20) // a leader's stream, not a marker
			_, err = sink.Write(chunk)
			require.NoError(t, err)
			switch op {
			case faultfs.OpWrite:
				ffs.Fail(op, "state.bin", false)
				_, err = sink.Write(chunk)
				require.Error(t, err, "the write must fail: %v", ffs)
				require.Error(t, sink.Cancel(), "raft's cancel cannot flush")
			case faultfs.OpRename:
				ffs.Fail(op, "*.tmp", false)
				require.Error(t, sink.Close())
			}
			ffs.Clear()
			fds, _ := os.ReadDir("/proc/self/fd")
			for _, fd := range fds {
				target, _ := os.Readlink(filepath.Join("/proc/self/fd", fd.Name()))
				require.NotContains(t, target, "state.bin", "the snapshot's file is still open: its blocks stay taken")
			}
			entries, err := os.ReadDir(filepath.Join(ffs.Backing(), "snapshots"))
			require.NoError(t, err)
			for _, e := range entries {
				require.False(t, strings.HasSuffix(e.Name(), ".tmp"), "left behind: %s (%v)", e.Name(), ffs)
			}
			list, err := s.List()
			require.NoError(t, err)
			require.Empty(t, list)
		})
	}
}

// A snapshot whose creation the disk fails (a write or an fsync of its
// meta.json, the creation of its state.bin: EIO) is not left behind
// either: raft's Create returns the error and keeps NAME.tmp, and a node
// whose own snapshot failed so kept one more at each try, every
// --snapshot-interval, until its next start (a walk: six in 7 s).
func TestSnapshotWhoseCreationTheDiskFailedIsNotLeftBehind(t *testing.T) {
	faultfs.Skip(t)
	for _, c := range []struct {
		op      faultfs.Op
		pattern string
	}{
		{faultfs.OpWrite, "meta.json"},
		{faultfs.OpFsync, "meta.json"},
		{faultfs.OpCreate, "state.bin"},
	} {
		t.Run(string(c.op)+"-"+c.pattern, func(t *testing.T) {
			ffs := faultfs.Mount(t)
			s, err := newSnapshotStore(ffs.Dir, nil, slog.New(slog.NewTextHandler(io.Discard, nil)))
			require.NoError(t, err)
			ffs.Fail(c.op, c.pattern, false)
			for i := range 3 { // one try per interval
				_, err := s.Create(raft.SnapshotVersionMax, uint64(10+i), 2, raft.Configuration{}, 1, nil)
				require.Error(t, err, "the creation must fail: %v", ffs)
				time.Sleep(2 * time.Millisecond) // raft names each by the millisecond
			}
			require.Len(t, ffs.Hits(), 3)
			ffs.Clear()
			entries, err := os.ReadDir(filepath.Join(ffs.Backing(), "snapshots"))
			require.NoError(t, err)
			for _, e := range entries {
				require.False(t, strings.HasSuffix(e.Name(), ".tmp"), "left behind: %s (%v)", e.Name(), ffs)
			}
			// The store still works once the disk does.
			sink, err := s.Create(raft.SnapshotVersionMax, 20, 2, raft.Configuration{}, 1, nil)
			require.NoError(t, err)
			require.NoError(t, writeMarker(sink, 20))
			require.NoError(t, sink.Close())
			list, err := s.List()
			require.NoError(t, err)
			require.Len(t, list, 1)
		})
	}
}
