package main

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// A command given a TLS node's https:// address without --ca-file (or with
// another CA) says which flag gives the CA, not only crypto/tls's "x509:
// certificate signed by unknown authority".
func TestCommandsNameCAFileOnAnUnknownCA(t *testing.T) {
	t.Setenv("IDEM_CA_FILE", "")
	t.Setenv("IDEM_AUTH_TOKEN", "")
	ca := newPKI(t)
	n := launch(t, t.TempDir(), freePort(t), freePort(t), ca.serveArgs("n1")...)
	waitReadyTLS(t, ca.httpsClient("", ""), n)
	other := newPKI(t)

	for _, extra := range [][]string{nil, {"--ca-file", other.ca()}} {
		code, _, stderr := runClientCmd(t, runGet, append([]string{"--addr", "https://" + n.http,
			"--principal", "p", "--endpoint", "e", "--key", "k"}, extra...)...)
		require.Equal(t, 1, code, stderr)
		require.Contains(t, stderr, "unknown authority", stderr)
		require.Contains(t, stderr, "with --ca-file (or IDEM_CA_FILE)", stderr)

		code, _, stderr = runClientCmd(t, runCluster, append([]string{"status", "--addr", "https://" + n.http}, extra...)...)
		require.Equal(t, 1, code, stderr)
		require.Contains(t, stderr, "with --ca-file (or IDEM_CA_FILE)", stderr)

		code, _, stderr = runClientCmd(t, runSnapshot, append([]string{"save", filepath.Join(t.TempDir(), "b.snap"), "--addr", "https://" + n.http}, extra...)...)
		require.Equal(t, 1, code, stderr)
		require.Contains(t, stderr, "with --ca-file (or IDEM_CA_FILE)", stderr)
	}
	code, _, stderr := runClientCmd(t, runGet, "--addr", "https://"+n.http, "--ca-file", ca.ca(),
		"--principal", "p", "--endpoint", "e", "--key", "k")
	require.Equal(t, 1, code)
	require.Contains(t, stderr, "code not_found", "with the nodes' CA the call goes through")
}
