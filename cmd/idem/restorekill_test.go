//go:build linux

package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A restore into a mount point builds its copy inside it and moves the
// copy's entries in one by one at the end. Killed (-9, a reboot) while it
// built the copy, it left only that hidden copy, and idem serve took the
// dir for an empty one and started a NEW, EMPTY cluster in it; killed
// while it moved the entries in, it left part of them, which serve
// refused as a node whose raft log was deleted (remove it from its
// cluster...), and a restore run again refused as "not empty". A marker
// in the dir now says, until the last entry is in, that a restore is
// unfinished there: serve refuses the dir saying to run the restore
// again, and that restore clears what the killed one left and restores
// the backup whole; idem recover refuses it too.
func TestRestoreKilledInAMountPointIsRefusedByServeAndRunsAgain(t *testing.T) {
	dir := t.TempDir()
	mnt := mountTmpfs(t, dir, "idem-new")
	file := filepath.Join(dir, "b.snap")
	writeTestBackup(t, file)
	backup, err := os.ReadFile(file)
	require.NoError(t, err)
	restoreArgs := func(from string) []string {
		return []string{"snapshot", "restore", from, "--data-dir", mnt, "--node-id", "n1", "--raft-addr", "127.0.0.1:7071"}
	}
	restoreAgain := func() {
		t.Helper()
		out, err := exec.Command(binary, restoreArgs(file)...).CombinedOutput()
		require.NoError(t, err, "the restore run again: %s", out)
		require.FileExists(t, filepath.Join(mnt, "raft.db"))
		for _, d := range []string{"fsm", "raft-wal", "snapshots"} {
			require.DirExists(t, filepath.Join(mnt, d))
		}
		require.NoFileExists(t, filepath.Join(mnt, restoreMarkerName))
		copies, _ := filepath.Glob(filepath.Join(mnt, ".restore-*"))
		require.Empty(t, copies, "%s", out)
	}
	empty := func() {
		t.Helper()
		entries, err := os.ReadDir(mnt)
		require.NoError(t, err)
		for _, e := range entries {
			require.NoError(t, os.RemoveAll(filepath.Join(mnt, e.Name())))
		}
	}

	// Killed while it reads the backup.
	killRestoreMidway(t, backup, restoreArgs, func() bool {
		copies, _ := filepath.Glob(filepath.Join(mnt, ".restore-[0-9]*"))
		return len(copies) == 1
	})
	out := serveRefused(t, mnt)
	require.Contains(t, out, "holds a restore that did not finish")
	require.Contains(t, out, "run the same idem snapshot restore into "+mnt+" again")
	require.NoFileExists(t, filepath.Join(mnt, "raft.db"), "serve wrote nothing")
	require.NoDirExists(t, filepath.Join(mnt, "fsm"))
	rec, err := exec.Command(binary, "recover", "--data-dir", mnt, "--node-id", "n1", "--peers", "n1=127.0.0.1:7071").CombinedOutput()
	require.Error(t, err, "recover took the killed restore's dir: %s", rec)
	require.Contains(t, string(rec), "holds a restore that did not finish")
	restoreAgain()

	// Killed at any point of a whole restore: the dir then holds the whole
	// restore without a marker, or a marker that serve refuses and the
	// next restore clears.
	empty()
	start := time.Now()
	require.NoError(t, exec.Command(binary, restoreArgs(file)...).Run())
	took := time.Since(start)
	whole, unfinished := 0, 0
	for i := range 12 {
		empty()
		restore := exec.Command(binary, restoreArgs(file)...)
		require.NoError(t, restore.Start())
		time.Sleep(took * time.Duration(i) / 10)
		restore.Process.Signal(syscall.SIGKILL)
		restore.Wait()
		_, markErr := os.Stat(filepath.Join(mnt, restoreMarkerName))
		if entries, _ := os.ReadDir(mnt); markErr != nil && len(entries) > 0 {
			// No marker: the restore is whole there.
			for _, d := range []string{"raft.db", "fsm", "raft-wal", "snapshots"} {
				_, err := os.Stat(filepath.Join(mnt, d))
				require.NoError(t, err, "kill %d: no marker, yet the restore is not whole", i)
			}
			whole++ // done before the kill: a restore again is refused, as into any data dir
			continue
		}
		if markErr == nil {
			unfinished++
			require.Contains(t, unfinishedRestoreProblem(mnt), "holds a restore that did not finish", "kill %d", i)
		}
		restoreAgain()
	}
	t.Logf("a restore takes %v; of 12 kills, %d left it whole, %d unfinished (marked), the rest nothing", took, whole, unfinished)
}

// killRestoreMidway starts a restore (args, given the backup file it
// reads) from a pipe holding half of backup, waits until started reports
// it building its copy, and kills it -9.
func killRestoreMidway(t *testing.T, backup []byte, args func(from string) []string, started func() bool) {
	t.Helper()
	fifo := filepath.Join(t.TempDir(), "b.fifo")
	require.NoError(t, syscall.Mkfifo(fifo, 0o600))
	restore := exec.Command(binary, args(fifo)...)
	require.NoError(t, restore.Start())
	w, err := os.OpenFile(fifo, os.O_WRONLY, 0)
	require.NoError(t, err)
	defer w.Close()
	_, err = w.Write(backup[:len(backup)/2])
	require.NoError(t, err)
	require.Eventually(t, started, 10*time.Second, 10*time.Millisecond, "the restore builds its copy")
	time.Sleep(200 * time.Millisecond)
	require.NoError(t, restore.Process.Signal(syscall.SIGKILL))
	restore.Wait()
}

// serveRefused runs idem serve on dataDir and requires its refusal (exit
// 2), which it returns.
func serveRefused(t *testing.T, dataDir string) string {
	t.Helper()
	ip := testIP("127.0.0.9")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	serve := exec.CommandContext(ctx, binary, "serve", "--data-dir", dataDir, "--node-id", "n1", "--http-addr", freePortOn(t, ip), "--raft-addr", freePortOn(t, ip), "--min-free-disk", "0")
	out, err := serve.CombinedOutput()
	var ee *exec.ExitError
	require.ErrorAs(t, err, &ee, "serve started on the killed restore's dir: %s", out)
	require.Equal(t, 2, ee.ExitCode(), "%s", out)
	return string(out)
}

// A restore into a plain directory builds its copy beside it, DIR.restore-*,
// and renames it into place: killed before, it leaves no DIR (or the empty
// one it was given) and the copy, and idem serve started a new, empty
// cluster in DIR where the operator meant the backup's. It refuses now,
// naming the copy, and the restore run again removes the copy and restores.
func TestRestoreKilledBeforeItsRenameIsRefusedByServe(t *testing.T) {
	dir := t.TempDir()
	data := filepath.Join(dir, "idem-new")
	file := filepath.Join(dir, "b.snap")
	writeTestBackup(t, file)
	backup, err := os.ReadFile(file)
	require.NoError(t, err)
	args := func(from string) []string {
		return []string{"snapshot", "restore", from, "--data-dir", data, "--node-id", "n1", "--raft-addr", "127.0.0.1:7071"}
	}
	killRestoreMidway(t, backup, args, func() bool {
		copies, _ := filepath.Glob(data + ".restore-*")
		return len(copies) == 1
	})
	// The restore made DIR, empty, to hold its lock on it from the start.
	entries, err := os.ReadDir(data)
	require.NoError(t, err)
	require.Empty(t, entries)
	out := serveRefused(t, data)
	require.Contains(t, out, "is the copy of a restore into it that was stopped before it finished")
	require.Contains(t, out, "run the idem snapshot restore into it again")
	entries, err = os.ReadDir(data)
	require.NoError(t, err)
	require.Empty(t, entries, "serve made nothing")

	restored, err := exec.Command(binary, args(file)...).CombinedOutput()
	require.NoError(t, err, "%s", restored)
	require.FileExists(t, filepath.Join(data, "raft.db"))
	copies, _ := filepath.Glob(data + ".restore-*")
	require.Empty(t, copies)
}

// Only a restore into a mount point writes its marker. One found in a
// plain directory was copied there with what it sat beside (cp -a of the
// disk's contents, an rsync): the rerun removed what the directory held
// as the stopped restore's (node.json, raft.db, fsm, ...), then refused
// the directory as not empty for the marker it kept. It changes nothing
// now, and says why.
func TestRestoreIntoAPlainDirWithAMarkerRemovesNothing(t *testing.T) {
	dir := t.TempDir()
	data := filepath.Join(dir, "n1")
	require.NoError(t, os.MkdirAll(filepath.Join(data, "fsm"), 0o700))
	for _, f := range []string{"node.json", "raft.db", restoreMarkerName} {
		require.NoError(t, os.WriteFile(filepath.Join(data, f), []byte("x"), 0o600))
	}
	file := filepath.Join(dir, "b.snap")
	writeTestBackup(t, file)
	var stdout, stderr bytes.Buffer
	code := run(context.Background(), []string{"snapshot", "restore", file, "--data-dir", data, "--node-id", "n1", "--raft-addr", "127.0.0.1:7071"}, &stdout, &stderr)
	require.Equal(t, 1, code, "%s", stderr.String())
	require.Contains(t, stderr.String(), "which only a restore into a mount point writes")
	require.NotContains(t, stderr.String(), "removed")
	for _, f := range []string{"node.json", "raft.db", "fsm", restoreMarkerName} {
		_, err := os.Stat(filepath.Join(data, f))
		require.NoError(t, err, "the restore removed %s", f)
	}
}
