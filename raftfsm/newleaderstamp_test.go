package raftfsm

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idem-store/idem/engine"
)

// A new leader's first claim, looked at before the term's barrier
// (settled's first look), does not say the leader "stamped nothing for a
// while (the process was stopped or paused, or stalled)": it was a
// follower, and the log's time stood still because no entry was applied
// (a leader removed, an election). A chaos soak's node said so 34 ms
// after it took the lead following a membership change, and the barrier's
// own line (cluster time ahead of the log's as it took the lead: nothing
// to do) was never said, the first look having moved the clock already.
func TestNewLeaderDoesNotSayItWasStoppedWhenTheLogStoodStill(t *testing.T) {
	t.Parallel()
	c := newMemCluster(t)
	addrs := testRaftAddrs(t, 2)
	logs := [2]*logBuffer{{}, {}}
	open := func(i int) *Node {
		cfg := loggedConfig(t, []string{"n1", "n2"}[i], addrs[i], i == 0, logs[i])
		cfg.TickInterval = time.Hour // the log's time moves with claims only
		return c.start(cfg)
	}
	n1 := open(0)
	c.leader(n1)
	n2 := open(1)
	c.join(n2, n1)
	claim := func(n *Node, key string) {
		t.Helper()
		_, _, err := n.Claim(engine.ClaimArgs{Scope: engine.Scope{Principal: "p", Endpoint: "e", Key: key}, Fingerprint: "aa", LeaseMs: 1000, RetentionMs: 600_000})
		require.NoError(t, err)
	}
	claim(n1, "before")
	time.Sleep(7 * time.Second) // nothing applied: the log's time stands still
	c.handOver(n1, n2)
	claim(n2, "after")
	require.NotContains(t, logs[1].String(), "this leader stamped nothing for a while", "n2's log:\n%s", logs[1].String())
	require.True(t, strings.Contains(logs[1].String(), "cluster time on this node was ahead of the log's as it took the lead"), "n2's log:\n%s", logs[1].String())
}
