package main

import (
	"crypto/rand"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idem-store/idem/engine"
	"github.com/idem-store/idem/raftfsm"
)

// writeBackupFile writes a backup of a state holding pad bytes of
// incompressible named values, without a node, and returns its path.
func writeBackupFile(t *testing.T, pad int) string {
	t.Helper()
	db, err := engine.Open(filepath.Join(t.TempDir(), "fsm"), engine.Options{})
	require.NoError(t, err)
	txn := db.Begin()
	for i := 0; pad > 0; i++ {
		v := make([]byte, min(pad, 1<<20))
		rand.Read(v)
		txn.SetNamed(fmt.Sprintf("pad/%04d", i), v)
		pad -= len(v)
	}
	require.NoError(t, txn.Commit(7))
	snap, err := db.Snapshot()
	require.NoError(t, err)
	h, err := raftfsm.NewBackupHeader(snap, "n1")
	require.NoError(t, err)
	file := filepath.Join(t.TempDir(), "b.snap")
	f, err := os.Create(file)
	require.NoError(t, err)
	_, err = raftfsm.WriteBackup(f, h, snap)
	require.NoError(t, err)
	require.NoError(t, f.Close())
	snap.Close()
	require.NoError(t, db.Close())
	return file
}

// restoreLeftNothing checks that a refused restore wrote nothing: no data
// dir and no half-built copy beside it.
func restoreLeftNothing(t *testing.T, dataDir string) {
	t.Helper()
	require.NoDirExists(t, dataDir)
	left, _ := filepath.Glob(dataDir + ".restore-*")
	require.Empty(t, left)
}

var spaceRefusal = regexp.MustCompile(`not enough free disk space for the restore: the disk holding \S+ has ([\d.]+) MiB free, and the restore needs ([\d.]+) MiB \(the raft log's first segment file, 64 MiB, preallocated whole; the backup's ([\d.]+) MiB of state; 16 MiB for the state store's own files\); nothing was written`)

// `idem snapshot restore` needs room for the raft log's first segment
// (64 MiB, preallocated whole) and the backup's state. On a nearly full
// disk it failed midway with a bare "no space left on device"; it now
// refuses up front, writing nothing, saying how much it needs and how much
// is free. A disk with that much room takes the restore.
func TestRestoreRefusesADiskWithoutRoomUpFront(t *testing.T) {
	mnt := tmpfs(t, "256m")
	small := writeBackupFile(t, 0)
	big := writeBackupFile(t, 40<<20)

	// 60 MiB free: not even the segment fits.
	fillDiskTo(t, filepath.Join(mnt, "filler"), 0, 60<<20)
	dataDir := filepath.Join(mnt, "new")
	out, err := idemCmd(t, "snapshot", "restore", small, "--data-dir", dataDir, "--node-id", "r1", "--raft-addr", "127.0.0.1:7071")
	require.Error(t, err, out)
	m := spaceRefusal.FindStringSubmatch(out)
	require.NotNil(t, m, out)
	require.NotContains(t, out, "no space left on device")
	restoreLeftNothing(t, dataDir)

	// Room for an empty state, not for the 40 MiB backup: the backup's size
	// counts.
	require.NoError(t, os.Remove(filepath.Join(mnt, "filler")))
	fillDiskTo(t, filepath.Join(mnt, "filler"), 0, 100<<20)
	out, err = idemCmd(t, "snapshot", "restore", big, "--data-dir", dataDir, "--node-id", "r1", "--raft-addr", "127.0.0.1:7071")
	require.Error(t, err, out)
	m = spaceRefusal.FindStringSubmatch(out)
	require.NotNil(t, m, out)
	require.Regexp(t, `^40(\.\d)?$`, m[3], out)
	restoreLeftNothing(t, dataDir)

	// The figure is enough: the empty backup restores in the same 100 MiB.
	out, err = idemCmd(t, "snapshot", "restore", small, "--data-dir", dataDir, "--node-id", "r1", "--raft-addr", "127.0.0.1:7071")
	require.NoError(t, err, out)
	require.DirExists(t, filepath.Join(dataDir, "raft-wal"))
}

// `idem recover --yes` starts a new raft log segment (64 MiB, preallocated
// whole) before it removes the old one: on a nearly full disk it failed
// midway with a bare "no space left on device". The dry run now says the
// disk has too little room, exit 1, and --yes refuses before it changes
// anything, naming what it needs and what is free.
func TestRecoverRefusesADiskWithoutRoomUpFront(t *testing.T) {
	mnt := tmpfs(t, "256m")
	dataDir := filepath.Join(mnt, "d")
	out, err := idemCmd(t, "snapshot", "restore", writeBackupFile(t, 0), "--data-dir", dataDir, "--node-id", "r1", "--raft-addr", "127.0.0.1:7071")
	require.NoError(t, err, out)
	segments := func() []string {
		s, _ := filepath.Glob(filepath.Join(dataDir, "raft-wal", "*.wal"))
		return s
	}
	before := segments()
	require.NotEmpty(t, before)

	fillDiskTo(t, filepath.Join(mnt, "filler"), 0, 40<<20)
	refusal := regexp.MustCompile(`not enough free disk space for the recovery: the disk holding \S+ has [\d.]+ MiB free, and the recovery needs 80 MiB \(a new raft log segment file, 64 MiB, preallocated whole before the old one is removed; 16 MiB for the state store's own files\); nothing was written`)
	recoverArgs := []string{"recover", "--data-dir", dataDir, "--node-id", "r1", "--peers", "r1=127.0.0.1:7071"}
	out, err = idemCmd(t, recoverArgs...)
	require.Error(t, err, out)
	require.Contains(t, out, "free disk space:       too little (it needs 80 MiB)")
	require.Regexp(t, refusal, out)
	require.Contains(t, out, "--yes would be refused")

	out, err = idemCmd(t, append(recoverArgs, "--yes")...)
	require.Error(t, err, out)
	require.Regexp(t, refusal, out)
	require.NotContains(t, out, "no space left on device")
	require.Equal(t, before, segments(), "the raft log changed")

	// With the room it needs, it recovers.
	require.NoError(t, os.Remove(filepath.Join(mnt, "filler")))
	out, err = idemCmd(t, append(recoverArgs, "--yes")...)
	require.NoError(t, err, out)
	require.Contains(t, out, "free disk space:       enough (it needs 80 MiB)")
	require.Contains(t, out, "recovered: configuration is now r1=127.0.0.1:7071")
}
