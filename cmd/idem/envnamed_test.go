package main

import (
	"bytes"
	"context"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A value an IDEM_* variable gave that the checks after parsing refused
// was named only by its flag: IDEM_NODE_ID=" n1" idem serve said
// `--node-id " n1" must be 1-64 letters...`, a flag the command line did
// not hold, while a value that did not parse said $IDEM_NODE_ID. Every
// line of a refused start names the variable that set a flag it names.
func TestServeRefusalNamesTheVariableThatSetTheFlag(t *testing.T) {
	notEmpty := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(notEmpty, "x"), nil, 0o644))
	for _, tc := range []struct {
		env, v, want string
	}{
		{"IDEM_NODE_ID", " n1", `idem serve: --node-id " n1" must be 1-64 letters, digits, '.', '_' or '-' (set by $IDEM_NODE_ID)`},
		{"IDEM_SCOPE", "Endpoint", `idem serve: --scope "Endpoint" must be endpoint or principal (set by $IDEM_SCOPE)`},
		{"IDEM_MAX_LEASE", "10ms", `idem serve: --lease 30s must be between --min-lease 100ms and --max-lease 10ms (set by $IDEM_MAX_LEASE)`},
		{"IDEM_DATA_DIR", notEmpty, "(set by $IDEM_DATA_DIR)"},
	} {
		t.Run(tc.env, func(t *testing.T) {
			t.Setenv(tc.env, tc.v)
			args := []string{"serve", "--http-addr", freePort(t), "--raft-addr", freePort(t)}
			if tc.env != "IDEM_DATA_DIR" {
				args = append(args, "--data-dir", filepath.Join(t.TempDir(), "d"))
			}
			var stdout, stderr bytes.Buffer
			code := run(context.Background(), args, &stdout, &stderr)
			require.Equal(t, 2, code, stderr.String())
			first := strings.Split(stderr.String(), "\n")[0]
			if strings.HasPrefix(tc.want, "idem serve: ") {
				require.Equal(t, tc.want, first)
			} else {
				require.True(t, strings.HasPrefix(first, "idem serve: --data-dir ") && strings.HasSuffix(first, tc.want), first)
			}
		})
	}
	// A flag given on the command line is not said to come from its
	// variable, set or not.
	t.Setenv("IDEM_NODE_ID", "n1")
	var stdout, stderr bytes.Buffer
	code := run(context.Background(), []string{"serve", "--node-id", " n1", "--data-dir", filepath.Join(t.TempDir(), "d"), "--http-addr", freePort(t), "--raft-addr", freePort(t)}, &stdout, &stderr)
	require.Equal(t, 2, code, stderr.String())
	require.NotContains(t, stderr.String(), "IDEM_NODE_ID")
}

// IDEM_RETENTON=48h (a letter dropped) was ignored without a word: the
// node kept its 24h retention, where --retenton is refused. A variable one
// or two letters from one of serve's is named at start, with the one
// meant; the other commands' variables (IDEM_ADDR, IDEM_TEST_IP) are not.
func TestServeNamesAMisspeltVariable(t *testing.T) {
	fs := flag.NewFlagSet("idem serve", flag.ContinueOnError)
	serveFlags(fs)
	notes := misspeltVariables(fs, []string{"IDEM_RETENTON=48h", "IDEM_ADDR=x", "IDEM_TEST_IP=127.0.0.9", "IDEM_AUTH_TOKEN=t", "IDEM_LEASE=30s", "IDEM_MAX_CONN=5", "PATH=/bin"})
	require.Equal(t, []string{
		"$IDEM_MAX_CONN is set but is not a variable of idem serve, and is ignored: did you mean $IDEM_MAX_CONNS? (--max-conns)",
		"$IDEM_RETENTON is set but is not a variable of idem serve, and is ignored: did you mean $IDEM_RETENTION? (--retention)",
	}, notes)

	t.Setenv("IDEM_RETENTON", "48h")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	var stdout, stderr bytes.Buffer
	run(ctx, []string{"serve", "--data-dir", filepath.Join(t.TempDir(), "d"), "--http-addr", freePort(t), "--raft-addr", freePort(t)}, &stdout, &stderr)
	require.Contains(t, stderr.String(), "did you mean $IDEM_RETENTION?")
}

// The files serve reads once its flags are checked (the key, auth, node
// token and TLS files) were named only by their flag when an IDEM_*
// variable gave a path that is not there: IDEM_AUTH_FILE=noauth.json idem
// serve said "--auth-file: open noauth.json: ...", a flag the command line
// did not hold. The refusal names the variable, as the checks before it do.
func TestServeFileRefusalNamesTheVariableThatSetTheFlag(t *testing.T) {
	dir := t.TempDir()
	missing := filepath.Join(dir, "missing")
	cert, key := filepath.Join(dir, "n1.pem"), filepath.Join(dir, "n1-key.pem")
	var out bytes.Buffer
	require.Equal(t, 0, run(context.Background(), []string{"tls", "ca", "--dir", dir}, &out, &out), out.String())
	require.Equal(t, 0, run(context.Background(), []string{"tls", "cert", "--dir", dir, "--name", "n1", "--ip", "127.0.0.1"}, &out, &out), out.String())
	// Every start below is refused before it listens: the addresses are
	// only ever checked, never held.
	httpAddr, raftAddr := freePort(t), freePort(t)
	for _, tc := range []struct {
		env  map[string]string
		want string
	}{
		{map[string]string{"IDEM_AUTH_FILE": missing}, "idem serve: --auth-file: open " + missing + ": no such file or directory (set by $IDEM_AUTH_FILE)"},
		{map[string]string{"IDEM_NODE_TOKEN_FILE": missing}, "idem serve: --node-token-file: open " + missing + ": no such file or directory (set by $IDEM_NODE_TOKEN_FILE)"},
		{map[string]string{"IDEM_ENCRYPTION_KEY_FILE": missing}, "(set by $IDEM_ENCRYPTION_KEY_FILE)"},
		{map[string]string{"IDEM_TLS_CERT_FILE": cert, "IDEM_TLS_KEY_FILE": key, "IDEM_TLS_CA_FILE": missing}, "idem serve: --tls-ca-file: open " + missing + ": no such file or directory (set by $IDEM_TLS_CA_FILE)"},
	} {
		for _, v := range []string{"IDEM_AUTH_FILE", "IDEM_NODE_TOKEN_FILE", "IDEM_ENCRYPTION_KEY_FILE", "IDEM_TLS_CERT_FILE", "IDEM_TLS_KEY_FILE", "IDEM_TLS_CA_FILE"} {
			t.Setenv(v, tc.env[v])
			if tc.env[v] == "" {
				os.Unsetenv(v)
			}
		}
		var stdout, stderr bytes.Buffer
		code := run(context.Background(), []string{"serve", "--data-dir", filepath.Join(t.TempDir(), "d"), "--http-addr", httpAddr, "--raft-addr", raftAddr}, &stdout, &stderr)
		require.Equal(t, 2, code, "a value refused: %s", stderr.String()) // the auth, token and key files' exited 1
		first := strings.Split(strings.TrimSpace(stderr.String()), "\n")
		last := first[len(first)-1]
		if strings.HasPrefix(tc.want, "idem serve: ") {
			require.Equal(t, tc.want, last, "%v", tc.env)
		} else {
			require.True(t, strings.HasPrefix(last, "idem serve: --encryption-key-file: ") && strings.HasSuffix(last, tc.want), last)
		}
	}
}
