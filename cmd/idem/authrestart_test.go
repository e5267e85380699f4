package main

import (
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A data dir served with --auth-file and restarted without it (a unit
// file edited by hand, a command copied from a test setup) answered any
// caller, every tenant's records included: only a warning said so. Such a
// start is refused now, naming the flag, unless --no-auth says it is meant.
func TestRestartWithoutAuthFileIsRefused(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	data := filepath.Join(dir, "n1")
	auth := filepath.Join(dir, "auth.json")
	const appTok = "app-token-a-0123456789"
	writeAuth(t, auth, entry("tenant-a", appTok, "app", "tenant-a"))
	nodeAuth := func() string {
		b, err := os.ReadFile(filepath.Join(data, "node.json"))
		require.NoError(t, err)
		var nf struct{ Auth string }
		require.NoError(t, json.Unmarshal(b, &nf))
		return nf.Auth
	}
	stop := func(p *proc) {
		require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
		require.NoError(t, p.wait(), "%s", p.logs)
	}
	h, r := freePort(t), freePort(t)

	// Created without tokens: a restart without --auth-file is as before.
	p := start(t, data, h, r, "--node-id", "n1")
	stop(p)
	require.Equal(t, "", nodeAuth())

	// Served with --auth-file once (node.json existed already).
	p = start(t, data, h, r, "--node-id", "n1", "--auth-file", auth)
	req, _ := http.NewRequest("POST", "http://"+h+"/v1/claim", strings.NewReader(`{"principal":"tenant-a","endpoint":"e","key":"k","fingerprint":"aa"}`))
	req.Header.Set("Authorization", "Bearer "+appTok)
	req.Header.Set("Content-Type", "application/json")
	hc := &http.Client{Timeout: 20 * time.Second}
	resp, err := hc.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusCreated, resp.StatusCode)
	stop(p)
	require.Equal(t, "tokens", nodeAuth())

	// Restarted without it: refused, exit 2, nothing served.
	p = launch(t, data, h, r, "--node-id", "n1")
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
		t.Fatalf("a start without --auth-file on a data dir served with it was not refused:\n%s", p.logs)
	}
	var exit *exec.ExitError
	require.ErrorAs(t, p.err, &exit, "%s", p.logs)
	require.Equal(t, 2, exit.ExitCode(), "%s", p.logs)
	logs := p.logs.String()
	require.Contains(t, logs, "--auth-file is missing: "+data+" was last served with --auth-file")
	require.Contains(t, logs, "pass --no-auth")
	// Said before the refusal, the start's notice read as if the node
	// served the API open to anyone.
	require.NotContains(t, logs, "open to anyone", "a start refused for its missing --auth-file said the API was open")
	require.Equal(t, "tokens", nodeAuth(), "a refused start changes nothing")

	// The same record stays readable with the token once the file is back.
	p = start(t, data, h, r, "--node-id", "n1", "--auth-file", auth)
	req, _ = http.NewRequest("GET", "http://"+h+"/v1/records?principal=tenant-a&endpoint=e&key=k", nil)
	req.Header.Set("Authorization", "Bearer "+appTok)
	resp, err = hc.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	stop(p)

	// Turned off on purpose: said at start, recorded, and not asked again.
	p = start(t, data, h, r, "--node-id", "n1", "--no-auth")
	waitForLine(t, p.logs, "--no-auth: this data dir was served with --auth-file")
	stop(p)
	require.Equal(t, "none", nodeAuth())
	p = start(t, data, h, r, "--node-id", "n1")
	stop(p)

	out, err := exec.Command(binary, "serve", "--data-dir", data, "--no-auth", "--auth-file", auth).CombinedOutput()
	require.ErrorAs(t, err, &exit, "%s", out)
	require.Equal(t, 2, exit.ExitCode(), "%s", out)
	require.Contains(t, string(out), "--no-auth and --auth-file contradict")
}

// Nodes forming a cluster with --bootstrap-expect are voters from the
// start, so one of them without --auth-file is never kept back as a
// joining node is: it answered any caller, every tenant's records included.
// The node with the file does not bootstrap with it and says why (the other
// one's questions are refused: 401).
func TestBootstrapExpectRefusesANodeWithoutAuthFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	const nodeTok = "node-token-0123456789"
	auth := filepath.Join(dir, "auth.json")
	writeAuth(t, auth, entry("node", nodeTok, "admin"))
	nodeToken := filepath.Join(dir, "node.token")
	require.NoError(t, os.WriteFile(nodeToken, []byte(nodeTok+"\n"), 0o600))
	h1, r1, h2, r2 := freePort(t), freePort(t), freePort(t), freePort(t)
	join := h1 + "," + h2
	n1 := launch(t, filepath.Join(dir, "n1"), h1, r1, "--node-id", "n1", "--bootstrap-expect", "2", "--join", join, "--auth-file", auth, "--node-token-file", nodeToken)
	// n2 sends the node token (it lacks only --auth-file), so it reads n1's
	// status and says the same from its side.
	n2 := launch(t, filepath.Join(dir, "n2"), h2, r2, "--node-id", "n2", "--bootstrap-expect", "2", "--join", join, "--node-token-file", nodeToken)
	waitFor(t, 15*time.Second, "both nodes refuse to bootstrap", func() (bool, string) {
		return strings.Contains(n1.logs.String(), "node n2 ("+h2+") runs without --auth-file and this node with it") &&
			strings.Contains(n2.logs.String(), "node n1 ("+h1+") checks tokens (--auth-file) and this node does not"), ""
	})
	_, body := get(t, h2, "/v1/cluster")
	var st struct{ Nodes []any }
	require.NoError(t, json.Unmarshal(body, &st))
	require.Empty(t, st.Nodes, "n2 formed a cluster: %s", body)
	require.Equal(t, 1, strings.Count(n1.logs.String(), "not bootstrapping"), "said once, not every second")
}
