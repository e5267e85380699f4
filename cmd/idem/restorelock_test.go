//go:build linux

package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// mountTmpfs mounts a tmpfs at dir/name, a data dir on a disk of its own.
func mountTmpfs(t *testing.T, dir, name string) string {
	t.Helper()
	mnt := filepath.Join(dir, name)
	require.NoError(t, os.Mkdir(mnt, 0o755))
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=256m", "tmpfs", mnt).CombinedOutput(); err != nil {
		t.Skipf("cannot mount a tmpfs here (needs root): %v: %s", err, out)
	}
	t.Cleanup(func() { exec.Command("umount", mnt).Run() })
	return mnt
}

// requireWholeRestore requires dir to hold one whole restore and nothing
// of a restore's making beside.
func requireWholeRestore(t *testing.T, dir string, msg ...any) {
	t.Helper()
	for _, d := range []string{"raft.db", "fsm", "raft-wal", "snapshots"} {
		_, err := os.Stat(filepath.Join(dir, d))
		require.NoError(t, err, msg...)
	}
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	for _, e := range entries {
		require.False(t, strings.HasPrefix(e.Name(), ".restore-"), "%s left in %s: %v", e.Name(), dir, fmt.Sprint(msg...))
	}
}

// Two restores into one mount point started together (the same command
// run in two terminals): between the first's writing its marker and
// taking its copy's lock, the second took the marker for a stopped
// restore's and cleared the dir, and between the first's removing its
// copy and its marker, the second removed what the first had moved in or
// mixed its own entries in. A restore now locks the dir before it touches
// anything: of two, one restores, the other is refused naming the first
// (or, run after it, refuses the dir as not empty), and the dir holds
// one whole restore.
func TestTwoRestoresIntoOneMountPointAtOnce(t *testing.T) {
	dir := t.TempDir()
	mnt := mountTmpfs(t, dir, "idem-new")
	file := filepath.Join(dir, "b.snap")
	writeTestBackup(t, file)
	args := []string{"snapshot", "restore", file, "--data-dir", mnt, "--node-id", "n1", "--raft-addr", "127.0.0.1:7071"}
	refusedRunning := 0
	for i := range 60 {
		entries, err := os.ReadDir(mnt)
		require.NoError(t, err)
		for _, e := range entries {
			require.NoError(t, os.RemoveAll(filepath.Join(mnt, e.Name())))
		}
		var wg sync.WaitGroup
		outs := make([]string, 2)
		codes := make([]int, 2)
		for j := range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				out, err := exec.Command(binary, args...).CombinedOutput()
				outs[j] = string(out)
				if ee, ok := err.(*exec.ExitError); ok {
					codes[j] = ee.ExitCode()
				} else {
					require.NoError(t, err)
				}
			}()
		}
		wg.Wait()
		ok := 0
		var refused []string // otherwise than as one running, or after it
		for j := range 2 {
			switch {
			case codes[j] == 0:
				ok++
			case strings.Contains(outs[j], "a restore into "+mnt+" is running, "):
				refusedRunning++
			case strings.Contains(outs[j], "is not empty"), strings.Contains(outs[j], "held it a moment ago"):
				// Run after the first: refused as any data dir, or, when
				// the lock was held to the end of the first's exit and not
				// listed anymore (a busy machine), refused saying so.
			default:
				refused = append(refused, outs[j])
			}
		}
		require.Equal(t, 1, ok, "round %d: exits %v:\n%s\n%s", i, codes, outs[0], outs[1])
		requireWholeRestore(t, mnt, "round ", i, ":\n", outs[0], "\n", outs[1])
		require.NoFileExists(t, filepath.Join(mnt, restoreMarkerName), "round %d", i)
		require.Empty(t, refused, "round %d: the other was refused without naming the running restore's pid", i)
	}
	t.Logf("of 60 pairs, %d second restores were refused while the first ran", refusedRunning)
}

// startSlowRestore starts a restore into dataDir from a pipe holding half
// of the backup, and returns it with the pipe, once it has begun reading.
func startSlowRestore(t *testing.T, file, dataDir string) (*exec.Cmd, *os.File, *strings.Builder) {
	t.Helper()
	backup, err := os.ReadFile(file)
	require.NoError(t, err)
	fifo := filepath.Join(t.TempDir(), "b.fifo")
	require.NoError(t, syscall.Mkfifo(fifo, 0o600))
	restore := exec.Command(binary, "snapshot", "restore", fifo, "--data-dir", dataDir, "--node-id", "n1", "--raft-addr", "127.0.0.1:7071")
	out := &strings.Builder{}
	restore.Stdout, restore.Stderr = out, out
	require.NoError(t, restore.Start())
	t.Cleanup(func() { restore.Process.Kill(); restore.Wait() })
	w, err := os.OpenFile(fifo, os.O_WRONLY, 0)
	require.NoError(t, err)
	t.Cleanup(func() { w.Close() })
	_, err = w.Write(backup[:len(backup)/2])
	require.NoError(t, err)
	go func() {
		time.Sleep(2 * time.Second)
		w.Write(backup[len(backup)/2:])
		w.Close()
	}()
	return restore, w, out
}

// idem serve started on a data dir while a restore fills it (fed slowly
// through a pipe here) took it for a stopped restore's, or, before the
// restore had written anything, for an empty dir, and started a new
// cluster there; a second restore meanwhile went on beside the first. Both
// are refused now, naming the restore's pid, and the restore finishes.
func TestServeAndRestoreRefusedWhileARestoreRuns(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "b.snap")
	writeTestBackup(t, file)
	mnt := mountTmpfs(t, dir, "mnt")
	for _, dataDir := range []string{mnt, filepath.Join(dir, "absent"), filepath.Join(dir, "plain")} {
		if strings.HasSuffix(dataDir, "plain") {
			require.NoError(t, os.Mkdir(dataDir, 0o700))
		}
		restore, _, restoreOut := startSlowRestore(t, file, dataDir)
		require.Eventually(t, func() bool {
			pid, exclusive := dirLockHolder(dataDir)
			return pid == restore.Process.Pid && exclusive
		}, 10*time.Second, 10*time.Millisecond, "the restore locks %s", dataDir)
		running := fmt.Sprintf("a restore into %s is running, pid %d", dataDir, restore.Process.Pid)

		out := serveRefused(t, dataDir)
		require.Contains(t, out, running)
		second, err := exec.Command(binary, "snapshot", "restore", file, "--data-dir", dataDir, "--node-id", "n1", "--raft-addr", "127.0.0.1:7071").CombinedOutput()
		require.Error(t, err, "%s", second)
		require.Contains(t, string(second), running)

		require.NoError(t, restore.Wait(), "%s", restoreOut)
		requireWholeRestore(t, dataDir, restoreOut.String())
		require.NoFileExists(t, filepath.Join(dataDir, restoreMarkerName))
		copies, _ := filepath.Glob(dataDir + ".restore-*")
		require.Empty(t, copies)
	}
}

// A restore into the data dir of a running node is refused naming it,
// before the restore reads the backup; the node's dir is left as it was.
func TestRestoreRefusedWhileServeRuns(t *testing.T) {
	dir := t.TempDir()
	data := filepath.Join(dir, "node")
	require.NoError(t, os.Mkdir(data, 0o700))
	file := filepath.Join(dir, "b.snap")
	writeTestBackup(t, file)
	ip := testIP("127.0.0.9")
	ctx, cancel := context.WithCancel(context.Background())
	serve := exec.CommandContext(ctx, binary, "serve", "--data-dir", data, "--node-id", "n1", "--http-addr", freePortOn(t, ip), "--raft-addr", freePortOn(t, ip), "--min-free-disk", "0")
	require.NoError(t, serve.Start())
	defer func() { cancel(); serve.Wait() }()
	require.Eventually(t, func() bool {
		pid, exclusive := dirLockHolder(data)
		return pid == serve.Process.Pid && !exclusive
	}, 10*time.Second, 10*time.Millisecond, "serve locks its data dir")
	out, err := exec.Command(binary, "snapshot", "restore", file, "--data-dir", data, "--node-id", "n1", "--raft-addr", "127.0.0.1:7071").CombinedOutput()
	require.Error(t, err, "%s", out)
	require.Contains(t, string(out), fmt.Sprintf("idem serve is running on %s, pid %d", data, serve.Process.Pid))
	copies, _ := filepath.Glob(data + ".restore-*")
	require.Empty(t, copies)
}

// idem serve on a data dir absent at its start made fsm/ and raft.db in it
// and took its lock only before raft ran: a restore that took the new dir
// in those milliseconds failed at its last step ("rename …: directory not
// empty (nothing was written …)"), the refused node's files left in the
// dir, or the node started a new, empty cluster there once the restore
// had failed (strace delaying serve's mkdirs by 50 ms). The node now makes
// the dir and locks it before it opens anything in it: stopped as soon as
// anything is in it, it holds the lock, and a restore is refused naming it.
func TestServeLocksAnAbsentDataDirBeforeAnythingIsInIt(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "b.snap")
	writeTestBackup(t, file)
	ip := testIP("127.0.0.9")
	for i := range 3 {
		data := filepath.Join(dir, fmt.Sprint("node", i))
		ctx, cancel := context.WithCancel(context.Background())
		serve := exec.CommandContext(ctx, binary, "serve", "--data-dir", data, "--node-id", "n1", "--http-addr", freePortOn(t, ip), "--raft-addr", freePortOn(t, ip), "--min-free-disk", "0")
		var out strings.Builder
		serve.Stdout, serve.Stderr = &out, &out
		require.NoError(t, serve.Start())
		var first []string
		deadline := time.Now().Add(20 * time.Second)
		for len(first) == 0 && time.Now().Before(deadline) {
			entries, _ := os.ReadDir(data)
			for _, e := range entries {
				first = append(first, e.Name())
			}
		}
		require.NoError(t, serve.Process.Signal(syscall.SIGSTOP))
		require.NotEmpty(t, first, "serve made nothing in %s: %s", data, &out)
		pid, exclusive := dirLockHolder(data)
		held := pid == serve.Process.Pid && !exclusive
		var restoreOut []byte
		if held {
			restoreOut, _ = exec.Command(binary, "snapshot", "restore", file, "--data-dir", data, "--node-id", "n1", "--raft-addr", "127.0.0.1:7071").CombinedOutput()
		}
		serve.Process.Signal(syscall.SIGCONT)
		cancel()
		serve.Wait()
		require.True(t, held, "round %d: %v in %s before serve locked it (lock holder pid %d, serve %d): a restore could take the dir meanwhile", i, first, data, pid, serve.Process.Pid)
		require.Contains(t, string(restoreOut), fmt.Sprintf("idem serve is running on %s, pid %d", data, serve.Process.Pid))
	}
}
