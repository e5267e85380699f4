package main

import (
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

// A backup of a cluster served with --auth-file holds every tenant's
// records, and the data dir restored from it recorded nothing of the
// tokens: started as the restore's hint reads (no --auth-file), the node
// answered any caller without a token with any tenant's records, where
// the data dir the backup came from refuses such a start. The backup now
// says its node checked tokens, the restore records it in node.json, and
// serve refuses the restored dir without --auth-file (or --no-auth).
func TestRestoreOfAnAuthClustersBackupNeedsTheAuthFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	const nodeTok, appTok = "node-token-0123456789", "app-token-a-0123456789"
	auth := filepath.Join(dir, "auth.json")
	writeAuth(t, auth, entry("node", nodeTok, "admin"), entry("tenant-a", appTok, "app", "tenant-a"))
	nodeToken := filepath.Join(dir, "node.token")
	require.NoError(t, os.WriteFile(nodeToken, []byte(nodeTok+"\n"), 0o600))
	hc := &http.Client{Timeout: 20 * time.Second}
	call := func(method, url, body, tok string) int {
		t.Helper()
		req, _ := http.NewRequest(method, url, strings.NewReader(body))
		if tok != "" {
			req.Header.Set("Authorization", "Bearer "+tok)
		}
		req.Header.Set("Content-Type", "application/json")
		resp, err := hc.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		return resp.StatusCode
	}

	h, r := freePort(t), freePort(t)
	p := start(t, filepath.Join(dir, "n1"), h, r, "--node-id", "n1", "--auth-file", auth, "--node-token-file", nodeToken)
	require.Equal(t, http.StatusCreated, call("POST", "http://"+h+"/v1/claim", `{"principal":"tenant-a","endpoint":"e","key":"k","fingerprint":"aa"}`, appTok))
	snap := filepath.Join(dir, "b.snap")
	out, err := idemCmd(t, "snapshot", "save", snap, "--addr", h, "--token-file", nodeToken)
	require.NoError(t, err, out)
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
	require.NoError(t, p.wait(), "%s", p.logs)
	out, err = idemCmd(t, "snapshot", "inspect", snap)
	require.NoError(t, err, out)
	require.Contains(t, out, "taken by a node that checked tokens (--auth-file)")

	restored := filepath.Join(dir, "restored")
	h2, r2 := freePort(t), freePort(t)
	out, err = idemCmd(t, "snapshot", "restore", snap, "--data-dir", restored, "--node-id", "n1", "--raft-addr", r2)
	require.NoError(t, err, out)
	require.Contains(t, out, "start it with the cluster's --auth-file (it refuses to start without it")
	// Only --auth-file is needed to start it: the hint said it refused to
	// start without --node-token-file too, which it never did.
	require.NotContains(t, out, "without them")

	// Started as the hint's first line reads: refused, exit 2, nothing served.
	q := launch(t, restored, h2, r2, "--node-id", "n1")
	select {
	case <-q.done:
	case <-time.After(30 * time.Second):
		t.Fatalf("a data dir restored from a backup of a cluster with --auth-file started without it:\n%s", q.logs)
	}
	var exit *exec.ExitError
	require.ErrorAs(t, q.err, &exit, "%s", q.logs)
	require.Equal(t, 2, exit.ExitCode(), "%s", q.logs)
	require.Contains(t, q.logs.String(), "--auth-file is missing: "+restored+" was last served with --auth-file, or restored from a backup of a cluster that ran with one")

	// With the file (and no node token, as the hint says): the record is
	// there, for its tenant's token only.
	q = start(t, restored, h2, r2, "--node-id", "n1", "--auth-file", auth)
	url := "http://" + h2 + "/v1/records?principal=tenant-a&endpoint=e&key=k"
	require.Equal(t, http.StatusOK, call("GET", url, "", appTok))
	require.Equal(t, http.StatusUnauthorized, call("GET", url, "", ""))
	require.NoError(t, q.cmd.Process.Signal(syscall.SIGTERM))
	require.NoError(t, q.wait(), "%s", q.logs)
}
