package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idem-store/idem/client"
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
	addr := deadAddr(t)
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

// A token no node could read (2 MiB: a node reads at most 1 MiB of request
// headers) was sent, and the 431 or dropped connection that came back
// was reported as an unknown outcome. Each command refuses it before any
// request, naming where it came from.
func TestTokenTooLargeForAnyNodeIsRefusedNamingItsSource(t *testing.T) {
	t.Setenv("IDEM_AUTH_TOKEN", "")
	big := strings.Repeat("t", 2<<20)
	file := filepath.Join(t.TempDir(), "t")
	require.NoError(t, os.WriteFile(file, []byte(big+"\n"), 0o600))
	addr := deadAddr(t) // never reached
	scope := []string{"--principal", "p", "--endpoint", "e", "--key", "k"}
	for _, tc := range []struct {
		name string
		run  func() (int, string, string)
		want string
	}{
		{"get --token-file", func() (int, string, string) {
			return runClientCmd(t, runGet, append([]string{"--addr", addr, "--token-file", file}, scope...)...)
		}, "idem get: --token-file " + file + ": a line is longer than 65536 bytes, more than any token a node can be sent"},
		{"get --token-file of a token just too long", func() (int, string, string) {
			require.NoError(t, os.WriteFile(file, []byte(big[:client.MaxTokenBytes+1]+"\n"), 0o600))
			return runClientCmd(t, runGet, append([]string{"--addr", addr, "--token-file", file}, scope...)...)
		}, "idem get: --token-file " + file + ": the token is 65537 bytes, more than 65536"},
		{"get --auth-token", func() (int, string, string) {
			return runClientCmd(t, runGet, append([]string{"--addr", addr, "--auth-token", big}, scope...)...)
		}, "idem get: --auth-token: the token is 2097152 bytes"},
		{"cluster status $IDEM_AUTH_TOKEN", func() (int, string, string) {
			t.Setenv("IDEM_AUTH_TOKEN", big)
			defer t.Setenv("IDEM_AUTH_TOKEN", "")
			return runClientCmd(t, runCluster, "status", "--addr", addr)
		}, "idem cluster status: $IDEM_AUTH_TOKEN: the token is 2097152 bytes"},
	} {
		code, _, stderr := tc.run()
		require.Equal(t, 2, code, "%s: %s", tc.name, stderr)
		require.Contains(t, stderr, tc.want, tc.name)
		require.NotContains(t, stderr, "nothing listens", "%s: refused before any request", tc.name)
	}
}
