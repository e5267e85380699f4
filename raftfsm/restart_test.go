package raftfsm

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/stretchr/testify/require"

	"github.com/idem-store/idem/engine"
)

// reopen closes n and opens a node on the same data dir and config.
func reopen(t *testing.T, n *Node) *Node {
	t.Helper()
	cfg := n.cfg
	require.NoError(t, n.Close())
	m, err := Open(cfg)
	require.NoError(t, err, "a clean restart must never be refused")
	t.Cleanup(func() { m.Close() })
	require.Eventually(t, m.IsLeader, 10*time.Second, 10*time.Millisecond)
	return m
}

// Bug: raft counts no-op and barrier entries in a snapshot's index, which
// the FSM never sees, so the state's applied index can be below the index
// of the node's own snapshot marker. A clean restart then refused to start
// (and advised deleting the data dir). The marker records the applied index
// of the state it stands for; that is what the state is compared with.
func TestRestartAfterSnapshotAtBarrierIndex(t *testing.T) {
	n := mustNode(t, func(c *Config) { c.TickInterval, c.SweepInterval = time.Hour, time.Hour })
	s := engine.Scope{Principal: "p", Endpoint: "e", Key: "k"}
	res, _, err := n.Claim(engine.ClaimArgs{Scope: s, Fingerprint: "aa", LeaseMs: 1000, RetentionMs: 3_600_000})
	require.NoError(t, err)
	require.Equal(t, engine.OutcomeClaimed, res.Outcome)
	n.barrierTerm.Store(0) // force the term's Barrier entry after the claim
	_, found, err := n.Lookup(context.Background(), s, false, true)
	require.NoError(t, err)
	require.True(t, found)
	require.NoError(t, n.Snapshot())
	list, err := n.snaps.List()
	require.NoError(t, err)
	require.Greater(t, list[0].Index, n.db.Meta().Applied, "the test needs a snapshot above the applied index")

	m := reopen(t, n)
	r, found, err := m.Lookup(context.Background(), s, false, true)
	require.NoError(t, err)
	require.True(t, found)
	require.Equal(t, res.Record.Token, r.Token)
	// And again, with the snapshot now the newest thing on disk.
	m = reopen(t, m)
	_, found, err = m.Lookup(context.Background(), s, false, true)
	require.NoError(t, err)
	require.True(t, found)
}

// Bug: a leader whose FSM had applied nothing yet (its fsm directory lost,
// the raft log kept) stamped its own wall clock before replaying the log,
// and cluster time jumped by that clock's skew: with +1 h, a record with
// ten minutes of retention was claimed again seconds after its first claim.
func TestLeaderWithLostStateDoesNotStampItsWallClock(t *testing.T) {
	n := mustNode(t, func(c *Config) { c.TickInterval = 20 * time.Millisecond })
	s := engine.Scope{Principal: "p", Endpoint: "e", Key: "k"}
	a := engine.ClaimArgs{Scope: s, Fingerprint: "aa", LeaseMs: 600_000, RetentionMs: 600_000}
	res, _, err := n.Claim(a)
	require.NoError(t, err)
	require.Equal(t, engine.OutcomeClaimed, res.Outcome)
	before := n.db.Meta().NowMs

	cfg := n.cfg
	require.NoError(t, n.Close())
	require.NoError(t, os.RemoveAll(filepath.Join(cfg.DataDir, "fsm")))
	require.NoError(t, os.RemoveAll(filepath.Join(cfg.DataDir, "fsm.filters")))
	cfg.ClockOffset = time.Hour
	// A slow FSM: the new leader's first proposals come before it has
	// replayed the log.
	setApplyHook(t, func(*FSM, []*raft.Log) { time.Sleep(300 * time.Millisecond) })
	m, err := Open(cfg)
	require.NoError(t, err)
	t.Cleanup(func() { m.Close() })
	require.Eventually(t, m.IsLeader, 10*time.Second, time.Millisecond)
	again, _, err := m.Claim(a)
	require.NoError(t, err)
	require.Equal(t, engine.OutcomeInProgress, again.Outcome, "the first claim's lease and record are still live")
	require.Less(t, m.db.Meta().NowMs-before, int64(time.Minute/time.Millisecond), "cluster time moved by the wall clock's skew")
}

// Bug: lookups judged expiry by the node's own clock, which runs ahead of
// the applied cluster time, so a record read as expired could still be
// live to a claim decided a moment later (by a leader whose stamps are
// behind that clock). A read must never call a record expired before the
// cluster time every later claim is decided at.
func TestLookupJudgesExpiryAtAppliedClusterTime(t *testing.T) {
	n := mustNode(t, func(c *Config) { c.TickInterval, c.SweepInterval = time.Hour, time.Hour })
	s := engine.Scope{Principal: "p", Endpoint: "e", Key: "k"}
	res, _, err := n.Claim(engine.ClaimArgs{Scope: s, Fingerprint: "aa", LeaseMs: 100, RetentionMs: 200})
	require.NoError(t, err)
	require.Equal(t, engine.OutcomeClaimed, res.Outcome)
	time.Sleep(400 * time.Millisecond) // the node's clock passes expires_at; nothing is applied
	for _, linearizable := range []bool{false, true} {
		_, found, err := n.Lookup(context.Background(), s, false, linearizable)
		require.NoError(t, err)
		applied := n.db.Meta().NowMs
		require.Equal(t, applied < res.Record.ExpiresMs, found, "linearizable=%v: found must agree with the applied cluster time %d (expires %d)", linearizable, applied, res.Record.ExpiresMs)
	}
	// Once time moves in the log, it is expired for reads and claims alike.
	_, err = n.propose(&Command{Op: OpTick})
	require.NoError(t, err)
	_, found, err := n.Lookup(context.Background(), s, false, true)
	require.NoError(t, err)
	require.False(t, found)
	again, _, err := n.Claim(engine.ClaimArgs{Scope: s, Fingerprint: "aa", LeaseMs: 100, RetentionMs: 200})
	require.NoError(t, err)
	require.Equal(t, engine.OutcomeClaimed, again.Outcome)
}

// The cluster's retention is replicated state: the first claim pins it,
// a claim proposed with another retention (a leader started with another
// --retention) gets the pinned one, SetRetention changes it for new
// records only, and a restart keeps
// it.
func TestRetentionIsReplicatedState(t *testing.T) {
	n := mustNode(t, func(c *Config) { c.TickInterval, c.SweepInterval = time.Hour, time.Hour })
	_, pinned := n.Retention()
	require.False(t, pinned)
	claim := func(n *Node, key string, ret time.Duration) *engine.Record {
		t.Helper()
		res, _, err := n.Claim(engine.ClaimArgs{Scope: engine.Scope{Principal: "p", Endpoint: "e", Key: key},
			Fingerprint: "aa", LeaseMs: 1000, RetentionMs: ret.Milliseconds()})
		require.NoError(t, err)
		require.Equal(t, engine.OutcomeClaimed, res.Outcome)
		return res.Record
	}
	span := func(r *engine.Record) time.Duration {
		return time.Duration(r.ExpiresMs-r.CreatedMs) * time.Millisecond
	}
	require.Equal(t, time.Hour, span(claim(n, "a", time.Hour)))
	ret, pinned := n.Retention()
	require.True(t, pinned)
	require.Equal(t, time.Hour, ret)
	require.Equal(t, time.Hour, span(claim(n, "b", time.Minute)), "the pinned retention decides, not the command's")
	// The batch path too (POST /v1/batch).
	out := n.Batch([]BatchOp{{Op: OpClaim, Claim: &engine.ClaimArgs{Scope: engine.Scope{Principal: "p", Endpoint: "e", Key: "batch"},
		Fingerprint: "aa", LeaseMs: 1000, RetentionMs: time.Minute.Milliseconds()}}})
	require.NoError(t, out[0].Err)
	require.Equal(t, engine.OutcomeClaimed, out[0].Outcome)
	require.Equal(t, time.Hour, span(out[0].Record), "a batch's claim gets the pinned retention")

	require.NoError(t, n.SetRetention(48*time.Hour))
	require.Equal(t, 48*time.Hour, span(claim(n, "c", time.Minute)))
	r, found, err := n.Lookup(context.Background(), engine.Scope{Principal: "p", Endpoint: "e", Key: "a"}, false, true)
	require.NoError(t, err)
	require.True(t, found)
	require.Equal(t, time.Hour, span(r), "a stored record keeps its expiry")

	m := reopen(t, n)
	ret, pinned = m.Retention()
	require.True(t, pinned)
	require.Equal(t, 48*time.Hour, ret)
	require.Equal(t, 48*time.Hour, span(claim(m, "d", time.Minute)))
}

// A leader stamps the cluster's retention into a claim after the term's
// barrier, not only from the state it had applied when the claim arrived:
// a new leader that had not applied a change of the retention committed
// before (or the first claim's pin) would otherwise stamp the old value,
// and Apply decides with the command's.
func TestClaimStampedAfterTheTermsBarrier(t *testing.T) {
	n := mustNode(t, func(c *Config) { c.TickInterval, c.SweepInterval = time.Hour, time.Hour })
	claimArgs := func(key string) engine.ClaimArgs {
		return engine.ClaimArgs{Scope: engine.Scope{Principal: "p", Endpoint: "e", Key: key},
			Fingerprint: "aa", LeaseMs: 1000, RetentionMs: time.Minute.Milliseconds()}
	}
	_, _, err := n.Claim(with(claimArgs("a"), time.Hour))
	require.NoError(t, err)

	// The change commits, but this node's FSM has not applied it when the
	// claim arrives; the claim then waits for the term's barrier.
	var stuck atomic.Bool
	stuck.Store(true)
	setApplyHook(t, func(f *FSM, _ []*raft.Log) {
		for f == n.fsm && stuck.Load() {
			time.Sleep(5 * time.Millisecond)
		}
	})
	last := n.raft.LastIndex()
	set := make(chan error, 1)
	go func() { set <- n.SetRetention(48 * time.Hour) }()
	require.Eventually(t, func() bool { return n.raft.LastIndex() > last }, 5*time.Second, 5*time.Millisecond)
	n.barrierTerm.Store(0) // as a new leader: a barrier before its first proposal
	type claimed struct {
		rec *engine.Record
		err error
	}
	got := make(chan claimed, 1)
	go func() {
		res, _, err := n.Claim(claimArgs("b"))
		got <- claimed{res.Record, err}
	}()
	time.Sleep(100 * time.Millisecond) // the claim is stamped and waits for the barrier
	stuck.Store(false)
	require.NoError(t, <-set)
	c := <-got
	require.NoError(t, c.err)
	require.Equal(t, 48*time.Hour, time.Duration(c.rec.ExpiresMs-c.rec.CreatedMs)*time.Millisecond,
		"stamped with the retention the log held before the claim, not with the one applied when it arrived")
}

func with(a engine.ClaimArgs, ret time.Duration) engine.ClaimArgs {
	a.RetentionMs = ret.Milliseconds()
	return a
}

// A node restored or recovered with one --raft-addr and started with
// another was still recorded at the old one in its configuration: it led
// alone, but members that joined it dialled a dead address and it could
// never hand leadership over. Leading, it records the address it listens on.
func TestLeaderRecordsItsNewRaftAddress(t *testing.T) {
	n := mustNode(t, func(c *Config) { c.TickInterval = 50 * time.Millisecond })
	old := n.self.RaftAddr
	m := reopen(t, n) // "127.0.0.1:0": another port
	require.NotEqual(t, old, m.self.RaftAddr, "the test needs the node on another port")
	require.Eventually(t, func() bool {
		f := m.raft.GetConfiguration()
		if f.Error() != nil {
			return false
		}
		s, err := server(f.Configuration(), m.self.ID)
		return err == nil && string(s.Address) == m.self.RaftAddr && s.Suffrage == raft.Voter
	}, 10*time.Second, 20*time.Millisecond, "the configuration names the node at its new raft address")
	claimed, _, err := m.Claim(engine.ClaimArgs{Scope: engine.Scope{Principal: "p", Endpoint: "e", Key: "after-move"}, Fingerprint: "aa", LeaseMs: 1000, RetentionMs: 3_600_000})
	require.NoError(t, err)
	require.Equal(t, engine.OutcomeClaimed, claimed.Outcome)
}

// A raft log missing its wal-meta.db (or with a damaged one) did not open,
// and the node said only which file raft-wal failed on ("file exists",
// "invalid database"). It now says what to do, as for a lost log.
func TestUnreadableRaftLogSaysWhatToDo(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cfg := DefaultConfig()
	cfg.NodeID, cfg.DataDir, cfg.Bootstrap, cfg.RaftAddr = "n1", dir, true, "127.0.0.1:0"
	n, err := Open(cfg)
	require.NoError(t, err)
	require.Eventually(t, n.IsLeader, 10*time.Second, 10*time.Millisecond)
	require.NoError(t, claim(n, "k"))
	require.NoError(t, n.Close())
	require.NoError(t, os.Remove(filepath.Join(dir, logStoreDir, "wal-meta.db")))
	_, err = Open(cfg)
	require.Error(t, err)
	require.Contains(t, err.Error(), "wal-meta.db is missing")
	require.Contains(t, err.Error(), "cannot be read")
	require.NoFileExists(t, filepath.Join(dir, logStoreDir, "wal-meta.db"), "nothing may be written")
	_, err = Open(cfg)
	require.ErrorContains(t, err, "wal-meta.db is missing", "a second start is refused alike (raft-wal's first open wrote a new one)")
	require.Contains(t, err.Error(), "idem recover")
	require.Contains(t, err.Error(), "start this node with an empty data dir and --join")
	require.Contains(t, err.Error(), "idem cluster remove --id "+cfg.NodeID)

	// Emptied (an operator's `: >`, a filesystem repair): bbolt made it a
	// new database and raft-wal panicked on its missing bucket, rewriting
	// the file. It is refused alike, and left as it was.
	meta := filepath.Join(dir, logStoreDir, "wal-meta.db")
	require.NoError(t, os.WriteFile(meta, nil, 0o600))
	_, err = Open(cfg)
	require.Error(t, err)
	require.Contains(t, err.Error(), "wal-meta.db is empty")
	require.Contains(t, err.Error(), "cannot be read")
	require.Contains(t, err.Error(), "idem recover")
	st, err := os.Stat(meta)
	require.NoError(t, err)
	require.Zero(t, st.Size(), "nothing may be changed")

	// The way out the message gives works: idem recover could not read the
	// log either, and failed the same way. It now sets the log aside, kept,
	// and starts a new one at the state's index; every record is there.
	off, err := ReadOfflineState(dir)
	require.NoError(t, err, "the dry run describes an unreadable log")
	require.Contains(t, off.LogUnreadable, "wal-meta.db is empty")
	_, err = Recover(dir, cfg.NodeID, []Peer{{ID: cfg.NodeID, RaftAddr: cfg.RaftAddr}}, nil)
	require.NoError(t, err)
	aside, err := filepath.Glob(filepath.Join(dir, logStoreDir+".unreadable-*"))
	require.NoError(t, err)
	require.Len(t, aside, 1, "the unreadable log is kept")
	n, err = Open(cfg)
	require.NoError(t, err)
	defer n.Close()
	require.Eventually(t, n.IsLeader, 10*time.Second, 10*time.Millisecond)
	_, ok := n.db.Lookup(engine.Scope{Principal: "p", Endpoint: "e", Key: "k"}, false, n.db.Meta().NowMs)
	require.True(t, ok, "k, claimed before the log was lost, is kept")
	require.NoError(t, claim(n, "new"), "new claims are decided")
}

// A member's data dir started under another --node-id (node.json lost, a
// typo) ran silently as a node outside its configuration, which never
// votes nor leads. It now says which member the data dir seems to be.
func TestDataDirStartedUnderAnotherIDSaysWhose(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cfg := DefaultConfig()
	cfg.NodeID, cfg.DataDir, cfg.Bootstrap, cfg.RaftAddr = "n1", dir, true, absentAddr(t)
	n, err := Open(cfg)
	require.NoError(t, err)
	require.Eventually(t, n.IsLeader, 10*time.Second, 10*time.Millisecond)
	require.NoError(t, n.Close())
	var logs logBuffer
	cfg.NodeID, cfg.Bootstrap = "n7", false
	cfg.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	n, err = Open(cfg)
	require.NoError(t, err)
	defer n.Close()
	require.Contains(t, logs.String(), "start it with --node-id n1")
}
