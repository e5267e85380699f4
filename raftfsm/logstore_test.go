package raftfsm

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	"github.com/stretchr/testify/require"

	"github.com/idem-store/idem/engine"
)

func openTestLogStore(t *testing.T, dir string) (*LogStore, *raftboltdb.BoltStore) {
	t.Helper()
	stable, err := raftboltdb.New(raftboltdb.Options{Path: filepath.Join(dir, "raft.db")})
	require.NoError(t, err)
	s, err := openLogStore(dir, stable, nil)
	if err != nil {
		stable.Close()
	}
	require.NoError(t, err)
	return s, stable
}

func testEntry(i uint64, term uint64) *raft.Log {
	l := &raft.Log{Index: i, Term: term, Type: raft.LogCommand, Data: []byte(fmt.Sprintf("entry %d term %d", i, term))}
	switch i % 4 {
	case 1:
		l.Extensions = []byte{0, 1, byte(i)}
	case 2:
		l.AppendedAt = time.Unix(1_700_000_000, int64(i))
	case 3:
		l.Type, l.Data = raft.LogNoop, nil
	}
	return l
}

func requireEntry(t *testing.T, s raft.LogStore, want *raft.Log) {
	t.Helper()
	var got raft.Log
	require.NoError(t, s.GetLog(want.Index, &got))
	require.Equal(t, want.Index, got.Index)
	require.Equal(t, want.Term, got.Term)
	require.Equal(t, want.Type, got.Type)
	require.Equal(t, want.Data, got.Data)
	require.Equal(t, want.Extensions, got.Extensions)
	require.True(t, want.AppendedAt.Equal(got.AppendedAt), "AppendedAt %v, want %v", got.AppendedAt, want.AppendedAt)
}

func requireBounds(t *testing.T, s raft.LogStore, first, last uint64) {
	t.Helper()
	f, err := s.FirstIndex()
	require.NoError(t, err)
	l, err := s.LastIndex()
	require.NoError(t, err)
	require.Equal(t, [2]uint64{first, last}, [2]uint64{f, l}, "first and last index")
}

// The contract hashicorp/raft relies on (and raft-boltdb keeps): 0 and 0
// when empty, ErrLogNotFound for a missing index, entries as stored
// (every field), inclusive DeleteRange of a prefix, a suffix or all, gaps
// allowed, and all of it across a reopen.
func TestLogStoreContract(t *testing.T) {
	dir := t.TempDir()
	s, stable := openTestLogStore(t, dir)
	requireBounds(t, s, 0, 0)
	var l raft.Log
	require.ErrorIs(t, s.GetLog(1, &l), raft.ErrLogNotFound)
	require.NoError(t, s.StoreLogs(nil))

	require.NoError(t, s.StoreLog(testEntry(1, 1)))
	requireBounds(t, s, 1, 1)
	batch := []*raft.Log{}
	for i := uint64(2); i <= 100; i++ {
		batch = append(batch, testEntry(i, 1+i/50))
	}
	require.NoError(t, s.StoreLogs(batch))
	requireBounds(t, s, 1, 100)
	for i := uint64(1); i <= 100; i++ {
		requireEntry(t, s, testEntry(i, 1+i/50))
	}
	require.ErrorIs(t, s.GetLog(101, &l), raft.ErrLogNotFound)
	require.ErrorIs(t, s.GetLog(0, &l), raft.ErrLogNotFound)

	// Compaction: a prefix.
	require.NoError(t, s.DeleteRange(1, 40))
	requireBounds(t, s, 41, 100)
	require.ErrorIs(t, s.GetLog(40, &l), raft.ErrLogNotFound)
	requireEntry(t, s, testEntry(41, 1))
	// A follower's conflicting suffix, then the leader's entries there.
	require.NoError(t, s.DeleteRange(90, 100))
	requireBounds(t, s, 41, 89)
	require.NoError(t, s.StoreLogs([]*raft.Log{testEntry(90, 7), testEntry(91, 7)}))
	requireBounds(t, s, 41, 91)
	requireEntry(t, s, testEntry(90, 7))
	// A range past either end, and an empty range, change nothing else.
	require.NoError(t, s.DeleteRange(200, 300))
	require.NoError(t, s.DeleteRange(5, 4))
	requireBounds(t, s, 41, 91)

	// A prefix up to past the end empties the log; the next append may
	// start anywhere (raft does so after installing a snapshot).
	require.NoError(t, s.DeleteRange(41, 91))
	requireBounds(t, s, 0, 0)
	require.NoError(t, s.StoreLogs([]*raft.Log{testEntry(500, 9), testEntry(501, 9)}))
	requireBounds(t, s, 500, 501)
	require.ErrorIs(t, s.GetLog(300, &l), raft.ErrLogNotFound)

	// Across a reopen.
	require.NoError(t, s.Close())
	require.Error(t, s.StoreLog(testEntry(502, 9)), "a closed store refuses")
	require.NoError(t, stable.Close())
	s, stable = openTestLogStore(t, dir)
	requireBounds(t, s, 500, 501)
	requireEntry(t, s, testEntry(500, 9))
	requireEntry(t, s, testEntry(501, 9))

	// Everything.
	require.NoError(t, s.DeleteRange(500, 501))
	requireBounds(t, s, 0, 0)
	require.NoError(t, s.Close())
	require.NoError(t, stable.Close())
	s, stable = openTestLogStore(t, dir)
	requireBounds(t, s, 0, 0)
	require.NoError(t, s.Close())
	require.NoError(t, stable.Close())
}

// writeOldLog stores entries in raft.db as idem kept its log before
// raft-log/ existed (raft-boltdb's "logs" bucket).
func writeOldLog(t *testing.T, dir string, entries []*raft.Log) {
	t.Helper()
	stable, err := raftboltdb.New(raftboltdb.Options{Path: filepath.Join(dir, "raft.db")})
	require.NoError(t, err)
	defer stable.Close()
	for len(entries) > 0 {
		n := min(len(entries), 1000)
		require.NoError(t, stable.StoreLogs(entries[:n]))
		entries = entries[n:]
	}
}

func oldEntries(n int, size int) []*raft.Log {
	out := make([]*raft.Log, n)
	for i := range out {
		l := testEntry(uint64(i+1), 3)
		l.Data = append(l.Data, bytes.Repeat([]byte{byte(i)}, size)...)
		out[i] = l
	}
	return out
}

// requireMigrated checks that dir's raft log is entries, in raft-log, and
// that raft.db holds no entry any more.
func requireMigrated(t *testing.T, dir string, entries []*raft.Log) {
	t.Helper()
	s, stable := openTestLogStore(t, dir)
	defer stable.Close()
	defer s.Close()
	requireBounds(t, s, entries[0].Index, entries[len(entries)-1].Index)
	for _, e := range entries {
		requireEntry(t, s, e)
	}
	requireBounds(t, stable, 0, 0)
}

// A crash at each step of the migration (after a chunk of the copy, after
// the marker and before raft.db's entries are deleted) loses nothing, and
// the next start finishes it.
func TestLogStoreMigrationStopsAnywhere(t *testing.T) {
	defer func(n int) { migrateChunk = n }(migrateChunk)
	migrateChunk = 32
	entries := oldEntries(300, 1000)
	for _, step := range []string{"chunk", "copied", "renamed", "drop"} {
		t.Run(step, func(t *testing.T) {
			dir := t.TempDir()
			writeOldLog(t, dir, entries)
			crash := errors.New("crash")
			migrateHook = func(s string) error {
				if s == step {
					return crash
				}
				return nil
			}
			defer func() { migrateHook = func(string) error { return nil } }()
			stable, err := raftboltdb.New(raftboltdb.Options{Path: filepath.Join(dir, "raft.db")})
			require.NoError(t, err)
			_, err = openLogStore(dir, stable, nil)
			require.ErrorIs(t, err, crash)
			require.NoError(t, stable.Close())
			// What a reader sees now is the whole log, wherever it is.
			requireReadOnlyLog(t, dir, entries)
			migrateHook = func(string) error { return nil }
			requireMigrated(t, dir, entries)
		})
	}
}

// requireReadOnlyLog reads dir's log as ReadOfflineState does.
func requireReadOnlyLog(t *testing.T, dir string, entries []*raft.Log) {
	t.Helper()
	stable, err := raftboltdb.New(raftboltdb.Options{Path: filepath.Join(dir, "raft.db")})
	require.NoError(t, err)
	defer stable.Close()
	s, closeLogs, err := openLogStoreReadOnly(dir, stable, nil)
	require.NoError(t, err)
	defer closeLogs()
	requireBounds(t, s, entries[0].Index, entries[len(entries)-1].Index)
	for _, e := range entries {
		requireEntry(t, s, e)
	}
}

// An entry in raft.db that differs from the moved log (an older idem run
// on the data dir after the move) stops the start, and changes nothing.
func TestLogStoreRefusesALogWrittenToRaftDBAfterTheMove(t *testing.T) {
	dir := t.TempDir()
	entries := oldEntries(20, 10)
	writeOldLog(t, dir, entries)
	requireMigrated(t, dir, entries)
	writeOldLog(t, dir, []*raft.Log{testEntry(5, 4)})
	stable, err := raftboltdb.New(raftboltdb.Options{Path: filepath.Join(dir, "raft.db")})
	require.NoError(t, err)
	_, err = openLogStore(dir, stable, nil)
	require.ErrorContains(t, err, "raft.db holds raft log entry 5 (term 4)")
	requireBounds(t, stable, 5, 5)
	require.NoError(t, stable.Close())
}

// TestLogStoreMigrationKillHelper is the process the kill test kills: it
// migrates the data dir in IDEM_TEST_MIGRATE_DIR.
func TestLogStoreMigrationKillHelper(t *testing.T) {
	dir := os.Getenv("IDEM_TEST_MIGRATE_DIR")
	if dir == "" {
		t.Skip("run by TestLogStoreMigrationSurvivesKill")
	}
	chunk, err := strconv.Atoi(os.Getenv("IDEM_TEST_MIGRATE_CHUNK"))
	require.NoError(t, err)
	migrateChunk = chunk
	s, stable := openTestLogStore(t, dir)
	require.NoError(t, s.Close())
	require.NoError(t, stable.Close())
}

// kill -9 of a process migrating a data dir, at random moments: after each
// kill the whole log reads back (from raft.db or raft-log, as
// ReadOfflineState reads it), and a start that is let run finishes the move.
// It kills until it has stopped a copy before its marker and a move before
// raft.db was emptied. Every other kill lands as soon as the copy's
// directory appears: at random moments alone, 30 kills on a loaded CI
// machine all missed the copy (the process's start takes most of a run).
func TestLogStoreMigrationSurvivesKill(t *testing.T) {
	pristine := t.TempDir()
	entries := oldEntries(8_000, 1000)
	writeOldLog(t, pristine, entries)
	dir := t.TempDir()
	copyDir(t, pristine, dir)
	// How long an undisturbed migration takes, to kill within it.
	cp := t.TempDir()
	copyDir(t, pristine, cp)
	start := time.Now()
	out, err := migrateProcess(cp).CombinedOutput()
	require.NoError(t, err, "%s", out)
	full := time.Since(start)
	seen := map[string]int{}
	for i := 0; i < 30 && (seen["copy-interrupted"] == 0 || seen["raft.db-not-emptied"] == 0); i++ {
		cmd := migrateProcess(dir)
		require.NoError(t, cmd.Start())
		if i%2 == 0 {
			time.Sleep(time.Duration(rand.Int64N(int64(full))))
		} else {
			appears(filepath.Join(dir, logStoreTmp), 4*full)
		}
		require.NoError(t, cmd.Process.Signal(syscall.SIGKILL))
		cmd.Wait()
		requireReadOnlyLog(t, dir, entries)
		state := migrationState(t, dir)
		seen[state]++
		if state == "done" {
			require.NoError(t, os.RemoveAll(dir))
			copyDir(t, pristine, dir)
		}
	}
	t.Logf("migration of %d entries takes %v; states after kill -9: %v", len(entries), full, seen)
	require.Positive(t, seen["copy-interrupted"], "no kill landed in the copy: %v", seen)
	out, err = migrateProcess(dir).CombinedOutput()
	require.NoError(t, err, "%s", out)
	requireMigrated(t, dir, entries)
}

// appears waits until path exists, at most wait.
func appears(path string, wait time.Duration) {
	for end := time.Now().Add(wait); time.Now().Before(end); time.Sleep(100 * time.Microsecond) {
		if _, err := os.Stat(path); err == nil {
			return
		}
	}
}

// migrationState says where a killed migration of dir stopped.
func migrationState(t *testing.T, dir string) string {
	t.Helper()
	stable, err := raftboltdb.New(raftboltdb.Options{Path: filepath.Join(dir, "raft.db")})
	require.NoError(t, err)
	defer stable.Close()
	s, closeLogs, err := openLogStoreReadOnly(dir, stable, nil)
	require.NoError(t, err)
	defer closeLogs()
	boltLast, err := stable.LastIndex()
	require.NoError(t, err)
	_, moved := s.(*LogStore)
	_, statErr := os.Stat(filepath.Join(dir, logStoreTmp))
	switch {
	case !moved && statErr != nil:
		return "not-started"
	case !moved:
		return "copy-interrupted"
	case boltLast > 0:
		return "raft.db-not-emptied"
	}
	return "done"
}

func migrateProcess(dir string) *exec.Cmd {
	cmd := exec.Command(os.Args[0], "-test.run=^TestLogStoreMigrationKillHelper$", "-test.count=1")
	cmd.Env = append(os.Environ(), "IDEM_TEST_MIGRATE_DIR="+dir, "IDEM_TEST_MIGRATE_CHUNK="+strconv.Itoa(256))
	return cmd
}

func copyDir(t *testing.T, from, to string) {
	t.Helper()
	require.NoError(t, filepath.WalkDir(from, func(path string, d os.DirEntry, err error) error {
		require.NoError(t, err)
		rel, err := filepath.Rel(from, path)
		require.NoError(t, err)
		if d.IsDir() {
			return os.MkdirAll(filepath.Join(to, rel), 0o700)
		}
		b, err := os.ReadFile(path)
		require.NoError(t, err)
		return os.WriteFile(filepath.Join(to, rel), b, 0o600)
	}))
}

// toOldLayout rewrites a stopped node's data dir as idem wrote it before
// raft-log/: the raft log in raft.db, no raft-log directory.
func toOldLayout(t *testing.T, dir string) (first, last uint64) {
	t.Helper()
	s, stable := openTestLogStore(t, dir)
	first, _ = s.FirstIndex()
	last, _ = s.LastIndex()
	require.Positive(t, last)
	var entries []*raft.Log
	for i := first; i <= last; i++ {
		l := new(raft.Log)
		require.NoError(t, s.GetLog(i, l))
		entries = append(entries, l)
	}
	require.NoError(t, stable.StoreLogs(entries))
	require.NoError(t, s.Close())
	require.NoError(t, stable.Close())
	require.NoError(t, os.RemoveAll(filepath.Join(dir, logStoreDir)))
	return first, last
}

// A one-node data dir whose log is in raft.db starts with its records, its
// log, its term and its configuration, and goes on committing.
func TestLogStoreMigratesOneNode(t *testing.T) {
	n := mustNode(t, func(c *Config) {
		c.TickInterval, c.SweepInterval = time.Hour, time.Hour
		c.SnapshotThreshold, c.SnapshotInterval = 1<<20, time.Hour // the log keeps everything
	})
	want := fill(t, n, 30)
	cfg := n.cfg
	term := n.raft.CurrentTerm()
	require.NoError(t, n.Close())
	first, last := toOldLayout(t, cfg.DataDir)
	before, err := ReadOfflineState(cfg.DataDir)
	require.NoError(t, err)
	require.Equal(t, last, before.LastIndex, "ReadOfflineState reads the log in raft.db")
	require.NoDirExists(t, filepath.Join(cfg.DataDir, logStoreDir), "ReadOfflineState changes nothing")

	m, err := Open(cfg)
	require.NoError(t, err)
	t.Cleanup(func() { m.Close() })
	require.Eventually(t, m.IsLeader, 10*time.Second, 10*time.Millisecond, "the migrated node must lead its one-node cluster")
	requireBounds(t, m.stable, 0, 0)
	f, _ := m.logStore.FirstIndex()
	require.Equal(t, first, f)
	require.GreaterOrEqual(t, m.raft.CurrentTerm(), term)
	require.GreaterOrEqual(t, m.raft.LastIndex(), last)
	requireRecords(t, m, want)
	res, _, err := m.Claim(engine.ClaimArgs{Scope: scopeN(1000), Fingerprint: "aa", LeaseMs: 60_000, RetentionMs: 3_600_000})
	require.NoError(t, err)
	require.Equal(t, engine.OutcomeClaimed, res.Outcome)
	res, _, err = m.Claim(engine.ClaimArgs{Scope: scopeN(1), Fingerprint: "aa", LeaseMs: 60_000, RetentionMs: 3_600_000})
	require.NoError(t, err)
	require.Equal(t, engine.OutcomeInProgress, res.Outcome, "an old claim still holds its lease")
}

// Three nodes whose logs are all in raft.db, one of them behind (stopped
// while the others wrote), start together: they elect a leader from their
// moved logs and configuration, the one behind catches up from the
// leader's moved log (no snapshot exists), every node has every record and
// new claims commit.
func TestLogStoreMigratesThreeNodes(t *testing.T) {
	c := newMemCluster(t)
	cfgs := func(n *Node) Config {
		cfg := n.cfg
		cfg.SnapshotThreshold, cfg.SnapshotInterval = 1<<20, time.Hour
		cfg.RaftAddr = n.self.RaftAddr // the port it got, which its peers know
		return cfg
	}
	a := c.open("a", "", true)
	c.leader(a)
	b := c.open("b", "", false)
	c.join(b, a)
	d := c.open("d", "", false)
	c.join(d, a)
	want := map[engine.Scope]bool{}
	for i := range 10 {
		require.NoError(t, claim(a, fmt.Sprintf("k%d", i)))
		want[engine.Scope{Principal: "p", Endpoint: "e", Key: fmt.Sprintf("k%d", i)}] = true
	}
	c.stop(d)
	for i := 10; i < 30; i++ {
		require.NoError(t, claim(c.leader(a, b), fmt.Sprintf("k%d", i)))
		want[engine.Scope{Principal: "p", Endpoint: "e", Key: fmt.Sprintf("k%d", i)}] = true
	}
	conf := []Config{cfgs(a), cfgs(b), cfgs(d)}
	c.stop(a)
	c.stop(b)
	for _, cfg := range conf {
		toOldLayout(t, cfg.DataDir)
	}
	var nodes []*Node
	for _, cfg := range conf {
		cfg.Bootstrap = false
		n, err := Open(cfg)
		require.NoError(t, err, "node %s", cfg.NodeID)
		n.SetPeerProbe(c.probe)
		c.mu.Lock()
		c.nodes[cfg.HTTPAdvertise] = n
		c.mu.Unlock()
		t.Cleanup(func() { c.stop(n) })
		nodes = append(nodes, n)
	}
	var l *Node
	require.Eventually(t, func() bool {
		l = c.leader(nodes...)
		return claim(l, "after") == nil
	}, 20*time.Second, 50*time.Millisecond, "no claim commits after the migration")
	want[engine.Scope{Principal: "p", Endpoint: "e", Key: "after"}] = true
	commit := l.raft.CommitIndex()
	for _, n := range nodes {
		require.Eventually(t, func() bool { return n.db.Meta().Applied >= commit }, 20*time.Second, 10*time.Millisecond,
			"%s never applied index %d", n.self.ID, commit)
		for s := range want {
			_, ok, err := n.Lookup(context.Background(), s, false, false) // this replica, applied past the claims
			require.NoError(t, err)
			require.True(t, ok, "%s lost %v", n.self.ID, s)
		}
		requireBounds(t, n.stable, 0, 0)
		f := n.raft.GetConfiguration()
		require.NoError(t, f.Error())
		require.Len(t, f.Configuration().Servers, 3)
	}
	// d, stopped before k10..k29, got them as log entries: no snapshot.
	list, err := nodes[2].snaps.List()
	require.NoError(t, err)
	require.Empty(t, list, "the node behind must catch up from the moved log, not a snapshot")
}

// writeSynced's errors named their file twice ("raftfsm: write F: write F:
// no space left on device", a restore on a full disk): the os error names
// it already.
func TestWriteSyncedNamesItsFileOnce(t *testing.T) {
	path := filepath.Join(t.TempDir(), "missing", "f")
	err := writeSynced(path, []byte("x"))
	require.Error(t, err)
	require.Equal(t, 1, strings.Count(err.Error(), path), err.Error())
}
