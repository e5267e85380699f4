package main

import (
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Two mistakes at 3 am: idem recover made n1 the cluster although n2 and
// n3, stopped, held writes n1 lacked (the dry run prints where each log
// ends; n1's ended lower), and n2's old data dir, moved aside as the
// runbook says, was later started again at n2's addresses, where an empty
// n2 had joined the recovered cluster. Same id, same address: the leader
// took it for its n2, raft replaced its log's tail with the cluster's
// entries, and its state, which had applied that tail, skipped the
// cluster's entries there: claims the recovered cluster acknowledged were
// absent on n2 (its state hash differed), and leading it would have let
// them be claimed again. Such a node now stops serving, as a member left
// out of a recovery does, and refuses to start on that data dir again.
func TestOldCopyAtAMembersAddressStopsServing(t *testing.T) {
	c := threeOnOneIP(t)
	n1, n2, n3 := c.node("n1"), c.node("n2"), c.node("n3")
	claimOK(t, c.leader().http, "a-1")
	waitSameState(t, c.nodes...)

	// n1 stopped; n2 and n3 take writes n1 never sees, then stop.
	n1.stop(t)
	for i := range 5 {
		claimOK(t, n2.http, fmt.Sprint("b-", i)) // n2 forwards to the leader of n2 and n3
	}
	n2.stop(t)
	n3.stop(t)

	out, err := idemCmd(t, "recover", "--data-dir", n1.dir, "--node-id", "n1", "--peers", "n1="+n1.raft, "--yes")
	require.NoError(t, err, "%s", out)
	c.restart(n1, []string{"--node-id", "n1", "--min-free-disk", "0"})
	c.waitStable(n1)
	claimOK(t, n1.http, "e-1") // acknowledged by the recovered cluster, at the indexes n2's old tail holds

	for _, n := range []*cnode{n2, n3} {
		require.NoError(t, os.Rename(n.dir, n.dir+".old"))
		c.restart(n, []string{"--node-id", n.id, "--join", n1.http, "--min-free-disk", "0"})
	}
	c.waitStable(c.nodes...)

	// n2's old data dir, back at n2's addresses.
	n2.stop(t)
	require.NoError(t, os.Rename(n2.dir, n2.dir+".new"))
	require.NoError(t, os.Rename(n2.dir+".old", n2.dir))
	c.restart(n2, []string{"--node-id", "n2", "--min-free-disk", "0"})
	waitForLine(t, n2.p.logs, "the leader replaced entries this node's state had applied")
	for _, path := range []string{recordPath("e-1", "stale"), recordPath("b-1", "stale"), "/readyz"} {
		a := call("GET", n2.http, path, "")
		require.Equal(t, 503, a.code, "%s on n2's old copy: %s", path, a)
	}
	a := call("GET", n2.http, recordPath("e-1", "stale"), "")
	require.Contains(t, string(a.body), "start this node with an empty data dir and --join")

	// The cluster goes on, every acknowledged claim of it held.
	a = call("POST", n1.http, "/v1/claim", claimReq("e-1", ""))
	require.Equal(t, 409, a.code, "e-1 claimed again: %s", a)
	claimOK(t, n3.http, "after")

	// Still a voter, its log the cluster's: handed the leadership (or
	// elected when its leader stops), it answered every write 503 and so
	// did the cluster through it, for good. It hands the leadership on.
	out, code := cli(t, "transfer-leadership", "--id", "n2", "--addr", n3.http)
	require.Equal(t, 0, code, "%s", out)
	waitFor(t, 30*time.Second, "a claim through n3 once n2 led", func() (bool, string) {
		a := call("POST", n3.http, "/v1/claim", claimReq("after-n2-led", ""))
		return a.err == nil && a.code == 201, a.String()
	})
	require.Contains(t, n2.p.logs.String(), "handed the leadership on")

	// It does not start on that data dir again, saying why.
	n2.kill(t)
	c.restart(n2, []string{"--node-id", "n2", "--min-free-disk", "0"})
	select {
	case <-n2.p.done:
	case <-time.After(30 * time.Second):
		t.Fatal("n2 started again on a data dir holding another history")
	}
	require.Contains(t, n2.p.logs.String(), "this node's state holds entries its cluster does not")
}
