package raftfsm

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idem-store/idem/engine"
)

// A node of a release without FeatureCredentialCap replays the log and
// skips every claim that carried its credential's cap: its state lacks
// their records, and leading it would claim their keys again. Bug: such a
// node joined to a cluster that had written capped claims was promoted
// once caught up (only the retention and key checks were guarded). The
// state now records the first capped claim applied (engine.Meta.Gated), and
// from then on such a node stays a non-voter, saying why; before any, it
// is promoted as before (an upgrade joins nodes of the earlier release to
// a new leader, which keeps caps out of the log while they are members).
func TestNodeLackingTheCapIsNotPromotedOnceCappedClaimsWereWritten(t *testing.T) {
	c := newMemCluster(t)
	var mu sync.Mutex
	earlier := map[string]bool{"mem-n2": true, "mem-n3": true} // the release before the cap
	setEarlier := func(addr string, v bool) {
		mu.Lock()
		defer mu.Unlock()
		earlier[addr] = v
	}
	probe := func(ctx context.Context, addr string) (Status, error) {
		st, err := c.probe(ctx, addr)
		mu.Lock()
		defer mu.Unlock()
		if earlier[addr] {
			st.Features = []string{FeatureRetention, FeatureKeyCheck}
		}
		return st, err
	}
	n1 := c.open("n1", "", true)
	n1.SetPeerProbe(probe)
	c.leader(n1)

	// Before any capped claim: promoted as before.
	n2 := c.open("n2", "", false)
	c.join(n2, n1)
	require.Equal(t, engine.OutcomeClaimed, mustClaim(t, n1, capClaim("cus_1", "k", 5, "cus_")).Outcome)
	require.Zero(t, n1.db.Meta().Gated, "gated while n2 lacks the cap: nothing recorded")

	// n2 upgraded: the next capped claim carries its cap, and the state
	// of every replica records it.
	setEarlier("mem-n2", false)
	require.Eventually(t, func() bool { return n1.membersHave(FeatureCredentialCap) }, 10*time.Second, 20*time.Millisecond)
	require.Equal(t, engine.OutcomeClaimed, mustClaim(t, n1, capClaim("cus_2", "k", 5, "cus_")).Outcome)
	require.Equal(t, gatedCredentialCap, n1.db.Meta().Gated&gatedCredentialCap)
	waitApplied(t, n1, n2)
	require.Equal(t, gatedCredentialCap, n2.db.Meta().Gated&gatedCredentialCap, "replicated: any leader reads it")

	n3 := c.open("n3", "", false)
	res, err := n1.Join(n3.Self(), false, false)
	require.NoError(t, err)
	require.Equal(t, "nonvoter", res.Suffrage)
	require.NoError(t, n3.Admitted(res.AdmittedIndex))
	require.Eventually(t, func() bool { return member(t, n1, "n3").NotPromoted != "" }, 10*time.Second, 20*time.Millisecond)
	time.Sleep(4 * promoteStable) // rounds in which a healthy, caught-up node would have been promoted
	m := member(t, n1, "n3")
	require.Equal(t, "Nonvoter", m.Suffrage)
	require.True(t, m.Healthy, "%+v", m)
	require.Contains(t, m.NotPromoted, "does not apply claims carrying their credential's max_principals")
	require.Contains(t, m.NotPromoted, FeatureCredentialCap)
	require.Contains(t, m.NotPromoted, "with an empty data dir and --join (upgraded on its data dir it would still lack them), and it is promoted once caught up")

	setEarlier("mem-n3", false)
	c.waitSuffrage(n1, "n3", "Voter")
	require.Empty(t, member(t, n1, "n3").NotPromoted)
}
