package raftfsm

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/stretchr/testify/require"

	"github.com/idem-store/idem/engine"
)

// Review finding: a cluster whose state records a check value for k1 (the
// leader records it within seconds of leading, before sealing anything:
// "from then on the id names that key for the life of the cluster") but
// holds no sealed value yet (a fresh cluster, or just after encryption was
// turned on) lets a keyless voter lead, and that leader stores every
// correlation id and response in plaintext, never hands the leadership
// over and logs nothing: sealReady/keyHandOff/lacksKeys look only at
// keyUse.inUse(), which is empty until the first sealed value. Reproduced
// with real processes (3 nodes, n3 without --encryption-key-file,
// transfer-leadership to n3: the body is plain bytes in every raft-wal).
func TestKeylessLeaderWithRecordedCheckButNoSealedValue(t *testing.T) {
	c := newMemCluster(t)
	n1 := c.open("n1", "", true)
	c.leader(n1)
	n2 := c.open("n2", "", false) // no key file
	c.join(n2, n1)                // a voter before encryption is on (a keyless non-voter is no longer promoted)
	n1.setKeyring(testRing(t, "k1"))
	require.Eventually(t, func() bool { return n2.fsm.keys.check("k1") != nil }, 15*time.Second, 20*time.Millisecond,
		"the keyed leader records k1's check value: the cluster is encrypted")

	// n2 may lead only for a moment (it hands the leadership back as soon
	// as its health loop sees it lacks the key): a poll of IsLeader missed
	// it once under load, so n2's own raft says when it leads.
	led := make(chan raft.Observation, 64)
	obs := raft.NewObserver(led, false, func(o *raft.Observation) bool {
		l, ok := o.Data.(raft.LeaderObservation)
		return ok && l.LeaderID == "n2"
	})
	n2.raft.RegisterObserver(obs)
	defer n2.raft.DeregisterObserver(obs)
	require.NoError(t, n1.TransferLeadershipTo("n2"))
	select {
	case <-led:
	case <-time.After(10 * time.Second):
		t.Fatal("n2 never led after the transfer")
	}
	s := engine.Scope{Principal: "cus_1", Endpoint: "POST /pay", Key: "corr"}
	_, _, err := n2.Claim(engine.ClaimArgs{Scope: s, Fingerprint: "aa",
		CorrelationID: secretCorrelation, LeaseMs: 60_000, RetentionMs: 3_600_000})
	// Refused before the log because n2 was already handing the leadership
	// over (raft refuses applies then: ErrNoLeader), or because it no longer
	// led, is as good; CI once caught the claim in a hand-off that then
	// failed, n2 leading again when the test looked.
	if !errors.Is(err, ErrNoLeader) && !errors.Is(err, ErrNotLeader) {
		var refused *SealRefusedError
		require.ErrorAs(t, err, &refused, "a keyless leader of a cluster that records a key's check value (and whose voters hold it) stored a correlation id in plaintext")
	}
	require.Eventually(t, n1.IsLeader, 10*time.Second, 10*time.Millisecond, "it hands the leadership to the voter that holds the recorded key")
	_, ok := n1.db.Lookup(s, false, n1.db.Meta().NowMs)
	require.False(t, ok, "nothing was stored")
}

// Same root cause, promotion side: a node without a key file joins a
// cluster whose leader holds k1 and whose state records k1's check value,
// but nothing is sealed yet; lacksKeys looks only at inUse and promotes it,
// after which it may lead and store plaintext (previous test).
func TestKeylessNodeNotPromotedWhenCheckRecorded(t *testing.T) {
	c := newMemCluster(t)
	n1 := c.open("n1", "", true)
	n1.setKeyring(testRing(t, "k1"))
	c.leader(n1)
	require.Eventually(t, func() bool { return n1.fsm.keys.check("k1") != nil }, 10*time.Second, 20*time.Millisecond)
	n2 := c.open("n2", "", false) // no key file
	res, err := n1.Join(n2.Self(), false, false)
	require.NoError(t, err)
	require.Equal(t, "nonvoter", res.Suffrage)
	time.Sleep(6 * promoteStable)
	require.Equal(t, "Nonvoter", member(t, n1, "n2").Suffrage, "a keyless node was made a voter of a cluster whose leader encrypts with k1")
}

// From a new user's walk: a one-node store started with
// --encryption-key-file (its check value recorded), then restarted
// without it, stored the next response in plaintext and said nothing. No
// voter holds the key, which is how encryption is turned off, so the write
// goes through; but the leader must say at WARN that it stores plaintext.
func TestKeylessLeaderOfAnEncryptedStoreSaysItStoresPlaintext(t *testing.T) {
	c := newMemCluster(t)
	var logs logBuffer
	n1 := c.openAt("n1", t.TempDir(), "127.0.0.1:0", true, &logs)
	c.leader(n1)
	n1.setKeyring(testRing(t, "k1"))
	require.Eventually(t, func() bool { return n1.fsm.keys.check("k1") != nil }, 15*time.Second, 20*time.Millisecond,
		"the leader records k1's check value")
	require.NotContains(t, logs.String(), "stores responses and correlation ids in plaintext", "said while it held the key")

	n1.setKeyring(nil) // as a restart without --encryption-key-file
	s := engine.Scope{Principal: "cus_1", Endpoint: "POST /pay", Key: "plain"}
	r, _, err := n1.Claim(engine.ClaimArgs{Scope: s, Fingerprint: "aa",
		CorrelationID: secretCorrelation, LeaseMs: 60_000, RetentionMs: 3_600_000})
	require.NoError(t, err, "no voter holds k1: encryption is off, writes go through")
	require.Equal(t, engine.OutcomeClaimed, r.Outcome)
	require.Eventually(t, func() bool {
		return strings.Contains(logs.String(), `level=WARN msg="encryption at rest was on`) &&
			strings.Contains(logs.String(), "key-ids=k1")
	}, 5*time.Second, 20*time.Millisecond, "the keyless leader must say it stores plaintext:\n%s", logs.String())
}
