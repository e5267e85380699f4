package main

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idem-store/idem/raftfsm"
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

	// Told before the backup is read: the restore read the whole file
	// (minutes for one of GBs) before it looked for the cluster. A damaged
	// copy is refused for the running cluster, not
	// for the damage the restore would have found only by reading it
	// (here its header, the first thing it reads).
	data, err := os.ReadFile(file)
	require.NoError(t, err)
	data[16] ^= 0x40 // the header's opening brace
	damaged := filepath.Join(t.TempDir(), "damaged.snap")
	require.NoError(t, os.WriteFile(damaged, data, 0o600))
	out, err = idemCmd(t, "snapshot", "restore", damaged, "--data-dir", dir, "--node-id", "n1", "--raft-addr", n1.raft)
	require.Error(t, err, out)
	require.Contains(t, out, "that cluster is running")
	require.NotContains(t, out, "bad backup")

	// Another raft address is a new cluster beside the old one, as before.
	out, err = idemCmd(t, "snapshot", "restore", file, "--data-dir", filepath.Join(t.TempDir(), "beside"), "--node-id", "n1", "--raft-addr", freePortOn(t, "127.0.0.19"))
	require.NoError(t, err, out)
	// A restore is a rollback, and says so (a walk: keys completed after
	// the backup were claimed afresh, and nothing had warned).
	require.Contains(t, out, "keys claimed or completed after the backup can be claimed again")
	require.NotContains(t, out, "never start its other members", "beside the old cluster, not in a member's place")
	// --force restores anyway: the operator says that cluster is gone for
	// good. In a member's place, the other members must not come back on
	// their old data dirs: they hold the old cluster's quorum (a walk: they
	// served its state, and claimed afresh a key the restored cluster had
	// completed).
	out, err = idemCmd(t, "snapshot", "restore", file, "--data-dir", dir, "--node-id", "n1", "--raft-addr", n1.raft, "--force")
	require.NoError(t, err, out)
	// In n1's place: the command to paste holds the HTTP address the
	// backup records for n1, where its clients call it.
	require.Contains(t, out, "--raft-addr "+n1.raft+" --http-addr "+n1.http+"\n", out)
	require.Contains(t, out, "never start its other members (n2 ("+c.node("n2").raft+"), n3 ("+c.node("n3").raft+"))", out)
	// Started there while that cluster in fact runs, the restored node is
	// the cluster, as after idem recover --force: the old members, whose
	// leader sends it entries, are told they were left out and stop
	// serving; it stays ready. (Before the restore recorded them, it was
	// the restored node that answered 503 while they served.)
	launch(t, dir, n1.http, n1.raft, "--node-id", "n1")
	for _, id := range []string{"n2", "n3"} {
		n := c.node(id)
		waitFor(t, 30*time.Second, id+" refusing as left out by the restore", func() (bool, string) {
			a := call("POST", n.http, "/v1/claim", claimReq("held-by-the-old-cluster", "c-stray"))
			return a.code == 503 && strings.Contains(string(a.body), "left out of a recovery"), a.String()
		})
	}
	// Ready once it has applied its commit index: under a loaded CI
	// machine (ci-86, load 30) that came after the old members' refusals.
	waitFor(t, 30*time.Second, "the restored n1 ready", func() (bool, string) {
		a := call("GET", n1.http, "/readyz", "")
		return a.code == 200, a.String()
	})
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

// The whole cluster is lost at once (a bad deploy, a region outage), and
// the operator rebuilds it from last night's backup at n1's addresses, as
// BACKUP.md says. Later the old n2 and n3 come back on their old data dirs
// (systemd's Restart=always, a host rebooted): two of three, they held a
// quorum of the old cluster, elected a leader and served its state at the
// addresses its clients know, beside the restored cluster; the restored
// n1 refused their entries, and only the restore's message had said not to
// start them (a walk). The restore now records them as left out, as idem
// recover does, and the restored node tells them so: they stop serving
// (503) and refuse to start again on those data dirs.
func TestMembersBesideARestoreInPlaceStopServing(t *testing.T) {
	c := newCluster(t, viaJoin, nil, nil)
	leader := c.leader()
	claimOK(t, leader.http, "before-backup")
	file := filepath.Join(t.TempDir(), "b.snap")
	out, err := idemCmd(t, "snapshot", "save", file, "--addr", leader.http)
	require.NoError(t, err, out)
	after := claimOK(t, leader.http, "after-backup")
	completeOK(t, leader.http, "after-backup", after.Token, "charged once")
	waitSameState(t, c.nodes...)
	for _, n := range c.nodes {
		n.kill(t)
	}

	n1 := c.node("n1")
	n1.dir = filepath.Join(t.TempDir(), "n1-restored")
	out, err = idemCmd(t, "snapshot", "restore", file, "--data-dir", n1.dir, "--node-id", "n1", "--raft-addr", n1.raft)
	require.NoError(t, err, out)
	require.Contains(t, out, "never start its other members")
	c.restart(n1, []string{"--node-id", "n1"})
	c.waitStable(n1)
	claimOK(t, n1.http, "only-in-the-restored-cluster")

	left := c.others(n1)
	for _, n := range left {
		c.restart(n, []string{"--node-id", n.id})
	}
	for _, n := range left {
		waitFor(t, 30*time.Second, n.id+" refusing as left out by the restore", func() (bool, string) {
			a := call("POST", n.http, "/v1/claim", claimReq("only-in-the-restored-cluster", "stale-check"))
			return a.code == 503 && strings.Contains(string(a.body), "left out of a recovery"), a.String()
		})
	}
	a := call("GET", n1.http, "/readyz", "")
	require.Equal(t, 200, a.code, "the restored node, told apart from the old cluster: %s", a)
	a = call("POST", n1.http, "/v1/claim", claimReq("only-in-the-restored-cluster", "again"))
	require.Equal(t, 409, a.code, "the restored cluster still holds its key: %s", a)

	// The one that heard it refuses to start on its data dir again, and
	// its log says what made it so.
	refused := 0
	for _, n := range left {
		n.kill(t)
		if _, err := os.Stat(filepath.Join(n.dir, raftfsm.SupersededFile)); err != nil {
			continue
		}
		c.restart(n, []string{"--node-id", n.id})
		select {
		case <-n.p.done:
		case <-time.After(30 * time.Second):
			t.Fatalf("%s started on a data dir the restore left out", n.id)
		}
		require.Error(t, n.p.err)
		require.Contains(t, n.p.logs.String(), "idem snapshot restore, from a backup, in the place of a member")
		refused++
	}
	require.Positive(t, refused, "no old member recorded it")
}
