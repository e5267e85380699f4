package raftfsm

import (
	"bytes"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/stretchr/testify/require"
)

func secretLog(t *testing.T, index uint64, key []byte) *raft.Log {
	t.Helper()
	b, err := (&Command{Op: OpSetSecret, NowMs: 1_700_000_000_000, WidthMs: 1000, Secret: key}).Encode()
	require.NoError(t, err)
	return &raft.Log{Index: index, Term: 1, Type: raft.LogCommand, Data: b}
}

func TestSecretCommandCodec(t *testing.T) {
	key := bytes.Repeat([]byte{7}, secretBytes)
	c := &Command{Op: OpSetSecret, NowMs: 5, WidthMs: 9, Secret: key}
	b, err := c.Encode()
	require.NoError(t, err)
	got, err := DecodeCommand(b)
	require.NoError(t, err)
	require.Equal(t, c, got)
	for i := 0; i < len(b); i++ {
		_, err := DecodeCommand(b[:i])
		require.ErrorIs(t, err, ErrBadCommand, "cut at %d", i)
	}
	_, err = (&Command{Op: OpSetSecret}).Encode()
	require.Error(t, err, "a secret op without a secret")
}

// The first secret applied stays, on every replica, whatever the batching:
// two leaders racing to set one must not leave replicas with different
// secrets (tokens issued under one would not verify on the others).
func TestFirstSecretAppliedWins(t *testing.T) {
	a, b := bytes.Repeat([]byte{1}, secretBytes), bytes.Repeat([]byte{2}, secretBytes)
	logs := []*raft.Log{secretLog(t, 1, a), secretLog(t, 2, b)}
	var hashes []string
	for _, batches := range [][]int{{2}, {1, 1}} { // both in one batch; one per batch
		dir := filepath.Join(t.TempDir(), "fsm")
		f, db := mustFSM(t, dir)
		i := 0
		for _, n := range batches {
			for _, r := range f.ApplyBatch(logs[i : i+n]) {
				require.NoError(t, r.(*ApplyResult).Err)
			}
			i += n
		}
		s, ok, err := f.clusterSecret()
		require.NoError(t, err)
		require.True(t, ok)
		require.Equal(t, a, s.Key)
		require.Equal(t, uint64(1), s.Index)
		hashes = append(hashes, stateHash(t, db))
		// A fresh FSM over the same state reads the same secret from Pebble.
		require.NoError(t, db.Close())
		f2, db2 := mustFSM(t, dir)
		s2, ok, err := f2.clusterSecret()
		require.NoError(t, err)
		require.True(t, ok)
		require.Equal(t, *s, *s2)
		db2.Close()
	}
	require.Equal(t, hashes[0], hashes[1], "batching changed the state")

	// A malformed secret is refused the same way everywhere and stores nothing.
	f, _ := mustFSM(t, filepath.Join(t.TempDir(), "fsm"))
	r := f.ApplyBatch([]*raft.Log{secretLog(t, 1, []byte("short"))})[0].(*ApplyResult)
	require.ErrorIs(t, r.Err, ErrBadCommand)
	_, ok, err := f.clusterSecret()
	require.NoError(t, err)
	require.False(t, ok)
}

// A leader sets the secret once, however many callers ask at the same
// time, and it survives a restart.
func TestEnsureClusterSecret(t *testing.T) {
	n := mustNode(t, func(c *Config) { c.TickInterval, c.SweepInterval = time.Hour, time.Hour })
	_, ok, err := n.ClusterSecret()
	require.NoError(t, err)
	require.False(t, ok, "a new cluster has no secret before its first claim")
	applied := n.db.Meta().Applied
	var wg sync.WaitGroup
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() { defer wg.Done(); require.NoError(t, n.EnsureClusterSecret()) }()
	}
	wg.Wait()
	s, ok, err := n.ClusterSecret()
	require.NoError(t, err)
	require.True(t, ok)
	require.Len(t, s.Key, secretBytes)
	require.Greater(t, s.Index, applied)
	require.Equal(t, s.Index, n.db.Meta().Applied, "eight callers, one entry")
	require.NoError(t, n.EnsureClusterSecret())
	require.Equal(t, s.Index, n.db.Meta().Applied, "a cluster with a secret proposes none")

	m := reopen(t, n)
	s2, ok, err := m.ClusterSecret()
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, s, s2)
}
