package raftfsm

import (
	"bytes"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/stretchr/testify/require"
)

// A node joining empty logged, at info, raft's "failed to get previous
// log ... log not found" on the leader's first append: every join printed
// it, and it asks nothing of anyone. It is said at debug while the node
// has not reached its admission; once it has caught up, the same line (a
// node that was down, behind the leader) is said at info again, and a
// real warning stays one throughout.
func TestJoinerLogsNoRoutineRaftLinesBeforeItsAdmission(t *testing.T) {
	t.Parallel()
	c := newMemCluster(t)
	open := func(id string, bootstrap bool, logs *logBuffer) *Node {
		ln := testRaftListener(t)
		cfg := DefaultConfig()
		cfg.NodeID, cfg.DataDir, cfg.Bootstrap, cfg.HTTPAdvertise = id, t.TempDir(), bootstrap, "mem-"+id
		cfg.RaftAddr, cfg.RaftListener = ln.Addr().String(), ln
		if logs != nil {
			cfg.Logger = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
		}
		return c.start(cfg)
	}
	n1 := open("n1", true, nil)
	c.leader(n1)
	for i := range 40 {
		require.NoError(t, claim(n1, fmt.Sprint("k", i)))
	}
	var logs logBuffer
	n2 := open("n2", false, &logs)
	require.NoError(t, n2.MarkJoining())
	res, err := n1.Join(n2.Self(), false, true)
	require.NoError(t, err)
	require.NoError(t, n2.Admitted(res.AdmittedIndex)) // as idem serve's join does
	require.Eventually(t, func() bool { return n2.IsMember() && !n2.joining.Load() }, 20*time.Second, 20*time.Millisecond, "n2 never caught up")
	require.False(t, n2.replayingQuiet(), "n2 has caught up")
	require.NotContains(t, logs.String(), "failed to get previous log", "n2's log:\n%s", logs.String())
	require.NotContains(t, logs.String(), "raft:", "n2's log:\n%s", logs.String())
}

// The adapter's side: the routine lines are debug while quiet says so,
// info otherwise; a warning that is not routine stays a warning.
func TestQuietRaftLogKeepsRealWarnings(t *testing.T) {
	var buf bytes.Buffer
	var quiet atomic.Bool
	h := newQuietHCLog(slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelInfo})), quiet.Load).Named("raft")
	line := func(msg string, args ...any) string {
		buf.Reset()
		h.Warn(msg, args...)
		return strings.TrimSpace(buf.String())
	}
	routine := []any{"previous-index", uint64(21), "last-index", uint64(0), "error", raft.ErrLogNotFound}
	missing := []any{"previous-index", uint64(15), "last-index", uint64(17), "error", raft.ErrLogNotFound}
	quiet.Store(true)
	require.Empty(t, line("failed to get previous log", routine...))
	require.Contains(t, line("failed to get previous log", missing...), "level=WARN")
	require.Contains(t, line("failed to contact", "server-id", raft.ServerID("n1")), "level=WARN")
	quiet.Store(false)
	require.Contains(t, line("failed to get previous log", routine...), "level=INFO")
	require.Contains(t, line("failed to get previous log", missing...), "level=WARN")
}
