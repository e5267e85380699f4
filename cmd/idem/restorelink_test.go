//go:build unix

package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// A data dir that is a link to an empty directory on another disk
// (/var/lib/idem -> /mnt/data/idem, made ready for the restore): the
// restore checked the free space of that disk, built its copy beside the
// link, on the link's disk, then removed the link and renamed the copy in
// its place. The restored state landed on a disk whose room was never
// checked, and the directory made for it stayed empty. The restore goes
// into the directory the link names; the link stays.
func TestRestoreIntoALinkedDataDirFillsTheLinkedDirectory(t *testing.T) {
	target := filepath.Join(t.TempDir(), "idem")
	require.NoError(t, os.Mkdir(target, 0o700))
	link := filepath.Join(t.TempDir(), "idem")
	require.NoError(t, os.Symlink(target, link))

	out, err := idemCmd(t, "snapshot", "restore", writeBackupFile(t, 0), "--data-dir", link, "--node-id", "r1", "--raft-addr", "127.0.0.1:7071")
	require.NoError(t, err, out)
	st, err := os.Lstat(link)
	require.NoError(t, err)
	require.NotZero(t, st.Mode()&os.ModeSymlink, "the link was replaced by a directory")
	require.DirExists(t, filepath.Join(target, "raft-wal"))
	left, _ := filepath.Glob(filepath.Join(filepath.Dir(link), "idem.restore-*"))
	require.Empty(t, left)
}

// A data dir that links to a directory not made yet (the disk's directory
// forgotten): the restore was built whole beside the link, on the link's
// disk, then could not be renamed over the link ("not a directory") and
// was thrown away. It is refused at once, saying what to make.
func TestRestoreIntoALinkToNothingIsRefusedAtOnce(t *testing.T) {
	target := filepath.Join(t.TempDir(), "idem")
	link := filepath.Join(t.TempDir(), "idem")
	require.NoError(t, os.Symlink(target, link))

	out, err := idemCmd(t, "snapshot", "restore", writeBackupFile(t, 0), "--data-dir", link, "--node-id", "r1", "--raft-addr", "127.0.0.1:7071")
	require.Error(t, err, out)
	require.Contains(t, out, "--data-dir "+link+" is a link to "+target+", which cannot be reached")
	st, err := os.Lstat(link)
	require.NoError(t, err)
	require.NotZero(t, st.Mode()&os.ModeSymlink, "the link was replaced")
	left, _ := filepath.Glob(filepath.Join(filepath.Dir(link), "idem.restore-*"))
	require.Empty(t, left)
}
