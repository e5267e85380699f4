package raftfsm

import (
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/stretchr/testify/require"

	"github.com/idem-store/idem/engine"
)

// A member replaced by an empty node under the id of the cluster's
// bootstrap node replays the cluster's log from its start, and while its
// log ends in the stretch the cluster ran as that id alone, its latest
// configuration lists it alone. Its vote was held (voteHold), but not its
// own candidacy: the leader silent for a heartbeat timeout there (here its
// appends and heartbeats are dropped), and the new n1 elected itself
// leader of a cluster of its own over a prefix of the log, without any
// restart. It now stands for election only once it no longer holds its
// vote (campaignHold); reached again, it catches up, votes, campaigns, and
// can take the lead.
func TestJoiningNodeDoesNotCampaignInTheOneNodeStretch(t *testing.T) {
	t.Parallel()
	c := newMemCluster(t)
	n1 := c.open("n1", "", true)
	c.leader(n1)
	for i := range 600 { // past the leader's first batch of 512 entries
		require.NoError(t, claim(n1, fmt.Sprintf("k%d", i)))
	}
	n2 := c.open("n2", "", false)
	c.join(n2, n1)
	n3 := c.open("n3", "", false)
	c.join(n3, n1)
	c.stop(n1)
	l := c.leader(n2, n3)
	c.removeStopped(l, "n1")
	require.NoError(t, claim(l, "after"))

	fresh := c.open("n1", "", false)
	require.True(t, fresh.voteHeld())
	// The leader goes silent for the new n1 once its log ends in the
	// stretch where n1 ran alone.
	var dropped atomic.Int64
	cut := func(rpc raft.RPC) error {
		if _, ok := rpc.Command.(*raft.AppendEntriesRequest); !ok {
			return nil
		}
		f := fresh.raft.GetConfiguration()
		if f.Error() != nil || fresh.raft.LastIndex() == 0 {
			return nil
		}
		if s := f.Configuration().Servers; len(s) != 1 || s[0].ID != "n1" {
			return nil
		}
		dropped.Add(1)
		return errors.New("test: the leader is cut off")
	}
	fresh.guard.hook.Store(&cut)
	res, err := l.Join(fresh.Self(), false, true)
	require.NoError(t, err)
	require.NoError(t, fresh.Admitted(res.AdmittedIndex))
	require.Eventually(t, func() bool { return dropped.Load() > 0 }, 20*time.Second, 10*time.Millisecond, "the new n1's log never ended in the one-node stretch")
	last := fresh.raft.LastIndex()
	require.Less(t, last, l.raft.LastIndex(), "the new n1 caught up in one batch")

	// Several heartbeat and election timeouts without a leader.
	deadline := time.Now().Add(6 * time.Second)
	for time.Now().Before(deadline) {
		require.Equal(t, raft.Follower.String(), fresh.raft.State().String(), "the new n1 stood for election in a configuration of itself alone, its log at index %d", last)
		time.Sleep(20 * time.Millisecond)
	}
	require.True(t, fresh.voteHeld())

	// The leader reaches it again: it catches up, gets its vote back, and
	// stands for election again.
	fresh.guard.hook.Store(nil)
	normal := raft.DefaultConfig()
	require.Eventually(t, func() bool {
		_, found := fresh.db.Lookup(engine.Scope{Principal: "p", Endpoint: "e", Key: "after"}, false, fresh.db.Meta().NowMs)
		rc := fresh.raft.ReloadableConfig()
		return found && !fresh.voteHeld() && rc.HeartbeatTimeout == normal.HeartbeatTimeout && rc.ElectionTimeout == normal.ElectionTimeout
	}, 20*time.Second, 20*time.Millisecond, "the new n1 never caught up, or its election timeouts were not given back")
	require.Same(t, l, c.leader(n2, n3, fresh), "the leader changed")
	require.False(t, fresh.IsLeader())
	c.waitSuffrage(l, "n1", "Voter")
	require.NoError(t, l.TransferLeadershipTo("n1"))
	require.Same(t, fresh, c.leader(fresh), "the hand-off")
	require.Eventually(t, func() bool { return !n2.IsLeader() && !n3.IsLeader() }, 15*time.Second, 10*time.Millisecond, "two leaders")
	require.NoError(t, claim(fresh, "led"))
}

// A node that started empty runs raft with its election timeouts held,
// and refuses a leader's hand-off while it holds its vote.
func TestHeldNodeRefusesAHandOff(t *testing.T) {
	t.Parallel()
	c := newMemCluster(t)
	n := c.openIn2("n3", t.TempDir(), "", nil)
	require.True(t, n.voteHeld())
	rc := n.raft.ReloadableConfig()
	require.Equal(t, campaignHoldTimeout, rc.HeartbeatTimeout)
	require.Equal(t, campaignHoldTimeout, rc.ElectionTimeout)
	require.Error(t, n.mayCampaign(raft.RPCHeader{ID: []byte("n2")}))
	n.refreshMembership()
	require.Equal(t, campaignHoldTimeout, n.raft.ReloadableConfig().HeartbeatTimeout, "lifted while the vote is held")
}

// GET /v1/cluster (Status) says when a node holds its vote and from what,
// and stops once it has caught up: an operator looking for why no leader
// is elected sees it there, not only in the log.
func TestStatusShowsAHeldVote(t *testing.T) {
	t.Parallel()
	c := newMemCluster(t)
	n1 := c.open("n1", "", true)
	c.leader(n1)
	require.NoError(t, claim(n1, "k"))
	st, err := n1.Status()
	require.NoError(t, err)
	require.Nil(t, st.HoldsVote, "a node that bootstrapped holds no vote")

	n2 := c.open("n2", "", false)
	st, err = n2.Status()
	require.NoError(t, err)
	require.NotNil(t, st.HoldsVote, "an empty node holds its vote")
	require.Zero(t, st.HoldsVote.LeaderTerm, "no leader has reached it")

	c.join(n2, n1)
	require.Eventually(t, func() bool {
		st, err := n2.Status()
		return err == nil && st.HoldsVote == nil
	}, 20*time.Second, 20*time.Millisecond, "caught up, it votes again and says so")
}
