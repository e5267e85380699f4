package main

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// --max-response-header-bytes 1TB was taken without a word, where
// --max-response-bytes 1TB is refused past the machine's memory and one
// past what a raft log entry holds is lowered with a warning. The header
// limit is checked as the body's: refused past the memory, lowered past
// 62 MiB (the headers are stored with the body, through one entry) and,
// when given, past --max-request-bytes (they travel in the body of the
// complete request), with a warning naming the flag.
func TestServeMaxResponseHeaderBytesIsLoweredOrRefusedAsTheBodyLimit(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "d")
	validate := func(args ...string) (*serveConfig, error) {
		t.Helper()
		return validatedServe(t, dir, args...)
	}
	for _, tc := range []struct {
		args []string
		want string
		to   int
	}{
		{[]string{"--max-response-header-bytes", "2MiB"}, "--max-response-header-bytes 2097152 lowered to 1048576, the maximum: --max-request-bytes 1048576 allows: a stored response's headers travel in the body of its complete request", 1 << 20},
		{[]string{"--max-response-header-bytes", "100MiB", "--max-request-bytes", "200MiB"}, "--max-response-header-bytes 104857600 lowered to 65011712, the maximum: a response's headers are stored with it through one raft log entry, which holds at most 63 MiB", 62 << 20},
	} {
		c, err := validate(tc.args...)
		require.NoError(t, err, "%v", tc.args)
		require.Equal(t, []string{tc.want}, c.lowered, "%v", tc.args)
		require.Equal(t, tc.to, c.limits.MaxResponseHeaderBytes, "%v", tc.args)
	}
	// What a request can reach is taken as given, and the default is not
	// lowered by a smaller --max-request-bytes.
	for _, args := range [][]string{{"--max-response-header-bytes", "1MiB"}, {"--max-request-bytes", "4KiB"}, {"--max-response-header-bytes", "62MiB", "--max-request-bytes", "100MiB"}} {
		c, err := validate(args...)
		require.NoError(t, err, "%v", args)
		require.Empty(t, c.lowered, "%v", args)
	}

	// Past the memory, a typo: refused, as --max-response-bytes 1TB is,
	// naming the variable that set it.
	if mem := physicalMemory(); mem == 0 || mem >= 1e12 {
		t.Skipf("memory %d: 1TB is not past it", mem)
	}
	t.Setenv("IDEM_MAX_RESPONSE_HEADER_BYTES", "1TB")
	var stdout, stderr bytes.Buffer
	code := run(context.Background(), []string{"serve", "--data-dir", dir, "--http-addr", "127.0.0.14:27741", "--raft-addr", "127.0.0.14:27742"}, &stdout, &stderr)
	require.Equal(t, 2, code, stderr.String())
	first := strings.Split(stderr.String(), "\n")[0]
	require.True(t, strings.HasPrefix(first, "idem serve: --max-response-header-bytes 1TB is more than this machine's memory"), first)
	require.True(t, strings.HasSuffix(first, "(set by $IDEM_MAX_RESPONSE_HEADER_BYTES)"), first)
}
