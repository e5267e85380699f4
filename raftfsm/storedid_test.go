package raftfsm

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// With CheckStoredID (its caller lost its record of the data dir's id), a
// start under an id the stored configurations never listed is refused
// before anything is written, naming the id they hold for this data dir;
// the right id starts.
func TestCheckStoredIDRefusesAnotherID(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cfg := DefaultConfig()
	cfg.NodeID, cfg.DataDir, cfg.Bootstrap, cfg.RaftAddr = "n1", dir, true, absentAddr(t)
	n, err := Open(cfg)
	require.NoError(t, err)
	require.Eventually(t, n.IsLeader, 10*time.Second, 10*time.Millisecond)
	require.NoError(t, claim(n, "k"))
	require.NoError(t, n.Close())

	cfg.CheckStoredID = true
	for _, tc := range []struct {
		addr string
		own  bool
	}{{cfg.RaftAddr, true}, {absentAddr(t), false}} {
		c := cfg
		c.NodeID, c.RaftAddr = "n7", tc.addr
		ran := false
		c.BeforeRaft = func() error { ran = true; return nil }
		_, err = Open(c)
		var e *StoredIDError
		require.True(t, errors.As(err, &e), "%v", err)
		require.Equal(t, "n1", e.Stored)
		require.Equal(t, tc.own, e.AtOwnAddr)
		require.Equal(t, cfg.RaftAddr, e.StoredAddr())
		require.False(t, ran, "BeforeRaft ran for a refused id")
	}
	n, err = Open(cfg)
	require.NoError(t, err)
	require.Eventually(t, n.IsLeader, 10*time.Second, 10*time.Millisecond)
	require.NoError(t, n.Close())
}

// A member's data dir of a cluster of several, started under an id no
// configuration listed at an address none gives, is refused too, naming
// the members; a member removed from the cluster starts under its id.
func TestCheckStoredIDManyMembers(t *testing.T) {
	t.Parallel()
	c := newMemCluster(t)
	var logs [3]logBuffer
	dirs := []string{t.TempDir(), t.TempDir(), t.TempDir()}
	n1 := c.openAt("n1", dirs[0], "127.0.0.1:0", true, &logs[0])
	c.leader(n1)
	n2 := c.openAt("n2", dirs[1], "127.0.0.1:0", false, &logs[1])
	c.join(n2, n1)
	n3 := c.openAt("n3", dirs[2], "127.0.0.1:0", false, &logs[2])
	c.join(n3, n1)
	require.NoError(t, claim(n1, "k"))
	waitApplied(t, n1, n3)
	require.NoError(t, n1.Remove("n3", false))
	c.stop(n3)
	c.stop(n2)
	c.stop(n1)

	cfg := DefaultConfig()
	cfg.NodeID, cfg.DataDir, cfg.RaftAddr, cfg.CheckStoredID = "n9", dirs[0], absentAddr(t), true
	_, err := Open(cfg)
	var e *StoredIDError
	require.True(t, errors.As(err, &e), "%v", err)
	require.Equal(t, "", e.Stored)
	require.Equal(t, []string{"n1", "n2"}, []string{e.Members[0].ID, e.Members[1].ID}, "%+v", e.Members)
	require.Len(t, e.Members, 2)

	// n3's data dir, under its own id: its configurations listed it.
	cfg.NodeID, cfg.DataDir = "n3", dirs[2]
	n, err := Open(cfg)
	require.NoError(t, err)
	require.NoError(t, n.Close())
}
