package raftfsm

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A voter whose release lacks FeatureKeyCheck in a state that records key
// checks is reported as downgraded in place (usedFeatures): its release
// skipped the OpKeyCheck entries. Bug: the leader promoted such a
// non-voter itself when no key was needed any more (encryption turned off
// after checks were recorded), then at its next health check said ERROR
// that it was downgraded in place, told the operator to rebuild it, and
// refused transfers to it. What the leader reports of a voter and what it
// lets become one agree.
func TestNodeLackingKeyChecksIsNotPromotedOnceChecksAreRecorded(t *testing.T) {
	c := newMemCluster(t)
	n1 := c.open("n1", "", true)
	c.leader(n1)
	_, err := n1.propose(&Command{Op: OpKeyCheck, KeyCheck: &KeyCheck{ID: "k1", Check: make([]byte, keyCheckSize)}})
	require.NoError(t, err)
	require.NotEmpty(t, n1.fsm.keys.recordedChecks())
	require.Empty(t, n1.neededKeys(), "no value sealed, no voter holds the key: none needed")

	earlier := []string{FeatureRetention, FeatureCredentialCap} // a release before key checks
	h := &peerHealth{answeredAt: time.Now(), features: earlier}
	n1.peers.mu.Lock()
	why := n1.notPromotable(h)
	n1.noteDowngrade("n2", h, Status{AppliedIndex: 5, Features: earlier}, true, n1.usedFeatures())
	n1.peers.mu.Unlock()
	if why == "" {
		require.Empty(t, h.downgraded, "promotable, then reported as downgraded in place once a voter")
	}
	require.Contains(t, why, FeatureKeyCheck)
}
