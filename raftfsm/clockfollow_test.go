package raftfsm

import (
	"errors"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/stretchr/testify/require"

	"github.com/idem-store/idem/engine"
)

// Two nodes of three restarted (a kill -9 of both, back within seconds)
// while n3 stayed up and counted the gap; a restarted node led, resuming
// cluster time from the last time it had applied, so its stamps came
// within ttl.RewindAfter of n3's reading, which n3 kept. When n3 later led
// (a transfer, or the leader dying), its first stamps moved cluster time
// on by the gap at once: on real processes a restart of 3 s expired 91
// records created meanwhile between 0.5 and 3 s early, each claimed afresh
// by a retry (a payment charged twice). Cluster time must never run ahead
// of real time since a record was created.
func TestLeaderThatCountedAMajorityRestartDoesNotJumpClusterTime(t *testing.T) {
	c := newMemCluster(t)
	n1, n2, n3 := c.three()
	require.NoError(t, claim(c.leader(n1, n2, n3), "before"))
	waitAppliedIndex(t, n3, n1.raft.CommitIndex())

	// As when n3 is slow to stand (a SIGSTOP, a stalled disk): the
	// restarted nodes elect one of themselves.
	refuse := func(self raft.ServerID, rpc raft.RPC) error {
		switch r := rpc.Command.(type) {
		case *raft.RequestVoteRequest:
			if string(r.RPCHeader.ID) == "n3" {
				return errors.New("test: n3 stands too late")
			}
		case *raft.RequestPreVoteRequest:
			if string(r.RPCHeader.ID) == "n3" {
				return errors.New("test: n3 stands too late")
			}
		}
		return nil
	}
	rpcHook.Store(&refuse)
	t.Cleanup(func() { rpcHook.Store(nil) })
	cfg1, cfg2 := n1.cfg, n2.cfg
	cfg1.RaftAddr, cfg1.RaftAdvertise = n1.self.RaftAddr, ""
	cfg2.RaftAddr, cfg2.RaftAdvertise = n2.self.RaftAddr, ""
	c.stop(n1)
	c.stop(n2)
	time.Sleep(2 * time.Second) // n3 counts it; the two resume from their applied time
	n1, n2 = c.start(cfg1), c.start(cfg2)
	l := c.leader(n1, n2)

	s := engine.Scope{Principal: "p", Endpoint: "e", Key: "mid"}
	created := time.Now() // before the record's stamp: what passed is not undercounted
	res, _, err := l.Claim(engine.ClaimArgs{Scope: s, Fingerprint: "aa", LeaseMs: 1000, RetentionMs: 60_000})
	require.NoError(t, err)
	require.Equal(t, engine.OutcomeClaimed, res.Outcome)
	waitAppliedIndex(t, n3, l.raft.CommitIndex())
	rpcHook.Store(nil)

	require.NoError(t, l.TransferLeadershipTo("n3"))
	require.Eventually(t, n3.IsLeader, 10*time.Second, 10*time.Millisecond)
	require.NoError(t, claim(n3, "after"))
	passed := time.Since(created)
	advanced := time.Duration(n3.db.Meta().NowMs-res.Record.CreatedMs) * time.Millisecond
	require.LessOrEqual(t, advanced, passed+300*time.Millisecond,
		"cluster time ran %s in %s since the record was created: it would expire that much early", advanced, passed)
}

func waitAppliedIndex(t *testing.T, n *Node, index uint64) {
	t.Helper()
	require.Eventually(t, func() bool { return n.db.Meta().Applied >= index }, 10*time.Second, 5*time.Millisecond,
		"%s never applied index %d", n.self.ID, index)
}
