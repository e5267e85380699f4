package main

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// A command that reaches a node started with --auth-file without a token,
// or with one the node does not know, says how to give it one in the
// CLI's terms (the flag and the variable), not only the server's
// "Authorization: Bearer" detail, which names no flag.
func TestCommandsSayHowToGiveATokenOn401(t *testing.T) {
	t.Setenv("IDEM_AUTH_TOKEN", "")
	dir := t.TempDir()
	auth := filepath.Join(dir, "auth.json")
	writeAuth(t, auth, entry("ops", "admin-1", "admin"))
	httpAddr := freePort(t)
	start(t, filepath.Join(dir, "data"), httpAddr, freePort(t), "--auth-file", auth)

	scope := []string{"--principal", "p", "--endpoint", "e", "--key", "k"}
	for _, c := range []struct {
		name string
		run  func(args []string) (int, string, string)
		ways string
	}{
		{"idem get", func(a []string) (int, string, string) {
			return runClientCmd(t, runGet, append(append([]string{"--addr", httpAddr}, scope...), a...)...)
		}, "--auth-token, --token-file or IDEM_AUTH_TOKEN"},
		{"idem cluster status", func(a []string) (int, string, string) {
			return runClientCmd(t, runCluster, append([]string{"status", "--addr", httpAddr}, a...)...)
		}, "--auth-token, --token-file or IDEM_AUTH_TOKEN"},
		{"idem snapshot save", func(a []string) (int, string, string) {
			return runClientCmd(t, runSnapshot, append([]string{"save", filepath.Join(dir, "b.snap"), "--addr", httpAddr}, a...)...)
		}, "--auth-token, --token-file or IDEM_AUTH_TOKEN"},
		{"idem keys status", func(a []string) (int, string, string) {
			return runClientCmd(t, runKeys, append([]string{"status", "--addr", httpAddr}, a...)...)
		}, "--auth-token, --token-file or IDEM_AUTH_TOKEN"},
	} {
		code, _, stderr := c.run(nil)
		require.Equal(t, 1, code, "%s: %s", c.name, stderr)
		require.Contains(t, stderr, "(code unauthorized, HTTP 401)", c.name)
		require.Contains(t, stderr, c.name+": the node runs with --auth-file: give one of its tokens with "+c.ways, c.name)

		code, _, stderr = c.run([]string{"--auth-token", "not-a-token"})
		require.Equal(t, 1, code, "%s: %s", c.name, stderr)
		require.Contains(t, stderr, c.name+": the token given ("+c.ways+") is not one of the node's", c.name)
	}
	code, _, stderr := runClientCmd(t, runGet, append([]string{"--addr", httpAddr, "--auth-token", "admin-1"}, scope...)...)
	require.Equal(t, 1, code)
	require.Contains(t, stderr, "code not_found")
	require.NotContains(t, stderr, "--auth-file", "a hint on an answer that is not a 401")
}
