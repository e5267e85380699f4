package raftfsm

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A member shown as downgraded in place, removed and joined again on the
// release the others run (docs: move its data dir aside, start it empty
// with --join), is another state: it answers the leader first once it is
// a member again, and a small state is installed before that answer, so
// the leader never sees the applied index of 0 that cleared the mark. Bug:
// the mark of the removed member stayed for the rest of the leader's term
// (cluster status kept its WARNING, and no transfer went to it).
func TestDowngradeMarkGoesWithTheMembersRemoval(t *testing.T) {
	var earlier atomic.Bool
	n1, _, member := downgradeLeader(t, func(st *Status) {
		if earlier.Load() {
			st.Features, st.Version = []string{FeatureRetention, FeatureKeyCheck}, "v-earlier"
		}
	})
	require.Eventually(t, func() bool { m := member(); return m.AppliedIndex != nil && m.Version == n1.cfg.Version }, 10*time.Second, 20*time.Millisecond)
	earlier.Store(true)
	require.Eventually(t, func() bool { return member().Downgraded != "" }, 10*time.Second, 20*time.Millisecond)

	info := member().NodeInfo
	require.NoError(t, n1.Remove("n2", false))
	time.Sleep(3 * probeEvery) // rounds without it
	earlier.Store(false)       // rebuilt on this release; never seen empty
	res, err := n1.Join(info, false, false)
	require.NoError(t, err)
	require.Equal(t, "nonvoter", res.Suffrage)
	require.Eventually(t, func() bool { return member().Suffrage == "Voter" }, 20*time.Second, 20*time.Millisecond)
	time.Sleep(3 * probeEvery)
	require.Empty(t, member().Downgraded, "the removed member's mark outlived its removal")
	require.NoError(t, n1.TransferLeadershipTo("n2"))
}
