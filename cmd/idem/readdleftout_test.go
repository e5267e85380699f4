package main

import (
	"os"
	"testing"

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
	l := recoverWithoutN2(t, nil)
	require.NoError(t, os.Rename(l.d2, l.d2+".old"))
	l.n2.p = start(t, l.d2, l.h2, l.r2, l.args2...)
	l.waitVoter(t, "n2")

	out, err := idemCmd(t, "cluster", "remove", "--addr", l.h1, "--id", "n2")
	require.NoError(t, err, "%s", out)
	waitForLine(t, l.n2.p.logs, "not in the cluster's configuration")
	out, err = idemCmd(t, "cluster", "join", "--addr", l.h1, "--id", "n2", "--raft-addr", l.r2, "--node-http-addr", l.h2)
	require.Error(t, err, "%s", out)
	require.Contains(t, out, "foreign_cluster")
	require.Contains(t, out, "refused by id, also for a node n2 that joined this cluster empty since and was removed again")

	// The way out it gives.
	l.n2.stop(t)
	require.NoError(t, os.Rename(l.d2, l.d2+".removed"))
	l.n2.p = launch(t, l.d2, l.h2, l.r2, l.args2...)
	l.waitVoter(t, "n2")
}
