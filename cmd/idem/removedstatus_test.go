package main

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A member stopped, removed (MEMBERSHIP.md, "Replacing a member") and
// started again on its old data dir, the mv skipped at 3 am, logs that it
// was removed; but `idem cluster status` asked of it printed its own view,
// "leader none", every member NO and "WARNING: fewer healthy voters than a
// quorum", a cluster lost at first sight, for which idem recover is the
// runbook. It says first that the node is not a member, with the command
// that adds it back, and leaves the quorum warning out.
func TestStatusOfARemovedNodeSaysItIsNotAMember(t *testing.T) {
	ip := testIP("127.0.0.9")
	root := t.TempDir()
	h1, r1, h2, r2 := freePortOn(t, ip), freePortOn(t, ip), freePortOn(t, ip), freePortOn(t, ip)
	d2 := filepath.Join(root, "n2")
	args2 := []string{"--node-id", "n2", "--join", h1, "--min-free-disk", "0"}
	start(t, filepath.Join(root, "n1"), h1, r1, "--node-id", "n1", "--min-free-disk", "0")
	n2 := &cnode{id: "n2", p: start(t, d2, h2, r2, args2...)}
	waitFor(t, 30*time.Second, "n2 a voter", func() (bool, string) {
		out, _ := idemCmd(t, "cluster", "status", "--addr", h1)
		v, _ := memberAt(t, h1, "n2")
		return v.Suffrage == "voter" && v.Healthy, out
	})
	n2.stop(t)
	out, err := idemCmd(t, "cluster", "remove", "--addr", h1, "--id", "n2")
	require.NoError(t, err, "%s", out)

	n2.p = launch(t, d2, h2, r2, args2...)
	waitForLine(t, n2.p.logs, "not in the cluster's configuration")
	var status string
	waitFor(t, 30*time.Second, "n2's status says it is not a member", func() (bool, string) {
		status, _ = idemCmd(t, "cluster", "status", "--addr", h2)
		return strings.Contains(status, "WARNING: n2 is not a member of the cluster"), status
	})
	require.Contains(t, status, "cluster join --id n2 --raft-addr "+r2+" --node-http-addr "+h2)
	require.NotContains(t, status, "fewer healthy voters than a quorum")

	// The members' own status says nothing of it.
	out, err = idemCmd(t, "cluster", "status", "--addr", h1)
	require.NoError(t, err, "%s", out)
	require.NotContains(t, out, "not a member")
}
