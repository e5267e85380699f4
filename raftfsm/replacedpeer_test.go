package raftfsm

import (
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/stretchr/testify/require"
)

// A member replaced as MEMBERSHIP.md says (stop it, remove it, start an
// empty node with the same id and addresses, join it) is promoted once it
// has caught up. The leader's heartbeats to the stopped member failed
// before its removal, and raft reports a resumed heartbeat only from the
// replication that failed: the new member's, started after the re-join,
// never failed, so a remembered failure kept it a non-voter, unhealthy
// ("the leader's raft heartbeats to it fail"), for good.
func TestReplacedMemberWithSameIDIsPromoted(t *testing.T) {
	t.Parallel()
	c := newMemCluster(t)
	n1 := c.open("n1", "", true)
	c.leader(n1)
	n2, n3 := c.open("n2", "", false), c.open("n3", "", false)
	c.join(n2, n1)
	c.join(n3, n1, n2)
	l := c.leader(n1, n2, n3)
	var f *Node
	for _, n := range []*Node{n1, n2, n3} {
		if n != l {
			f = n
			break
		}
	}
	id, raftAddr := f.self.ID, f.self.RaftAddr
	c.stop(f)
	// Wait until the leader has seen its heartbeats to the stopped member fail.
	require.Eventually(t, func() bool {
		l.mu.Lock()
		defer l.mu.Unlock()
		_, failing := l.unhealty[raft.ServerID(id)]
		return failing
	}, 10*time.Second, 20*time.Millisecond, "the leader never saw a heartbeat to the stopped member fail")
	require.NoError(t, l.Remove(id, false))

	again := c.open(id, raftAddr, false)
	c.join(again, l) // waits until the leader has made it a voter
	require.True(t, member(t, l, id).Healthy, "%+v", member(t, l, id))
}
