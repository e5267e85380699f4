package raftfsm

import (
	"bytes"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

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
