package raftfsm

import (
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Two nodes' data dirs swapped (each started with the id of its dir, at
// the other's addresses): raft goes by address, so the swapped node got the
// other member's messages and voted as both, and elections never settled
// (an operator walk). The node now refuses to start at an address its own
// configuration gives to another member, and nothing of its state moves.
func TestNodeRefusesARaftAddressItsConfigurationGivesAnother(t *testing.T) {
	t.Parallel()
	c := newMemCluster(t)
	n1 := c.open("n1", "", true)
	c.leader(n1)
	n2 := c.open("n2", "", false)
	c.join(n2, n1)
	require.NoError(t, claim(n1, "k"))
	require.Eventually(t, func() bool { return n2.db.Meta().Applied >= n1.db.Meta().Applied }, 10*time.Second, 20*time.Millisecond)
	addr1, dir2 := n1.self.RaftAddr, n2.cfg.DataDir
	applied := n2.db.Meta().Applied
	c.stop(n1)
	c.stop(n2)

	cfg := DefaultConfig()
	cfg.NodeID, cfg.DataDir, cfg.RaftAddr, cfg.HTTPAdvertise = "n2", dir2, addr1, "mem-n2"
	_, err := Open(cfg)
	require.ErrorIs(t, err, ErrAddressOfAnother)
	require.Contains(t, err.Error(), "member n1's")
	require.Contains(t, err.Error(), "Most likely this is n1's data dir", "the likelier mistake first, not \"this data dir is n2's\"")

	// At its own address it starts, with its state as it was.
	again := c.openAt("n2", dir2, n2.self.RaftAddr, false, &logBuffer{})
	require.Equal(t, applied, again.db.Meta().Applied)
}

// A node that took over the raft address of a removed member (n3 dead, its
// host given to a fresh n4) and stopped while catching up: the leader's
// snapshot it installed still listed n3 at that address and did not list
// n4 yet (both changes are in entries after it). Its state is modelled by
// a copy of the leader's data dir from before the removal. Such a node is
// in no configuration of its own, so it never campaigns, and the cluster
// sends the address's messages to n4: nothing is answered twice. It must
// start to finish its catch-up; refused, it could never start again.
func TestCatchingUpNodeAtARemovedMembersAddressStarts(t *testing.T) {
	t.Parallel()
	c := newMemCluster(t)
	n1 := c.open("n1", "", true)
	c.leader(n1)
	n3 := c.open("n3", "", false)
	c.join(n3, n1)
	require.NoError(t, claim(n1, "k"))
	addr3, dir1 := n3.self.RaftAddr, n1.cfg.DataDir
	c.stop(n3)
	c.stop(n1)

	dir4 := t.TempDir()
	require.NoError(t, os.CopyFS(dir4, os.DirFS(dir1)))
	cfg := DefaultConfig()
	cfg.NodeID, cfg.DataDir, cfg.RaftAddr, cfg.HTTPAdvertise = "n4", dir4, addr3, "mem-n4"
	n4, err := Open(cfg)
	require.NoError(t, err)
	n4.Close()
}
