package raftfsm

import (
	"errors"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/stretchr/testify/require"
)

// A cluster formed with --bootstrap-expect in which n1 bootstrapped and n2
// and n3 asked to join it (they hold their votes and campaigns): n1 is
// elected, replicates its first entries, commits them, and dies before n2
// and n3 hear a commit index above 0 (here the AppendEntries naming one are
// cut off, as a kill -9 of n1 a few milliseconds after its election does).
// Their logs then end past the bootstrap configuration while no leader had
// named them a commit index: they refused every candidate whose log goes
// past index 1 (n1, restarted, among them) and never campaigned themselves,
// so the cluster had no leader for good with all three nodes up. The
// AppendEntries that carried the entries named the leader's commit index,
// 0; it now counts as their mark.
func TestFirstLeaderDiesBeforeNamingACommitIndex(t *testing.T) {
	t.Parallel()
	c := newMemCluster(t)
	nodes, dirs, addrs, infos := c.openEmpty("n1", "n2", "n3")
	cut := func(rpc raft.RPC) error {
		if ae, ok := rpc.Command.(*raft.AppendEntriesRequest); ok && ae.LeaderCommitIndex > 0 {
			return errors.New("test: the leader died")
		}
		return nil
	}
	for _, n := range nodes[1:] {
		n.guard.hook.Store(&cut)
	}
	require.NoError(t, nodes[0].Bootstrap(infos)) // n1 only; n2 and n3 asked to join
	require.Equal(t, "n1", c.leader(nodes...).self.ID)
	require.Eventually(t, func() bool {
		// One of them is enough (and all a commit needs): the other's
		// retry after a mismatch may come once n1 has committed, and is cut.
		return (nodes[1].raft.LastIndex() >= 2 || nodes[2].raft.LastIndex() >= 2) && nodes[0].raft.CommitIndex() >= 2
	}, 15*time.Second, 10*time.Millisecond, "n1 never replicated and committed its first entry")
	c.stop(nodes[0])
	for _, n := range nodes[1:] {
		n.guard.hook.Store(nil)
	}

	nodes[0] = c.openIn2("n1", dirs[0], addrs[0], nil)
	l := c.leader(nodes...)
	require.NoError(t, claim(l, "after"))
}
