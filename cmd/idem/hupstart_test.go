package main

import (
	"net/http"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// SIGHUP's default is to end a Go process, and idem serve listened for it
// only once it had opened its data dir and started raft, and only with
// --auth-file or TLS: a node without them died of the SIGHUP an operator
// sends every node after editing the auth file (turning tokens on, one
// node at a time), and one signalled while it started died too (a walk of
// docs/SECURITY.md's reloads during a rolling restart). It now lives, and a
// SIGHUP that came during its start is acted on once it runs.
func TestSIGHUPDoesNotEndANode(t *testing.T) {
	t.Parallel()
	alive := func(p *proc) bool {
		select {
		case <-p.done:
			return false
		case <-time.After(time.Second):
			return true
		}
	}

	// Neither --auth-file nor TLS: nothing to reload.
	open := start(t, t.TempDir(), freePort(t), freePort(t))
	require.NoError(t, open.cmd.Process.Signal(syscall.SIGHUP))
	require.True(t, alive(open), "a node without --auth-file or TLS ended on SIGHUP: %v; logs:\n%s", open.err, open.logs)
	require.Contains(t, open.logs.String(), "SIGHUP: nothing to reload")

	// Signalled as soon as it logs its first line, while it starts.
	auth := filepath.Join(t.TempDir(), "auth.json")
	writeAuth(t, auth, entry("deploy", "admin-1", "admin"))
	p := launch(t, t.TempDir(), freePort(t), freePort(t), "--auth-file", auth)
	require.Eventually(t, func() bool { return strings.Contains(p.logs.String(), "level=") }, 10*time.Second, time.Millisecond)
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGHUP))
	require.True(t, alive(p), "a node signalled while it started ended: %v; logs:\n%s", p.err, p.logs)
	require.Eventually(t, func() bool {
		resp, err := http.Get("http://" + p.http + "/healthz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}, 20*time.Second, 50*time.Millisecond)
	require.Eventually(t, func() bool { return strings.Contains(p.logs.String(), "auth file reloaded") }, 10*time.Second, 20*time.Millisecond,
		"the SIGHUP of the start was not acted on")
}

// idem proxy ended on SIGHUP too, with every request it held: an operator
// reloading every idem process after editing an auth file or renewing
// certificates. It reads its files only at start, says so, and goes on.
func TestSIGHUPDoesNotEndAProxy(t *testing.T) {
	t.Parallel()
	px := startProxy(t, "--upstream", "http://"+freePort(t), "--store", freePort(t))
	require.NoError(t, px.cmd.Process.Signal(syscall.SIGHUP))
	select {
	case <-px.done:
		t.Fatalf("the proxy ended on SIGHUP: %v; logs:\n%s", px.err, px.logs)
	case <-time.After(time.Second):
	}
	require.Eventually(t, func() bool { return strings.Contains(px.logs.String(), "SIGHUP ignored") }, 5*time.Second, 20*time.Millisecond)
}
