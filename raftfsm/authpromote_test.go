package raftfsm

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idem-store/idem/engine"
)

// A node admitted by an idem cluster join by hand before it was started
// (the join's auth check had nothing to ask), then started without
// --auth-file into a cluster whose nodes check tokens, had its own join
// refused (auth_mismatch) but was promoted once caught up, and answered
// every route, and consistency=stale reads of every tenant's records from
// its own replica, to callers without a token. It now stays a non-voter,
// kept back (no stale read, not ready), until it checks tokens.
func TestNodeWithoutAuthIsNotPromotedWhereTokensAreChecked(t *testing.T) {
	c := newMemCluster(t)
	open := func(id string, bootstrap, checks bool) *Node {
		cfg := DefaultConfig()
		cfg.NodeID, cfg.DataDir, cfg.Bootstrap = id, t.TempDir(), bootstrap
		cfg.RaftAddr, cfg.HTTPAdvertise, cfg.ChecksTokens = "127.0.0.1:0", "mem-"+id, checks
		return c.start(cfg)
	}
	n1 := open("n1", true, true)
	c.leader(n1)
	s := engine.Scope{Principal: "tenant-b", Endpoint: "e", Key: "k"}
	_, _, err := n1.Claim(engine.ClaimArgs{Scope: s, Fingerprint: "aa", LeaseMs: 60_000, RetentionMs: 3_600_000})
	require.NoError(t, err)

	n2 := open("n2", false, false)
	m := joinKept(t, n1, n2)
	require.Contains(t, m.NotPromoted, "without --auth-file while this cluster's nodes check tokens")
	var kept *KeptBackError
	require.Eventually(t, func() bool { return errors.As(staleRead(n2, s), &kept) }, 10*time.Second, 20*time.Millisecond,
		"the node without --auth-file serves another tenant's record from its replica")

	// Started (again, on an empty data dir) with the cluster's auth, it
	// is promoted.
	c.stop(n2)
	n3 := open("n3", false, true)
	_, err = n1.Join(n3.Self(), false, false)
	require.NoError(t, err)
	c.waitSuffrage(n1, "n3", "Voter")
	require.Empty(t, member(t, n1, "n3").NotPromoted)
}
