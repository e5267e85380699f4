//go:build linux

package raftfsm

import (
	"bytes"
	"errors"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
)

// A restore that cannot write the new data dir (a quota, a file size
// limit, an I/O error on its disk) failed with "bad backup: engine:
// restore: write …: file too large": the good backup was blamed, and an
// operator told so would throw it away. Only a fault of the file is
// ErrBackup; a fault of the data dir is named as the restore's.
func TestRestoreWriteErrorDoesNotBlameTheBackup(t *testing.T) {
	n := mustNode(t)
	fill(t, n, 3000)
	data := backupOf(t, n)
	// The file size limit below is the whole process's: the node's own
	// writes past 64 KiB (a tick into its Pebble WAL, whose failed write
	// Pebble does not survive) would fail with the restore's.
	require.NoError(t, n.Close())
	_, err := VerifyBackup(bytes.NewReader(data))
	require.NoError(t, err)

	// Files of the restore cannot grow past 64 KiB: the state's tables
	// fail to be written, after the store was opened.
	var old syscall.Rlimit
	require.NoError(t, syscall.Getrlimit(syscall.RLIMIT_FSIZE, &old))
	lim := old
	lim.Cur = 64 << 10
	require.NoError(t, syscall.Setrlimit(syscall.RLIMIT_FSIZE, &lim))
	_, err = RestoreBackup(bytes.NewReader(data), t.TempDir(), RestoreOptions{NodeID: "r1", RaftAddr: "127.0.0.1:1"})
	require.NoError(t, syscall.Setrlimit(syscall.RLIMIT_FSIZE, &old))

	require.Error(t, err)
	require.True(t, errors.Is(err, syscall.EFBIG), "%v", err)
	require.False(t, errors.Is(err, ErrBackup), "a good backup blamed: %v", err)
}
