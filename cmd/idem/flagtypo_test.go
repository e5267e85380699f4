package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// A misspelt flag, copied from a note at 3 am, was answered "flag provided
// but not defined: -adr": one dash where two were typed, and no word of
// the flag meant. It names the flag as typed and the closest one, or the
// one it is with "node-" added or taken away.
func TestMisspeltFlagNamesTheFlagMeant(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"get", "--adr", "127.0.0.1:1", "--principal", "p", "--endpoint", "e", "--key", "k"}, "idem get: --adr is not a flag of this command: did you mean --addr?"},
		{[]string{"recover", "--data-dir", "d", "--node-id", "n1", "--peer", "n1=127.0.0.1:7071"}, "idem recover: --peer is not a flag of this command: did you mean --peers? (see idem recover --help)"},
		{[]string{"snapshot", "save", "f.snap", "--foce"}, "idem snapshot save: --foce is not a flag of this command: did you mean --force? (see idem snapshot --help)"},
		{[]string{"cluster", "status", "--zzzzzz"}, "idem cluster status: --zzzzzz is not a flag of this command (see idem cluster --help)"},
		// idem serve's words for a node's own flags, where cluster join and
		// remove name another node's: five edits away, they were named as
		// no flag at all (an operator walk).
		{[]string{"cluster", "remove", "--addr", "127.0.0.1:1", "--node-id", "n3"}, "idem cluster remove: --node-id is not a flag of this command: did you mean --id? (see idem cluster --help)"},
		{[]string{"cluster", "join", "--addr", "127.0.0.1:1", "--id", "n3", "--raft-addr", "127.0.0.3:7071", "--http-addr", "127.0.0.3:7070"}, "idem cluster join: --http-addr is not a flag of this command: did you mean --node-http-addr? (see idem cluster --help)"},
		{[]string{"serve", "--id", "n1"}, "idem serve: --id is not a flag of this command: did you mean --node-id?"},
		{[]string{"snapshot", "restore", "f.snap", "--data-dir", "d", "--id", "n1"}, "idem snapshot restore: --id is not a flag of this command: did you mean --node-id? (see idem snapshot --help)"},
		// A flag of idem serve given to the command that writes its data
		// dir was named as no flag at all (a walk).
		{[]string{"snapshot", "restore", "f.snap", "--data-dir", "d", "--node-id", "n1", "--raft-addr", "127.0.0.1:7071", "--http-addr", "127.0.0.1:7070"}, "idem snapshot restore: --http-addr is a flag of idem serve, not of this command: give it to idem serve when you start the node on the data dir; nothing was done (see idem snapshot --help)"},
		{[]string{"recover", "--data-dir", "d", "--node-id", "n1", "--raft-addr", "127.0.0.1:7071"}, "idem recover: --raft-addr is a flag of idem serve, not of this command: give this node's new raft address in --peers (ID=RAFTADDR, this node included), and the same as --raft-addr to idem serve when you start it; nothing was done (see idem recover --help)"},
		// The flag meant is one the subcommand reads: status was asked
		// "did you mean --node-http-addr?", a flag of join it then refused.
		{[]string{"cluster", "status", "--http-addr", "127.0.0.1:7070"}, "idem cluster status: --http-addr is not a flag of this command: did you mean --addr? (see idem cluster --help)"},
		{[]string{"cluster", "status", "--node-id", "n1"}, "idem cluster status: --node-id is not a flag of this command (--id is a flag of join, remove and transfer-leadership) (see idem cluster --help)"},
		{[]string{"snapshot", "save", "f.snap", "--data-dr", "d"}, "idem snapshot save: --data-dr is not a flag of this command (--data-dir is a flag of restore) (see idem snapshot --help)"},
		{[]string{"get", "--http-addr", "127.0.0.1:7070", "--principal", "p", "--endpoint", "e", "--key", "k"}, "idem get: --http-addr is not a flag of this command: did you mean --addr?"},
	} {
		var stdout, stderr bytes.Buffer
		code := run(context.Background(), tc.args, &stdout, &stderr)
		require.Equal(t, 2, code, "%v: %s", tc.args, stderr.String())
		require.Equal(t, tc.want, strings.Split(stderr.String(), "\n")[0], "%v", tc.args)
		require.NotContains(t, stderr.String(), "not defined: -", "%v", tc.args)
		require.Empty(t, stdout.String(), "%v", tc.args)
	}
}

// `idem serve --insecure false` set --insecure and left "false" as an
// argument, refused as unexpected without a word of why: a true/false
// flag takes its value only after '='. The refusal says so.
func TestBoolFlagValueAfterASpaceSaysUseEquals(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"serve", "--insecure", "false"}, `idem serve: unexpected argument "false": a true/false flag takes its value after '=': --insecure=false`},
		{[]string{"cluster", "status", "--json", "true"}, `idem cluster status: unexpected argument "true" (a true/false flag takes its value after '=': --json=true)`},
		{[]string{"bench", "--quiet", "false"}, `idem bench: unexpected argument "false": a true/false flag takes its value after '=': --quiet=false`},
	} {
		var stdout, stderr bytes.Buffer
		code := run(context.Background(), tc.args, &stdout, &stderr)
		require.Equal(t, 2, code, "%v: %s", tc.args, stderr.String())
		require.Equal(t, tc.want, strings.Split(stderr.String(), "\n")[0], "%v", tc.args)
	}
}
