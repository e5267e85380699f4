package main

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A SIGHUP whose --tls-* files did not load (here the last step of a CA
// rotation, the new CA file copied half) keeps the certificates and CAs
// in force: the old CA stays trusted on that node, raft included. Only the
// node's log said so, where an auth file that failed to reload is
// published and warned of by idem cluster status (a walk of
// docs/SECURITY.md). Now GET /v1/config has tls_reload_error and the
// status names the member, until a reload works.
func TestClusterStatusWarnsOfATLSReloadThatFailed(t *testing.T) {
	t.Parallel()
	ca := newPKI(t)
	n := launch(t, t.TempDir(), freePort(t), freePort(t), ca.serveArgs("n1")...)
	ops := ca.httpsClient("", "")
	waitReadyTLS(t, ops, n)
	good, err := os.ReadFile(ca.ca())
	require.NoError(t, err)
	clientCA := filepath.Join(t.TempDir(), "ca.pem") // the client's own copy
	require.NoError(t, os.WriteFile(clientCA, good, 0o600))
	status := func() string {
		t.Helper()
		out, err := idemCmd(t, "cluster", "status", "--addr", n.http, "--ca-file", clientCA)
		require.NoError(t, err, out)
		return out
	}
	require.NotContains(t, status(), "--tls-* files")

	require.NoError(t, os.WriteFile(ca.ca(), good[:len(good)/2], 0o600)) // copied half
	require.NoError(t, n.cmd.Process.Signal(syscall.SIGHUP))
	require.Eventually(t, func() bool { return strings.Contains(n.logs.String(), "TLS reload failed") }, 5*time.Second, 50*time.Millisecond)
	var cfg struct {
		TLSReloadError string `json:"tls_reload_error"`
	}
	require.Equal(t, 200, getJSON(t, ops, "https://"+n.http+"/v1/config", &cfg))
	require.Contains(t, cfg.TLSReloadError, "holds no PEM certificate")
	out := status()
	require.Contains(t, out, "WARNING: the last SIGHUP did not reload the --tls-* files of these members")
	require.Contains(t, out, "  n1: ")

	require.NoError(t, os.WriteFile(ca.ca(), good, 0o600))
	require.NoError(t, n.cmd.Process.Signal(syscall.SIGHUP))
	require.Eventually(t, func() bool { return strings.Count(n.logs.String(), "TLS certificates reloaded") > 0 }, 5*time.Second, 50*time.Millisecond)
	require.NotContains(t, status(), "--tls-* files", "a reload that worked still warned of")
}
