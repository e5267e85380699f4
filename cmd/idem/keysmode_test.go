package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// SECURITY.md says to check each key file of a rotation with idem keys
// status --encryption-key-file before rolling it out, and to keep them
// 0600; its jq recipe makes them with the shell's >, 0644 without the
// umask 077 it sets first. The check passed such a file without a word
// (an ops walk), and only idem serve warned, once the file was on every
// node. It warns now, naming the flag, the file and its mode, as idem
// token check does of an auth file; a file of mode 0600 says nothing.
func TestKeysStatusWarnsOfAKeyFileOthersMayRead(t *testing.T) {
	root := t.TempDir()
	open, closed := filepath.Join(root, "open.json"), filepath.Join(root, "closed.json")
	writeKeyFile(t, closed, "k1")
	b, err := os.ReadFile(closed)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(open, b, 0o600))
	require.NoError(t, os.Chmod(open, 0o644))

	httpAddr := freePort(t)
	start(t, filepath.Join(root, "n1"), httpAddr, freePort(t), "--min-free-disk", "0")
	status := func(file string) string {
		out, err := exec.Command(binary, "keys", "status", "--addr", httpAddr, "--encryption-key-file", file).CombinedOutput()
		require.NoError(t, err, string(out))
		return string(out)
	}
	text := status(open)
	require.Contains(t, text, "idem keys status: warning: --encryption-key-file is readable by other users (it holds the keys that encrypt every record): make it mode 0600", text)
	require.Contains(t, text, "("+open+", mode -rw-r--r--)", text)
	require.NotContains(t, status(closed), "warning", "a key file of mode 0600")
}
