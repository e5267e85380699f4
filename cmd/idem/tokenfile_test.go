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

// A removed node logs its add-back command with its --node-token-file as
// the client's --token-file, so the two must read a file alike. A file
// that serve took (a UTF-8 byte order mark, as Windows editors save it)
// sent the mark inside the client's token: 401 "not one of the node's";
// and a file of two tokens, which serve refuses, sent the first one.
func TestClientTokenFileReadsAsNodeTokenFile(t *testing.T) {
	dir := t.TempDir()
	bom := filepath.Join(dir, "bom.token")
	require.NoError(t, os.WriteFile(bom, []byte("\ufeffadmin-1\n"), 0o600))
	tok, err := readTokenFile("--token-file", bom)
	require.NoError(t, err)
	require.Equal(t, "admin-1", tok)

	two := filepath.Join(dir, "two.token")
	require.NoError(t, os.WriteFile(two, []byte("# nodes\napp-1\n\nadmin-1\n"), 0o600))
	_, err = readTokenFile("--token-file", two)
	require.EqualError(t, err, "--token-file "+two+" holds two tokens (lines 2 and 4); a token file holds one token, on one line (blank lines and # comments aside)")
}
