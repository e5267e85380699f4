package raftfsm

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A voter started again on an empty data dir at its own addresses, and
// reached by the leader before it asked to join (its --join did not
// answer), catches up as that voter without a join of its own. idem
// serve's warning that it ran on another data dir (warnEmptyVoter) comes
// from the answer to a join: the node still asks, its admission pending
// (the joining file written at its empty start names none), and the
// answer says it ran at these addresses before, as when its own join
// comes first.
func TestVoterRestartedEmptyAndReachedByTheLeaderFirstIsToldItRanBefore(t *testing.T) {
	t.Parallel()
	c := newMemCluster(t)
	addrs := testRaftAddrs(t, 3) // IDEM_TEST_IP and IDEM_TEST_PORTS on a shared machine
	n1 := c.open("n1", addrs[0], true)
	c.leader(n1)
	n2 := c.open("n2", addrs[1], false)
	c.join(n2, n1)
	c.join(c.open("n3", addrs[2], false), n1) // n1 keeps its quorum while n2 is away

	cfg := n2.cfg
	cfg.DataDir, cfg.RaftAddr, cfg.RaftAdvertise = t.TempDir(), n2.self.RaftAddr, ""
	c.stop(n2)
	n2 = c.start(cfg)
	require.True(t, n2.StartedEmpty())
	require.Eventually(t, func() bool { return n2.HasState() && n2.IsMember() && n2.Registered() },
		20*time.Second, 20*time.Millisecond, "the leader never caught n2 up")
	require.True(t, n2.AdmissionPending(), "a node caught up before it asked still asks")

	l := c.leader(n1)
	res, err := l.Join(n2.Self(), false, false)
	require.NoError(t, err)
	require.Equal(t, "voter", res.Suffrage)
	require.True(t, res.RanBefore)
}
