package main

import (
	"bytes"
	"context"
	"testing"

	"github.com/stretchr/testify/require"
)

// A node id pasted with a trailing space (--id "n4 ") went to the node:
// remove answered "no such member: n4  is not in the cluster (members: n1,
// …, n4)", the space unseen and n4 listed, and a transfer's --from "n2 "
// answered "n2 leads, not n2 : nothing was handed over". Each such flag
// is refused before any request, exit 2, naming the flag and the value
// quoted.
func TestClusterIDFlagsWithASpaceAreRefused(t *testing.T) {
	addr := freePort(t) // nothing listens: a refusal must come first
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"remove", "--id", "n4 "}, `--id "n4 " is not a node id`},
		{[]string{"transfer-leadership", "--from", "n2 "}, `--from "n2 " is not a node id`},
		{[]string{"transfer-leadership", "--id", " n3"}, `--id " n3" is not a node id`},
		{[]string{"join", "--id", "n5\t", "--raft-addr", "127.0.0.5:7071", "--node-http-addr", "127.0.0.5:7070"}, `--id "n5\t" is not a node id`},
	} {
		var stdout, stderr bytes.Buffer
		code := run(context.Background(), append(append([]string{"cluster"}, tc.args...), "--addr", addr), &stdout, &stderr)
		require.Equal(t, 2, code, "%v: stdout %s stderr %s", tc.args, stdout.String(), stderr.String())
		require.Contains(t, stderr.String(), tc.want, "%v", tc.args)
		require.Contains(t, stderr.String(), "a space was pasted with it", "%v", tc.args)
		require.NotContains(t, stderr.String(), "nothing listens", "%v: a request was made", tc.args)
	}
	var stdout, stderr bytes.Buffer
	code := run(context.Background(), []string{"cluster", "remove", "--id", "n/4", "--addr", addr}, &stdout, &stderr)
	require.Equal(t, 2, code, "stderr %s", stderr.String())
	require.Contains(t, stderr.String(), `--id "n/4" is not a node id`)
	require.NotContains(t, stderr.String(), "pasted")
}
