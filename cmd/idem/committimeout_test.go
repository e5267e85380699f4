package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// The leader's bound on a write's commit (raft's ApplyTimeout for client
// writes) was 5 s, with no flag: an operator whose disks take seconds to
// fsync got 503 outcome unknown for writes a quorum stored a moment later,
// and could not raise it. --commit-timeout sets it, from 1s to 1m; a
// value outside is refused at once, naming the flag, before the data dir
// is created.
func TestServeCommitTimeoutIsAFlagWithBounds(t *testing.T) {
	for _, v := range []string{"0", "-1s", "500ms", "2h", "1m1s"} {
		dir := filepath.Join(t.TempDir(), "d")
		code, out := serveExit(t, "--data-dir", dir, "--http-addr", freePort(t), "--raft-addr", freePort(t), "--commit-timeout", v)
		require.Equal(t, 2, code, out)
		require.Contains(t, out, "idem serve: --commit-timeout ", v)
		require.Contains(t, out, "must be from 1s to 1m: how long a write may wait to be committed", v)
		_, err := os.Stat(dir)
		require.ErrorIs(t, err, os.ErrNotExist, "--commit-timeout %s refused after creating the data dir", v)
	}

	t.Setenv("IDEM_COMMIT_TIMEOUT", "12s")
	p := start(t, filepath.Join(t.TempDir(), "d"), freePort(t), freePort(t))
	waitForLine(t, p.logs, "commit-timeout=12s")
}
