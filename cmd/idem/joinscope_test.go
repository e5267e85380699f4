package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/idem-store/idem/raftfsm"
	"github.com/stretchr/testify/require"
)

// A node joined by hand (idem cluster join, before it started: nothing to
// ask its scope of) and started with another --scope than the cluster's
// pinned one follows the pinned scope once its state holds it, and is
// promoted. Its own join, which asks for its admission, sent its --scope
// all the same, and was refused (scope_mismatch) for as long as it ran: its
// joining file never went. A voter then, removed, it said it had been
// "removed before it caught up", and its raft lines stayed at debug.
func TestJoinedByHandWithAnotherScopeRecordsItsAdmission(t *testing.T) {
	t.Parallel()
	h1, r1 := freePort(t), freePort(t)
	start(t, t.TempDir(), h1, r1, "--node-id", "n1")
	claimOK(t, h1, "pins-endpoint-scope")

	h2, r2, d2 := freePort(t), freePort(t), t.TempDir()
	out, code := cli(t, "join", "--addr", h1, "--id", "n2", "--raft-addr", r2, "--node-http-addr", h2)
	require.Equal(t, 0, code, "%s", out)
	n2 := launch(t, d2, h2, r2, "--node-id", "n2", "--scope", "principal", "--join", h1)

	waitFor(t, 20*time.Second, "n2 is promoted", func() (bool, string) {
		m, _ := memberAt(t, h1, "n2")
		return m.Suffrage == "voter", fmt.Sprintf("%+v", m)
	})
	waitFor(t, 20*time.Second, "n2's joining file goes", func() (bool, string) {
		_, err := os.Stat(filepath.Join(d2, "joining"))
		return os.IsNotExist(err), fmt.Sprintf("%v; n2's log:\n%s", err, tail(n2.logs.String()))
	})

	// Removed now, it says that it was removed, not that it had not caught up.
	out, code = cli(t, "remove", "--addr", h1, "--id", "n2")
	require.Equal(t, 0, code, "%s", out)
	waitForLine(t, n2.logs, "not in the cluster's configuration")
	require.NotContains(t, n2.logs.String(), raftfsm.RemovedBeforeCaughtUp)
}

func tail(s string) string {
	if len(s) > 2000 {
		return "..." + s[len(s)-2000:]
	}
	return strings.TrimSpace(s)
}
