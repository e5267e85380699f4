package raftfsm

import (
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A cluster started from clocks that were off (here a one-node store
// bootstrapped on a clock two hours fast) keeps its cluster time: answers
// read two hours in the future for good, and nothing said so. The node
// says it once it has run clockWatchFirst.
func TestClusterTimeOffTheWallClockIsSaid(t *testing.T) {
	old := clockWatchFirst
	clockWatchFirst = 200 * time.Millisecond
	t.Cleanup(func() { clockWatchFirst = old })
	dir := t.TempDir()
	n := mustNode(t, func(c *Config) { c.DataDir, c.ClockOffset = dir, 2*time.Hour })
	require.Eventually(t, func() bool { return n.db.Meta().NowMs > 0 }, 10*time.Second, 20*time.Millisecond, "an applied tick stamps cluster time")
	require.NoError(t, n.Close())

	logs := &logBuffer{}
	n = mustNode(t, func(c *Config) {
		c.DataDir = dir
		c.Logger = slog.New(slog.NewTextHandler(logs, nil))
	})
	require.Eventually(t, func() bool {
		return strings.Contains(logs.String(), "cluster time reads ahead of this node's wall clock")
	}, 10*time.Second, 50*time.Millisecond)
	// The node was down a moment between its two runs, which cluster time
	// does not count: a loaded machine makes that a second or more.
	require.Regexp(t, `ahead-by=(2h0m|1h59m)`, logs.String())
	require.Contains(t, logs.String(), "level=WARN")
}
