package main

import (
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A data dir holding a one-node cluster of its own (a make run store, a
// restored backup), started with --join naming another cluster's members,
// ignored --join without a word and served writes as a separate cluster:
// a client given every address could have the same key claimed in both.
// The node now says at start that --join is ignored and why.
func TestJoinIgnoredByANodeWithAClusterOfItsOwnSaysSo(t *testing.T) {
	t.Parallel()
	const warning = "--join is ignored"
	other := start(t, t.TempDir(), freePort(t), freePort(t))
	dir := t.TempDir()
	httpAddr, raftAddr := freePort(t), freePort(t)
	p := start(t, dir, httpAddr, raftAddr)
	claimOK(t, httpAddr, "own")
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
	p.wait()
	require.NotContains(t, p.logs.String(), warning, "no --join: nothing to say")

	p = start(t, dir, httpAddr, raftAddr, "--join", other.http)
	waitFor(t, 10*time.Second, "the warning", func() (bool, string) {
		return strings.Contains(p.logs.String(), warning), p.logs.String()
	})
	require.Contains(t, p.logs.String(), "empty data dir")

	// --join naming only itself (a template listing every node) says nothing.
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
	p.wait()
	p = start(t, dir, httpAddr, raftAddr, "--join", httpAddr)
	time.Sleep(2 * time.Second)
	require.NotContains(t, p.logs.String(), warning)
}
