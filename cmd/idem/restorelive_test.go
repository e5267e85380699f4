package main

import (
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

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
	// A restore is a rollback, and says so (a walk: keys completed after
	// the backup were claimed afresh, and nothing had warned).
	require.Contains(t, out, "keys claimed or completed after the backup can be claimed again")
	require.NotContains(t, out, "never start its other members", "beside the old cluster, not in a member's place")
	// --force restores anyway. Started there, the node is a cluster of its
	// own that the old cluster's leader keeps sending entries: it refuses
	// them, and is not ready while they come (it was, and load balancers
	// sent n1's clients to it).
	out, err = idemCmd(t, "snapshot", "restore", file, "--data-dir", dir, "--node-id", "n1", "--raft-addr", n1.raft, "--force")
	require.NoError(t, err, out)
	// In n1's place: the command to paste holds the HTTP address the
	// backup records for n1, where its clients call it.
	require.Contains(t, out, "--raft-addr "+n1.raft+" --http-addr "+n1.http+"\n", out)
	// In a member's place, the other members must not come back on their
	// old data dirs: they hold the old cluster's quorum (a walk: they
	// served its state, and claimed afresh a key the restored cluster had
	// completed).
	require.Contains(t, out, "never start its other members (n2 ("+c.node("n2").raft+"), n3 ("+c.node("n3").raft+"))", out)
	launch(t, dir, n1.http, n1.raft, "--node-id", "n1")
	waitFor(t, 20*time.Second, "the restored n1 is not ready, naming the other cluster's leader", func() (bool, string) {
		a := call("GET", n1.http, "/readyz", "")
		return a.code == 503 && strings.Contains(string(a.body), "a leader of another cluster"), a.String()
	})
	// Nor does it answer for records meanwhile: unready, it still
	// answered claims, 201 for a key the running cluster holds (an
	// operator walk, with an empty data dir at a member's addresses).
	held := claimOK(t, c.node("n2").http, "held-by-the-cluster") // a follower forwards it
	require.Equal(t, 1, held.Attempt)
	for _, req := range []struct{ method, path, body string }{
		{"POST", "/v1/claim", claimReq("held-by-the-cluster", "c-stray")},
		{"POST", "/v1/batch", `{"ops":[{"op":"claim",` + claimReq("held-by-the-cluster", "c-stray")[1:] + `]}`},
		{"GET", "/v1/records?principal=" + url.QueryEscape(cPrincipal) + "&endpoint=" + url.QueryEscape(cEndpoint) + "&key=before-backup&consistency=stale", ""},
	} {
		a := call(req.method, n1.http, req.path, req.body)
		require.Equal(t, 503, a.code, "%s %s on the node another cluster's leader sends entries to: %s", req.method, req.path, a)
		require.Contains(t, string(a.body), "a leader of another cluster")
	}
}

// raft.db (raft's term and vote) of a member of a three-node cluster is
// deleted or emptied (a clean-up, a filesystem that lost it) while its raft
// log and state are kept. The node started as if nothing had happened, at
// term 0 with no vote: one that had voted in the running election could
// vote again in the same term for another candidate, and two leaders could
// be elected in one term. It now refuses, naming raft.db and the way out
// (rejoin with an empty data dir); a one-node cluster, which has no one to
// vote for, still starts.
func TestLostRaftDBIsRefusedInACluster(t *testing.T) {
	c := newCluster(t, viaJoin, nil, nil)
	claimOK(t, c.leader().http, "before")
	n3 := c.node("n3")
	waitSameState(t, c.nodes...)
	n3.kill(t)
	require.NoError(t, os.Truncate(filepath.Join(n3.dir, "raft.db"), 0))
	c.restart(n3, nil)
	requireExits(t, n3.p, "a member that lost its term and vote must not start")
	out := n3.p.logs.String()
	require.Contains(t, out, filepath.Join(n3.dir, "raft.db"))
	require.Contains(t, out, "empty data dir and --join", "the message gives the way out: %s", out)

	// One node alone votes only for itself.
	dir := filepath.Join(t.TempDir(), "solo")
	httpAddr, raftAddr := freePort(t), freePort(t)
	p := start(t, dir, httpAddr, raftAddr)
	claimOK(t, httpAddr, "solo")
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
	require.NoError(t, p.wait())
	require.NoError(t, os.Remove(filepath.Join(dir, "raft.db")))
	start(t, dir, httpAddr, raftAddr)
	a := call("GET", httpAddr, recordPath("solo", ""), "")
	require.Equal(t, 200, a.code, "%s", a)
}
