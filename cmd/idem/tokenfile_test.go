package main

import (
	"bytes"
	"context"
	"log/slog"
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

// An operator walk: --auth-file and --node-token-file swapped, the
// README's nodes.entry given as a --token-file, or idem token new's whole
// output redirected into the file. The JSON was read as a token: the CLI
// said the token was not the node's, and serve offered an auth file entry
// for the SHA-256 of the JSON, which would have made the file itself the
// node token. The output of token new was "two tokens (lines 1 and 2)".
// Each is named for what it is, by serve and the client commands alike.
func TestTokenFileHoldingAnAuthFileOrTokenNewsOutputIsNamed(t *testing.T) {
	dir := t.TempDir()
	var out, stderr bytes.Buffer
	require.Equal(t, 0, run(context.Background(), []string{"token", "new", "--name", "nodes", "--role", "admin"}, &out, &stderr), stderr.String())
	lines := strings.Split(out.String(), "\n")
	entryLine := strings.TrimSpace(lines[len(lines)-2])
	require.True(t, strings.HasPrefix(entryLine, `{"name":"nodes"`), "%q", out.String())
	files := map[string]struct{ body, want string }{
		"auth.json":   {`{"tokens":[` + entryLine + "]}\n", "holds JSON, an auth file or an auth file entry"},
		"pretty.json": {"{\n  \"tokens\": [\n    " + entryLine + "\n  ]\n}\n", "holds JSON, an auth file or an auth file entry"},
		"nodes.entry": {entryLine + "\n", "holds JSON, an auth file or an auth file entry"},
		"node.token":  {out.String(), "holds the whole output of idem token new (the token is line 2"},
	}
	for name, f := range files {
		path := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(path, []byte(f.body), 0o600))
		_, err := readTokenFile("--token-file", path)
		require.ErrorContains(t, err, "--token-file "+path+" "+f.want)
		_, _, err = loadAuth(&serveConfig{nodeTokenFile: path}, slog.New(slog.DiscardHandler))
		require.ErrorContains(t, err, "--node-token-file "+path+": "+f.want)
	}
	// A token that only looks like JSON at its start is still a token.
	odd := filepath.Join(dir, "odd.token")
	require.NoError(t, os.WriteFile(odd, []byte("{admin-1\n"), 0o600))
	tok, err := readTokenFile("--token-file", odd)
	require.NoError(t, err)
	require.Equal(t, "{admin-1", tok)
}
