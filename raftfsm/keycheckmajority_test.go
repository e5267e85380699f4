package raftfsm

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Review finding: when a cluster that predates check values is upgraded,
// whichever node leads once every member lists key-check records its OWN
// key's check value, unverified. If that leader is the one node whose k1
// differs (generated on it), the wrong value is recorded: it goes on
// sealing values only it can read (sealReady compares with its own
// value), while the two nodes holding the key every stored value is
// sealed with are flagged WRONG KEY and refuse to start at their next
// restart. The leader knows better: the members' statuses list their
// keys' check values (h.keys), and stored values under the id exist.
// Suggested fix: record a check value only when a majority of voters
// report it (or after opening a stored value sealed under the id).
func TestKeyCheckRecordedByTheOddLeaderOut(t *testing.T) {
	// n1's write before the upgrade finds a member without key-check and
	// puts n1's next attempt keyCheckRetry (10 s) away: with it the wait
	// below spent 10.5 of its 15 s on that pause alone.
	old := keyCheckRetry
	keyCheckRetry = 100 * time.Millisecond
	t.Cleanup(func() { keyCheckRetry = old })
	c := newMemCluster(t)
	var upgraded atomic.Bool
	hide := func(ctx context.Context, addr string) (Status, error) {
		st, err := c.probe(ctx, addr)
		if !upgraded.Load() {
			st.Features = []string{FeatureRetention} // a release before key checks
			st.Keys = nil
		}
		return st, err
	}
	n1 := c.open("n1", "", true)
	n1.SetPeerProbe(hide)
	c.leader(n1)
	n2 := c.open("n2", "", false)
	n2.SetPeerProbe(hide)
	n2.setKeyring(testRing(t, "k1"))
	c.join(n2, n1)
	n3 := c.open("n3", "", false)
	n3.SetPeerProbe(hide)
	n3.setKeyring(otherRing(t, "k1")) // generated on n3 before the upgrade
	c.join(n3, n1)
	// Given its key only now: alone, n1 would record its check value at once
	// (one voter is the majority), and the cluster would not be one from
	// before check values (n2 then stayed a non-voter now and then).
	n1.setKeyring(testRing(t, "k1"))
	write(t, n1, "sealed-by-the-majority-key")
	require.Nil(t, n1.fsm.keys.check("k1"))

	require.NoError(t, n1.TransferLeadershipTo("n3"))
	require.Eventually(t, n3.IsLeader, 10*time.Second, 10*time.Millisecond)
	upgraded.Store(true)
	require.Eventually(t, func() bool { return n1.fsm.keys.check("k1") != nil }, 15*time.Second, 20*time.Millisecond)
	require.Equal(t, n1.Keyring().Check("k1"), n1.fsm.keys.check("k1"),
		"the check value recorded is n3's own k1, which no stored value is sealed with and two of three voters do not hold")
}
