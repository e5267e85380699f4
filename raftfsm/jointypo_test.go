package raftfsm

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// An operator walk: a removed node added back by hand with its HTTP port
// as --raft-addr (idem cluster join --raft-addr 127.0.0.1:7070
// --node-http-addr 127.0.0.1:7070) was answered "joined", recorded at the
// wrong raft address, and stayed a non-voter that no leader reached. A new
// member that answers at its HTTP address under its own id at another
// raft address is refused, naming both; force adds it anyway, and a node
// that does not answer (not started yet) is let in as before.
func TestJoinOfANewMemberAtAnotherRaftAddressThanItsOwnIsRefused(t *testing.T) {
	t.Parallel()
	c := newMemCluster(t)
	a := c.open("a1", "", true)
	c.leader(a)
	b := c.open("a2", "", false)

	typo := b.Self()
	typo.RaftAddr = "mem-typo-a2"
	_, err := a.Join(typo, false, true)
	require.ErrorIs(t, err, ErrNotAnswering)
	require.Contains(t, err.Error(), "a2 answers at HTTP "+typo.HTTPAddr+" but its raft address is "+b.Self().RaftAddr+", not mem-typo-a2: check --raft-addr")
	require.Empty(t, member(t, a, "a2").ID, "a2 was added at the wrong raft address")

	_, err = a.Join(b.Self(), false, true)
	require.NoError(t, err, "the right addresses")
	require.NoError(t, a.Remove("a2", false))

	_, err = a.Join(typo, true, true)
	require.NoError(t, err, "force adds it anyway")
	require.Equal(t, "mem-typo-a2", member(t, a, "a2").RaftAddr)

	unstarted := NodeInfo{ID: "a3", RaftAddr: "mem-a3", HTTPAddr: "mem-a3-http"}
	_, err = a.Join(unstarted, false, true)
	require.NoError(t, err, "a node that does not answer yet")
}

// A voter whose addresses the state recorded before, the same ones, is
// answered RanBefore: a node that started empty then says that its data
// dir is not the one it ran on (cmd/idem's warnEmptyVoter). A new member
// (a non-voter) is not, nor is a voter joining at other addresses, nor a
// member of a first configuration whose addresses were never recorded.
func TestJoinSaysWhenAVoterRanAtTheseAddressesBefore(t *testing.T) {
	t.Parallel()
	c := newMemCluster(t)
	a := c.open("a1", "", true)
	c.leader(a)
	b := c.open("a2", "", false)
	res, err := a.Join(b.Self(), false, true)
	require.NoError(t, err)
	require.Equal(t, "nonvoter", res.Suffrage)
	require.False(t, res.RanBefore, "a new member")
	require.NoError(t, b.Admitted(res.AdmittedIndex))
	c.waitSuffrage(a, "a2", "Voter")

	res, err = a.Join(b.Self(), false, true)
	require.NoError(t, err)
	require.Equal(t, "voter", res.Suffrage)
	require.True(t, res.RanBefore, "a voter at the addresses recorded before")

	// Its addresses not recorded (a member of a first configuration
	// before its own join): not RanBefore.
	_, err = a.propose(&Command{Op: OpRemoveNode, Node: &NodeInfo{ID: "a2"}})
	require.NoError(t, err)
	res, err = a.Join(b.Self(), false, true)
	require.NoError(t, err)
	require.Equal(t, "voter", res.Suffrage)
	require.False(t, res.RanBefore, "addresses recorded by this join only")
}

// A join given another member's HTTP address as the new node's raft
// address (or that member's raft address as its HTTP address), for a node
// not started yet, was answered "joined": the member there answered
// neither as the joiner nor at all, and the joiner was recorded at an
// address where no raft of its would ever listen, never promoted. It is
// refused as an address in use by that member, force or not.
func TestJoinAtAnotherMembersAddressOfTheOtherKindIsRefused(t *testing.T) {
	t.Parallel()
	c := newMemCluster(t)
	a := c.open("a1", "", true)
	c.leader(a)
	b := c.open("a2", "", false)
	_, err := a.Join(b.Self(), false, true)
	require.NoError(t, err)
	self := b.Self()
	for _, force := range []bool{false, true} {
		_, err := a.Join(NodeInfo{ID: "a3", RaftAddr: self.HTTPAddr, HTTPAddr: "mem-a3-http"}, force, true)
		require.ErrorIs(t, err, ErrAddressInUse)
		require.Contains(t, err.Error(), "raft address "+self.HTTPAddr+" is a2's HTTP address")
		_, err = a.Join(NodeInfo{ID: "a3", RaftAddr: "mem-a3", HTTPAddr: self.RaftAddr}, force, true)
		require.ErrorIs(t, err, ErrAddressInUse)
		require.Contains(t, err.Error(), "HTTP address "+self.RaftAddr+" is a2's raft address")
		require.Empty(t, member(t, a, "a3").ID)
	}
	_, err = a.Join(NodeInfo{ID: "a3", RaftAddr: "mem-a3", HTTPAddr: "mem-a3-http"}, false, true)
	require.NoError(t, err)
}
