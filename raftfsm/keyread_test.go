package raftfsm

import (
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/stretchr/testify/require"
)

// Bug (an attack on encryption at rest): a voter rebuilt empty with an old
// key file (k1 only, while values are sealed under k2 too) was handed the
// leadership by idem cluster transfer-leadership, and kept it: it sealed
// under k1, which every voter holds, so no write was refused, but every
// read and replay of a value sealed under k2 answered 500, on every node.
// A transfer to a voter seen without a key in use is refused, and a
// leader without one hands the leadership to a voter that holds it.
func TestLeaderLackingAKeyInUseHandsOver(t *testing.T) {
	c, n1, n2, n3 := keyedThree(t)
	keysOf := func(id string) []NodeKey {
		st, err := n1.Status()
		require.NoError(t, err)
		for _, m := range st.Nodes {
			if m.ID == id {
				return m.Keys
			}
		}
		return nil
	}
	n2.setKeyring(testRing(t, "k2", "k1")) // rotation step 1 on n2; n3 keeps its old file
	require.Eventually(t, func() bool { return len(keysOf("n2")) == 2 }, 10*time.Second, 20*time.Millisecond,
		"the leader's health checks see n2 hold k2")
	n1.setKeyring(testRing(t, "k2", "k1"))
	require.Eventually(t, func() bool {
		writeSomewhere(t, c, "k2", n1, n2)
		return keyValues(n1, "k2") > 0
	}, 20*time.Second, 50*time.Millisecond, "a value sealed under k2")
	require.True(t, n1.IsLeader())

	require.Eventually(t, func() bool { return len(keysOf("n3")) == 1 }, 10*time.Second, 20*time.Millisecond,
		"the leader's health checks see n3 hold k1 only")
	err := n1.TransferLeadershipTo("n3")
	require.ErrorIs(t, err, ErrLacksKey)
	require.Contains(t, err.Error(), "n3 lacks encryption key k2")
	require.True(t, n1.IsLeader(), "a refused transfer moves nothing")

	// Elected all the same (raft's own transfer, as after the others'
	// restarts), n3 hands the leadership to a voter that holds k2.
	require.NoError(t, n1.raft.LeadershipTransferToServer("n3", raft.ServerAddress(n3.self.RaftAddr)).Error())
	require.Eventually(t, func() bool { return n1.IsLeader() || n2.IsLeader() }, 20*time.Second, 20*time.Millisecond,
		"n3, without k2, kept the leadership")
	require.False(t, n3.IsLeader())
}

// electAnyway makes to the leader by raft's own transfer, as an election
// would after the others' restarts: TransferLeadershipTo refuses a voter
// seen without a key in use, and the guards of a leader that lacks one
// are tested on such a leader.
func electAnyway(t *testing.T, from, to *Node) {
	t.Helper()
	require.NoError(t, from.raft.LeadershipTransferToServer(raft.ServerID(to.self.ID), raft.ServerAddress(to.self.RaftAddr)).Error())
}
