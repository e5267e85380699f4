package main

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// After idem recover made n1 the cluster without n2, a new n2 joined it
// empty (the runbook), and was removed later. Its own log said that
// `idem cluster join` with its id and addresses adds it back, as
// MEMBERSHIP.md does; n1, leading, refused it (409 foreign_cluster) saying
// n2 "joins with the older state it kept", which it did not. The refusal
// goes by id (the leader cannot tell that node from the old data dir): it
// says so, and the way out, an empty data dir and --join, takes it in.
func TestReaddOfARejoinedLeftOutIDSaysWhy(t *testing.T) {
	ip := testIP("127.0.0.9")
	root := t.TempDir()
	h1, r1, h2, r2 := freePortOn(t, ip), freePortOn(t, ip), freePortOn(t, ip), freePortOn(t, ip)
	d1, d2 := filepath.Join(root, "n1"), filepath.Join(root, "n2")
	args1 := []string{"--node-id", "n1", "--min-free-disk", "0"}
	args2 := []string{"--node-id", "n2", "--join", h1, "--min-free-disk", "0"}
	voter := func(id string) {
		waitFor(t, 30*time.Second, id+" a voter", func() (bool, string) {
			v, _ := memberAt(t, h1, id)
			return v.Suffrage == "voter" && v.Healthy, ""
		})
	}
	n1 := &cnode{id: "n1", p: start(t, d1, h1, r1, args1...)}
	n2 := &cnode{id: "n2", p: start(t, d2, h2, r2, args2...)}
	voter("n2")
	n2.kill(t)
	n1.kill(t)
	out, err := idemCmd(t, "recover", "--data-dir", d1, "--node-id", "n1", "--peers", "n1="+r1, "--yes")
	require.NoError(t, err, "%s", out)
	n1.p = start(t, d1, h1, r1, args1...)
	require.NoError(t, os.Rename(d2, d2+".old"))
	n2.p = start(t, d2, h2, r2, args2...)
	voter("n2")

	out, err = idemCmd(t, "cluster", "remove", "--addr", h1, "--id", "n2")
	require.NoError(t, err, "%s", out)
	waitForLine(t, n2.p.logs, "not in the cluster's configuration")
	out, err = idemCmd(t, "cluster", "join", "--addr", h1, "--id", "n2", "--raft-addr", r2, "--node-http-addr", h2)
	require.Error(t, err, "%s", out)
	require.Contains(t, out, "foreign_cluster")
	require.Contains(t, out, "refused by id, also for a node n2 that joined this cluster empty since and was removed again")

	// The way out it gives.
	n2.stop(t)
	require.NoError(t, os.Rename(d2, d2+".removed"))
	n2.p = launch(t, d2, h2, r2, args2...)
	voter("n2")
}
