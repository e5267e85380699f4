package raftfsm

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idem-store/idem/engine"
)

// A data dir whose raft log was in raft.db (idem before raft-wal) keeps no
// byte of that log in raft.db once the log is moved: deleting the entries
// only freed bolt's pages, and the responses and correlation ids stored in
// plaintext before encryption at rest was turned on stayed in raft.db for
// the life of the data dir, after their records expired and the log was
// compacted.
func TestMovedLogLeavesNothingInRaftDB(t *testing.T) {
	n := mustNode(t, func(c *Config) {
		c.TickInterval, c.SweepInterval = time.Hour, time.Hour
		c.SnapshotThreshold, c.SnapshotInterval = 1<<20, time.Hour
	})
	for i := range 200 {
		write(t, n, fmt.Sprintf("k%03d", i))
	}
	cfg := n.cfg
	require.NoError(t, n.Close())
	toOldLayout(t, cfg.DataDir)
	raftDB := filepath.Join(cfg.DataDir, "raft.db")
	requireInFile := func(want bool, why string) {
		t.Helper()
		b, err := os.ReadFile(raftDB)
		require.NoError(t, err)
		require.Equal(t, want, bytes.Contains(b, secretBody), "response body in raft.db: %s", why)
		require.Equal(t, want, bytes.Contains(b, []byte(secretCorrelation)), "correlation id in raft.db: %s", why)
	}
	requireInFile(true, "the old layout keeps the log there")

	cfg.Keyring = testRing(t, "k1") // encryption turned on with the upgrade
	m, err := Open(cfg)
	require.NoError(t, err)
	require.Eventually(t, m.IsLeader, 10*time.Second, 10*time.Millisecond)
	requireBounds(t, m.stable, 0, 0)
	requireInFile(false, "the moved log must not stay in raft.db's free pages")
	s, _, _ := write(t, m, "after")
	r, ok, err := m.Lookup(context.Background(), s, false, true)
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, secretBody, r.Response.Body)
	r, ok, err = m.Lookup(context.Background(), engine.Scope{Principal: "cus_1", Endpoint: "POST /pay", Key: "k007"}, false, true)
	require.NoError(t, err)
	require.True(t, ok, "a record written before the move is kept")
	require.Equal(t, secretBody, r.Response.Body)
	term := m.raft.CurrentTerm()
	require.NoError(t, m.Close())
	requireInFile(false, "after a stop")

	before, err := os.Stat(raftDB)
	require.NoError(t, err)
	m, err = Open(cfg) // the rewritten raft.db keeps raft's term
	require.NoError(t, err)
	after, err := os.Stat(raftDB)
	require.NoError(t, err)
	require.True(t, os.SameFile(before, after), "raft.db is rewritten once, not at every start")
	t.Cleanup(func() { m.Close() })
	require.Eventually(t, m.IsLeader, 10*time.Second, 10*time.Millisecond)
	require.Greater(t, m.raft.CurrentTerm(), term)
	require.NoFileExists(t, filepath.Join(cfg.DataDir, stableScrubTmp))
}

// The rewrite is hygiene: when it cannot be done (here raft.db.scrub is in
// the way; a full disk is the real case) the node starts with raft.db as
// it was, says so, and tries again at its next start.
func TestRaftDBRewriteThatFailsDoesNotStopTheNode(t *testing.T) {
	n := mustNode(t, func(c *Config) {
		c.TickInterval, c.SweepInterval = time.Hour, time.Hour
		c.SnapshotThreshold, c.SnapshotInterval = 1<<20, time.Hour
	})
	for i := range 20 {
		write(t, n, fmt.Sprintf("k%03d", i))
	}
	cfg := n.cfg
	require.NoError(t, n.Close())
	toOldLayout(t, cfg.DataDir)
	blocker := filepath.Join(cfg.DataDir, stableScrubTmp)
	require.NoError(t, os.MkdirAll(filepath.Join(blocker, "x"), 0o700))
	var logs bytes.Buffer
	cfg.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	m, err := Open(cfg)
	require.NoError(t, err, "a rewrite that fails must not keep the node from starting")
	require.Eventually(t, m.IsLeader, 10*time.Second, 10*time.Millisecond)
	require.Contains(t, logs.String(), "could not rewrite raft.db")
	_, ok, err := m.Lookup(context.Background(), engine.Scope{Principal: "cus_1", Endpoint: "POST /pay", Key: "k007"}, false, true)
	require.NoError(t, err)
	require.True(t, ok)
	require.NoError(t, m.Close())

	require.NoError(t, os.RemoveAll(blocker))
	m, err = Open(cfg)
	require.NoError(t, err)
	t.Cleanup(func() { m.Close() })
	b, err := os.ReadFile(filepath.Join(cfg.DataDir, "raft.db"))
	require.NoError(t, err)
	require.False(t, bytes.Contains(b, secretBody), "rewritten at the next start")
}
