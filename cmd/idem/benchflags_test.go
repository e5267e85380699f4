package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// idem bench checked most of its flags only once the nodes' /healthz had
// answered: against a node that was down, --concurrency 0 said the node's
// /healthz failed (exit 1), and --cpuprofile had already truncated its
// file. --ops -1 was taken as not given and the run went on for
// --duration. Each is refused first, naming the flag, with status 2, and
// nothing written.
func TestBenchRefusesBadFlagsBeforeAskingTheNodes(t *testing.T) {
	prof := filepath.Join(t.TempDir(), "cpu.prof")
	require.NoError(t, os.WriteFile(prof, []byte("keep"), 0o644))
	down := freePort(t) // nothing listens there
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--concurrency", "0"}, "idem bench: --concurrency must be at least 1"},
		{[]string{"--ops", "-1"}, "idem bench: --ops -1 must not be negative"},
		{[]string{"--principals", "0"}, "idem bench: --principals must be at least 1"},
		{[]string{"--key-bytes", "3"}, "idem bench: --key-bytes must be 16..255"},
		{[]string{"--warmup", "-1s"}, "idem bench: --warmup must not be negative"},
	} {
		args := append([]string{"bench", "--quiet", "--addr", down, "--cpuprofile", prof}, tc.args...)
		var stdout, stderr bytes.Buffer
		code := run(context.Background(), args, &stdout, &stderr)
		require.Equal(t, 2, code, "%v: %s", tc.args, stderr.String())
		require.True(t, strings.HasPrefix(stderr.String(), tc.want), "%v: %s", tc.args, stderr.String())
		require.NotContains(t, stderr.String(), "healthz", "%v", tc.args)
		b, err := os.ReadFile(prof)
		require.NoError(t, err)
		require.Equal(t, "keep", string(b), "%v: --cpuprofile was written", tc.args)
	}
}

// idem bench reads IDEM_ADDR and IDEM_AUTH_TOKEN as every client command
// does, but its --help named neither, where the others say (env ...).
func TestBenchHelpNamesItsVariables(t *testing.T) {
	var stdout, stderr bytes.Buffer
	require.Equal(t, 0, run(context.Background(), []string{"bench", "--help"}, &stdout, &stderr))
	help := stdout.String() + stderr.String()
	for flag, env := range map[string]string{"--addr": "IDEM_ADDR", "--auth-token": "IDEM_AUTH_TOKEN"} {
		i := strings.Index(help, "\n  "+flag+" ")
		require.GreaterOrEqual(t, i, 0, "%s not in --help:\n%s", flag, help)
		entry := help[i+1:]
		if j := strings.Index(entry, "\n  --"); j >= 0 {
			entry = entry[:j]
		}
		require.Contains(t, entry, "env "+env, "%s", flag)
	}
}
