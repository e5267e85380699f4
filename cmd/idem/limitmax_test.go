package main

import (
	"bytes"
	"context"
	"flag"
	"io"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// --max-scope-bytes, --max-id-bytes and --max-batch-ops had no upper
// bound: a value no request could reach (a key whose lookup URL is over
// the 1 MiB a node reads of request headers, a claim_id longer than the
// body that carries it, more ops than a body holds) was taken without a
// word, and --max-response-bytes over what a raft log entry holds made a
// node that could not start on its log. They are lowered to their maximum
// at start, with a warning naming the flag and the maximum: not refused,
// since a unit file that an earlier release took must still start in a
// rolling upgrade (refused, the node stayed down mid-upgrade).
// validatedServe parses serve's flags as idem serve does (IDEM_*
// variables included), with --data-dir dir and addresses of its own, then
// args, and validates them: the config and validate's error. Nothing
// listens; nothing is made.
func validatedServe(t *testing.T, dir string, args ...string) (*serveConfig, error) {
	t.Helper()
	fs := flag.NewFlagSet("idem serve", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	c := serveFlags(fs)
	set, err := parseWithEnv(fs, append([]string{"--data-dir", dir, "--http-addr", "127.0.0.13:27731", "--raft-addr", "127.0.0.13:27732"}, args...))
	require.NoError(t, err, "%v", args)
	c.given = set
	return c, c.validate()
}

func TestServeLowersLimitsNoRequestCanReach(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "d")
	validated := func(args ...string) *serveConfig {
		t.Helper()
		c, err := validatedServe(t, dir, args...)
		require.NoError(t, err, "%v", args)
		return c
	}
	for _, tc := range []struct {
		args []string
		want string
		got  func(c *serveConfig) int64
		to   int64
	}{
		{[]string{"--max-scope-bytes", "65537"}, "--max-scope-bytes 65537 lowered to 65536, the maximum", func(c *serveConfig) int64 { return int64(c.limits.MaxScopeBytes) }, 65536},
		{[]string{"--max-scope-bytes", "1MiB", "--max-request-bytes", "2MiB"}, "--max-scope-bytes 1048576 lowered to 65536", func(c *serveConfig) int64 { return int64(c.limits.MaxScopeBytes) }, 65536},
		{[]string{"--max-scope-bytes", "4KiB", "--max-request-bytes", "1KiB"}, "--max-scope-bytes 4096 lowered to 1024, the maximum: --max-request-bytes 1024 allows", func(c *serveConfig) int64 { return int64(c.limits.MaxScopeBytes) }, 1024},
		{[]string{"--max-id-bytes", "2MiB"}, "--max-id-bytes 2097152 lowered to 1048576, the maximum: --max-request-bytes 1048576 allows", func(c *serveConfig) int64 { return int64(c.limits.MaxIDBytes) }, 1 << 20},
		{[]string{"--max-batch-ops", "19418"}, "--max-batch-ops 19418 lowered to 19417, the maximum: --max-request-bytes 1048576 allows", func(c *serveConfig) int64 { return int64(c.maxBatchOps) }, 19417},
		{[]string{"--max-batch-ops", "256", "--max-request-bytes", "8KiB"}, "--max-batch-ops 256 lowered to 151", func(c *serveConfig) int64 { return int64(c.maxBatchOps) }, 151},
		// A response is stored through one raft log entry, which raft-wal
		// reads back only up to 64 MiB.
		{[]string{"--max-response-bytes", "100MiB", "--max-request-bytes", "200MiB"}, "--max-response-bytes 104857600 lowered to 65011712, the maximum", func(c *serveConfig) int64 { return int64(c.limits.MaxResponseBytes) }, 62 << 20},
	} {
		c := validated(tc.args...)
		require.Len(t, c.lowered, 1, "%v", tc.args)
		require.Contains(t, c.lowered[0], tc.want, "%v", tc.args)
		require.Equal(t, tc.to, tc.got(c), "%v", tc.args)
	}

	// What a request can reach is taken as given, and a limit checked
	// against --max-request-bytes is so only when given: lowering the body
	// limit does not lower another flag's default.
	for _, args := range [][]string{
		{"--max-scope-bytes", "64KiB", "--max-id-bytes", "1MiB", "--max-batch-ops", "19417"},
		{"--max-request-bytes", "8KiB"},
		{"--max-request-bytes", "200"},
		{"--max-batch-ops", "151", "--max-request-bytes", "8KiB"},
		{"--max-response-bytes", "62MiB", "--max-request-bytes", "100MiB"},
	} {
		require.Empty(t, validated(args...).lowered, "%v", args)
	}
}

// A unit file of an earlier release with --max-response-bytes 100MiB
// stopped the node (exit 2, naming the flag) in the middle of a rolling
// upgrade: the limit is no refusal now.
func TestServeDoesNotRefuseALimitItLowers(t *testing.T) {
	var stdout, stderr bytes.Buffer
	// --bootstrap-expect 10 is refused, so the run ends before a node
	// starts: its refusal is the only one.
	code := run(context.Background(), []string{"serve", "--data-dir", filepath.Join(t.TempDir(), "d"), "--http-addr", "127.0.0.13:27731", "--raft-addr", "127.0.0.13:27732",
		"--max-response-bytes", "100MiB", "--max-request-bytes", "200MiB", "--bootstrap-expect", "10"}, &stdout, &stderr)
	require.Equal(t, 2, code)
	require.NotContains(t, stderr.String(), "--max-response-bytes", "a lowered limit is not a refusal: %s", stderr.String())
}

// idem bench --batch is the batcher's most ops a request, and the
// batcher cuts requests at 512 KiB: more ops than that holds were never
// sent, and the batcher's queue was made that long (--batch 1000000000
// asked for gigabytes). Refused before the run, naming the maximum.
func TestBenchBatchHasAMaximum(t *testing.T) {
	var stdout, stderr bytes.Buffer
	// --addr ":" is refused too: a bench that took --batch stops before a run.
	code := run(context.Background(), []string{"bench", "--addr", ":", "--batch", "9709"}, &stdout, &stderr)
	require.Equal(t, 2, code, stderr.String())
	require.Contains(t, stderr.String(), "idem bench: --batch 9709 is more than the maximum, 9708")

	stderr.Reset()
	code = run(context.Background(), []string{"bench", "--addr", ":", "--batch", "9708"}, &stdout, &stderr)
	require.Equal(t, 2, code, stderr.String())
	require.NotContains(t, stderr.String(), "--batch", "the maximum itself is taken")
	require.Contains(t, stderr.String(), `--addr ":"`)
}

// idem chaos --batch has the same maximum as idem bench's: its workload
// sends through the same batcher.
func TestChaosBatchHasAMaximum(t *testing.T) {
	var stdout, stderr bytes.Buffer
	code := run(context.Background(), []string{"chaos", "--batch", "9709"}, &stdout, &stderr)
	require.Equal(t, 2, code, stderr.String())
	require.Contains(t, stderr.String(), "idem chaos: --batch 9709 is more than the maximum, 9708")
}
