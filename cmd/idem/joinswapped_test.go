package main

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// idem cluster join pasted with --raft-addr and --node-http-addr swapped
// was taken for a non-voter (a voter's join checks that the node answers
// there as itself): a running non-voter not measured yet was moved to
// them and never heard from its leader again (raft sent to its HTTP port,
// the health checks asked its raft port), unhealthy and never promoted,
// until someone repeated the join the right way round. The leader now
// refuses it naming both flags: for a new node that answers at the address
// given as --raft-addr, and for a member recorded at the two addresses the
// other way round, running or not.
func TestClusterJoinWithTheAddressesSwappedIsRefused(t *testing.T) {
	t.Parallel()
	c := threeOnOneIP(t)
	leader := c.leader()
	ip := c.nodes[0].ip
	h4, r4 := freePortOn(t, ip), freePortOn(t, ip)
	// n4 runs but is no member: its own join is refused (another
	// --retention before any claim pinned the cluster's).
	n4 := launch(t, t.TempDir(), h4, r4, "--node-id", "n4", "--join", leader.http, "--retention", "48h", "--min-free-disk", "0")
	waitForLine(t, n4.logs, "retention_mismatch")

	swapped := []string{"join", "--addr", leader.http, "--id", "n4", "--raft-addr", h4, "--node-http-addr", r4}
	wantRefusal := func(out string, code int) {
		t.Helper()
		require.NotEqual(t, 0, code, "%s", out)
		require.Contains(t, out, fmt.Sprintf("--raft-addr %s and --node-http-addr %s of n4 look swapped", h4, r4))
		require.Contains(t, out, fmt.Sprintf("here --raft-addr %s --node-http-addr %s", r4, h4))
	}
	out, code := cli(t, swapped...)
	wantRefusal(out, code)
	m, _ := memberAt(t, leader.http, "n4")
	require.Empty(t, m.ID, "n4 was not added: %+v", m)

	// Added the right way round while stopped, n4 then starts and answers
	// there, healthy (a non-voter the leader keeps one for its --retention).
	require.NoError(t, n4.cmd.Process.Kill())
	n4.wait()
	out, code = cli(t, "join", "--addr", leader.http, "--id", "n4", "--raft-addr", r4, "--node-http-addr", h4)
	require.Equal(t, 0, code, "%s", out)
	n4 = launch(t, t.TempDir(), h4, r4, "--node-id", "n4", "--join", leader.http, "--retention", "48h", "--min-free-disk", "0")
	waitFor(t, 30*time.Second, "n4 healthy at its addresses", func() (bool, string) {
		m, _ := memberAt(t, leader.http, "n4")
		return m.Healthy && m.RaftAddr == r4 && m.HTTPAddr == h4, fmt.Sprintf("%+v", m)
	})
	out, code = cli(t, swapped...)
	wantRefusal(out, code)

	// Stopped, it answers nowhere: the swapped paste still does not move it.
	require.NoError(t, n4.cmd.Process.Kill())
	n4.wait()
	out, code = cli(t, swapped...)
	wantRefusal(out, code)
	m, _ = memberAt(t, leader.http, "n4")
	require.Equal(t, r4, m.RaftAddr, "%+v", m)
	require.Equal(t, h4, m.HTTPAddr, "%+v", m)
}
