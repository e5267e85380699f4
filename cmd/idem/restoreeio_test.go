package main

import (
	"os"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idem-store/idem/internal/faultfs"
)

// A restore whose data dir's disk fails a write of the new store (its
// MANIFEST, its WAL: EIO) stops inside Pebble, exit 1. Its ERROR line was
// the running node's: "this node stops … the next start replays it …
// restart the machine", for a node that never ran. It now says the
// restore failed, that nothing was restored into DIR (true: the copy is
// beside it, and the next restore removes it), which file the disk failed,
// and to check the disk and run it again; run again, it restores.
func TestRestoreWhoseDiskFailsAWriteSaysTheRestoreFailed(t *testing.T) {
	faultfs.Skip(t)
	backup := writeBackupFile(t, 1<<20)
	for file, named := range map[string]string{"MANIFEST-*": `MANIFEST-\d+`, "*.log": `\d+\.log`} {
		t.Run(file, func(t *testing.T) {
			ffs := faultfs.Mount(t)
			ffs.Fail(faultfs.OpWrite, file, false)
			dataDir := filepath.Join(ffs.Dir, "new")
			args := []string{"snapshot", "restore", backup, "--data-dir", dataDir, "--node-id", "r1", "--raft-addr", "127.0.0.14:28001"}
			out, err := idemCmd(t, args...)
			require.Error(t, err, out)
			require.NotEmpty(t, ffs.Hits(), out)
			require.Regexp(t, `idem snapshot restore: the restore of \S+ failed: nothing was restored into `+regexp.QuoteMeta(dataDir)+` \(the next restore removes its partial copy \S+\): the disk failed a write of \S+/fsm/`+named+` \(input/output error\)`, out)
			require.Contains(t, out, "Check the disk")
			require.Contains(t, out, "then run it again")
			require.NotContains(t, out, "this node stops")
			require.NotContains(t, out, "next start replays")
			require.NotContains(t, out, "restart the machine")
			entries, _ := os.ReadDir(dataDir)
			require.Empty(t, entries, "nothing may be restored into the data dir")

			ffs.Clear()
			out, err = idemCmd(t, args...)
			require.NoError(t, err, out)
			require.Contains(t, out, "removed ", "the next restore removes the partial copy")
			left, _ := filepath.Glob(dataDir + ".restore-*")
			require.Empty(t, left, out)
			require.DirExists(t, filepath.Join(dataDir, "raft-wal"))
		})
	}
}
