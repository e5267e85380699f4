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
