package main

import (
	"bytes"
	"context"
	"io"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// envClientCmds are the commands that call a node and read IDEM_ADDR,
// IDEM_CA_FILE, IDEM_CERT_FILE and IDEM_KEY_FILE, each with arguments
// that pass every other check.
func envClientCmds(t *testing.T) []struct {
	name string
	run  func(context.Context, []string, io.Writer, io.Writer) int
	args []string
} {
	return []struct {
		name string
		run  func(context.Context, []string, io.Writer, io.Writer) int
		args []string
	}{
		{"idem get", runGet, []string{"--principal", "p", "--endpoint", "e", "--key", "k", "--timeout", "2s"}},
		{"idem claim", runClaim, []string{"--principal", "p", "--endpoint", "e", "--key", "k", "--fingerprint", "ff", "--timeout", "2s"}},
		{"idem cluster", runCluster, []string{"status", "--timeout", "2s"}},
		{"idem keys status", runKeys, []string{"status", "--timeout", "2s"}},
		{"idem snapshot save", runSnapshot, []string{"save", filepath.Join(t.TempDir(), "snap")}},
		{"idem bench", runBench, []string{"--duration", "1s"}},
	}
}

// runWithin runs a command in process, given at most 5s: a refusal
// returns at once.
func runWithin(run func(context.Context, []string, io.Writer, io.Writer) int, args ...string) (int, string) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var stdout, stderr bytes.Buffer
	code := run(ctx, args, &stdout, &stderr)
	return code, stderr.String()
}

// A value an IDEM_* variable gave a client command or the proxy that was
// refused was named only by its flag: IDEM_CA_FILE=/nonexistent idem get
// said "--ca-file: open /nonexistent", a flag the command line did not
// hold, where serve names the variable. Each refusal names it now.
func TestClientCommandsNameTheVariableThatSetAFlag(t *testing.T) {
	t.Setenv("IDEM_AUTH_TOKEN", "")
	missing := filepath.Join(t.TempDir(), "nonexistent.pem")
	for _, c := range envClientCmds(t) {
		t.Setenv("IDEM_ADDR", freePort(t)) // nothing listens: nothing is called before the refusal
		t.Setenv("IDEM_CA_FILE", missing)
		code, stderr := runWithin(c.run, c.args...)
		require.Equal(t, 2, code, "%s: %s", c.name, stderr)
		require.Contains(t, stderr, c.name+": --ca-file: open "+missing+": no such file or directory (set by $IDEM_CA_FILE)", c.name)
		// Given on the command line, the flag is not said to come from it.
		code, stderr = runWithin(c.run, append(append([]string{}, c.args...), "--ca-file", missing)...)
		require.Equal(t, 2, code, "%s: %s", c.name, stderr)
		require.Contains(t, stderr, c.name+": --ca-file: open "+missing, c.name)
		require.NotContains(t, stderr, "$IDEM_CA_FILE", c.name)
		t.Setenv("IDEM_CA_FILE", "")

		t.Setenv("IDEM_CERT_FILE", missing)
		code, stderr = runWithin(c.run, c.args...)
		require.Equal(t, 2, code, "%s: %s", c.name, stderr)
		require.Contains(t, stderr, c.name+": --cert-file needs --key-file (set by $IDEM_CERT_FILE)", c.name)
		t.Setenv("IDEM_CERT_FILE", "")
	}

	// The proxy's: IDEM_PROXY_*, IDEM_STORE_TOKEN and the TLS ones.
	t.Setenv("IDEM_PROXY_LISTEN", "127.0.0.1:99999")
	t.Setenv("IDEM_PROXY_UPSTREAM", "ftp://u")
	t.Setenv("IDEM_PROXY_STORE", "nonsense")
	t.Setenv("IDEM_STORE_TOKEN", "a b")
	t.Setenv("IDEM_CA_FILE", missing)
	code, stderr := runWithin(runProxy)
	require.Equal(t, 2, code, stderr)
	for _, want := range []string{
		`idem proxy: --listen: "127.0.0.1:99999" is not host:port with a port from 1 to 65535: port "99999" is not a number from 1 to 65535 (set by $IDEM_PROXY_LISTEN)`,
		`idem proxy: --upstream: "ftp://u" must be an http:// or https:// URL with a host (set by $IDEM_PROXY_UPSTREAM)`,
		`idem proxy: --store: "nonsense": no port (idem serve listens on 7070 by default) (set by $IDEM_PROXY_STORE)`,
		"idem proxy: --store-token: a bearer token holds no spaces or line breaks (set by $IDEM_STORE_TOKEN)",
		"idem proxy: --ca-file: open " + missing + ": no such file or directory (set by $IDEM_CA_FILE)",
	} {
		require.Contains(t, stderr, want+"\n")
	}
	code, stderr = runWithin(runProxy, "--listen", "127.0.0.1:99998", "--ca-file", missing, "--store-token-file", missing)
	require.Equal(t, 2, code, stderr)
	require.NotContains(t, stderr, "$IDEM_PROXY_LISTEN", stderr)
	require.NotContains(t, stderr, "$IDEM_CA_FILE", stderr)
	require.NotContains(t, stderr, "$IDEM_STORE_TOKEN", stderr)
}
