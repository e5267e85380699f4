package main

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
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
	require.Error(t, err, "without --yes it must only print the plan")
	require.Contains(t, out, "current configuration: n1="+survivor.raft+", n2="+c.node("n2").raft+", n3="+c.node("n3").raft)
	require.Contains(t, out, "new configuration:     n1="+survivor.raft)
	require.Contains(t, out, "nothing was changed; run again with --yes")
	out2, err := idemCmd(t, "recover", "--data-dir", survivor.dir, "--node-id", "n1", "--peers", peers)
	require.Error(t, err)
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
	require.Contains(t, out, "holds no node's state")
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
