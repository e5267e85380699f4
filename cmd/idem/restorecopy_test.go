//go:build unix

package main

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
)

// A restore killed before it finished (kill -9, a reboot) left its copy,
// DIR.restore-*, beside DIR, and every retry killed again left one more:
// a walk killed six restores of a 900 MB backup and found 560 MB of them,
// and the next retry was refused for want of 3.5 MiB, its refusal naming
// none (they were named only once a restore succeeded). A restore now
// removes, before it reads the free space, each copy whose restore has
// ended (no process holds the lock file in it), and names a copy it cannot
// tell from a restore still running.
func TestRestoreRemovesTheCopiesKilledRestoresLeft(t *testing.T) {
	mnt := tmpfs(t, "256m")
	backup := writeBackupFile(t, 40<<20)
	dataDir := filepath.Join(mnt, "new")

	// Two copies of restores that were killed: a lock file no one holds,
	// and 50 MiB of tables each.
	var dead []string
	for _, n := range []string{"new.restore-111", "new.restore-222"} {
		d := filepath.Join(mnt, n)
		require.NoError(t, os.MkdirAll(filepath.Join(d, "fsm"), 0o700))
		require.NoError(t, os.WriteFile(filepath.Join(d, ".restore-lock"), nil, 0o600))
		writeBytes(t, filepath.Join(d, "fsm", "000001.sst"), 50<<20)
		dead = append(dead, d)
	}
	// A copy whose restore still runs: its lock is held.
	live := filepath.Join(mnt, "new.restore-333")
	require.NoError(t, os.MkdirAll(live, 0o700))
	lock, err := os.OpenFile(filepath.Join(live, ".restore-lock"), os.O_CREATE|os.O_RDWR, 0o600)
	require.NoError(t, err)
	defer lock.Close()
	require.NoError(t, syscall.Flock(int(lock.Fd()), syscall.LOCK_EX|syscall.LOCK_NB))

	// Room for the restore (40 MiB of state and 80 MiB besides) only once
	// the dead copies are gone.
	fillDiskTo(t, filepath.Join(mnt, "filler"), 0, 90<<20)
	out, err := idemCmd(t, "snapshot", "restore", backup, "--data-dir", dataDir, "--node-id", "r1", "--raft-addr", "127.0.0.1:7071")
	require.NoError(t, err, out)
	for _, d := range dead {
		require.NoDirExists(t, d)
		require.Contains(t, out, "removed "+d+" (52428800 bytes), the copy a restore into "+dataDir+" left when it was stopped before it finished")
	}
	require.DirExists(t, live)
	require.Contains(t, out, live+" is left from a restore into "+dataDir+" that was stopped before it finished (or is another restore's, still running)")
	require.NoFileExists(t, filepath.Join(dataDir, ".restore-lock"))
	require.DirExists(t, filepath.Join(dataDir, "raft-wal"))
}

// writeBytes writes n zero bytes to path.
func writeBytes(t *testing.T, path string, n int) {
	t.Helper()
	require.NoError(t, os.WriteFile(path, make([]byte, n), 0o600))
}
