package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestFlagGivenTwiceIsRefused: the flag package keeps the last of a flag
// given twice, so `idem serve --join a --join b` (two commands pasted
// together) joined through b alone and `--data-dir x --data-dir y` used y
// without a word. A single-value flag given twice is refused, naming it,
// by every command; --header, documented as repeatable, still repeats.
func TestFlagGivenTwiceIsRefused(t *testing.T) {
	dir := t.TempDir()
	x, y := filepath.Join(dir, "x"), filepath.Join(dir, "y")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"serve", "--data-dir", x, "--data-dir", y}, "idem serve: --data-dir is given twice (" + x + ", then " + y + "): give it once"},
		{[]string{"serve", "--data-dir", x, "--join", "127.0.0.13:27701", "--join=127.0.0.13:27703"}, "--join is given twice (127.0.0.13:27701, then 127.0.0.13:27703)"},
		{[]string{"serve", "--data-dir", x, "--insecure", "--insecure=false"}, "--insecure is given twice"},
		{[]string{"get", "--addr", "127.0.0.13:27701", "--addr", "127.0.0.13:27702", "--principal", "p", "--endpoint", "e", "--key", "k"}, "idem get: --addr is given twice"},
		{[]string{"cluster", "status", "--addr", "127.0.0.13:27701", "--timeout", "1s", "--timeout", "2s"}, "idem cluster status: --timeout is given twice (1s, then 2s)"},
		{[]string{"bench", "--addr", ":", "--batch", "8", "--batch", "16"}, "idem bench: --batch is given twice"},
		{[]string{"token", "new", "--name", "a", "--name", "b", "--role", "admin"}, "idem token new: --name is given twice"},
		{[]string{"get", "--auth-token", "idem_secret-one", "--auth-token", "idem_secret-two", "--principal", "p", "--endpoint", "e", "--key", "k"}, "idem get: --auth-token is given twice: give it once"},
		// A claim's fencing token completes or releases its attempt.
		{[]string{"complete", "--token", "idem_secret-1", "--token", "idem_secret-2", "--principal", "p", "--endpoint", "e", "--key", "k", "--status", "200"}, "idem complete: --token is given twice: give it once"},
	} {
		args := tc.args
		if args[0] == "serve" {
			// A setting validate refuses, so that a serve that took the
			// flag given twice stops before starting a node.
			args = append(args, "--http-addr", "127.0.0.13:27701", "--raft-addr", "127.0.0.13:27702", "--bootstrap-expect", "10")
		}
		var stdout, stderr bytes.Buffer
		code := run(context.Background(), args, &stdout, &stderr)
		require.Equal(t, 2, code, "%v: %s", tc.args, stderr.String())
		require.Contains(t, stderr.String(), tc.want, "%v", tc.args)
		require.Empty(t, stdout.String(), "%v", tc.args)
		require.NotContains(t, stderr.String(), "idem_secret", "%v: a token is echoed", tc.args)
		for _, d := range []string{x, y} {
			_, err := os.Stat(d)
			require.ErrorIs(t, err, os.ErrNotExist, "%v created %s", tc.args, d)
		}
	}

	// --header is repeatable: both are taken, and the command goes on to
	// send (to an address nothing listens on: exit 1, not a usage error).
	code, _, stderr := runClientCmd(t, runComplete, "--addr", deadAddr(t), "--timeout", "2s", "--principal", "p", "--endpoint", "e", "--key", "k",
		"--token", "t", "--status", "200", "--header", "A: 1", "--header", "B: 2", "--header", "a: 3")
	require.NotContains(t, stderr, "given twice")
	require.Equal(t, 1, code, stderr)
}
