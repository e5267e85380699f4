package raftfsm

import (
	"os/exec"
	"testing"

	"github.com/stretchr/testify/require"
)

// The command a removed node logs to add it back printed an IPv6 address
// bare (--raft-addr [::1]:7071): a glob pattern, which zsh refuses ("no
// matches found") and bash expands when a file matches. Every word of it
// reaches the command as printed.
func TestAddBackCommandQuotesIPv6(t *testing.T) {
	cmd := AddBackCommand(NodeInfo{ID: "n4", RaftAddr: "[::1]:7071", HTTPAddr: "[fe80::1%eth0]:7070"}, "[2001:db8::1]:7070")
	require.Equal(t, "idem cluster join --id n4 --raft-addr '[::1]:7071' --node-http-addr '[fe80::1%eth0]:7070' --addr '[2001:db8::1]:7070'", cmd)
	require.Equal(t, "idem cluster join --id n4 --raft-addr 10.0.0.4:7071 --node-http-addr n4.example.com:7070 --addr MEMBER_HTTP_ADDR",
		AddBackCommand(NodeInfo{ID: "n4", RaftAddr: "10.0.0.4:7071", HTTPAddr: "n4.example.com:7070"}, ""))
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skip("no sh")
	}
	for _, w := range []string{"[::1]:7071", "it's", "a b", "$x`y`", ""} {
		out, err := exec.Command(sh, "-c", "printf %s "+ShellWord(w)).Output()
		require.NoError(t, err)
		require.Equal(t, w, string(out))
	}
}
