package raftfsm

import (
	"bytes"
	"fmt"
	"io"
	"math/rand/v2"
	"path/filepath"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/stretchr/testify/require"

	"github.com/idem-store/idem/engine"
	"github.com/idem-store/idem/ttl"
)

func mustFSM(t testing.TB, dir string) (*FSM, *engine.DB) {
	t.Helper()
	db, err := engine.Open(dir, engine.Options{})
	require.NoError(t, err)
	return NewFSM(db, ttl.NewClock(0), nil, nil), db
}

func stateHash(t testing.TB, db *engine.DB) string {
	t.Helper()
	h, err := db.StateHash()
	require.NoError(t, err)
	return h
}

// genLog builds a deterministic, contended log: claims, completes, releases,
// extends, deletes, ticks and bucket drops over a handful of scopes, with
// cluster time moving forward (and sometimes backward, as a new leader's
// stamp might) so that leases run out and buckets expire.
func genLog(seed uint64, n int) []*raft.Log {
	r := rand.New(rand.NewPCG(seed, 7))
	const widthMs = 1000
	now := int64(1_700_000_000_000)
	logs := make([]*raft.Log, 0, n)
	tokens := map[int]uint64{}
	for i := 1; i <= n; i++ {
		now += int64(r.IntN(300)) - 20
		k := r.IntN(6)
		scope := engine.Scope{Principal: fmt.Sprintf("p%d", k%2), Endpoint: "POST /x", Key: fmt.Sprintf("k%d", k)}
		target := &engine.TokenArgs{Scope: scope, Token: tokens[k]}
		if r.IntN(5) == 0 {
			target.Token = uint64(r.IntN(i + 1)) // a stale or wrong token
		}
		c := &Command{NowMs: now, WidthMs: widthMs}
		switch x := r.IntN(10); {
		case x < 4:
			c.Op = OpClaim
			c.Claim = &engine.ClaimArgs{Scope: scope, Fingerprint: fmt.Sprintf("%02x", r.IntN(2)),
				LeaseMs: int64(100 + r.IntN(900)), RetentionMs: int64(2000 + r.IntN(3000)), MaxKeys: 4}
			tokens[k] = uint64(i)
		case x < 6:
			c.Op = OpComplete
			c.Target = target
			c.Response = &engine.Response{Status: 200 + r.IntN(2), Body: []byte{byte(r.IntN(3))}}
		case x < 7:
			c.Op, c.Target = OpRelease, target
		case x < 8:
			c.Op, c.Target, c.LeaseMs = OpExtend, target, int64(100+r.IntN(900))
		case x < 9:
			c.Op = OpDropBucket
			c.Bucket = uint64(now/widthMs) - uint64(r.IntN(8))
		default:
			if r.IntN(2) == 0 {
				c.Op, c.Target = OpDelete, target
			} else {
				c.Op = OpTick
			}
		}
		b, err := c.Encode()
		if err != nil {
			panic(err)
		}
		logs = append(logs, &raft.Log{Index: uint64(i), Term: 1, Type: raft.LogCommand, Data: b})
	}
	return logs
}

// applyInBatches applies logs in batches of random size up to max.
func applyInBatches(f *FSM, logs []*raft.Log, seed uint64, max int) []any {
	r := rand.New(rand.NewPCG(seed, 1))
	var out []any
	for len(logs) > 0 {
		n := 1 + r.IntN(max)
		if n > len(logs) {
			n = len(logs)
		}
		out = append(out, f.ApplyBatch(logs[:n])...)
		logs = logs[n:]
	}
	return out
}

func TestApplyIsDeterministic(t *testing.T) {
	for seed := uint64(1); seed <= 5; seed++ {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			logs := genLog(seed, 600)
			a, dbA := mustFSM(t, t.TempDir())
			b, dbB := mustFSM(t, t.TempDir())
			defer dbA.Close()
			defer dbB.Close()
			resA := applyInBatches(a, logs, seed, 1)
			resB := applyInBatches(b, logs, seed+100, 64)
			require.Equal(t, stateHash(t, dbA), stateHash(t, dbB), "same log, different state")
			for i := range resA {
				require.Equal(t, resA[i], resB[i], "entry %d decided differently", i+1)
			}
			require.Equal(t, uint64(len(logs)), dbA.Meta().Applied)
			// The log must have exercised the interesting paths.
			seen := map[engine.Outcome]bool{}
			for _, r := range resA {
				seen[r.(*ApplyResult).Outcome] = true
			}
			for _, o := range []engine.Outcome{engine.OutcomeClaimed, engine.OutcomeInProgress, engine.OutcomeReplay,
				engine.OutcomeCompleted, engine.OutcomeTokenMismatch, engine.OutcomeDropped, engine.OutcomeDropRefused} {
				require.True(t, seen[o], "log never produced %s", o)
			}
		})
	}
}

func TestReplayAfterRestartChangesNothing(t *testing.T) {
	dir := t.TempDir()
	logs := genLog(42, 400)
	f, db := mustFSM(t, dir)
	applyInBatches(f, logs[:300], 1, 32)
	want := stateHash(t, db)
	require.NoError(t, db.Close())

	// hashicorp/raft replays from its last snapshot after a restart: the
	// entries the FSM already has must be skipped, whatever the batching.
	f, db = mustFSM(t, dir)
	require.Equal(t, uint64(300), db.Meta().Applied)
	res := applyInBatches(f, logs[:300], 2, 17)
	for _, r := range res {
		require.Nil(t, r, "a replayed entry was applied again")
	}
	require.Equal(t, want, stateHash(t, db))

	// A batch straddling the applied index applies only the new part.
	applyInBatches(f, logs[250:], 3, 64)
	ref, refDB := mustFSM(t, t.TempDir())
	applyInBatches(ref, logs, 4, 1)
	require.Equal(t, stateHash(t, refDB), stateHash(t, db))
	refDB.Close()
	db.Close()
}

type memSink struct {
	bytes.Buffer
	cancelled bool
}

func (s *memSink) ID() string    { return "mem" }
func (s *memSink) Cancel() error { s.cancelled = true; return nil }
func (s *memSink) Close() error  { return nil }

func TestSnapshotRestoreReplacesState(t *testing.T) {
	logs := genLog(9, 300)
	src, srcDB := mustFSM(t, t.TempDir())
	defer srcDB.Close()
	applyInBatches(src, logs[:200], 1, 16)
	snap, err := src.Snapshot()
	require.NoError(t, err)
	// Writes after Snapshot returns are not in it.
	applyInBatches(src, logs[200:], 1, 16)
	var sink memSink
	require.NoError(t, snap.Persist(&sink))
	snap.Release()

	ref, refDB := mustFSM(t, t.TempDir())
	defer refDB.Close()
	applyInBatches(ref, logs[:200], 2, 1)

	// The target has unrelated state of its own, which Restore must replace.
	dst, dstDB := mustFSM(t, filepath.Join(t.TempDir(), "dst"))
	defer dstDB.Close()
	applyInBatches(dst, genLog(1234, 50), 1, 8)
	require.NoError(t, dst.Restore(io.NopCloser(bytes.NewReader(sink.Bytes()))))
	require.Equal(t, stateHash(t, refDB), stateHash(t, dstDB))
	require.Equal(t, uint64(200), dstDB.Meta().Applied)

	// And it continues exactly like the source.
	applyInBatches(dst, logs[200:], 3, 5)
	require.Equal(t, stateHash(t, srcDB), stateHash(t, dstDB))
}

func TestBadCommandIsIgnoredEverywhere(t *testing.T) {
	f, db := mustFSM(t, t.TempDir())
	defer db.Close()
	before := stateHash(t, db)
	res := f.Apply(&raft.Log{Index: 1, Type: raft.LogCommand, Data: []byte("not json")})
	require.ErrorIs(t, res.(*ApplyResult).Err, ErrBadCommand)
	claimNoWidth, _ := (&Command{Op: OpClaim, NowMs: 5, Claim: &engine.ClaimArgs{}}).Encode()
	res = f.Apply(&raft.Log{Index: 2, Type: raft.LogCommand, Data: claimNoWidth})
	require.ErrorIs(t, res.(*ApplyResult).Err, ErrBadCommand)
	require.NotEqual(t, before, stateHash(t, db), "the applied index must still advance")
	require.Equal(t, uint64(2), db.Meta().Applied)
}

func TestClusterTimeNeverGoesBack(t *testing.T) {
	f, db := mustFSM(t, t.TempDir())
	defer db.Close()
	stamp := func(i uint64, now int64) int64 {
		b, _ := (&Command{Op: OpTick, NowMs: now}).Encode()
		return f.Apply(&raft.Log{Index: i, Type: raft.LogCommand, Data: b}).(*ApplyResult).NowMs
	}
	require.Equal(t, int64(5000), stamp(1, 5000))
	// A new leader whose stamp is behind cannot move cluster time back.
	require.Equal(t, int64(5000), stamp(2, 4000))
	require.Equal(t, int64(6000), stamp(3, 6000))
	// A stamp an hour ahead moves time by ttl.MaxStep only, the same on
	// every replica.
	require.Equal(t, int64(6000)+ttl.MaxStep.Milliseconds(), stamp(4, 6000+3_600_000))
	require.Equal(t, int64(6000)+2*ttl.MaxStep.Milliseconds(), stamp(5, 6000+3_600_000))
	// The node's clock follows the applied time, not its wall clock.
	require.GreaterOrEqual(t, f.clock.NowMs(), int64(6000))
	require.Less(t, f.clock.NowMs(), int64(6000)+3*ttl.MaxStep.Milliseconds()+int64(time.Minute/time.Millisecond))
}

func benchClaims(b *testing.B, batch int, widthMs int64, randomKeys bool, memtableBytes int64) {
	db, err := engine.Open(b.TempDir(), engine.Options{MemTableBytes: memtableBytes})
	require.NoError(b, err)
	defer db.Close()
	f := NewFSM(db, ttl.NewClock(0), nil, nil)
	now := time.Now().UnixMilli()
	logs := make([]*raft.Log, batch)
	idx := uint64(0)
	rnd := rand.New(rand.NewPCG(1, 2))
	b.ReportAllocs()
	b.ResetTimer()
	for done := 0; done < b.N; done += batch {
		b.StopTimer() // encoding is the leader's cost, not apply's
		for i := range logs {
			idx++
			key := fmt.Sprint("k-", idx)
			if randomKeys {
				key = fmt.Sprintf("%016x", rnd.Uint64())
			}
			c := &Command{Op: OpClaim, NowMs: now, WidthMs: widthMs, Claim: &engine.ClaimArgs{
				Scope:       engine.Scope{Principal: "cus_" + fmt.Sprint(idx%1000), Endpoint: "POST /payments", Key: key},
				Fingerprint: "9f86d081884c7d65", LeaseMs: 30000, RetentionMs: 86_400_000, MaxKeys: 1 << 40}}
			data, _ := c.Encode()
			logs[i] = &raft.Log{Index: idx, Type: raft.LogCommand, Data: data}
		}
		b.StartTimer()
		f.ApplyBatch(logs)
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "claims/s")
}

// BenchmarkApplyClaims measures FSM apply of fresh claims in raft batches
// of 1, 64 and 512 entries (one Pebble commit per batch), at the default
// bucket width. Keys are sequential ("k-1", "k-2", ...), or random as
// clients make them (UUIDs): the memtable's inserts then land anywhere,
// and cost more the larger the memtable (the last case, the 32 MiB nodes
// had before: a quarter slower, engine.DefaultMemTableBytes).
func BenchmarkApplyClaims(b *testing.B) {
	width := DefaultConfig().BucketWidth.Milliseconds()
	for _, n := range []int{1, 64, 512} {
		b.Run(fmt.Sprint("batch=", n), func(b *testing.B) { benchClaims(b, n, width, false, 0) })
	}
	b.Run("batch=64/keys=random", func(b *testing.B) { benchClaims(b, 64, width, true, 0) })
	b.Run("batch=64/keys=random/memtable=32MiB", func(b *testing.B) { benchClaims(b, 64, width, true, 32<<20) })
}

// BenchmarkApplyClaimsByWidth shows what the bucket width costs: a claim
// probes one bucket per width in the retention (24h here), so the default
// width trades probes per claim against how long after expiry a record
// stays on disk.
func BenchmarkApplyClaimsByWidth(b *testing.B) {
	for _, w := range []time.Duration{30 * time.Minute, time.Hour, 2 * time.Hour, 4 * time.Hour, 6 * time.Hour} {
		b.Run(fmt.Sprint("width=", w), func(b *testing.B) { benchClaims(b, 64, w.Milliseconds(), false, 0) })
	}
}

// Node.Leader caches the leader's stored addresses per nodesGen: it must
// move after every committed change of them, and only then.
func TestNodesGenMovesWithStoredAddresses(t *testing.T) {
	f, db := mustFSM(t, t.TempDir())
	defer db.Close()
	idx := uint64(0)
	apply := func(c *Command) {
		t.Helper()
		b, err := c.Encode()
		require.NoError(t, err)
		idx++
		f.ApplyBatch([]*raft.Log{{Index: idx, Type: raft.LogCommand, Data: b}})
	}
	node := &NodeInfo{ID: "n2", RaftAddr: "127.0.0.2:7071", HTTPAddr: "127.0.0.2:7070"}
	gen := f.nodesGen.Load()
	apply(&Command{Op: OpTick, NowMs: 1000, WidthMs: 1000})
	apply(&Command{Op: OpClaim, NowMs: 1000, WidthMs: 1000, Claim: &engine.ClaimArgs{
		Scope: engine.Scope{Principal: "p", Endpoint: "e", Key: "k"}, Fingerprint: "f", LeaseMs: 10, RetentionMs: 100}})
	require.Equal(t, gen, f.nodesGen.Load(), "claims and ticks leave the addresses alone")
	apply(&Command{Op: OpSetNode, NowMs: 1000, Node: node})
	require.Greater(t, f.nodesGen.Load(), gen, "SetNode")
	gen = f.nodesGen.Load()
	apply(&Command{Op: OpRemoveNode, NowMs: 1000, Node: node})
	require.Greater(t, f.nodesGen.Load(), gen, "RemoveNode")
	gen = f.nodesGen.Load()
	// A replayed entry (already applied) changes nothing and moves nothing.
	b, _ := (&Command{Op: OpSetNode, NowMs: 1000, Node: node}).Encode()
	f.ApplyBatch([]*raft.Log{{Index: idx, Type: raft.LogCommand, Data: b}})
	require.Equal(t, gen, f.nodesGen.Load(), "replay")

	snap, err := f.Snapshot()
	require.NoError(t, err)
	var sink memSink
	require.NoError(t, snap.Persist(&sink))
	snap.Release()
	g, gdb := mustFSM(t, t.TempDir()) // a node joining: its state is older
	defer gdb.Close()
	gen = g.nodesGen.Load()
	require.NoError(t, g.Restore(io.NopCloser(bytes.NewReader(sink.Bytes()))))
	require.Greater(t, g.nodesGen.Load(), gen, "Restore")
}

// Bug (membership walk): a node that had caught up was sent the leader's
// older snapshot again (a replication begun before the node was removed
// and added back) and installed it; raft then dropped its log and went
// back to the snapshot's index, and the node panicked on the first entry
// it no longer had. The FSM refuses a snapshot not newer than its state,
// and keeps its state.
func TestRestoreRefusesASnapshotNotNewerThanTheState(t *testing.T) {
	logs := genLog(11, 300)
	f, db := mustFSM(t, t.TempDir())
	defer db.Close()
	applyInBatches(f, logs[:200], 1, 16)
	snap, err := f.Snapshot()
	require.NoError(t, err)
	var sink memSink
	require.NoError(t, snap.Persist(&sink))
	snap.Release()
	// The same state: refused, nothing changes.
	before := stateHash(t, db)
	require.Error(t, f.Restore(io.NopCloser(bytes.NewReader(sink.Bytes()))))
	require.Equal(t, before, stateHash(t, db))
	// An older one: refused, the entries applied since are kept.
	applyInBatches(f, logs[200:], 1, 16)
	after := stateHash(t, db)
	err = f.Restore(io.NopCloser(bytes.NewReader(sink.Bytes())))
	require.ErrorContains(t, err, "not newer than this node's (applied index 300)")
	require.Equal(t, uint64(300), db.Meta().Applied)
	require.Equal(t, after, stateHash(t, db))
}

// Bug: the scope mode travelled in each command, so a node configured with
// another --scope, once leader, encoded the same scope differently and it
// was claimed twice. The first write naming a scope pins the mode for
// every replica.
func TestScopeModeIsPinnedByTheFirstScopedWrite(t *testing.T) {
	f, db := mustFSM(t, t.TempDir())
	defer db.Close()
	idx := uint64(0)
	claim := func(principalScope bool, endpoint string) engine.Outcome {
		idx++
		b, err := (&Command{Op: OpClaim, NowMs: 1000, WidthMs: 1000, Claim: &engine.ClaimArgs{
			Scope: engine.Scope{Principal: "p", Endpoint: endpoint, Key: "k"}, PrincipalScope: principalScope,
			Fingerprint: "aa", LeaseMs: 60_000, RetentionMs: 60_000}}).Encode()
		require.NoError(t, err)
		return f.Apply(&raft.Log{Index: idx, Type: raft.LogCommand, Data: b}).(*ApplyResult).Outcome
	}
	require.Equal(t, engine.OutcomeClaimed, claim(true, "POST /a"))
	require.Equal(t, engine.ScopePrincipal, db.Meta().Scope)
	// A leader configured with --scope endpoint proposes the same key on
	// another endpoint: in the pinned principal mode it is the same scope.
	require.Equal(t, engine.OutcomeInProgress, claim(false, "POST /b"))
	require.Equal(t, engine.OutcomeInProgress, claim(false, "POST /a"))
	require.Equal(t, engine.ScopePrincipal, db.Meta().Scope, "the pin never moves")
}

// A batch of raft's configuration entries moves no time: noted as the
// log's time seen now, it set a leader's clock back by the time since the
// last stamp (a new cluster's first leader by its election, so a bucket of
// a loaded store dropped seconds late).
func TestConfigurationEntriesDoNotSetTheLogsTimeBack(t *testing.T) {
	f, db := mustFSM(t, t.TempDir())
	defer db.Close()
	tick := func(ms int64) []byte {
		b, err := (&Command{Op: OpTick, NowMs: ms, WidthMs: 1000}).Encode()
		require.NoError(t, err)
		return b
	}
	f.ApplyBatch([]*raft.Log{{Index: 1, Term: 1, Type: raft.LogCommand, Data: tick(time.Now().UnixMilli())}})
	time.Sleep(300 * time.Millisecond)
	f.ApplyBatch([]*raft.Log{{Index: 2, Term: 1, Type: raft.LogConfiguration}})
	require.Zero(t, f.clock.FollowLog(), "the log's time was stamped 300 ms ago, not now")
}
