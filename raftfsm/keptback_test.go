package raftfsm

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/stretchr/testify/require"

	"github.com/idem-store/idem/engine"
)

// A non-voter the leader keeps one because its state lacks records (here:
// upgraded on a data dir on which an earlier release skipped capped
// claims) answered consistency=stale reads from that state, and /readyz
// 200 (api): a key the cluster holds could be read there as absent. Bug:
// nothing told the node it was kept back. It now asks the leader, and
// while the leader names a reason it refuses stale reads (KeptBackError)
// until it is promoted; a normally joining node, and a voter, serve them.
func TestKeptBackNonVoterRefusesStaleReads(t *testing.T) {
	c := newMemCluster(t)
	var mu sync.Mutex
	lacking := true
	probe := func(ctx context.Context, addr string) (Status, error) {
		st, err := c.probe(ctx, addr)
		mu.Lock()
		defer mu.Unlock()
		if addr == "mem-n3" && lacking {
			st.Gated = ptr(uint64(0)) // its state records no capped claim: it skipped them
		}
		return st, err
	}
	n1 := c.open("n1", "", true)
	n1.SetPeerProbe(probe)
	c.leader(n1)
	n2 := c.open("n2", "", false)
	c.join(n2, n1)
	require.Eventually(t, func() bool { return n1.membersHave(FeatureCredentialCap) }, 10*time.Second, 20*time.Millisecond)
	a := capClaim("cus_1", "k", 5, "cus_")
	require.Equal(t, engine.OutcomeClaimed, mustClaim(t, n1, a).Outcome)
	stale := func(n *Node) error {
		_, _, err := n.Lookup(context.Background(), a.Scope, false, false)
		return err
	}
	require.NoError(t, stale(n2), "a voter serves stale reads")
	require.NoError(t, n2.KeptBack())

	n3 := c.open("n3", "", false)
	res, err := n1.Join(n3.Self(), false, false)
	require.NoError(t, err)
	require.Equal(t, "nonvoter", res.Suffrage)
	require.NoError(t, n3.Admitted(res.AdmittedIndex))
	require.Eventually(t, func() bool { return member(t, n1, "n3").NotPromoted != "" }, 10*time.Second, 20*time.Millisecond)

	require.Eventually(t, func() bool { return n3.KeptBack() != nil }, 10*time.Second, 20*time.Millisecond,
		"n3 never learned that the leader keeps it a non-voter")
	err = stale(n3)
	var kept *KeptBackError
	require.True(t, errors.As(err, &kept), "a stale read on the kept node: %v", err)
	require.Equal(t, "n1", kept.Leader)
	require.Equal(t, "n3", kept.Node)
	require.Contains(t, kept.Reason, "upgraded on its data dir")
	require.Contains(t, kept.Detail(), "empty data dir and --join")
	require.Contains(t, kept.Detail(), "answers no consistency=stale read")
	// A linearizable read is the leader's (the api package forwards it).
	_, _, err = n3.Lookup(context.Background(), a.Scope, false, true)
	require.ErrorIs(t, err, ErrNotLeader)
	// It stays kept across rounds in which the leader names the reason.
	time.Sleep(4 * probeEvery)
	require.Error(t, n3.KeptBack())
	require.NoError(t, stale(n2))

	// Rebuilt (its state records them): promoted, and it serves stale reads.
	mu.Lock()
	lacking = false
	mu.Unlock()
	c.waitSuffrage(n1, "n3", "Voter")
	require.Eventually(t, func() bool { return n3.KeptBack() == nil }, 10*time.Second, 20*time.Millisecond)
	require.NoError(t, stale(n3))
}

// A non-voter joining and catching up as usual is never kept back.
func TestNonVoterCatchingUpIsNotKeptBack(t *testing.T) {
	c := newMemCluster(t)
	n1 := c.open("n1", "", true)
	c.leader(n1)
	for i := range 50 {
		require.NoError(t, claim(n1, "k"+string(rune('a'+i%26))+string(rune('a'+i/26))))
	}
	n2 := c.open("n2", "", false)
	var everKept sync.Map
	done := make(chan struct{})
	go func() {
		for {
			select {
			case <-done:
				return
			case <-time.After(5 * time.Millisecond):
				if n2.KeptBack() != nil {
					everKept.Store("n2", true)
				}
			}
		}
	}()
	c.join(n2, n1)
	time.Sleep(3 * probeEvery)
	close(done)
	_, kept := everKept.Load("n2")
	require.False(t, kept, "a non-voter catching up was kept back")
}

// The cluster's first claim carrying its credential's cap, written while a
// non-voter is caught up (between two of the leader's health rounds): its
// last answer, taken before the claim, records no capped claim applied,
// and the leader compared it with its own state as it is after the claim,
// so it named the non-voter's state as lacking records (not_promoted) until
// its next round; the non-voter, asking then, was kept back (/readyz 503,
// stale reads refused) for three more rounds. A node is compared with the
// leader's state as of the index its answer is known to have applied.
func TestFirstCappedClaimDoesNotKeepACaughtUpNonVoterBack(t *testing.T) {
	c := newMemCluster(t)
	n1 := c.open("n1", "", true)
	c.leader(n1)
	var calls atomic.Int32
	var triggered atomic.Bool
	n1.SetPeerProbe(func(ctx context.Context, addr string) (Status, error) {
		st, err := c.probe(ctx, addr)
		if err != nil || addr != "mem-n2" || calls.Add(1) < 2 || triggered.Load() {
			return st, err
		}
		if st.AppliedIndex >= n1.raft.CommitIndex() && n1.membersHave(FeatureCredentialCap) {
			// Caught up, and its answer is on its way: the first capped claim now.
			mustClaim(t, n1, capClaim("cus_1", "k", 5, "cus_"))
			triggered.Store(true)
		}
		return st, err
	})
	n2 := c.open("n2", "", false)
	res, err := n1.Join(n2.Self(), false, false)
	require.NoError(t, err)
	require.NoError(t, n2.Admitted(res.AdmittedIndex))
	require.Eventually(t, triggered.Load, 20*time.Second, 5*time.Millisecond, "the capped claim was never written while n2 was a caught-up non-voter")
	named := ""
	deadline := time.Now().Add(3 * probeEvery)
	for time.Now().Before(deadline) && named == "" {
		m := member(t, n1, "n2")
		if m.Suffrage == raft.Nonvoter.String() {
			named = m.NotPromoted
		}
		if n2.KeptBack() != nil {
			named = n2.KeptBack().Error()
		}
		time.Sleep(5 * time.Millisecond)
	}
	require.Empty(t, named, "a caught-up non-voter whose state holds every record was kept back")
	c.waitSuffrage(n1, "n2", "Voter")
}
