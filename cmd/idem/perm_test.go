package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
)

// A data dir, or a file in it, that the user running idem may not read is
// refused at start with a message naming the file and saying what to do.
// Only the raft log's files said what to do; node.json, fsm/, snapshots/
// and the data dir itself gave a bare "permission denied", and raft.db
// the advice for a lost one (remove the node, rejoin it empty).
func TestServeRefusesUnreadableDataDirSaysWhatToDo(t *testing.T) {
	pr := newPermRun(t)
	root := pr.root

	for _, tc := range []struct {
		name   string
		break_ func(dir string) error
		file   string
	}{
		{"node.json unreadable", func(dir string) error { return os.Chmod(filepath.Join(dir, "node.json"), 0) }, "node.json"},
		{"fsm dir unreadable", func(dir string) error { return os.Chmod(filepath.Join(dir, "fsm"), 0) }, "fsm"},
		{"snapshots dir unreadable", func(dir string) error { return os.Chmod(filepath.Join(dir, "snapshots"), 0) }, "snapshots"},
		{"data dir of another user", func(dir string) error { return os.Chmod(dir, 0) }, ""},
		// raft.db's refusal told the operator to remove the node and
		// rejoin it empty: a rebuild for a file's mode.
		{"raft.db unreadable", func(dir string) error { return os.Chmod(filepath.Join(dir, "raft.db"), 0) }, "raft.db"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(root, strings.ReplaceAll(tc.name, " ", "-"))
			httpAddr, raftAddr := freePort(t), freePort(t)
			p := start(t, dir, httpAddr, raftAddr)
			code, body := post(t, httpAddr, "/v1/claim", claimBody)
			require.Equal(t, 201, code, "%s", body)
			require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
			require.NoError(t, p.wait())
			pr.give(t, dir)
			require.NoError(t, tc.break_(dir))
			t.Cleanup(func() { os.Chmod(dir, 0o700); os.Chmod(filepath.Join(dir, tc.file), 0o700) })

			cmd := pr.command("serve", "--data-dir", dir, "--http-addr", httpAddr, "--raft-addr", raftAddr)
			out, err := cmd.CombinedOutput()
			require.Error(t, err, "the node started on a data dir it cannot read:\n%s", out)
			last := strings.TrimSpace(string(out))
			last = last[strings.LastIndex(last, "\n")+1:]
			require.Contains(t, last, filepath.Join(dir, tc.file), "the message names the file")
			require.Contains(t, last, "permission denied")
			require.Contains(t, last, "check that the user running idem owns "+dir, "the message says what to do")
			require.NotContains(t, last, "empty data dir", "a file's owner or mode is no reason to rebuild the node")
		})
	}
}

// idem recover on a data dir whose files the user may not read says what
// to do too: it printed a bare "permission denied".
func TestRecoverUnreadableDataDirSaysWhatToDo(t *testing.T) {
	pr := newPermRun(t)
	dir := filepath.Join(pr.root, "n1")
	httpAddr, raftAddr := freePort(t), freePort(t)
	p := start(t, dir, httpAddr, raftAddr)
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
	require.NoError(t, p.wait())
	pr.give(t, dir)
	for _, f := range []string{"node.json", "fsm", "raft.db"} {
		require.NoError(t, os.Chmod(filepath.Join(dir, f), 0))
		cmd := pr.command("recover", "--data-dir", dir, "--node-id", "n1", "--peers", "n1="+raftAddr)
		out, err := cmd.CombinedOutput()
		require.Equal(t, 1, exitCode(err), "%s", out)
		require.Contains(t, string(out), filepath.Join(dir, f), "the message names the file")
		require.Contains(t, string(out), "check that the user running idem owns "+dir, "the message says what to do:\n%s", out)
		require.NoError(t, os.Chmod(filepath.Join(dir, f), 0o700))
	}
}

// permRun runs the permission tests' commands as nobody when the tests run
// as root: permission bits do not stop root.
type permRun struct {
	root   string // a directory everyone may enter, removed after the test
	asRoot bool
}

const nobody = 65534

func newPermRun(t *testing.T) permRun {
	t.Helper()
	root, err := os.MkdirTemp("", "idem-perm")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(root) })
	require.NoError(t, os.Chmod(root, 0o755))
	pr := permRun{root: root, asRoot: os.Geteuid() == 0}
	if pr.asRoot {
		require.NoError(t, os.Chmod(filepath.Dir(binary), 0o755))
	}
	return pr
}

// give hands dir, with everything in it, to the user the commands run as.
func (pr permRun) give(t *testing.T, dir string) {
	t.Helper()
	if !pr.asRoot {
		return
	}
	require.NoError(t, filepath.Walk(dir, func(path string, _ os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(path, nobody, nobody)
	}))
}

// command is idem with args, run as that user.
func (pr permRun) command(args ...string) *exec.Cmd {
	cmd := exec.Command(binary, args...)
	if pr.asRoot {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobody, Gid: nobody}}
	}
	return cmd
}

// A data dir on a filesystem remounted read-only (ext4 after an I/O error,
// an operator's walk with a read-only bind mount): the start failed on
// "open DIR/fsm/LOCK: read-only file system", naming neither the cause nor
// what to do. The refusal now says both.
func TestReadOnlyFilesystemSaysWhatToDo(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "n1")
	err := permissionHint(&os.PathError{Op: "open", Path: filepath.Join(dir, "fsm", "LOCK"), Err: syscall.EROFS}, dir)
	msg := err.Error()
	require.ErrorIs(t, err, syscall.EROFS)
	require.Contains(t, msg, "the filesystem holding "+dir+" is mounted read-only")
	require.Contains(t, msg, "nothing was changed")
	require.Contains(t, msg, "dmesg")
	require.Contains(t, msg, "mount -o remount,rw")
	require.NotContains(t, msg, "chown", "the owner is not the problem")
}

// idem recover on a data dir the user may not enter (a node's dir, mode
// 0700, of the user idem runs as, and recover run as another): every
// stat inside it fails with permission denied, which noNodeAt took as
// "no node is there" and exit 2, sending the operator after a typo in a
// right path. It says what to do about the permissions, exit 1, as for
// files inside it the user may not read.
func TestRecoverDataDirTheUserMayNotEnterSaysWhatToDo(t *testing.T) {
	pr := newPermRun(t)
	dir := filepath.Join(pr.root, "n1")
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "fsm"), 0o700))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "node.json"), []byte(`{"node_id":"n1","bucket_width_ms":7200000}`), 0o600))
	pr.give(t, dir)
	require.NoError(t, os.Chmod(dir, 0))
	t.Cleanup(func() { os.Chmod(dir, 0o700) })
	out, err := pr.command("recover", "--data-dir", dir, "--node-id", "n1", "--peers", "n1="+freePort(t)).CombinedOutput()
	require.Equal(t, 1, exitCode(err), "%s", out)
	require.NotContains(t, string(out), "no node is there")
	require.Contains(t, string(out), "check that the user running idem owns "+dir, "the message says what to do:\n%s", out)
}
