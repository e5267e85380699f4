package raftfsm

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A member replaced by a fresh node with the same id (the documented way:
// idem cluster remove --id n1, then join n1 again on an empty data dir)
// replays the cluster's log from its start. The log begins with n1's own
// bootstrap, a configuration of n1 alone, and here 600 entries follow
// before n2 joined (a one-node store grown later): after the leader's
// first batch of 512 entries, the fresh n1's latest configuration is
// itself alone, and foreignGuard then refused the leader's further
// entries and heartbeats as another cluster's. n1 then never caught up,
// and, hearing no leader, elected itself leader of a cluster of its own
// over a prefix of the real log.
func TestFreshNodeRejoiningUnderTheBootstrapIDCatchesUp(t *testing.T) {
	t.Parallel()
	c := newMemCluster(t)
	n1 := c.open("n1", "", true)
	c.leader(n1)
	for i := range 600 {
		require.NoError(t, claim(n1, fmt.Sprintf("k%d", i)))
	}
	n2 := c.open("n2", "", false)
	c.join(n2, n1)
	n3 := c.open("n3", "", false)
	c.join(n3, n1)
	c.stop(n1)
	l := c.leader(n2, n3)
	require.Eventually(t, func() bool { return l.Remove("n1", false) == nil }, 15*time.Second, 200*time.Millisecond)
	require.NoError(t, claim(l, "after"))

	fresh := c.open("n1", "", false)
	_, err := l.Join(fresh.Self(), false, true)
	require.NoError(t, err)
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) && fresh.db.Meta().Applied < l.db.Meta().Applied {
		require.False(t, fresh.IsLeader(), "the fresh n1 elected itself leader of a cluster of its own at applied index %d", fresh.db.Meta().Applied)
		time.Sleep(50 * time.Millisecond)
	}
	require.False(t, fresh.IsLeader(), "the fresh n1 leads a cluster of its own")
	require.GreaterOrEqual(t, fresh.db.Meta().Applied, l.db.Meta().Applied, "the fresh n1 never caught up")
}
