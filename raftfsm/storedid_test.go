package raftfsm

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// With CheckStoredID (its caller lost its record of the data dir's id), a
// start under an id the stored configuration shows is not this data dir's
// is refused before raft starts, naming the id it holds; the right id
// starts, and without CheckStoredID the start goes on as before (it warns).
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
		require.Equal(t, StoredIDError{NodeID: "n7", Stored: "n1", StoredAddr: cfg.RaftAddr, AtOwnAddr: tc.own}, *e)
		require.False(t, ran, "BeforeRaft ran for a refused id")
	}
	n, err = Open(cfg)
	require.NoError(t, err)
	require.Eventually(t, n.IsLeader, 10*time.Second, 10*time.Millisecond)
	require.NoError(t, n.Close())
}
