package raftfsm

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/stretchr/testify/require"

	"github.com/idem-store/idem/engine"
)

func capClaim(principal, key string, max int64, prefixes ...string) engine.ClaimArgs {
	return engine.ClaimArgs{Scope: engine.Scope{Principal: principal, Endpoint: "e", Key: key}, Fingerprint: "aa",
		LeaseMs: 60_000, RetentionMs: 3_600_000, CredentialPrefixes: prefixes, CredentialMaxPrincipals: max}
}

func TestClaimCodecCarriesCredentialCap(t *testing.T) {
	a := capClaim("cus_1", "k", 1000, "cus_", "", "acme_")
	a.MaxPrincipals = 7
	b, err := (&Command{Op: OpClaim, NowMs: 5, WidthMs: 9, Claim: &a}).Encode()
	require.NoError(t, err)
	c, err := DecodeCommand(b)
	require.NoError(t, err)
	require.Equal(t, a, *c.Claim)
	const flagsAt = 4
	require.Equal(t, byte(flagMaxPrincipals|flagCredentialCap), b[flagsAt])
	// Without a cap, the entry is what the builds before it wrote.
	a.CredentialPrefixes, a.CredentialMaxPrincipals = nil, 0
	without, err := (&Command{Op: OpClaim, NowMs: 5, WidthMs: 9, Claim: &a}).Encode()
	require.NoError(t, err)
	require.Equal(t, without, append(append([]byte(nil), b[:flagsAt]...), append([]byte{flagMaxPrincipals}, b[flagsAt+1:len(without)]...)...))
	// A prefix count beyond the entry is refused, not allocated.
	bad := append(append([]byte(nil), without...), 0xff, 0xff, 0x03)
	bad[flagsAt] |= flagCredentialCap
	_, err = DecodeCommand(bad)
	require.ErrorIs(t, err, ErrBadCommand)
}

func mustClaim(t *testing.T, n *Node, a engine.ClaimArgs) engine.Result {
	t.Helper()
	res, _, err := n.Claim(a)
	require.NoError(t, err)
	return res
}

func waitApplied(t *testing.T, from *Node, nodes ...*Node) {
	t.Helper()
	idx := from.raft.AppliedIndex()
	require.Eventually(t, func() bool {
		for _, n := range nodes {
			if n.db.Meta().Applied < idx {
				return false
			}
		}
		return true
	}, 10*time.Second, 10*time.Millisecond)
}

// The cap is decided by Apply on every replica: a capped credential is
// refused at its cap while another still creates principals, a principal
// holding keys still claims, the batch decides as the route, and a
// replica restarted and caught up by a snapshot counts the same and, once
// it leads, refuses the same.
func TestCredentialCapReplicated(t *testing.T) {
	c := newMemCluster(t)
	logs := &logBuffer{}
	n1 := c.openAt("n1", t.TempDir(), "127.0.0.1:0", true, logs)
	c.leader(n1)
	n2 := c.openAt("n2", t.TempDir(), "127.0.0.1:0", false, logs)
	c.join(n2, n1)
	dir3, addr3 := t.TempDir(), absentAddr(t)
	n3 := c.openAt("n3", dir3, addr3, false, logs)
	c.join(n3, n1)
	require.Eventually(t, func() bool { return n1.membersHave(FeatureCredentialCap) }, 10*time.Second, 20*time.Millisecond)

	require.Equal(t, engine.OutcomeClaimed, mustClaim(t, n1, capClaim("cus_1", "k", 2, "cus_")).Outcome)
	require.Equal(t, engine.OutcomeClaimed, mustClaim(t, n1, capClaim("cus_2", "k", 2, "cus_")).Outcome)
	last := n1.raft.LastIndex()
	r := mustClaim(t, n1, capClaim("cus_3", "k", 2, "cus_"))
	require.Equal(t, engine.OutcomePrincipalLimit, r.Outcome)
	require.True(t, r.ByCredential)
	require.Equal(t, last, n1.raft.LastIndex(), "the leader's peek answered the refusal")
	require.Equal(t, engine.OutcomeClaimed, mustClaim(t, n1, capClaim("acme_1", "k", 2, "acme_")).Outcome, "another credential")
	require.Equal(t, engine.OutcomeClaimed, mustClaim(t, n1, capClaim("cus_1", "k2", 2, "cus_")).Outcome, "a principal holding keys")

	// The batch: the same decisions, and a claim it adds counts for the
	// claims after it in the same entry.
	out := n1.Batch([]BatchOp{
		{Op: OpClaim, Claim: ptr(capClaim("cus_4", "k", 2, "cus_"))},
		{Op: OpClaim, Claim: ptr(capClaim("acme_2", "k", 3, "acme_"))},
		{Op: OpClaim, Claim: ptr(capClaim("cus_2", "k2", 2, "cus_"))},
		{Op: OpClaim, Claim: ptr(capClaim("acme_3", "k", 3, "acme_"))},
		{Op: OpClaim, Claim: ptr(capClaim("acme_4", "k", 3, "acme_"))},
	})
	want := []engine.Outcome{engine.OutcomePrincipalLimit, engine.OutcomeClaimed, engine.OutcomeClaimed,
		engine.OutcomeClaimed, engine.OutcomePrincipalLimit}
	for i, o := range out {
		require.NoError(t, o.Err, "op %d", i)
		require.Equal(t, want[i], o.Outcome, "op %d", i)
	}
	require.True(t, out[0].ByCredential)
	require.True(t, out[4].ByCredential, "decided by Apply, after acme_3 in the same entry")

	waitApplied(t, n1, n2, n3)
	h1, _, err := n1.StateHash()
	require.NoError(t, err)
	for _, n := range []*Node{n2, n3} {
		h, _, err := n.StateHash()
		require.NoError(t, err)
		require.Equal(t, h1, h)
		for p, want := range map[string]int64{"cus_": 2, "acme_": 3} {
			got, err := n.db.PrefixPrincipals(p)
			require.NoError(t, err)
			require.Equal(t, want, got, "%s under %q", n.self.ID, p)
		}
	}

	// n3 stops, misses enough entries to be sent a snapshot, comes back.
	c.stop(n3)
	stoppedAt := n1.raft.LastIndex()
	for i := range 24 {
		require.Equal(t, engine.OutcomeClaimed, mustClaim(t, n1, capClaim("cus_1", fmt.Sprint("more", i), 2, "cus_")).Outcome)
	}
	require.Eventually(t, func() bool {
		_ = n1.Snapshot() // "nothing new" once taken: then wait for the compaction
		first, err := n1.logStore.FirstIndex()
		return err == nil && first > stoppedAt+1
	}, 10*time.Second, 50*time.Millisecond, "the leader never compacted past the stopped follower")
	logs3 := &logBuffer{}
	n3 = c.openAt("n3", dir3, addr3, false, logs3)
	require.Eventually(t, func() bool { return strings.Contains(logs3.String(), "restored snapshot") }, 20*time.Second, 20*time.Millisecond,
		"n3 was never sent a snapshot")
	require.Eventually(t, func() bool { return n3.db.Meta().Applied >= n1.raft.AppliedIndex() }, 20*time.Second, 20*time.Millisecond)
	require.NoError(t, n1.TransferLeadershipTo("n3"))
	require.Eventually(t, n3.IsLeader, 10*time.Second, 10*time.Millisecond)
	require.Eventually(t, func() bool { return n3.membersHave(FeatureCredentialCap) }, 10*time.Second, 20*time.Millisecond)
	r = mustClaim(t, n3, capClaim("cus_5", "k", 2, "cus_"))
	require.Equal(t, engine.OutcomePrincipalLimit, r.Outcome, "the restarted replica counts the same")
	require.True(t, r.ByCredential)
	require.Equal(t, engine.OutcomeClaimed, mustClaim(t, n3, capClaim("cus_5", "k", 3, "cus_")).Outcome)
	require.Equal(t, engine.OutcomePrincipalLimit, mustClaim(t, n3, capClaim("cus_6", "k", 3, "cus_")).Outcome)
	for _, n := range []*Node{n1, n3} {
		n.capFlight.mu.Lock()
		require.Empty(t, n.capFlight.n, "%s: a decided claim still counts as in flight", n.self.ID)
		n.capFlight.mu.Unlock()
	}
	waitApplied(t, n3, n1, n2)
	h3, _, err := n3.StateHash()
	require.NoError(t, err)
	for _, n := range []*Node{n1, n2} {
		h, _, err := n.StateHash()
		require.NoError(t, err)
		require.Equal(t, h3, h)
	}
}

// While a member does not list FeatureCredentialCap the cap stays out of
// the log (that member would refuse the entry) and the leader checks it
// against its own applied state; once every member lists it, entries
// carry it.
func TestCredentialCapWaitsForEveryMember(t *testing.T) {
	var upgraded atomic.Bool
	n1 := gatedCapLeader(t, &upgraded)

	lastClaim := func() *engine.ClaimArgs {
		t.Helper()
		for i := n1.raft.LastIndex(); i > 0; i-- {
			var l raft.Log
			require.NoError(t, n1.logStore.GetLog(i, &l))
			if l.Type != raft.LogCommand {
				continue
			}
			cmd, err := DecodeCommand(l.Data)
			require.NoError(t, err)
			require.Equal(t, OpClaim, cmd.Op)
			return cmd.Claim
		}
		t.Fatal("no claim in the log")
		return nil
	}
	require.Equal(t, engine.OutcomeClaimed, mustClaim(t, n1, capClaim("cus_1", "k", 2, "cus_")).Outcome)
	require.Zero(t, lastClaim().CredentialMaxPrincipals, "an older member cannot decode the cap")
	require.Equal(t, engine.OutcomeClaimed, mustClaim(t, n1, capClaim("cus_2", "k", 2, "cus_")).Outcome)
	last := n1.raft.LastIndex()
	r := mustClaim(t, n1, capClaim("cus_3", "k", 2, "cus_"))
	require.Equal(t, engine.OutcomePrincipalLimit, r.Outcome, "the leader's own check")
	require.True(t, r.ByCredential)
	out := n1.Batch([]BatchOp{{Op: OpClaim, Claim: ptr(capClaim("cus_3", "k", 2, "cus_"))}})
	require.Equal(t, engine.OutcomePrincipalLimit, out[0].Outcome)
	require.Equal(t, last, n1.raft.LastIndex())
	out = n1.Batch([]BatchOp{{Op: OpClaim, Claim: ptr(capClaim("cus_1", "k2", 2, "cus_"))}})
	require.Equal(t, engine.OutcomeClaimed, out[0].Outcome)
	require.Zero(t, lastClaim().CredentialMaxPrincipals, "nor in a batch")

	upgraded.Store(true)
	require.Eventually(t, func() bool { return n1.membersHave(FeatureCredentialCap) }, 10*time.Second, 20*time.Millisecond)
	require.Equal(t, engine.OutcomeClaimed, mustClaim(t, n1, capClaim("cus_3", "k", 3, "cus_")).Outcome)
	a := lastClaim()
	require.EqualValues(t, 3, a.CredentialMaxPrincipals)
	require.Equal(t, []string{"cus_"}, a.CredentialPrefixes)
}

// gatedCapLeader is the leader of two nodes that answer each other as the
// release before the cap until upgraded (nil: never): it keeps the cap out
// of the log and checks it itself.
func gatedCapLeader(t *testing.T, upgraded *atomic.Bool) *Node {
	c := newMemCluster(t)
	hide := func(ctx context.Context, addr string) (Status, error) {
		st, err := c.probe(ctx, addr)
		if upgraded == nil || !upgraded.Load() {
			st.Features = []string{FeatureRetention, FeatureKeyCheck} // the release before the cap
		}
		return st, err
	}
	n1 := c.open("n1", "", true)
	n1.SetPeerProbe(hide)
	c.leader(n1)
	n2 := c.open("n2", "", false)
	n2.SetPeerProbe(hide)
	c.join(n2, n1)
	require.False(t, n1.membersHave(FeatureCredentialCap))
	return n1
}

// While the cap is the leader's own check (a member does not list
// FeatureCredentialCap), the claims of one batch for new principals count
// for the ones after them: the leader decides them all against the same
// applied state, so without that one request of N new principals went N
// past the cap.
func TestCredentialCapGatedBatchCountsItsOwnClaims(t *testing.T) {
	n1 := gatedCapLeader(t, nil)

	require.Equal(t, engine.OutcomeClaimed, mustClaim(t, n1, capClaim("cus_1", "k", 3, "cus_")).Outcome)
	out := n1.Batch([]BatchOp{
		{Op: OpClaim, Claim: ptr(capClaim("cus_2", "k", 3, "cus_"))},
		{Op: OpClaim, Claim: ptr(capClaim("cus_2", "k2", 3, "cus_"))}, // the same new principal again
		{Op: OpClaim, Claim: ptr(capClaim("cus_1", "k2", 3, "cus_"))}, // holds keys
		{Op: OpClaim, Claim: ptr(capClaim("cus_3", "k", 3, "cus_"))},
		{Op: OpClaim, Claim: ptr(capClaim("cus_4", "k", 3, "cus_"))},
		{Op: OpClaim, Claim: ptr(capClaim("cus_5", "k", 3, "cus_"))},
		{Op: OpClaim, Claim: ptr(capClaim("acme_1", "k", 3, "acme_"))}, // another prefix
	})
	want := []engine.Outcome{engine.OutcomeClaimed, engine.OutcomeClaimed, engine.OutcomeClaimed, engine.OutcomeClaimed,
		engine.OutcomePrincipalLimit, engine.OutcomePrincipalLimit, engine.OutcomeClaimed}
	for i, o := range out {
		require.NoError(t, o.Err, "op %d", i)
		require.Equal(t, want[i], o.Outcome, "op %d", i)
	}
	got, err := n1.db.PrefixPrincipals("cus_")
	require.NoError(t, err)
	require.EqualValues(t, 3, got)
}

// While the leader checks the cap itself, concurrent claims for new
// principals count for each other until they are decided: without that,
// 40 requests in flight took a token of cap 8 to 15 principals in the
// walkthrough (a member down at an election keeps the cap out of the log).
func TestCredentialCapGatedConcurrentClaims(t *testing.T) {
	n1 := gatedCapLeader(t, nil)

	const cap, tries = 3, 40
	var claimed atomic.Int32
	done := make(chan struct{})
	for i := range tries {
		go func() {
			defer func() { done <- struct{}{} }()
			res, _, err := n1.Claim(capClaim(fmt.Sprint("cus_", i), "k", cap, "cus_"))
			if err == nil && res.Outcome == engine.OutcomeClaimed {
				claimed.Add(1)
			}
		}()
	}
	for range tries {
		<-done
	}
	got, err := n1.db.PrefixPrincipals("cus_")
	require.NoError(t, err)
	require.EqualValues(t, cap, got)
	require.EqualValues(t, cap, claimed.Load())
}

// While the leader checks the cap itself, a new leader checks only once
// its state holds every claim the last term committed (its term's
// barrier): a node elected while its FSM still applied them let claims
// for new principals through against a count without them.
func TestCredentialCapGatedNewLeaderWaitsForTheLastTerm(t *testing.T) {
	c := newMemCluster(t)
	hide := func(ctx context.Context, addr string) (Status, error) {
		st, err := c.probe(ctx, addr)
		st.Features = []string{FeatureRetention, FeatureKeyCheck} // the release before the cap
		return st, err
	}
	n1 := c.open("n1", "", true)
	n1.SetPeerProbe(hide)
	c.leader(n1)
	n2, n3 := c.open("n2", "", false), c.open("n3", "", false)
	for _, n := range []*Node{n2, n3} {
		n.SetPeerProbe(hide)
		c.join(n, n1)
	}
	waitApplied(t, n1, n2, n3)

	// n2's FSM stalls: it has the claims below in its log, not applied.
	var stalled atomic.Bool
	stalled.Store(true)
	setApplyHook(t, func(f *FSM, _ []*raft.Log) {
		for f == n2.fsm && stalled.Load() {
			time.Sleep(5 * time.Millisecond)
		}
	})
	const cap = 3
	for i := range cap {
		require.Equal(t, engine.OutcomeClaimed, mustClaim(t, n1, capClaim(fmt.Sprintf("cus_%d", i), "k", cap, "cus_")).Outcome)
	}
	require.NoError(t, n1.TransferLeadershipTo("n2"))
	c.leader(n2)
	require.False(t, n2.membersHave(FeatureCredentialCap), "the cap is the leader's own check")
	got, err := n2.db.PrefixPrincipals("cus_")
	require.NoError(t, err)
	require.Less(t, got, int64(cap), "n2's state already holds the claims: the test would prove nothing")

	go func() {
		time.Sleep(300 * time.Millisecond)
		stalled.Store(false)
	}()
	res, _, err := n2.Claim(capClaim("cus_new", "k", cap, "cus_"))
	require.NoError(t, err)
	require.Equal(t, engine.OutcomePrincipalLimit, res.Outcome, "a new leader let a claim past the cap before applying the last term's claims")
	got, err = n2.db.PrefixPrincipals("cus_")
	require.NoError(t, err)
	require.EqualValues(t, cap, got)
	n2.capFlight.mu.Lock()
	require.Empty(t, n2.capFlight.n, "a decided claim still counts as in flight")
	n2.capFlight.mu.Unlock()
}

// A claim the leader let past a credential cap in one term is not proposed
// in another: a leader between the two may have decided claims that check
// did not see. Alone or in a batch, it is refused as not proposed.
func TestCredentialCapCheckBindsToItsTerm(t *testing.T) {
	n1 := gatedCapLeader(t, nil)
	term := n1.term()
	stale := func() *Command {
		return &Command{Op: OpClaim, Claim: ptr(capClaim("cus_1", "k", 3, "cus_")), capTerm: term - 1}
	}
	_, err := n1.propose(stale())
	require.ErrorIs(t, err, ErrNotProposed)
	_, err = n1.proposeEntry([]*Command{stale(), {Op: OpClaim, Claim: ptr(capClaim("cus_2", "k", 3, "cus_"))}})
	require.ErrorIs(t, err, ErrNotProposed)
	got, err := n1.db.PrefixPrincipals("cus_")
	require.NoError(t, err)
	require.Zero(t, got, "nothing was decided")
	c := stale()
	c.capTerm = term
	r, err := n1.propose(c)
	require.NoError(t, err)
	require.Equal(t, engine.OutcomeClaimed, r.Outcome, "checked in this term: proposed")
}
