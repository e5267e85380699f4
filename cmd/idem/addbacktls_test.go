package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// The command a removed node logs to add it back lacked the client
// command's TLS and token flags: pasted on a TLS cluster with --auth-file
// it failed (a TLS error, then 401 and 403). It now carries the node's own
// CA, certificate, key and node token file, as absolute paths, and runs
// as pasted from another directory.
func TestAddBackCommandRunsOnATLSClusterWithTokens(t *testing.T) {
	t.Parallel()
	ca := newPKI(t)
	dir := t.TempDir()
	auth := filepath.Join(dir, "auth.json")
	writeAuth(t, auth, entry("nodes", "node-admin-1", "admin"))
	tokenFile := filepath.Join(dir, "node.token")
	require.NoError(t, os.WriteFile(tokenFile, []byte("node-admin-1\n"), 0o600))
	n1 := launch(t, filepath.Join(dir, "n1"), freePort(t), freePort(t),
		append([]string{"--auth-file", auth, "--node-token-file", tokenFile}, ca.serveArgs("n1")...)...)
	waitReadyTLS(t, ca.httpsClient("", ""), n1)

	// n2's flags as its serve was given them, relative to its directory.
	wd, err := os.Getwd()
	require.NoError(t, err)
	rel := func(p string) string {
		r, err := filepath.Rel(wd, p)
		require.NoError(t, err)
		return r
	}
	cert, key := ca.cert("n2", "--ip", testIP("127.0.0.9"))
	c := &serveConfig{nodeID: "n2", raftAdvertise: freePort(t), httpAdvertise: freePort(t), join: n1.http,
		authFile: rel(auth), nodeTokenFile: rel(tokenFile)}
	c.tls.certFile, c.tls.keyFile, c.tls.caFile = rel(cert), rel(key), rel(ca.ca())
	cmd := addBackCommand(c)
	require.Contains(t, cmd, "--ca-file "+ca.ca()+" --cert-file "+cert+" --key-file "+key, cmd)
	require.Contains(t, cmd, "--token-file "+tokenFile, cmd)

	sh := exec.Command("sh", "-c", strings.Replace(cmd, "idem ", binary+" ", 1))
	sh.Dir = t.TempDir()
	out, err := sh.CombinedOutput()
	require.NoError(t, err, "%s\n%s", cmd, out)

	// Without --node-token-file (an old-format auth file's first token is
	// the node's), the operator is asked for an admin token of their own.
	c.nodeTokenFile = ""
	require.True(t, strings.HasSuffix(addBackCommand(c), " --token-file ADMIN_TOKEN_FILE"), addBackCommand(c))
	// Without TLS or tokens, nothing is added.
	require.Equal(t, "idem cluster join --id n3 --raft-addr 127.0.0.3:7071 --node-http-addr 127.0.0.3:7070 --addr 127.0.0.1:7070",
		addBackCommand(&serveConfig{nodeID: "n3", raftAdvertise: "127.0.0.3:7071", httpAdvertise: "127.0.0.3:7070", join: "127.0.0.1:7070"}))
}
