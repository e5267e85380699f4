package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A node started as MEMBERSHIP.md's "replacing a member" shows it, without
// the --auth-file and --node-token-file the cluster's nodes run with (a doc
// walk, copy-pasting at 3 am), logged only the member's own answer: "join
// refused; retrying every second ... a valid Authorization: Bearer token is
// required", once, and waited for ever without naming the flags it lacked.
// It now names them; so does a node with --auth-file and no node token, and
// one whose node token the member's auth file does not list.
func TestJoinRefusedForItsTokenNamesTheFlags(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	const nodeTok = "node-token-0123456789"
	auth := filepath.Join(dir, "auth.json")
	writeAuth(t, auth, entry("nodes", nodeTok, "admin"))
	nodeToken := filepath.Join(dir, "node.token")
	require.NoError(t, os.WriteFile(nodeToken, []byte(nodeTok+"\n"), 0o600))
	otherAuth, otherToken := filepath.Join(dir, "other.json"), filepath.Join(dir, "other.token")
	writeAuth(t, otherAuth, entry("nodes", "other-token-0123456789", "admin"))
	require.NoError(t, os.WriteFile(otherToken, []byte("other-token-0123456789\n"), 0o600))

	h1, r1 := freePort(t), freePort(t)
	start(t, filepath.Join(dir, "n1"), h1, r1, "--node-id", "n1", "--auth-file", auth, "--node-token-file", nodeToken)

	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"no auth flags", nil, "start this node with the --auth-file and --node-token-file the other nodes run with"},
		{"no node token", []string{"--auth-file", auth}, "start this node with the --node-token-file the other nodes run with"},
		{"another node token", []string{"--auth-file", otherAuth, "--node-token-file", otherToken}, "does not list the token of this node's --node-token-file"},
	} {
		h, r := freePort(t), freePort(t)
		id := "n" + strings.ReplaceAll(tc.name, " ", "-")
		p := launch(t, filepath.Join(dir, id), h, r, append([]string{"--node-id", id, "--join", h1}, tc.args...)...)
		waitFor(t, 20*time.Second, tc.name+": the refusal names the flags", func() (bool, string) {
			logs := p.logs.String()
			return strings.Contains(logs, "join refused") && strings.Contains(logs, tc.want), tail(logs)
		})
		p.cmd.Process.Kill()
		p.wait()
	}
}
