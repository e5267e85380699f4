package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// A documentation walk gave a token file's name where the token goes
// (--auth-token node.token; IDEM_AUTH_TOKEN=app.token alike) and was told
// only that "the token given ... is not one of the node's", as of a token
// the auth file lacks. The commands now say that it is a file and name
// --token-file.
func TestAuthTokenThatNamesAFileSaysSo(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	const nodeTok = "node-token-0123456789"
	auth := filepath.Join(dir, "auth.json")
	writeAuth(t, auth, entry("nodes", nodeTok, "admin"))
	nodeToken := filepath.Join(dir, "node.token")
	require.NoError(t, os.WriteFile(nodeToken, []byte(nodeTok+"\n"), 0o600))
	h, r := freePort(t), freePort(t)
	start(t, filepath.Join(dir, "n1"), h, r, "--node-id", "n1", "--auth-file", auth, "--node-token-file", nodeToken)

	for _, args := range [][]string{
		{"get", "--addr", h, "--auth-token", nodeToken, "--principal", "p", "--endpoint", "e", "--key", "k"},
		{"cluster", "status", "--addr", h, "--auth-token", nodeToken},
		{"keys", "status", "--addr", h, "--auth-token", nodeToken},
		{"snapshot", "save", "--addr", h, "--auth-token", nodeToken, filepath.Join(dir, "backup.snap")},
	} {
		out, err := exec.Command(binary, args...).CombinedOutput()
		require.Error(t, err, "%s", out)
		require.Contains(t, string(out), "is a file: --auth-token and IDEM_AUTH_TOKEN take the token itself; give the file as --token-file "+nodeToken, "%v", args)
	}
	// The token itself, wrong: no word of a file.
	out, err := exec.Command(binary, "cluster", "status", "--addr", h, "--auth-token", "not-a-token-0123456789").CombinedOutput()
	require.Error(t, err, "%s", out)
	require.Contains(t, string(out), "is not one of the node's")
	require.NotContains(t, string(out), "is a file")
}
