package raftfsm

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idem-store/idem/engine"
)

// A cluster whose stored values are encrypted must not store a value in
// plaintext because a node without the key file joined and came to lead.
// Today such a node is promoted to voter, can take the leadership, and then
// writes every response and correlation id in plaintext into every node's
// raft log and Pebble (ops walk: a node started without
// --encryption-key-file joined a restored encrypted cluster, was promoted,
// led after a leadership transfer, and a completed body was found as plain
// bytes in the other nodes' raft-wal/). Either the node never leads or is
// refused writes, or what it stores is sealed.
func TestKeylessLeaderDoesNotStorePlaintext(t *testing.T) {
	c := newMemCluster(t)
	n1 := c.open("n1", "", true)
	n1.cfg.Keyring = testRing(t, "k1")
	c.leader(n1)
	write(t, n1, "before") // a value under k1: the cluster uses encryption

	n2 := c.open("n2", "", false) // no key file
	c.join(n2, n1)
	require.NoError(t, n1.TransferLeadershipTo("n2"))
	require.Eventually(t, func() bool { return n2.IsLeader() || n1.IsLeader() }, 10*time.Second, 10*time.Millisecond)
	if !n2.IsLeader() {
		return // leadership refused to a node without the key: fine
	}
	s := engine.Scope{Principal: "cus_1", Endpoint: "POST /pay", Key: "after"}
	res, _, err := n2.Claim(engine.ClaimArgs{Scope: s, Fingerprint: "aa", LeaseMs: 60_000, RetentionMs: 3_600_000})
	if err != nil {
		return // writes refused by a leader without the key: fine
	}
	_, err = n2.Complete(engine.TokenArgs{Scope: s, Token: res.Record.Token}, &engine.Response{Status: 201, Body: secretBody})
	if err != nil {
		return
	}
	require.Eventually(t, func() bool {
		r, ok := n1.db.Lookup(s, false, n1.db.Meta().NowMs)
		return ok && r.State == engine.StateCompleted && r.Response != nil
	}, 5*time.Second, 10*time.Millisecond)
	require.True(t, isSealedResponse(stored(t, n1, s).Response),
		"a response completed while a node without the key led is stored in plaintext in an encrypted cluster")
}
