package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// A tired operator rebuilds member n1 of a running cluster from last
// night's backup: stops n1, restores the backup with n1's --node-id and
// --raft-addr and starts it as n1. The restored node was a one-node cluster
// of its own at n1's addresses: it elected itself and was ready, so the
// clients and load balancers of n1 got a second cluster, and a key claimed
// in one was claimed again in the other (two 201s). The old members kept
// sending it entries, which it refused. The restore now refuses while other
// members of the backup's cluster answer, when --raft-addr is the raft
// address of one of its members, and says what to do instead; --force skips
// the check, as for idem recover.
func TestRestoreRefusedAtALiveClusterMembersAddress(t *testing.T) {
	c := newCluster(t, viaJoin, nil, nil)
	leader := c.leader()
	claimOK(t, leader.http, "before-backup")
	file := filepath.Join(t.TempDir(), "b.snap")
	out, err := idemCmd(t, "snapshot", "save", file, "--addr", leader.http)
	require.NoError(t, err, out)

	n1 := c.node("n1")
	n1.kill(t)
	dir := filepath.Join(t.TempDir(), "n1-restored")
	out, err = idemCmd(t, "snapshot", "restore", file, "--data-dir", dir, "--node-id", "n1", "--raft-addr", n1.raft)
	require.Error(t, err, "restoring a member of a running cluster in place makes a second cluster at its addresses: %s", out)
	require.Equal(t, 1, exitCode(err))
	require.Contains(t, out, "n2: raft address "+c.node("n2").raft)
	require.Contains(t, out, "empty data dir and --join")
	_, serr := os.Stat(dir)
	require.True(t, os.IsNotExist(serr), "nothing is written on a refusal")

	// Another raft address is a new cluster beside the old one, as before.
	out, err = idemCmd(t, "snapshot", "restore", file, "--data-dir", filepath.Join(t.TempDir(), "beside"), "--node-id", "n1", "--raft-addr", freePortOn(t, "127.0.0.19"))
	require.NoError(t, err, out)
	// --force restores anyway.
	out, err = idemCmd(t, "snapshot", "restore", file, "--data-dir", dir, "--node-id", "n1", "--raft-addr", n1.raft, "--force")
	require.NoError(t, err, out)
}
