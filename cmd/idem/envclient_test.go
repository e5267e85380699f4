package main

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"path/filepath"
	"strings"
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

// An empty IDEM_ADDR= sent every client command to 127.0.0.1:7070, the
// default, without a word, where serve takes an empty variable as its
// flag given empty and refuses what cannot be empty (IDEM_NODE_ID=). As
// serve's, a variable set is its flag's value: IDEM_ADDR= is refused,
// exit 2, naming it, as are the proxy's empty IDEM_PROXY_LISTEN,
// IDEM_PROXY_UPSTREAM and IDEM_PROXY_STORE (which had said "--listen:
// required"). A flag that may be empty takes it as not given, as
// --ca-file "" does, and as serve's IDEM_TLS_CA_FILE= does.
func TestClientCommandsRefuseAnEmptyAddrVariable(t *testing.T) {
	t.Setenv("IDEM_AUTH_TOKEN", "")
	t.Setenv("IDEM_CA_FILE", "")
	t.Setenv("IDEM_CERT_FILE", "")
	t.Setenv("IDEM_KEY_FILE", "")
	t.Setenv("IDEM_ADDR", "")
	for _, c := range envClientCmds(t) {
		code, stderr := runWithin(c.run, c.args...)
		// Fatal at once: without the refusal the command went to
		// 127.0.0.1:7070, which this test must not load further.
		require.Equal(t, 2, code, "%s: %s", c.name, stderr)
		require.True(t, strings.HasPrefix(stderr, c.name+": $IDEM_ADDR (--addr) is empty: want host:port or a URL (e.g. 127.0.0.1:7070 or https://idem.example.com); unset it for the default, 127.0.0.1:7070\n"), "%s: %s", c.name, stderr)
	}
	// --addr on the command line wins over the variable, empty too, and
	// the empty TLS variables are no TLS, as their flags given empty.
	f := newAPIFake(t, http.StatusOK, `{"record":{}}`)
	code, stderr := runWithin(runGet, "--addr", f.url, "--principal", "p", "--endpoint", "e", "--key", "k")
	require.Equal(t, 0, code, stderr)
	t.Setenv("IDEM_ADDR", f.url)
	code, stderr = runWithin(runGet, "--principal", "p", "--endpoint", "e", "--key", "k")
	require.Equal(t, 0, code, stderr)

	for _, v := range []string{"IDEM_PROXY_LISTEN", "IDEM_PROXY_UPSTREAM", "IDEM_PROXY_STORE"} {
		t.Setenv(v, "")
	}
	code, stderr = runWithin(runProxy)
	require.Equal(t, 2, code, stderr)
	require.Equal(t, "idem proxy: --listen: $IDEM_PROXY_LISTEN is set but empty: give it the address to listen on (e.g. 127.0.0.1:8080), or unset it and give --listen\n"+
		"idem proxy: --upstream: $IDEM_PROXY_UPSTREAM is set but empty: give it the URL of the service behind the proxy (e.g. http://127.0.0.1:9000), or unset it and give --upstream\n"+
		"idem proxy: --store: $IDEM_PROXY_STORE is set but empty: give it the address of at least one idem node (e.g. 127.0.0.1:7070), or unset it and give --store\n"+
		"(see idem proxy --help)\n", stderr)
}

// IDEM_ADRR=10.0.0.5:7070 idem get asked 127.0.0.1:7070 without a word,
// where serve names a variable one or two letters from one of its own
// (IDEM_RETENTON). Every command that reads IDEM_* variables names one
// too, with the one meant, and still runs; another idem command's
// variable (IDEM_RETENTION, serve's) and the tests' are not named.
func TestClientCommandsNameAMisspeltVariable(t *testing.T) {
	t.Setenv("IDEM_AUTH_TOKEN", "")
	t.Setenv("IDEM_CA_FILE", "")
	f := newAPIFake(t, http.StatusOK, `{"record":{}}`)
	t.Setenv("IDEM_ADDR", f.url)
	t.Setenv("IDEM_ADRR", "127.0.0.1:1")
	t.Setenv("IDEM_CA_FLE", "ca.pem")
	t.Setenv("IDEM_RETENTION", "48h")
	var stdout, stderr bytes.Buffer
	code := run(context.Background(), []string{"get", "--principal", "p", "--endpoint", "e", "--key", "k"}, &stdout, &stderr)
	require.Equal(t, 0, code, stderr.String())
	require.Equal(t, "idem get: $IDEM_ADRR is set but is not a variable of idem get, and is ignored: did you mean $IDEM_ADDR? (--addr)\n"+
		"idem get: $IDEM_CA_FLE is set but is not a variable of idem get, and is ignored: did you mean $IDEM_CA_FILE? (--ca-file)\n", stderr.String())

	t.Setenv("IDEM_PROXY_LISTN", "127.0.0.1:8080")
	stdout.Reset()
	stderr.Reset()
	code = run(context.Background(), []string{"proxy"}, &stdout, &stderr)
	require.Equal(t, 2, code, stderr.String())
	require.Contains(t, stderr.String(), "idem proxy: $IDEM_PROXY_LISTN is set but is not a variable of idem proxy, and is ignored: did you mean $IDEM_PROXY_LISTEN? (--listen)\n")
	require.NotContains(t, stderr.String(), "IDEM_RETENTION")
	require.NotContains(t, stderr.String(), "IDEM_TEST")
}
