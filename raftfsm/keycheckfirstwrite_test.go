package raftfsm

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idem-store/idem/engine"
)

// A new leader's first write under a key with no check value asked to
// record it before the leader had measured its members (its first health
// round): taken for a member without key-check, the next try was put 10 s
// away, so the check was "not recorded" for 10 s (a walk: a new encrypted
// cluster's first 200 writes, keys status 3 s later), where the docs say
// within a few seconds of leading. Unmeasured members are asked again at
// the next round.
func TestCheckValueRecordedSoonAfterANewLeadersFirstWrite(t *testing.T) {
	n1, n2, n3 := newMemCluster(t).three()
	require.NoError(t, n1.TransferLeadershipTo("n2"))
	require.Eventually(t, n2.IsLeader, 10*time.Second, time.Millisecond)
	for _, n := range []*Node{n1, n2, n3} {
		n.setKeyring(testRing(t, "k1"))
	}
	// At once, before n2's first health round: refused or not, it asks to
	// record k1's check value.
	n2.Claim(engine.ClaimArgs{Scope: engine.Scope{Principal: "cus_1", Endpoint: "POST /pay", Key: "first"}, Fingerprint: "aa", CorrelationID: secretCorrelation, LeaseMs: 60_000, RetentionMs: 3_600_000})
	require.Eventually(t, func() bool { return n2.fsm.keys.check("k1") != nil }, 5*time.Second, 20*time.Millisecond,
		"k1's check value recorded within a few seconds of the new leader's first write")
}
