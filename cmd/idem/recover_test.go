package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idem-store/idem/raftfsm"
)

// A three-node cluster loses two nodes for good: the survivor alone has no
// quorum and serves nothing. idem recover (offline, with --yes) makes it a
// one-node cluster: restarted, it elects itself, serves every acknowledged
// record byte for byte, and a fresh node can join it.
func TestRecoverAfterLosingQuorum(t *testing.T) {
	c := newCluster(t, viaJoin, nil, nil)
	leader := c.leader()
	want := map[string]answer{}
	claimed := []string{}
	for i := range 20 {
		key := fmt.Sprintf("rec-%d", i)
		cl := claimOK(t, c.nodes[i%3].http, key)
		if i%2 == 1 {
			claimed = append(claimed, key)
			continue
		}
		completeWithHeaders(t, leader.http, key, cl.Token)
		a := call("POST", leader.http, "/v1/claim", claimReq(key, "replay-check"))
		require.Equal(t, 200, a.code, "%s", a)
		want[key] = a
	}
	// The survivor to recover is the one with every committed entry (in a
	// real loss: the raft log that ends highest, which idem recover prints).
	waitSameState(t, c.nodes...)
	survivor := c.node("n1")
	for _, n := range c.others(survivor) {
		n.kill(t)
	}
	survivor.kill(t)

	peers := "n1=" + survivor.raft
	out, err := idemCmd(t, "recover", "--data-dir", survivor.dir, "--node-id", "n1", "--peers", peers)
	require.NoError(t, err, "without --yes it only prints the plan, exit 0: %s", out)
	require.Contains(t, out, "current configuration: n1="+survivor.raft+", n2="+c.node("n2").raft+", n3="+c.node("n3").raft)
	require.Contains(t, out, "new configuration:     n1="+survivor.raft)
	require.Contains(t, out, "other members alive:   none answered", "n2 and n3 were stopped")
	require.Contains(t, out, "nothing was changed; run again with --yes")
	out2, err := idemCmd(t, "recover", "--data-dir", survivor.dir, "--node-id", "n1", "--peers", peers)
	require.NoError(t, err)
	require.Equal(t, out, out2, "the dry run changed something")

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--node-id", "n1", "--peers", "n2=127.0.0.1:1"}, "--peers must include this node (n1)"},
		{[]string{"--node-id", "n2", "--peers", "n2=127.0.0.1:1"}, `--node-id "n2" differs from "n1"`},
		{[]string{"--node-id", "n1", "--peers", "n1"}, "--peers"},
		{[]string{"--node-id", "n1"}, "--peers is required"},
	} {
		out, err := idemCmd(t, append([]string{"recover", "--data-dir", survivor.dir, "--yes"}, tc.args...)...)
		require.Error(t, err, "%v", tc.args)
		require.Contains(t, out, tc.want)
	}
	out, err = idemCmd(t, "recover", "--data-dir", filepath.Join(t.TempDir(), "none"), "--node-id", "n1", "--peers", peers)
	require.Error(t, err)
	require.Contains(t, out, "no node is there")
	// A running node's data dir is refused, and stays as it was.
	c.restart(survivor, nil)
	waitFor(t, 20*time.Second, "survivor serving HTTP (without a quorum)", func() (bool, string) {
		a := call("GET", survivor.http, "/healthz", "")
		return a.err == nil && a.code == 200, a.String()
	})
	out, err = idemCmd(t, "recover", "--data-dir", survivor.dir, "--node-id", "n1", "--peers", peers, "--yes")
	require.Error(t, err)
	require.Contains(t, out, fmt.Sprintf("in use by another idem process (pid %d)", survivor.p.cmd.Process.Pid), "the message names the process to stop")
	survivor.kill(t)

	out, err = idemCmd(t, "recover", "--data-dir", survivor.dir, "--node-id", "n1", "--peers", peers, "--yes")
	require.NoError(t, err, out)
	require.Contains(t, out, "recovered: configuration is now n1="+survivor.raft)
	// The command to paste holds the HTTP address the state records for
	// n1: without it the node would serve on 127.0.0.1:7070, not where its
	// clients call it.
	require.Contains(t, out, "--raft-addr "+survivor.raft+" --http-addr "+survivor.http+"\n", out)

	c.restart(survivor, nil)
	c.waitStable(survivor)
	for key, w := range want {
		a := call("POST", survivor.http, "/v1/claim", claimReq(key, "replay-check"))
		require.Equal(t, w.code, a.code, "%s: %s", key, a)
		require.Equal(t, string(w.body), string(a.body), "replay of %s after recovery is not byte-identical", key)
	}
	for _, key := range claimed {
		a := call("GET", survivor.http, recordPath(key, ""), "")
		require.Equal(t, 200, a.code, "%s: %s", key, a)
		require.Contains(t, string(a.body), `"state":"in_progress"`)
	}
	cl := claimOK(t, survivor.http, "after-recover")
	completeOK(t, survivor.http, "after-recover", cl.Token, `{"ok":1}`)

	n4 := &cnode{id: "n4", ip: "127.0.0.14", dir: filepath.Join(t.TempDir(), "n4")}
	n4.http, n4.raft = freePortOn(t, n4.ip), freePortOn(t, n4.ip)
	n4.args = []string{"--node-id", n4.id, "--join", survivor.http}
	n4.p = launch(t, n4.dir, n4.http, n4.raft, n4.args...)
	c.waitStable(survivor, n4)
	waitSameState(t, survivor, n4)
	for key := range want {
		a := call("GET", n4.http, recordPath(key, "stale"), "")
		require.Equal(t, 200, a.code, "%s on the new node: %s", key, a)
		var r recordAnswer
		require.NoError(t, json.Unmarshal(a.body, &r))
		require.Equal(t, "completed", r.Record.State)
	}
}

// exitCode is the exit status of a finished idemCmd (-1: it did not run).
func exitCode(err error) int {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode()
	}
	if err == nil {
		return 0
	}
	return -1
}

// idem recover on a stopped node of a HEALTHY cluster succeeded: started
// again, the node had configuration {itself}, elected itself when the real
// leader died while the others elected another leader in the same term,
// and the same key was claimed twice. It now refuses while any other member
// of the configuration in the data dir answers at its raft or HTTP address,
// names each one, and changes nothing; --force skips the check.
func TestRecoverRefusedWhileOtherMembersAnswer(t *testing.T) {
	c := newCluster(t, viaJoin, nil, nil)
	leader := c.leader()
	claimOK(t, leader.http, "before-recover")
	waitSameState(t, c.nodes...)
	target := c.others(leader)[0]
	target.kill(t)
	live := c.others(target)

	before, err := raftfsm.ReadOfflineState(target.dir)
	require.NoError(t, err)
	require.Len(t, before.Configuration, 3)
	peers := target.id + "=" + target.raft

	// The dry run already says so.
	out, err := idemCmd(t, "recover", "--data-dir", target.dir, "--node-id", target.id, "--peers", peers)
	require.Equal(t, 1, exitCode(err), out)
	require.Contains(t, out, "other members alive:   ")
	require.Contains(t, out, "--yes would be refused while they answer")

	start := time.Now()
	out, err = idemCmd(t, "recover", "--data-dir", target.dir, "--node-id", target.id, "--peers", peers, "--yes")
	require.Equal(t, 1, exitCode(err), out)
	require.Less(t, time.Since(start), 10*time.Second, "the addresses are tried at once, about 1 s each")
	for _, n := range live {
		require.Contains(t, out, n.id+": raft address "+n.raft, out)
		require.Contains(t, out, n.id+": HTTP address "+n.http, out)
	}
	require.NotContains(t, out, target.id+": raft address", "this node itself is not probed")
	require.Contains(t, out, "only for a cluster that lost its quorum for good")
	require.Contains(t, out, "idem cluster status")
	require.Contains(t, out, "stop every other member before recovering")
	require.Contains(t, out, "--force")
	require.Contains(t, out, "nothing was changed")
	require.NotContains(t, out, "recovered:")
	after, err := raftfsm.ReadOfflineState(target.dir)
	require.NoError(t, err)
	require.Equal(t, before, after, "a refused recover changed the data dir")

	// Started again as it was, the node is still a member of the cluster.
	c.restart(target, nil)
	c.waitStable(c.nodes...)
	waitSameState(t, c.nodes...)

	// Every node stopped, but something listens at one other member's
	// raft address: refused, naming that one only.
	for _, n := range c.nodes {
		n.kill(t)
	}
	other := live[0]
	ln, err := net.Listen("tcp", other.raft)
	require.NoError(t, err)
	defer ln.Close()
	before, err = raftfsm.ReadOfflineState(target.dir)
	require.NoError(t, err)
	out, err = idemCmd(t, "recover", "--data-dir", target.dir, "--node-id", target.id, "--peers", peers, "--yes")
	require.Equal(t, 1, exitCode(err), out)
	require.Contains(t, out, other.id+": raft address "+other.raft, out)
	require.Equal(t, 1, strings.Count(out, " address "), "only the listener answered:\n%s", out)
	after, err = raftfsm.ReadOfflineState(target.dir)
	require.NoError(t, err)
	require.Equal(t, before, after, "a refused recover changed the data dir")
	require.Len(t, after.Configuration, 3)

	// --force skips the check.
	out, err = idemCmd(t, "recover", "--data-dir", target.dir, "--node-id", target.id, "--peers", peers, "--yes", "--force")
	require.NoError(t, err, out)
	require.Contains(t, out, "other members alive:   not checked (--force)")
	require.Contains(t, out, "recovered: configuration is now "+peers)
	after, err = raftfsm.ReadOfflineState(target.dir)
	require.NoError(t, err)
	require.Equal(t, []raftfsm.Peer{{ID: target.id, RaftAddr: target.raft, Suffrage: "Voter"}}, after.Configuration)
}

// The dry run (no --yes) only reports: it exits 0 when --yes would go
// ahead, so a script or runbook can tell it from an error. It exited 1,
// as a failure, every time. A bad flag stays 2, a data dir without a node
// too (TestRecoverWhereNoNodeIsNamesTheFlag), and neither the dry run nor
// they change anything.
func TestRecoverDryRunExitStatus(t *testing.T) {
	dir := t.TempDir()
	httpAddr, raftAddr := freePort(t), freePort(t)
	p := start(t, dir, httpAddr, raftAddr)
	code, body := post(t, httpAddr, "/v1/claim", claimBody)
	require.Equal(t, 201, code, "%s", body)
	p.cmd.Process.Kill()
	p.wait()
	before, err := raftfsm.ReadOfflineState(dir)
	require.NoError(t, err)

	peers := "n1=" + raftAddr
	out, err := idemCmd(t, "recover", "--data-dir", dir, "--node-id", "n1", "--peers", peers)
	require.Equal(t, 0, exitCode(err), "a dry run that only reports exits 0:\n%s", out)
	require.Contains(t, out, "nothing was changed; run again with --yes")
	out, err = idemCmd(t, "recover", "--data-dir", dir, "--node-id", "n1", "--peers", "n1=nowhere")
	require.Equal(t, 2, exitCode(err), out)
	require.Contains(t, out, "--peers")
	out, err = idemCmd(t, "recover", "--data-dir", filepath.Join(t.TempDir(), "none"), "--node-id", "n1", "--peers", peers)
	require.Equal(t, 2, exitCode(err), out)
	// A forgotten --node-id is named as missing, once: it was an invalid
	// id "" and a --peers "without this node ()".
	out, err = idemCmd(t, "recover", "--data-dir", dir, "--peers", peers)
	require.Equal(t, 2, exitCode(err), out)
	require.Equal(t, "idem recover: --node-id is required: the id of the stopped node (its idem serve --node-id, which node.json in the data dir records)\n", out)
	out, err = idemCmd(t, "snapshot", "restore", filepath.Join(t.TempDir(), "b.snap"), "--data-dir", filepath.Join(t.TempDir(), "new"), "--raft-addr", raftAddr)
	require.Equal(t, 2, exitCode(err), out)
	require.Contains(t, out, "--node-id is required")
	after, err := raftfsm.ReadOfflineState(dir)
	require.NoError(t, err)
	require.Equal(t, before, after, "the dry run changed the data dir")
}

// A member of a healthy cluster whose snapshots were deleted has lost the
// configuration they held (its compacted log no longer has it), so recover
// found no other member to try, and with --yes would have made a second
// cluster beside the healthy one. The members the state records are tried
// instead, and recover refuses while they answer.
func TestRecoverWithLostSnapshotsTriesTheMembersTheStateRecords(t *testing.T) {
	c := newCluster(t, viaJoin, []string{"--snapshot-threshold", "16", "--trailing-logs", "4", "--snapshot-interval", "200ms"}, nil)
	leader := c.leader()
	for i := range 60 {
		claimOK(t, leader.http, fmt.Sprintf("lost-snap-%d", i))
	}
	waitSameState(t, c.nodes...)
	target := c.others(leader)[0]
	waitFor(t, 20*time.Second, "a snapshot on "+target.id, func() (bool, string) {
		m, _ := filepath.Glob(filepath.Join(target.dir, "snapshots", "*", "meta.json"))
		return len(m) > 0, fmt.Sprint(m)
	})
	// Raft compacts the log just after it writes the snapshot's meta.json:
	// killed in between (a CI run), the log still began at 1. Another
	// snapshot needs 16 more entries, which idle ticks take 16 s to make.
	time.Sleep(time.Second)
	target.kill(t)
	snaps, err := filepath.Glob(filepath.Join(target.dir, "snapshots", "*"))
	require.NoError(t, err)
	for _, s := range snaps {
		require.NoError(t, os.RemoveAll(s))
	}
	before, err := raftfsm.ReadOfflineState(target.dir)
	require.NoError(t, err)
	require.NotZero(t, before.LogHeadLost)
	require.Empty(t, before.Configuration, "the configuration was compacted into the lost snapshots")

	peers := target.id + "=" + target.raft
	out, err := idemCmd(t, "recover", "--data-dir", target.dir, "--node-id", target.id, "--peers", peers, "--yes")
	require.Equal(t, 1, exitCode(err), out)
	for _, n := range c.others(target) {
		require.Contains(t, out, n.id+": raft address "+n.raft, out)
	}
	require.Contains(t, out, "nothing was changed")
	after, err := raftfsm.ReadOfflineState(target.dir)
	require.NoError(t, err)
	require.Equal(t, before, after, "a refused recover changed the data dir")
}

// The members idem recover left out, started again with their data dirs
// (systemd restarting them after a kill -9), were a majority of the old
// configuration: they elected a leader and served their older records, so
// keys the recovered cluster held were claimed again through them, and
// the recovered node, refusing their entries as another cluster's, was
// the one /readyz called unready (walk of the operator docs). Now the
// recovered node tells their leader it was left out; that leader answers
// every request 503 saying so (a follower's requests too, which go to it),
// the recovered node stays ready, and a left-out node will not start on
// its data dir again.
func TestMembersLeftOutOfARecoveryStopServing(t *testing.T) {
	c := newCluster(t, viaJoin, nil, nil)
	for i := range 3 {
		claimOK(t, c.leader().http, fmt.Sprint("pre-", i))
	}
	waitSameState(t, c.nodes...)
	survivor := c.node("n1")
	left := c.others(survivor)
	for _, n := range left {
		n.kill(t)
	}
	survivor.kill(t)
	out, err := idemCmd(t, "recover", "--data-dir", survivor.dir, "--node-id", "n1", "--peers", "n1="+survivor.raft, "--yes")
	require.NoError(t, err, out)
	c.restart(survivor, nil)
	c.waitStable(survivor)
	for i := range 3 {
		claimOK(t, survivor.http, fmt.Sprint("post-", i))
	}

	// Started as they were before the cluster formed (no --join: each has
	// its state and the old configuration), as a unit file would.
	for _, n := range left {
		c.restart(n, []string{"--node-id", n.id})
	}
	// Their leader learns it at its first heartbeat to n1; its follower's
	// requests go to it.
	for _, n := range left {
		waitFor(t, 30*time.Second, n.id+" refusing as left out of the recovery", func() (bool, string) {
			a := call("POST", n.http, "/v1/claim", claimReq("post-0", "stale-check"))
			return a.code == 503 && strings.Contains(string(a.body), "left out of a recovery"), a.String()
		})
		a := call("GET", n.http, recordPath("pre-0", ""), "")
		require.Equal(t, 503, a.code, "a linearizable read of the old state through %s: %s", n.id, a)
		// Not ready either, the follower (which asks its leader) too: a
		// load balancer sends clients elsewhere.
		waitFor(t, 10*time.Second, n.id+" unready", func() (bool, string) {
			a := call("GET", n.http, "/readyz", "")
			return a.code == 503, a.String()
		})
	}
	// Not one of the recovered cluster's keys was claimed again.
	for i := range 3 {
		a := call("POST", survivor.http, "/v1/claim", claimReq(fmt.Sprint("post-", i), "stale-check"))
		require.Equal(t, 409, a.code, "post-%d on the recovered node: %s", i, a)
	}
	a := call("GET", survivor.http, "/readyz", "")
	require.Equal(t, 200, a.code, "the recovered node, told apart from another cluster: %s", a)

	// Stopped and started again, a left-out node refuses to start: only the
	// one that heard it has the file, so look at both.
	refused := 0
	var follower *cnode
	for _, n := range left {
		n.kill(t)
		if _, err := os.Stat(filepath.Join(n.dir, raftfsm.SupersededFile)); err != nil {
			follower = n
			continue
		}
		c.restart(n, []string{"--node-id", n.id})
		select {
		case <-n.p.done:
		case <-time.After(30 * time.Second):
			t.Fatalf("%s started on a data dir left out of a recovery", n.id)
		}
		require.Error(t, n.p.err)
		require.Contains(t, n.p.logs.String(), "left out of a recovery")
		require.Contains(t, n.p.logs.String(), "start this node with an empty data dir and --join")
		refused++
	}
	require.Positive(t, refused, "no left-out node recorded it")

	// The other, which followed, is started with its first command (--join
	// n1), and was taken in by n1 with its older state: its log replaced
	// by n1's, its state kept past n1's entries where it had applied its
	// own. n1 refuses it now, naming what to do (the node logs n1's answer).
	if follower != nil {
		c.restart(follower, nil)
		waitFor(t, 30*time.Second, "n1 refusing "+follower.id+"'s join", func() (bool, string) {
			return strings.Contains(follower.p.logs.String(), follower.id+" was left out when idem recover made n1 this cluster"), ""
		})
		a := call("GET", survivor.http, "/v1/cluster", "")
		require.Equal(t, 200, a.code, "%s", a)
		require.NotContains(t, string(a.body), `"`+follower.id+`"`, "a left-out member with its old state was taken in")
	}
	require.NotContains(t, survivor.p.logs.String(), "level=ERROR", "the recovered node")
}

// Bug: idem recover run on two survivors, each alone (the documented
// command, copied once per survivor), made two one-node clusters that
// never spoke: each left the other out, so no raft RPC went between them,
// and both answered `201 claimed` for one key, each from its own copy.
// Each now probes the members it left out; learning that one was
// recovered without it, both answer 503 and refuse to start again, until
// the operator keeps one copy.
func TestTwoSurvivorsRecoveredAloneStopServing(t *testing.T) {
	c := newCluster(t, viaJoin, nil, nil)
	for i := range 3 {
		claimOK(t, c.leader().http, fmt.Sprint("pre-", i))
	}
	waitSameState(t, c.nodes...)
	for _, n := range c.nodes {
		n.kill(t)
	}
	n1, n2 := c.node("n1"), c.node("n2")
	for _, n := range []*cnode{n1, n2} {
		out, err := idemCmd(t, "recover", "--data-dir", n.dir, "--node-id", n.id, "--peers", n.id+"="+n.raft, "--yes")
		require.NoError(t, err, out)
	}
	for _, n := range []*cnode{n1, n2} {
		c.restart(n, []string{"--node-id", n.id})
	}
	for _, n := range []*cnode{n1, n2} {
		waitFor(t, 30*time.Second, n.id+" refusing as one of two recoveries", func() (bool, string) {
			a := call("POST", n.http, "/v1/claim", claimReq("twin-"+n.id, "twin-check"))
			return a.code == 503 && strings.Contains(string(a.body), "were each made the cluster by idem recover (or idem snapshot restore"), a.String()
		})
		a := call("POST", n.http, "/v1/claim", claimReq("twin-"+n.id, "twin-check"))
		require.NotContains(t, string(a.body), "was left out", "%s was recovered, not left out", n.id)
		a = call("GET", n.http, "/readyz", "")
		require.Equal(t, 503, a.code, "%s: %s", n.id, a)
	}
	// Both refuse to start on their data dirs; the operator keeps n1: n2's
	// dir moved aside, n1's superseded file deleted, n1 serves again, and
	// n2 joins it empty.
	for _, n := range []*cnode{n1, n2} {
		n.kill(t)
		_, err := os.Stat(filepath.Join(n.dir, raftfsm.SupersededFile))
		require.NoError(t, err, n.id)
		c.restart(n, []string{"--node-id", n.id})
		select {
		case <-n.p.done:
		case <-time.After(30 * time.Second):
			t.Fatalf("%s started on the data dir of a twin recovery", n.id)
		}
		require.Contains(t, n.p.logs.String(), "Choose the copy to keep")
	}
	require.NoError(t, os.Rename(n2.dir, n2.dir+".aside"))
	require.NoError(t, os.Remove(filepath.Join(n1.dir, raftfsm.SupersededFile)))
	c.restart(n1, []string{"--node-id", n1.id})
	c.waitStable(n1)
	claimOK(t, n1.http, "after-twins")
	c.restart(n2, []string{"--node-id", n2.id, "--join", n1.http})
	c.waitStable(n1, n2)
	a := call("POST", n2.http, "/v1/claim", claimReq("pre-0", "after-check"))
	require.Equal(t, 409, a.code, "pre-0 through the rejoined n2: %s", a)
}

// A member left out of a restore in place whose log ends highest is told
// to run idem recover on its data dir; recover did, said nothing of
// superseded.json, and printed a serve that was refused because the file
// was still there (an operator walk). Recover says so, dry run and --yes.
func TestRecoverNamesSupersededFile(t *testing.T) {
	dir := t.TempDir()
	httpAddr, raftAddr := freePort(t), freePort(t)
	p := start(t, dir, httpAddr, raftAddr)
	code, body := post(t, httpAddr, "/v1/claim", claimBody)
	require.Equal(t, 201, code, "%s", body)
	p.cmd.Process.Kill()
	p.wait()
	path := filepath.Join(dir, raftfsm.SupersededFile)
	require.NoError(t, os.WriteFile(path, []byte(`{"from":"n9","raft_address":"127.0.0.9:7071","learned_at":"2026-01-01T00:00:00Z","detail":"x"}`), 0o600))

	peers := "n1=" + raftAddr
	out, err := idemCmd(t, "recover", "--data-dir", dir, "--node-id", "n1", "--peers", peers)
	require.Equal(t, 0, exitCode(err), out)
	require.Contains(t, out, "superseded:            "+path+" is there: n9 (127.0.0.9:7071) said")
	out, err = idemCmd(t, "recover", "--data-dir", dir, "--node-id", "n1", "--peers", peers, "--yes")
	require.NoError(t, err, out)
	require.Contains(t, out, "but first: "+path+" is there")
	require.Contains(t, out, "Delete it only if this copy is the one to keep and n9 (127.0.0.9:7071) is stopped for good")
	require.FileExists(t, path, "recover deletes no such file: the choice is the operator's")
}

// A recover given a node's HTTP address where --peers takes its raft address
// (the flag most often confused) rewrote the membership with it and printed
// a start command that idem serve refuses (--http-addr and --raft-addr the
// same). It is refused as a bad flag, naming the raft address, and the data
// dir is left as it was.
func TestRecoverRefusesAnHTTPAddressAsRaftAddress(t *testing.T) {
	dir := t.TempDir()
	httpAddr, raftAddr := freePort(t), freePort(t)
	p := start(t, dir, httpAddr, raftAddr)
	code, body := post(t, httpAddr, "/v1/claim", claimBody)
	require.Equal(t, 201, code, "%s", body)
	// The leader records its HTTP address in the log at its first tick
	// (a second) after it leads: wait for an entry past the claim's.
	var claimed struct {
		Token string `json:"token"`
	}
	require.NoError(t, json.Unmarshal(body, &claimed))
	idx, _, _ := strings.Cut(claimed.Token, ".")
	require.Eventually(t, func() bool {
		var st struct {
			CommitIndex uint64 `json:"commit_index"`
		}
		code, b := get(t, httpAddr, "/v1/cluster")
		return code == 200 && json.Unmarshal(b, &st) == nil && fmt.Sprintf("%020d", st.CommitIndex) > idx
	}, 10*time.Second, 50*time.Millisecond)
	require.NoError(t, p.cmd.Process.Signal(os.Interrupt))
	p.wait()
	before, err := raftfsm.ReadOfflineState(dir)
	require.NoError(t, err)
	require.Equal(t, httpAddr, before.HTTPAddrs["n1"])

	for _, yes := range []bool{false, true} {
		args := []string{"recover", "--data-dir", dir, "--node-id", "n1", "--peers", "n1=" + httpAddr}
		if yes {
			args = append(args, "--yes")
		}
		out, err := idemCmd(t, args...)
		require.Equal(t, 2, exitCode(err), out)
		require.Contains(t, out, httpAddr+" is the HTTP address the state records for n1")
		require.Contains(t, out, "n1's is "+raftAddr)
		require.Contains(t, out, "nothing was changed")
		after, err := raftfsm.ReadOfflineState(dir)
		require.NoError(t, err)
		require.Equal(t, before, after, "the refused recover changed the data dir")
	}
}

// idem recover on a path that holds no node (absent, an empty directory,
// one of other files, a file, the parent of the node dirs) exited 1, as a
// refusal to recover a node does, saying raftfsm's "holds no node's state".
// It is a wrong flag: exit 2, naming --data-dir, the nodes near it, and
// that nothing was changed; nothing is created or written there.
func TestRecoverWhereNoNodeIsNamesTheFlag(t *testing.T) {
	root := t.TempDir()
	node := filepath.Join(root, "n1")
	require.NoError(t, os.MkdirAll(filepath.Join(node, "fsm"), 0o700))
	require.NoError(t, os.WriteFile(filepath.Join(node, "node.json"), []byte(`{"node_id":"n1","bucket_width_ms":7200000}`), 0o600))
	empty := filepath.Join(root, "empty")
	require.NoError(t, os.Mkdir(empty, 0o700))
	other := filepath.Join(root, "other")
	require.NoError(t, os.Mkdir(other, 0o700))
	require.NoError(t, os.WriteFile(filepath.Join(other, "notes.txt"), []byte("x"), 0o600))
	for _, tc := range []struct{ dir, what, near string }{
		{filepath.Join(root, "none"), "it does not exist", node},
		{filepath.Join(root, "n11"), "it does not exist", node},
		{empty, "holds no node.json, fsm/ or raft.db", node},
		{other, "holds no node.json, fsm/ or raft.db", node},
		{filepath.Join(other, "notes.txt"), "it is not a directory", ""},
		{root, "holds no node.json, fsm/ or raft.db", node},
		{filepath.Join(node, "fsm"), "holds no node.json, fsm/ or raft.db", node},
	} {
		var before []string
		filepath.WalkDir(root, func(p string, _ os.DirEntry, _ error) error { before = append(before, p); return nil })
		var stdout, stderr strings.Builder
		code := runRecover(t.Context(), []string{"--data-dir", tc.dir, "--node-id", "n1", "--peers", "n1=127.0.0.1:7071", "--yes"}, &stdout, &stderr)
		require.Equal(t, 2, code, "%s: %s", tc.dir, stderr.String())
		require.Contains(t, stderr.String(), "idem recover: --data-dir "+tc.dir+": no node is there", tc.dir)
		require.Contains(t, stderr.String(), tc.what, tc.dir)
		require.Contains(t, stderr.String(), "nothing was changed", tc.dir)
		if tc.near != "" {
			require.Contains(t, stderr.String(), "these hold nodes: "+tc.near, tc.dir)
		}
		require.Empty(t, stdout.String(), tc.dir)
		var after []string
		filepath.WalkDir(root, func(p string, _ os.DirEntry, _ error) error { after = append(after, p); return nil })
		require.Equal(t, before, after, "%s: something was written", tc.dir)
	}
}
