package raftfsm

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idem-store/idem/engine"
)

// A removed node keeps running outside the cluster, its replica frozen at
// its removal. It answered consistency=stale lookups from that replica for
// as long as it ran (an ops walk: removed, it still served a record over
// `idem get --consistency stale`, while its own log said it "answers no
// writes or reads"): a key the cluster claimed since read as absent, an
// attempt completed since as in progress. It refuses them, as a kept
// non-voter does, and answers them again once added back.
func TestRemovedNodeRefusesStaleReads(t *testing.T) {
	t.Parallel()
	c := newMemCluster(t)
	n1, _, n3 := c.three()
	require.NoError(t, claim(n1, "before"))
	s := engine.Scope{Principal: "p", Endpoint: "e", Key: "before"}
	require.Eventually(t, func() bool {
		_, ok, err := n3.Lookup(context.Background(), s, false, false)
		return err == nil && ok
	}, 10*time.Second, 20*time.Millisecond, "n3 never applied the claim")

	require.NoError(t, n1.Remove("n3", false))
	// It knows once it has heard from no leader for stateOnItsWayWithin
	// (5 s); on a CI machine running three packages' tests at once that
	// took more than the 10 s this waited before.
	require.Eventually(t, n3.Outside, 30*time.Second, 20*time.Millisecond, "n3 was removed")
	require.NoError(t, claim(n1, "after"))

	for _, key := range []string{"before", "after"} {
		_, _, err := n3.Lookup(context.Background(), engine.Scope{Principal: "p", Endpoint: "e", Key: key}, false, false)
		var removed *RemovedError
		require.True(t, errors.As(err, &removed), "a stale read of %q on a removed node: %v", key, err)
		require.Equal(t, "n3", removed.Node)
	}

	// Added back, it follows the cluster again and answers them.
	c.join(n3, n1)
	require.Eventually(t, func() bool {
		_, ok, err := n3.Lookup(context.Background(), engine.Scope{Principal: "p", Endpoint: "e", Key: "after"}, false, false)
		return err == nil && ok
	}, 10*time.Second, 20*time.Millisecond, "n3, added back, never answered the claim made while it was out")
}
