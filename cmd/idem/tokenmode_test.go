package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// The client commands' --token-file and the file of idem token check were
// read without a word when other users could read them, while idem serve
// warns of its secret files (--node-token-file, --auth-file) so. They are
// warned of the same way now, and a file of mode 0600 says nothing.
func TestLooseTokenFilesOfTheClientCommandsAreNamed(t *testing.T) {
	t.Setenv("IDEM_AUTH_TOKEN", "")
	dir := t.TempDir()
	tokenFile, auth := filepath.Join(dir, "t"), filepath.Join(dir, "auth.json")
	require.NoError(t, os.WriteFile(tokenFile, []byte("secret-1\n"), 0o600))
	writeAuth(t, auth, entry("ops", "secret-1", "admin"))
	require.NoError(t, os.Chmod(auth, 0o600))
	// Nothing listens at --addr: each command fails to connect (exit 1)
	// after reading the token.
	const addr = "127.0.0.13:27709"
	commands := []struct {
		name string
		run  func() (int, string, string)
	}{
		{"idem get", func() (int, string, string) {
			return runClientCmd(t, runGet, "--addr", addr, "--timeout", "2s", "--token-file", tokenFile, "--principal", "p", "--endpoint", "e", "--key", "k")
		}},
		{"idem cluster status", func() (int, string, string) {
			return runClientCmd(t, runCluster, "status", "--addr", addr, "--timeout", "2s", "--token-file", tokenFile)
		}},
		{"idem token check", func() (int, string, string) { return runClientCmd(t, runToken, "check", auth) }},
	}
	for _, c := range commands {
		_, _, stderr := c.run()
		require.NotContains(t, stderr, "by other users", "%s: a file of mode 0600", c.name)
	}
	require.NoError(t, os.Chmod(tokenFile, 0o644))
	require.NoError(t, os.Chmod(auth, 0o664))
	for _, c := range commands {
		code, _, stderr := c.run()
		want := c.name + ": warning: --token-file is readable by other users (whoever reads it can use its bearer token): make it mode 0600 (chmod 600)"
		if c.name == "idem token check" {
			require.Equal(t, 0, code, stderr)
			want = c.name + ": warning: the auth file is readable and writable by other users"
		}
		require.Contains(t, stderr, want, c.name)
	}
}
