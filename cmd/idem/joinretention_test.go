package main

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Nodes bootstrapping together compare --retention, but a node joined
// later was let in with another one: started with --retention 1h beside a
// cluster of 24h nodes, it was promoted, and leading the first claim it
// pinned 1h for every node (records expired after 1h while the operator
// had asked for 24h). Until a claim pins the cluster's retention its join
// is now refused, naming both values, whether it asks itself (serve
// --join) or an operator adds it (cluster join, which asks the node).
// Once the retention is pinned the flag changes nothing, and the join
// goes through: a rolling change of --retention after set-retention still
// works.
func TestJoinWithAnotherRetentionIsRefusedUntilPinned(t *testing.T) {
	t.Parallel()
	h1, r1 := freePort(t), freePort(t)
	start(t, t.TempDir(), h1, r1, "--node-id", "n1", "--retention", "24h")
	h2, r2 := freePort(t), freePort(t)
	n2 := launch(t, t.TempDir(), h2, r2, "--node-id", "n2", "--retention", "1h", "--join", h1)
	waitFor(t, 15*time.Second, "n2 logs its refusal", func() (bool, string) {
		return strings.Contains(n2.logs.String(), "retention_mismatch"), ""
	})
	require.Contains(t, n2.logs.String(), "node n2 runs with --retention 1h0m0s but this cluster's nodes run with --retention 24h0m0s")
	_, st := memberAt(t, h1, "n2")
	require.Len(t, st.Nodes, 1, "%+v", st.Nodes)

	// Joined by hand, which sends no retention: the cluster asks the node.
	out, code := cli(t, "join", "--addr", h1, "--id", "n2", "--raft-addr", r2, "--node-http-addr", h2)
	require.Equal(t, 1, code, "%s", out)
	require.Contains(t, out, "retention_mismatch")
	require.Contains(t, out, "--retention 1h0m0s but this cluster's nodes run with --retention 24h0m0s")
	_, st = memberAt(t, h1, "n2")
	require.Len(t, st.Nodes, 1, "%+v", st.Nodes)

	// The first claim pins n1's 24h: n2's own join, retried every
	// second, now goes through, and it is promoted.
	a := call("POST", h1, "/v1/claim", claimReq("first", "c-first"))
	require.Equal(t, 201, a.code, "%s", a)
	waitFor(t, 30*time.Second, "n2 a voter once the retention is pinned", func() (bool, string) {
		m, _ := memberAt(t, h1, "n2")
		return m.Suffrage == "voter", m.Suffrage
	})
	code, body := get(t, h2, "/v1/config")
	require.Equal(t, 200, code, "%s", body)
	require.Contains(t, string(body), `"retention":"24h0m0s"`)
}
