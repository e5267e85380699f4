package main

import (
	"bytes"
	"context"
	"flag"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// --max-scope-bytes, --max-id-bytes and --max-batch-ops had no upper
// bound: a value no request could reach (a key whose lookup URL is over
// the 1 MiB a node reads of request headers, a claim_id longer than the
// body that carries it, more ops than a body holds) was taken without a
// word. They are refused at start with the flag and its maximum.
func TestServeRefusesLimitsNoRequestCanReach(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "d")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--max-scope-bytes", "65537"}, "--max-scope-bytes 65537 is more than the maximum, 65536 (64KiB)"},
		{[]string{"--max-scope-bytes", "1MiB", "--max-request-bytes", "2MiB"}, "--max-scope-bytes 1048576 is more than the maximum, 65536"},
		{[]string{"--max-scope-bytes", "4KiB", "--max-request-bytes", "1KiB"}, "--max-scope-bytes 4096 is more than 1024, the maximum --max-request-bytes 1024 allows"},
		{[]string{"--max-id-bytes", "2MiB"}, "--max-id-bytes 2097152 is more than 1048576, the maximum --max-request-bytes 1048576 allows"},
		{[]string{"--max-batch-ops", "19418"}, "--max-batch-ops 19418 is more than 19417, the maximum --max-request-bytes 1048576 allows"},
		{[]string{"--max-batch-ops", "256", "--max-request-bytes", "8KiB"}, "--max-batch-ops 256 is more than 151, the maximum --max-request-bytes 8192 allows"},
		// A response is stored through one raft log entry, which raft-wal
		// reads back only up to 64 MiB.
		{[]string{"--max-response-bytes", "100MiB", "--max-request-bytes", "200MiB"}, "--max-response-bytes 104857600 is more than the maximum, 65011712 (62MiB)"},
	} {
		// --bootstrap-expect 10 is refused too: a serve that took the
		// limit stops before starting a node.
		args := append([]string{"serve", "--data-dir", dir, "--http-addr", "127.0.0.13:27731", "--raft-addr", "127.0.0.13:27732", "--bootstrap-expect", "10"}, tc.args...)
		var stdout, stderr bytes.Buffer
		code := run(context.Background(), args, &stdout, &stderr)
		require.Equal(t, 2, code, "%v: %s", tc.args, stderr.String())
		require.Contains(t, stderr.String(), tc.want, "%v", tc.args)
		_, err := os.Stat(dir)
		require.ErrorIs(t, err, os.ErrNotExist)
	}

	// What a request can reach is taken, and a limit checked against
	// --max-request-bytes is so only when given: lowering the body limit
	// does not make another flag's default an error.
	for _, args := range [][]string{
		{"--max-scope-bytes", "64KiB", "--max-id-bytes", "1MiB", "--max-batch-ops", "19417"},
		{"--max-request-bytes", "8KiB"},
		{"--max-request-bytes", "200"},
		{"--max-batch-ops", "151", "--max-request-bytes", "8KiB"},
		{"--max-response-bytes", "62MiB", "--max-request-bytes", "100MiB"},
	} {
		fs := flag.NewFlagSet("idem serve", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		c := serveFlags(fs)
		set, err := parseWithEnv(fs, append([]string{"--data-dir", dir, "--http-addr", "127.0.0.13:27731", "--raft-addr", "127.0.0.13:27732"}, args...))
		require.NoError(t, err)
		c.given = set
		require.NoError(t, c.validate(), "%v", args)
	}
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
