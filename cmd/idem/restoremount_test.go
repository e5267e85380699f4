//go:build linux

package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// A data dir on a disk of its own (an empty mount point, as
// /var/lib/idem-new often is) could not be restored into: the restore
// read the whole backup, built its copy beside the mount point (on the
// parent's disk, whose room it never checked) and failed at the end with
// "remove DIR: device or resource busy". The copy is built inside the
// mount point now and moved into place; a copy a killed restore left
// there does not make the dir "not empty".
func TestRestoreIntoAMountPoint(t *testing.T) {
	dir := t.TempDir()
	mnt := filepath.Join(dir, "idem-new")
	require.NoError(t, os.Mkdir(mnt, 0o755))
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=256m", "tmpfs", mnt).CombinedOutput(); err != nil {
		t.Skipf("cannot mount a tmpfs here (needs root): %v: %s", err, out)
	}
	t.Cleanup(func() { exec.Command("umount", mnt).Run() })
	file := filepath.Join(dir, "b.snap")
	writeTestBackup(t, file)
	// What a restore killed before it finished leaves (its lock not held).
	left := filepath.Join(mnt, ".restore-1234")
	require.NoError(t, os.MkdirAll(filepath.Join(left, "fsm"), 0o700))
	require.NoError(t, os.WriteFile(filepath.Join(left, restoreLockName), nil, 0o600))

	var stdout, stderr bytes.Buffer
	code := run(context.Background(), []string{"snapshot", "restore", file, "--data-dir", mnt, "--node-id", "n1", "--raft-addr", "127.0.0.1:7071"}, &stdout, &stderr)
	require.Equal(t, 0, code, "%s%s", stdout.String(), stderr.String())
	require.Contains(t, stderr.String(), "removed "+left)
	require.FileExists(t, filepath.Join(mnt, "raft.db"))
	for _, d := range []string{"fsm", "raft-wal", "snapshots"} {
		require.DirExists(t, filepath.Join(mnt, d))
	}
	entries, err := os.ReadDir(mnt)
	require.NoError(t, err)
	for _, e := range entries {
		require.NotContains(t, e.Name(), "restore", "left in the data dir")
	}
	copies, _ := filepath.Glob(mnt + ".restore-*")
	require.Empty(t, copies, "nothing built beside the mount point")
	st, err := os.Stat(mnt)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o700), st.Mode().Perm())
}

// A fresh ext2/3/4 filesystem is not empty: mkfs puts lost+found at its
// root. Restoring onto such a disk of its own (the common case the mount
// point support was for) was refused as "--data-dir is not empty" before
// a byte was read, though serve starts a new node on such a dir. The
// lost+found of a mount point counts as empty and is left in place.
func TestRestoreIntoAFreshExt4MountPoint(t *testing.T) {
	dir := t.TempDir()
	mnt := filepath.Join(dir, "idem-new")
	require.NoError(t, os.Mkdir(mnt, 0o755))
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=256m", "tmpfs", mnt).CombinedOutput(); err != nil {
		t.Skipf("cannot mount a tmpfs here (needs root): %v: %s", err, out)
	}
	t.Cleanup(func() { exec.Command("umount", mnt).Run() })
	// What mkfs.ext4 leaves at the root of the filesystem it makes.
	require.NoError(t, os.Mkdir(filepath.Join(mnt, "lost+found"), 0o700))
	file := filepath.Join(dir, "b.snap")
	writeTestBackup(t, file)

	var stdout, stderr bytes.Buffer
	code := run(context.Background(), []string{"snapshot", "restore", file, "--data-dir", mnt, "--node-id", "n1", "--raft-addr", "127.0.0.1:7071"}, &stdout, &stderr)
	require.Equal(t, 0, code, "%s%s", stdout.String(), stderr.String())
	require.FileExists(t, filepath.Join(mnt, "raft.db"))
	require.DirExists(t, filepath.Join(mnt, "lost+found"), "fsck's directory stays")

	// A directory that is no mount point is still refused with one.
	plain := filepath.Join(dir, "plain")
	require.NoError(t, os.MkdirAll(filepath.Join(plain, "lost+found"), 0o700))
	stdout.Reset()
	stderr.Reset()
	code = run(context.Background(), []string{"snapshot", "restore", file, "--data-dir", plain, "--node-id", "n1", "--raft-addr", "127.0.0.1:7071"}, &stdout, &stderr)
	require.Equal(t, 1, code)
	require.Contains(t, stderr.String(), "is not empty")
}

// A bind mount of a directory of the parent's own filesystem (a systemd
// BindPaths=, a container's -v of a host dir beside another) has its
// parent's device, so the restore took it for a plain directory: it read
// the whole backup, built its copy beside it and failed at the end with
// "remove DIR: device or resource busy". The kernel's mount table names
// it a mount point, and the copy is built inside it.
func TestRestoreIntoABindMountOfTheSameFilesystem(t *testing.T) {
	dir := t.TempDir()
	src, mnt := filepath.Join(dir, "src"), filepath.Join(dir, "idem-new")
	require.NoError(t, os.Mkdir(src, 0o755))
	require.NoError(t, os.Mkdir(mnt, 0o755))
	if out, err := exec.Command("mount", "--bind", src, mnt).CombinedOutput(); err != nil {
		t.Skipf("cannot bind-mount here (needs root): %v: %s", err, out)
	}
	t.Cleanup(func() { exec.Command("umount", mnt).Run() })
	file := filepath.Join(dir, "b.snap")
	writeTestBackup(t, file)

	var stdout, stderr bytes.Buffer
	code := run(context.Background(), []string{"snapshot", "restore", file, "--data-dir", mnt, "--node-id", "n1", "--raft-addr", "127.0.0.1:7071"}, &stdout, &stderr)
	require.Equal(t, 0, code, "%s%s", stdout.String(), stderr.String())
	require.FileExists(t, filepath.Join(mnt, "raft.db"))
	require.FileExists(t, filepath.Join(src, "raft.db"), "restored through the bind mount")
	copies, _ := filepath.Glob(mnt + ".restore-*")
	require.Empty(t, copies, "nothing built beside the mount point")
}

func TestUnescapeMountPath(t *testing.T) {
	require.Equal(t, "/mnt/a b\\c", unescapeMountPath(`/mnt/a\040b\134c`))
	require.Equal(t, "/plain", unescapeMountPath("/plain"))
	require.Equal(t, `/odd\04`, unescapeMountPath(`/odd\04`))
}
