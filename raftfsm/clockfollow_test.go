package raftfsm

import (
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/stretchr/testify/assert"
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
	refuseVotesFrom(t, "n3")
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

// n3, a follower that had applied everything, stayed up while the leader
// and n2 were down for 12 s, and led once they were back: nothing newer
// to apply, so the log's time, extrapolated from when n3 applied its
// newest entry, counted the outage (real time, which alone expires
// nothing early). But its first stamps ran more than ttl.MaxStep past the
// applied time, and Step moves cluster time at most 10 s an entry: the
// first claims were decided at the capped time (created, and their leases
// counted, from there) and the entries right after moved time on by the
// rest of the gap within milliseconds. Those records expired, and their
// leases ran out, that much early.
func TestLeaderThatCountedAnOutageDoesNotAgeItsFirstRecordsAtOnce(t *testing.T) {
	c := newMemCluster(t)
	open := func(id string, bootstrap bool) *Node {
		cfg := DefaultConfig()
		cfg.NodeID, cfg.DataDir, cfg.Bootstrap = id, t.TempDir(), bootstrap
		cfg.RaftAddr, cfg.HTTPAdvertise = "127.0.0.1:0", "mem-"+id
		cfg.TickInterval = time.Hour // no tick or announce comes between the test's entries
		return c.start(cfg)
	}
	n1 := open("n1", true)
	c.leader(n1)
	n2, n3 := open("n2", false), open("n3", false)
	c.join(n2, n1)
	c.join(n3, n1)
	l := c.leader(n1, n2, n3)
	if l == n3 {
		require.NoError(t, n3.TransferLeadershipTo("n1"))
		l = c.leader(n1, n2)
	}
	require.NoError(t, claim(l, "before"))
	waitAppliedIndex(t, n3, l.raft.CommitIndex())
	waitAppliedIndex(t, n1, l.raft.CommitIndex())
	waitAppliedIndex(t, n2, l.raft.CommitIndex())

	// n3 stands first once the others are back (they restart slowly).
	refuseVotesFrom(t, "n1", "n2")
	cfg1, cfg2 := n1.cfg, n2.cfg
	cfg1.RaftAddr, cfg1.RaftAdvertise = n1.self.RaftAddr, ""
	cfg2.RaftAddr, cfg2.RaftAdvertise = n2.self.RaftAddr, ""
	c.stop(n1)
	c.stop(n2)
	time.Sleep(12 * time.Second)
	c.start(cfg1)
	c.start(cfg2)
	c.leader(n3)

	const claims = 16
	created := time.Now() // before every stamp
	recs := make([]*engine.Record, claims)
	var wg sync.WaitGroup
	for i := range claims {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// A loaded machine can take n3's lead away as the restarted
			// nodes catch up (only n3 can win it back: the hook): a claim
			// that failed is made again under a new key until it holds.
			deadline := time.Now().Add(30 * time.Second)
			for try := 0; ; try++ {
				s := engine.Scope{Principal: "p", Endpoint: "e", Key: fmt.Sprintf("k%d-%d", i, try)}
				res, _, err := n3.Claim(engine.ClaimArgs{Scope: s, Fingerprint: "aa", LeaseMs: 30_000, RetentionMs: 60_000})
				if err != nil && time.Now().Before(deadline) {
					time.Sleep(100 * time.Millisecond)
					continue
				}
				if assert.NoError(t, err) && assert.Equal(t, engine.OutcomeClaimed, res.Outcome) {
					recs[i] = res.Record
				}
				return
			}
		}()
	}
	wg.Wait()
	require.Eventually(t, func() bool { return claim(n3, "after") == nil }, 30*time.Second, 100*time.Millisecond)
	passed := time.Since(created)
	now := n3.db.Meta().NowMs
	for i, r := range recs {
		if r == nil {
			continue
		}
		advanced := time.Duration(now-r.CreatedMs) * time.Millisecond
		assert.LessOrEqual(t, advanced, passed+300*time.Millisecond,
			"claim %d: cluster time ran %s in %s since it was created: it expires, and its lease runs out, that much early", i, advanced, passed)
	}
}

// refuseVotesFrom makes every node refuse the vote and pre-vote requests
// of ids until the test ends: as when they are slow to stand (a SIGSTOP,
// a stalled disk, a slow restart), another node leads.
func refuseVotesFrom(t *testing.T, ids ...string) {
	refuse := func(self raft.ServerID, rpc raft.RPC) error {
		var from string
		switch r := rpc.Command.(type) {
		case *raft.RequestVoteRequest:
			from = string(r.RPCHeader.ID)
		case *raft.RequestPreVoteRequest:
			from = string(r.RPCHeader.ID)
		}
		if slices.Contains(ids, from) {
			return fmt.Errorf("test: %s stands too late", from)
		}
		return nil
	}
	rpcHook.Store(&refuse)
	t.Cleanup(func() { rpcHook.Store(nil) })
}
