package raftfsm

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// An operator rotating keys must see that every node holds the new key
// before making it the first (step 2); the status showed only the node
// asked (idem keys status), so checking a cluster took a command per node.
// The leader's status lists every member's key ids and check values as its
// health checks saw them: an empty list for a node without a key file,
// null for one not measured.
func TestStatusListsEveryMembersKeys(t *testing.T) {
	c := newMemCluster(t)
	n1 := c.open("n1", "", true)
	c.leader(n1)
	n2 := c.open("n2", "", false)
	c.join(n2, n1)
	n3 := c.open("n3", "", false)
	c.join(n3, n1)
	// n1 encrypts with k1, which n2 holds as another key (generated on
	// n2): the voters disagree, so n1 keeps the leadership (it handed it
	// round when it had k2 first, held by it alone, which made this test
	// wait for the leadership to come back to n1).
	n1.setKeyring(testRing(t, "k1", "k2"))
	n2.setKeyring(otherRing(t, "k1")) // generated on n2: another key under k1

	keysOf := func(st Status) map[string][]NodeKey {
		out := map[string][]NodeKey{}
		for _, m := range st.Nodes {
			out[m.ID] = m.Keys
		}
		return out
	}
	var st Status
	require.Eventually(t, func() bool {
		var err error
		st, err = n1.Status()
		require.NoError(t, err)
		k := keysOf(st)
		return len(k["n2"]) == 1 && k["n3"] != nil
	}, 30*time.Second, 20*time.Millisecond, "the leader's health checks see n2's and n3's keys")
	k := keysOf(st)
	require.Equal(t, []string{"k1", "k2"}, []string{k["n1"][0].ID, k["n1"][1].ID}, "the leader's own, its first key first")
	require.Equal(t, n1.nodeKeys(), k["n1"])
	require.Equal(t, n2.nodeKeys(), k["n2"])
	require.NotEqual(t, k["n1"][0].Check, k["n2"][0].Check, "n2's k1 is another key, and its check value says so")
	require.NotNil(t, k["n3"], "n3 was measured")
	require.Empty(t, k["n3"], "and holds no key file")

	// A follower knows its own keys; the others' are not known to it (the
	// api package merges the leader's view).
	st, err := n2.Status()
	require.NoError(t, err)
	k = keysOf(st)
	require.Equal(t, n2.nodeKeys(), k["n2"])
	require.Nil(t, k["n1"])
	st, err = n3.Status()
	require.NoError(t, err)
	require.NotNil(t, keysOf(st)["n3"])
	require.Empty(t, keysOf(st)["n3"])

	// Merged with the leader's view, as a follower's /v1/cluster shows it.
	leader, err := n1.Status()
	require.NoError(t, err)
	st.MergeHealth(leader)
	k = keysOf(st)
	require.Equal(t, n1.nodeKeys(), k["n1"])
	require.Equal(t, n2.nodeKeys(), k["n2"])
	require.Empty(t, k["n3"])
}
