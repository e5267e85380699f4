package raftfsm

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Review finding: the leader records a check value only once every member
// has answered it listing key-check (membersHave), so while one member is
// down (here: since before the first check could be recorded) none is
// ever recorded, and every key-check protection is off: a node whose k1
// was generated on it instead of copied joins, is promoted (lacksKeys
// compares with recorded checks only), and, leading, seals values the
// other nodes cannot read. Reproduced with real processes: 3 nodes, one
// killed right after bootstrap; n4 with another k1 joined, was promoted,
// took the leadership, and a claim it sealed answered 500 ("does not
// decrypt with this node's key") on the other nodes. Suggested fix: with
// no recorded check, compare a candidate's key with the leader's own
// (and refuse hand-off/promotion on a difference), and record a check
// once every member that answers lists key-check, or from the voters'
// majority.
func TestWrongKeyPromotedWhileAMemberIsDown(t *testing.T) {
	c := newMemCluster(t)
	n1 := c.open("n1", "", true)
	c.leader(n1)
	n2 := c.open("n2", "", false)
	c.join(n2, n1)
	n3 := c.open("n3", "", false)
	c.join(n3, n1)
	c.stop(n3) // down for a while: a voter short, still a quorum
	// A new term (a leader change), in which n3 never answers.
	require.NoError(t, n1.TransferLeadershipTo("n2"))
	require.Eventually(t, n2.IsLeader, 10*time.Second, 10*time.Millisecond)
	n1.setKeyring(testRing(t, "k1"))
	n2.setKeyring(testRing(t, "k1"))
	// A leader seals under a key nothing is sealed under yet only once its
	// health checks have seen which voters hold it (keyOnFew).
	time.Sleep(3 * probeEvery)
	write(t, n2, "sealed")
	time.Sleep(3 * probeEvery)
	require.Nil(t, n2.fsm.keys.check("k1"), "no check value while n3 is down")

	n4 := c.open("n4", "", false)
	n4.setKeyring(otherRing(t, "k1")) // generated on n4
	res, err := n2.Join(n4.Self(), false, false)
	require.NoError(t, err)
	require.Equal(t, "nonvoter", res.Suffrage)
	time.Sleep(6 * promoteStable)
	require.Equal(t, "Nonvoter", member(t, n2, "n4").Suffrage,
		"a node whose k1 is not the leader's (nor what stored values are sealed with) was made a voter")
}
