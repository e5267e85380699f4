package raftfsm

import (
	"errors"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/stretchr/testify/require"
)

// A voter emptied and started again at its own addresses without idem
// cluster remove (the careless replacement): it learns its mark from the
// leader and starts catching up, holding its vote and, with raft's
// heartbeat timeout at 24h, its campaign. The leader dies before it has
// caught up. The other full voter's log reaches the mark, so the held
// node may vote for it, but raft on the held node never noticed the
// leader's silence (its heartbeat timeout is a day), still took the dead
// leader for its leader, and refused every pre-vote and vote "since we
// have a leader": the cluster had no leader until the dead node was back
// (an operator walk). The guard now lets such a vote through as a
// leadership transfer's, and answers the pre-vote (foreignGuard.settle).
func TestHeldVoterForgetsADeadLeader(t *testing.T) {
	t.Parallel()
	c := newMemCluster(t)
	n1, n2, n3 := c.three()
	for i := range 50 {
		require.NoError(t, claim(n1, "k"+string(rune('a'+i%26))+string(rune('a'+i/26))))
	}
	require.Same(t, n1, c.leader(n1, n2, n3))
	raft3 := n3.self.RaftAddr
	c.stop(n3)
	var logs3 logBuffer
	fresh := c.openIn2("n3", t.TempDir(), raft3, &logs3) // n3's disk lost, no removal
	// The leader reaches it (the mark) but dies before it has caught up.
	var reached bool
	cut := func(rpc raft.RPC) error {
		switch r := rpc.Command.(type) {
		case *raft.AppendEntriesRequest:
			if r.LeaderCommitIndex > 0 && reached {
				return errors.New("test: the leader died")
			}
			if r.LeaderCommitIndex > 0 {
				reached = true
			}
		case *raft.InstallSnapshotRequest:
			return errors.New("test: the leader died")
		}
		return nil
	}
	fresh.guard.hook.Store(&cut)
	require.Eventually(t, func() bool { return fresh.voteMark().term > 0 }, 15*time.Second, 10*time.Millisecond, "the leader never reached the emptied n3")
	require.True(t, fresh.voteHeld())
	c.stop(n1)
	fresh.guard.hook.Store(nil)

	defer func() {
		if t.Failed() {
			t.Log(logs3.String())
		}
	}()
	l := c.leader(n2, fresh)
	require.NoError(t, claim(l, "after"))
}
