package raftfsm

import (
	"bytes"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/stretchr/testify/require"

	"github.com/idem-store/idem/engine"
)

// A bit flips in an entry of the raft log that is not in the newest batch
// (a disk's silent error, an entry the node applied long ago). raft-wal
// checks only the last batch when it opens, and gave the entry back as it
// now read: a leader sent it so to a follower catching up, which applied
// it and served a stored response that was not the one acknowledged (an
// operator walk, three real nodes). The entry is now refused where it is
// read; the others read back as they were stored.
func TestFlippedBitInARaftLogEntryIsRefused(t *testing.T) {
	path := filepath.Join(t.TempDir(), "raft-wal")
	require.NoError(t, os.Mkdir(path, 0o700))
	s, err := openWAL(path, nil)
	require.NoError(t, err)
	data := func(i uint64) []byte { return fmt.Appendf(nil, "resp-%03d-%s", i, bytes.Repeat([]byte("x"), 64)) }
	for i := uint64(1); i <= 100; i += 10 {
		var batch []*raft.Log
		for j := i; j < i+10; j++ {
			batch = append(batch, &raft.Log{Index: j, Term: 1, Type: raft.LogCommand, Data: data(j)})
		}
		require.NoError(t, s.StoreLogs(batch))
		require.Nil(t, batch[0].Extensions, "the caller's entries are left as they were")
	}
	require.NoError(t, s.Close())

	segs, err := filepath.Glob(filepath.Join(path, "*.wal"))
	require.NoError(t, err)
	require.Len(t, segs, 1)
	b, err := os.ReadFile(segs[0])
	require.NoError(t, err)
	at := bytes.Index(b, data(21))
	require.Positive(t, at)
	b[at+20] ^= 0x01
	require.NoError(t, os.WriteFile(segs[0], b, 0o600))

	var logs bytes.Buffer
	s, err = openWAL(path, slog.New(slog.NewTextHandler(&logs, nil)))
	require.NoError(t, err)
	defer s.Close()
	cfg := DefaultConfig()
	cfg.NodeID, cfg.DataDir, cfg.HTTPAdvertise = "n1", filepath.Dir(path), "127.0.0.1:7070"
	s.damagedAdvice = damagedLogAdvice(cfg)
	var l raft.Log
	err = s.GetLog(21, &l)
	require.ErrorIs(t, err, errEntryDamaged, "a damaged entry must not be read as good: %q", l.Data)
	require.ErrorContains(t, err, path)
	// Said at ERROR with the way out; a leader hands its leadership on
	// first, or the followers it cannot send the entry to stay behind.
	require.Contains(t, logs.String(), "level=ERROR")
	require.Contains(t, logs.String(), path)
	require.Contains(t, logs.String(), "idem cluster transfer-leadership --addr 127.0.0.1:7070")
	require.Contains(t, logs.String(), "empty data dir and --join")
	for _, i := range []uint64{20, 22, 100} {
		var l raft.Log
		require.NoError(t, s.GetLog(i, &l))
		require.Equal(t, data(i), l.Data)
		require.Nil(t, l.Extensions)
	}
}

// A node whose log holds a damaged entry above its newest snapshot (the
// entries raft reads as it starts) is refused with the way out, not
// started nor left to raft's panic on it, and nothing is changed.
func TestNodeWithADamagedLogEntryIsRefused(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cfg := DefaultConfig()
	cfg.NodeID, cfg.DataDir, cfg.Bootstrap, cfg.RaftAddr = "n1", dir, true, "127.0.0.1:0"
	n, err := Open(cfg)
	require.NoError(t, err)
	require.Eventually(t, n.IsLeader, 10*time.Second, 10*time.Millisecond)
	for i := range 20 {
		require.NoError(t, claim(n, fmt.Sprintf("key-%02d-of-the-walk", i)))
	}
	require.NoError(t, n.Close())

	segs, err := filepath.Glob(filepath.Join(dir, logStoreDir, "*.wal"))
	require.NoError(t, err)
	require.Len(t, segs, 1)
	b, err := os.ReadFile(segs[0])
	require.NoError(t, err)
	at := bytes.Index(b, []byte("key-05-of-the-walk"))
	require.Positive(t, at)
	b[at+3] ^= 0x01
	require.NoError(t, os.WriteFile(segs[0], b, 0o600))

	_, err = Open(cfg)
	require.ErrorIs(t, err, errEntryDamaged)
	require.ErrorContains(t, err, filepath.Join(dir, logStoreDir))
	require.ErrorContains(t, err, "idem cluster remove --id n1")
	require.ErrorContains(t, err, "empty data dir and --join")
	require.ErrorContains(t, err, "idem recover --data-dir "+dir)
	after, err := os.ReadFile(segs[0])
	require.NoError(t, err)
	require.Equal(t, b, after, "nothing may be changed")

	// The way out for a one-node cluster: recover failed on the same
	// entry (it applies every one); it now sets the log aside and
	// rebuilds the node from its state, which holds every claim.
	off, err := ReadOfflineState(dir)
	require.NoError(t, err)
	require.Contains(t, off.LogUnreadable, "entry")
	_, err = Recover(dir, cfg.NodeID, []Peer{{ID: cfg.NodeID, RaftAddr: cfg.RaftAddr}}, nil)
	require.NoError(t, err)
	n, err = Open(cfg)
	require.NoError(t, err)
	defer n.Close()
	require.Eventually(t, n.IsLeader, 10*time.Second, 10*time.Millisecond)
	for i := range 20 {
		_, ok := n.db.Lookup(engine.Scope{Principal: "p", Endpoint: "e", Key: fmt.Sprintf("key-%02d-of-the-walk", i)}, false, n.db.Meta().NowMs)
		require.True(t, ok, "claim %d", i)
	}
	require.NoError(t, claim(n, "new"))
}
