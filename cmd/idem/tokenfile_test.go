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

// README's auth walk-through runs token new --token-file node.token again
// and says the chain stops at the first line: it stopped with only "open
// node.token: file exists". It says the file is kept and what to do, and
// the file keeps its token.
func TestTokenNewKeepsAnExistingTokenFileAndSaysSo(t *testing.T) {
	file := filepath.Join(t.TempDir(), "node.token")
	var stdout, stderr bytes.Buffer
	require.Equal(t, 0, run(context.Background(), []string{"token", "new", "--name", "nodes", "--role", "admin", "--token-file", file}, &stdout, &stderr), stderr.String())
	before, err := os.ReadFile(file)
	require.NoError(t, err)

	stdout.Reset()
	stderr.Reset()
	require.Equal(t, 1, run(context.Background(), []string{"token", "new", "--name", "nodes", "--role", "admin", "--token-file", file}, &stdout, &stderr))
	require.Equal(t, "idem token new: --token-file "+file+" exists, and a token file is never overwritten (its token may be in use): nothing was made; name a new file", strings.TrimSpace(stderr.String()))
	require.Empty(t, stdout.String(), "no entry for a token nobody holds")
	after, err := os.ReadFile(file)
	require.NoError(t, err)
	require.Equal(t, before, after)
}
