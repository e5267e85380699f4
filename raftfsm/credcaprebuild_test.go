package raftfsm

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idem-store/idem/engine"
)

// A node of a release without FeatureCredentialCap that joined after
// capped claims were written replays the log and skips them; the leader
// keeps it a non-voter. Bug (seen with real processes: e861e54 joined to a
// cluster of HEAD, kept back, then restarted on HEAD on its data dir as its
// not_promoted said, "upgrade it, and it is promoted once caught up"): it
// was promoted, its state lacking every capped claim (idem_records 0
// against 23, a different state hash), and leading it answered a claim of
// a key already claimed "claimed", attempt 1. Its data dir holds those
// entries as applied, so an upgrade on it never applies them. The node's
// status now says what its own state records (Status.Gated), and a
// caught-up node whose state lacks a kind the leader's records stays a
// non-voter, told to start again on an empty data dir.
func TestNodeUpgradedOnADataDirThatSkippedCappedClaimsIsNotPromoted(t *testing.T) {
	c := newMemCluster(t)
	type pose int
	const (
		asIs    pose = iota
		earlier      // the release before the cap
		inPlace      // upgraded on the data dir an earlier release replayed
	)
	var mu sync.Mutex
	poses := map[string]pose{"mem-n3": earlier}
	setPose := func(addr string, p pose) {
		mu.Lock()
		defer mu.Unlock()
		poses[addr] = p
	}
	probe := func(ctx context.Context, addr string) (Status, error) {
		st, err := c.probe(ctx, addr)
		mu.Lock()
		defer mu.Unlock()
		switch poses[addr] {
		case earlier:
			st.Features, st.Gated = []string{FeatureRetention, FeatureKeyCheck}, nil
		case inPlace:
			st.Gated = ptr(uint64(0)) // it skipped every capped claim
		}
		return st, err
	}
	n1 := c.open("n1", "", true)
	n1.SetPeerProbe(probe)
	c.leader(n1)
	n2 := c.open("n2", "", false)
	c.join(n2, n1)
	require.Eventually(t, func() bool { return n1.membersHave(FeatureCredentialCap) }, 10*time.Second, 20*time.Millisecond)
	require.Equal(t, engine.OutcomeClaimed, mustClaim(t, n1, capClaim("cus_1", "k", 5, "cus_")).Outcome)
	require.Equal(t, gatedCredentialCap, n1.db.Meta().Gated&gatedCredentialCap)

	n3 := c.open("n3", "", false)
	res, err := n1.Join(n3.Self(), false, false)
	require.NoError(t, err)
	require.Equal(t, "nonvoter", res.Suffrage)
	require.NoError(t, n3.Admitted(res.AdmittedIndex))
	require.Eventually(t, func() bool { return member(t, n1, "n3").NotPromoted != "" }, 10*time.Second, 20*time.Millisecond)
	require.Contains(t, member(t, n1, "n3").NotPromoted, "empty data dir")

	// Restarted on the new release on its data dir: it lists the cap now,
	// and its state still records no capped claim.
	setPose("mem-n3", inPlace)
	require.Eventually(t, func() bool {
		return member(t, n1, "n3").NotPromoted != "" && !strings.Contains(member(t, n1, "n3").NotPromoted, "its status lists no")
	}, 10*time.Second, 20*time.Millisecond)
	time.Sleep(4 * promoteStable) // rounds in which a healthy, caught-up node would have been promoted
	m := member(t, n1, "n3")
	require.Equal(t, "Nonvoter", m.Suffrage)
	require.True(t, m.Healthy, "%+v", m)
	require.Contains(t, m.NotPromoted, "upgraded on its data dir")
	require.Contains(t, m.NotPromoted, "empty data dir and --join")

	// Rebuilt (an empty data dir): its state records them, and it is promoted.
	setPose("mem-n3", asIs)
	c.waitSuffrage(n1, "n3", "Voter")
	require.Empty(t, member(t, n1, "n3").NotPromoted)
}
