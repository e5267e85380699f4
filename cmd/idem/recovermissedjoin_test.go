package main

import (
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// n3, stopped, missed the entry that added n4; then the cluster lost its
// quorum. `idem recover --peers n3=…,n4=…` on n3's data dir is refused
// (n3's data dir cannot tell n4 from a typo), and the refusal said only to
// check the id for a typo. It names the way out: n4's configuration lists
// it, n4's log ends past n3's, so n4 is the survivor to recover, without
// n3, which then joins empty.
func TestRecoverOfAPeerThisSurvivorMissedSaysWhichSurvivorToRecover(t *testing.T) {
	c := threeOnOneIP(t)
	n1, n3 := c.node("n1"), c.node("n3")
	c.waitStable(c.nodes...)
	claimOK(t, n1.http, "before")
	n3.stop(t)

	n4 := &cnode{id: "n4", ip: n1.ip, dir: filepath.Join(t.TempDir(), "n4"), http: freePortOn(t, n1.ip), raft: freePortOn(t, n1.ip)}
	n4.args = []string{"--node-id", "n4", "--join", n1.http, "--min-free-disk", "0"}
	n4.p = launch(t, n4.dir, n4.http, n4.raft, n4.args...)
	waitFor(t, 45*time.Second, "n4 a voter", func() (bool, string) {
		st, err := c.status(n1)
		if err != nil {
			return false, err.Error()
		}
		for _, m := range st.Nodes {
			if m.ID == "n4" && m.Suffrage == "voter" {
				return true, ""
			}
		}
		return false, fmt.Sprintf("%+v", st.Nodes)
	})
	for _, n := range []*cnode{n1, c.node("n2"), n4} {
		n.stop(t)
	}

	peers := "n3=" + n3.raft + ",n4=" + n4.raft
	out, err := idemCmd(t, "recover", "--data-dir", n3.dir, "--node-id", "n3", "--peers", peers)
	require.Equal(t, 2, exitCode(err), "%s", out)
	require.Contains(t, out, "--peers n4="+n4.raft+": not a member of this data dir's configuration (n1, n2, n3), whose raft log ends at index")
	require.Contains(t, out, "If n4 joined the cluster after that, another survivor's configuration lists it")
	require.Contains(t, out, "Recover that survivor instead, with --peers naming it and any other survivor that lists n4, not this node; then start this node with an empty data dir and --join")
	require.Contains(t, out, "nothing was changed")

	// The way out: n4 lists n3 and itself, and its dry run says so.
	out, err = idemCmd(t, "recover", "--data-dir", n4.dir, "--node-id", "n4", "--peers", "n4="+n4.raft)
	require.Equal(t, 0, exitCode(err), "%s", out)
	require.Contains(t, out, "n3="+n3.raft)
	require.Contains(t, out, "n4="+n4.raft)
}
