package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idem-store/idem/engine"
	"github.com/idem-store/idem/raftfsm"
)

// writeTestBackup writes a backup of an empty store to file.
func writeTestBackup(t *testing.T, file string) {
	t.Helper()
	db, err := engine.Open(filepath.Join(t.TempDir(), "fsm"), engine.Options{})
	require.NoError(t, err)
	defer db.Close()
	snap, err := db.Snapshot()
	require.NoError(t, err)
	defer snap.Close()
	h, err := raftfsm.NewBackupHeader(snap, "n1")
	require.NoError(t, err)
	var b bytes.Buffer
	_, err = raftfsm.WriteBackup(&b, h, snap)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(file, b.Bytes(), 0o600))
}

// main turns Ctrl-C and SIGTERM into ctx's end, and restore and inspect
// read their backup without looking at it: a restore of GBs, interrupted
// (the wrong backup, noticed), went on for minutes, then put that state
// into --data-dir and exited 0; inspect could not be stopped at all. Both
// stop reading now, and the restore writes nothing.
func TestRestoreAndInspectStopOnCtrlC(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "b.snap")
	writeTestBackup(t, file)
	var stdout, stderr bytes.Buffer
	require.Equal(t, 0, run(context.Background(), []string{"snapshot", "inspect", file}, &stdout, &stderr), stderr.String())

	ctx, cancel := context.WithCancel(context.Background())
	cancel() // the operator's Ctrl-C
	data := filepath.Join(dir, "restored")
	stdout.Reset()
	stderr.Reset()
	code := run(ctx, []string{"snapshot", "restore", file, "--data-dir", data, "--node-id", "n1", "--raft-addr", "127.0.0.1:7071"}, &stdout, &stderr)
	require.Equal(t, 1, code, "an interrupted restore succeeded: %s%s", stdout.String(), stderr.String())
	require.Contains(t, stderr.String(), "idem snapshot restore: interrupted after reading 0 bytes of "+file+": nothing was written to "+data)
	_, err := os.Stat(data)
	require.True(t, os.IsNotExist(err), "the interrupted restore made %s", data)
	left, _ := filepath.Glob(data + ".restore-*")
	require.Empty(t, left, "its copy is removed")

	stdout.Reset()
	stderr.Reset()
	require.Equal(t, 1, run(ctx, []string{"snapshot", "inspect", file}, &stdout, &stderr), stdout.String())
	require.Equal(t, "idem snapshot inspect: "+file+": interrupted before its end: not checked", strings.TrimSpace(stderr.String()))
}
