package main

import (
	"encoding/json"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idem-store/idem/raftfsm"
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

// The same node restarted with --join and a new HTTP address (not yet
// recorded in its state) asked the --join members to take it in while its
// election ran, and logged their refusal ("join refused", id in use) beside
// "--join is ignored": two lines that contradict each other. It logs the
// one: it leads its own cluster and records its new address itself.
func TestJoinIgnoredNodeWithNewAddressAsksNoOne(t *testing.T) {
	t.Parallel()
	other := start(t, t.TempDir(), freePort(t), freePort(t))
	dir := t.TempDir()
	raftAddr := freePort(t)
	p := start(t, dir, freePort(t), raftAddr)
	claimOK(t, p.http, "own")
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
	p.wait()

	httpAddr := freePort(t)
	p = start(t, dir, httpAddr, raftAddr, "--join", other.http)
	waitFor(t, 20*time.Second, "the node leads and has recorded its new HTTP address", func() (bool, string) {
		a := call("GET", httpAddr, "/v1/cluster", "")
		var st raftfsm.Status
		if a.err != nil || a.code != 200 || json.Unmarshal(a.body, &st) != nil {
			return false, a.String()
		}
		return len(st.Nodes) == 1 && st.Nodes[0].HTTPAddr == httpAddr && st.Leader != nil && st.Leader.ID == st.Self.ID, a.String()
	})
	claimOK(t, httpAddr, "after")
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
	p.wait()
	logs := p.logs.String()
	require.Equal(t, 1, strings.Count(logs, "--join is ignored"), logs)
	require.NotContains(t, logs, "join refused", logs)
	require.NotContains(t, logs, "cluster membership recorded", "it joined the other cluster:\n%s", logs)
}
