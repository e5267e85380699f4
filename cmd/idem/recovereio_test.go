package main

import (
	"path/filepath"
	"regexp"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idem-store/idem/internal/faultfs"
)

// `idem recover` on a data dir whose disk fails a write of the state
// store's files (its MANIFEST, its WAL: EIO, at the store's open) exited 1
// with no output at all: the store's stop logged to recover's discarding
// logger, and its words were a running node's. It now says recover
// stopped before it changed anything, which file the disk failed, and to
// check the disk and run it again; run again, it recovers.
func TestRecoverWhoseDiskFailsAWriteSaysSo(t *testing.T) {
	faultfs.Skip(t)
	for file, named := range map[string]string{"MANIFEST-*": `MANIFEST-\d+`, "*.log": `\d+\.log`} {
		t.Run(file, func(t *testing.T) {
			ffs := faultfs.Mount(t)
			dataDir := filepath.Join(ffs.Dir, "d")
			out, err := idemCmd(t, "snapshot", "restore", writeBackupFile(t, 0), "--data-dir", dataDir, "--node-id", "r1", "--raft-addr", "127.0.0.14:28001")
			require.NoError(t, err, out)
			ffs.Fail(faultfs.OpWrite, file, false)
			args := []string{"recover", "--data-dir", dataDir, "--node-id", "r1", "--peers", "r1=127.0.0.14:28001"}
			for _, run := range [][]string{args, append(args, "--yes")} {
				out, err = idemCmd(t, run...)
				require.Error(t, err, out)
				require.NotEmpty(t, ffs.Hits(), out)
				require.Regexp(t, `idem recover: stopped reading `+regexp.QuoteMeta(dataDir)+` before it changed anything in it: the disk failed a write of \S+/fsm/`+named+` \(input/output error\)\. Check the disk and the filesystem \(dmesg, SMART\), then run it again`, out)
				require.NotContains(t, out, "this node stops")
				require.NotContains(t, out, "next start replays")
			}
			ffs.Clear()
			out, err = idemCmd(t, append(args, "--yes")...)
			require.NoError(t, err, out)
		})
	}
}
