package raftfsm

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/stretchr/testify/require"

	"github.com/idem-store/idem/engine"
)

// A follower runs a client's write itself before forwarding it: the check
// that guards sealing (sealReady) passes there, since only a leader checks,
// and propose then commits the write if the node leads by that time. A
// keyless node that won the leadership between the two stored a
// correlation id in plaintext in an encrypted cluster (review of the key
// checks). The check binds to the term it was made in: propose makes it
// again, after the term's barrier, for a write checked in another term (or
// not at all).
func TestSealCheckBindsToItsTerm(t *testing.T) {
	c := newMemCluster(t)
	n1 := c.open("n1", "", true)
	c.leader(n1)
	n2 := c.open("n2", "", false) // no key file
	c.join(n2, n1)                // a voter before encryption is on
	n1.setKeyring(testRing(t, "k1"))
	write(t, n1, "before") // a value under k1: the cluster uses encryption
	require.Eventually(t, func() bool { return len(n2.fsm.keys.inUse()) > 0 }, 5*time.Second, 10*time.Millisecond)

	// n2 checks as a follower, then leads (blind: it keeps the leadership
	// rather than hand it back) before it proposes.
	var blind interface{ Store(bool) }
	h := func(n *Node) {
		if n == n2 && blind == nil {
			blind = leadBlind(t, c, n1, n2)
		}
	}
	sealCheckHook.Store(&h)
	t.Cleanup(func() {
		sealCheckHook.Store(nil)
		if blind != nil {
			blind.Store(false)
		}
	})
	s := engine.Scope{Principal: "cus_1", Endpoint: "POST /pay", Key: "corr"}
	_, _, err := n2.Claim(engine.ClaimArgs{Scope: s, Fingerprint: "aa", CorrelationID: secretCorrelation, LeaseMs: 60_000, RetentionMs: 3_600_000})
	require.NotNil(t, blind, "n2 leads now")
	var refused *SealRefusedError
	require.ErrorAs(t, err, &refused, "checked as a follower, the claim must be checked again by the leader it reached")
	require.ErrorIs(t, err, ErrNotProposed)
	_, ok := n1.db.Lookup(s, false, n1.db.Meta().NowMs)
	require.False(t, ok, "nothing was stored")
}

// A new leader's state may lack what earlier leaders committed until its
// term's barrier is applied: checked before it, a keyless leader whose
// state did not hold the cluster's first sealed value yet saw a plaintext
// cluster, and stored a correlation id in plaintext. The check waits for
// the barrier.
func TestSealCheckWaitsForTheTermsBarrier(t *testing.T) {
	c := newMemCluster(t)
	n1 := c.open("n1", "", true)
	c.leader(n1)
	n2 := c.open("n2", "", false) // no key file
	c.join(n2, n1)                // a voter before encryption is on
	c.waitSuffrage(n1, "n2", "Voter")

	// n2 applies nothing from here until it leads and is asked to write.
	var stuck atomic.Bool
	setApplyHook(t, func(f *FSM, _ []*raft.Log) {
		for f == n2.fsm && stuck.Load() {
			time.Sleep(5 * time.Millisecond)
		}
	})
	stuck.Store(true)
	t.Cleanup(func() { stuck.Store(false) })
	n1.setKeyring(testRing(t, "k1"))
	write(t, n1, "before") // the cluster's first value under k1
	require.Empty(t, n2.fsm.keys.inUse(), "n2's state does not show it yet")

	blind := leadBlind(t, c, n1, n2)
	t.Cleanup(func() { blind.Store(false) })
	time.AfterFunc(time.Second, func() { stuck.Store(false) })
	s := engine.Scope{Principal: "cus_1", Endpoint: "POST /pay", Key: "corr"}
	_, _, err := n2.Claim(engine.ClaimArgs{Scope: s, Fingerprint: "aa", CorrelationID: secretCorrelation, LeaseMs: 60_000, RetentionMs: 3_600_000})
	var refused *SealRefusedError
	require.ErrorAs(t, err, &refused, "the leader must check with the state its term's barrier applied")
	require.Contains(t, refused.Detail(), "k1")
	_, ok := n1.db.Lookup(s, false, n1.db.Meta().NowMs)
	require.False(t, ok, "nothing was stored")
}
