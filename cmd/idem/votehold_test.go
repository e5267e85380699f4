package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A --bootstrap-expect 3 start in which one node bootstraps and the two
// others ask to join it: here n2 and n3 list only n1 in --join, so they
// never know three nodes and never bootstrap, while n1, which lists all
// three, bootstraps the three of them as soon as they answer. n2 and n3 are
// empty when n1 campaigns, each with its joining file, and they asked to
// join a cluster that has no leader yet. Holding their votes until they had
// caught up (acc8560, reverted) deadlocked this start: no leader was ever
// elected (as TestTLSClusterRefusesRogueRaftPeer saw when one node
// bootstrapped first). The first election must work, and the empty nodes
// must vote again once caught up: the cluster goes on without n1.
func TestBootstrapExpectPeersThatAskedToJoinElectALeader(t *testing.T) {
	t.Parallel()
	c := &testCluster{t: t}
	root := t.TempDir()
	for i := 1; i <= 3; i++ {
		ip := fmt.Sprintf("127.0.0.%d", 10+i)
		c.nodes = append(c.nodes, &cnode{id: fmt.Sprintf("n%d", i), ip: ip, dir: filepath.Join(root, fmt.Sprintf("n%d", i)),
			http: freePortOn(t, ip), raft: freePortOn(t, ip)})
	}
	all := []string{c.nodes[0].http, c.nodes[1].http, c.nodes[2].http}
	for i, n := range c.nodes {
		join := all[0]
		if i == 0 {
			join = strings.Join(all, ",")
		}
		n.args = []string{"--node-id", n.id, "--bootstrap-expect", "3", "--join", join}
		n.p = launch(t, n.dir, n.http, n.raft, n.args...)
	}
	leader := c.waitStable(c.nodes...)
	require.Equal(t, "n1", leader.id, "only n1 bootstrapped")
	// Logged by n1's membership loop once its bootstrap returned: the
	// cluster it formed can be seen stable before that.
	waitForLine(t, c.nodes[0].p.logs, "bootstrapped the cluster")
	for _, n := range c.nodes[1:] {
		require.NotContains(t, n.p.logs.String(), "bootstrapped", "%s bootstrapped: the test did not make it ask to join", n.id)
	}
	claimOK(t, c.nodes[1].http, "first")

	// The joining files go as before: n2 and n3 asked the leader for their
	// admission, and caught up past it.
	for _, n := range c.nodes[1:] {
		waitFor(t, 20*time.Second, n.id+"'s joining file goes", func() (bool, string) {
			_, err := os.Stat(filepath.Join(n.dir, "joining"))
			return os.IsNotExist(err), fmt.Sprint(err)
		})
	}

	// Without n1, n2 and n3 need each other's vote.
	c.nodes[0].stop(t)
	waitFor(t, 30*time.Second, "n2 or n3 leads", func() (bool, string) {
		st, err := c.status(c.nodes[1])
		if err != nil {
			return false, err.Error()
		}
		if st.Leader == nil || st.Leader.ID == "n1" {
			return false, fmt.Sprintf("leader %+v", st.Leader)
		}
		return true, ""
	})
	claimOK(t, c.nodes[2].http, "second")
}
