package engine

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/stretchr/testify/require"

	"github.com/idem-store/idem/partition"
)

const (
	testWidth = partition.Width(10_000)
	t0        = int64(1_700_000_000_000) // a multiple of testWidth
	testLease = int64(5_000)
	testRet   = int64(60_000)
)

// tWriter sends slog output to t.Log.
type tWriter struct{ t *testing.T }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Helper()
	w.t.Log(string(bytes.TrimRight(p, "\n")))
	return len(p), nil
}

// mustOpen opens a fresh store on an in-memory filesystem.
func mustOpen(t *testing.T) *DB {
	t.Helper()
	return mustOpenFS(t, vfs.NewMem(), "db")
}

// mustOpenFS opens the store in dir of fs and closes it when the test ends.
func mustOpenFS(t *testing.T, fs vfs.FS, dir string) *DB {
	t.Helper()
	db, err := Open(dir, Options{
		FS:         fs,
		CacheBytes: 1 << 20,
		Logger:     slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn})),
	})
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	return db
}

// mustOpenDir opens the store on disk.
func mustOpenDir(t *testing.T, dir string) *DB {
	t.Helper()
	return mustOpenFS(t, vfs.Default, dir)
}

// harness applies one operation per Txn, the way the FSM applies one raft
// entry: the raft index is the fencing token of a new attempt.
type harness struct {
	t   *testing.T
	db  *DB
	idx uint64
}

func newHarness(t *testing.T) *harness {
	t.Helper()
	return &harness{t: t, db: mustOpen(t)}
}

func (h *harness) apply(now int64, fn func(tx *Txn, now int64, index uint64) Result) Result {
	h.t.Helper()
	h.idx++
	tx := h.db.Begin()
	require.Equal(h.t, testWidth, tx.EnsureWidth(testWidth))
	n := tx.Advance(now)
	res := fn(tx, n, h.idx)
	require.Equal(h.t, n, res.NowMs, "results carry the decision time")
	require.NoError(h.t, tx.Commit(h.idx))
	return res
}

func (h *harness) claim(now int64, a ClaimArgs) Result {
	h.t.Helper()
	return h.apply(now, func(tx *Txn, n int64, idx uint64) Result { return tx.Claim(a, idx, n) })
}

// claimRet claims as a cluster whose retention is a.RetentionMs: the
// retention is set in the same entry (a claim alone gets the pinned one).
// Tests that place records in buckets by their retention use it.
func (h *harness) claimRet(now int64, a ClaimArgs) Result {
	h.t.Helper()
	return h.apply(now, func(tx *Txn, n int64, idx uint64) Result {
		tx.SetRetention(a.RetentionMs)
		return tx.Claim(a, idx, n)
	})
}

func (h *harness) complete(now int64, s Scope, token uint64, resp *Response) Result {
	h.t.Helper()
	return h.apply(now, func(tx *Txn, n int64, _ uint64) Result {
		return tx.Complete(TokenArgs{Scope: s, Token: token}, resp, n)
	})
}

func (h *harness) release(now int64, s Scope, token uint64) Result {
	h.t.Helper()
	return h.apply(now, func(tx *Txn, n int64, _ uint64) Result {
		return tx.Release(TokenArgs{Scope: s, Token: token}, n)
	})
}

func (h *harness) extend(now int64, s Scope, token uint64, leaseMs int64) Result {
	h.t.Helper()
	return h.apply(now, func(tx *Txn, n int64, _ uint64) Result {
		return tx.Extend(TokenArgs{Scope: s, Token: token}, leaseMs, n)
	})
}

func (h *harness) del(now int64, s Scope) Result {
	h.t.Helper()
	return h.apply(now, func(tx *Txn, n int64, _ uint64) Result { return tx.Delete(s, false, n) })
}

func (h *harness) drop(now int64, b partition.Bucket) Result {
	h.t.Helper()
	return h.apply(now, func(tx *Txn, n int64, _ uint64) Result { return tx.DropBucket(b, n) })
}

func (h *harness) lookup(s Scope, now int64) *Record {
	h.t.Helper()
	r, ok := h.db.Lookup(s, false, now)
	if !ok {
		require.Nil(h.t, r)
		return nil
	}
	require.NotNil(h.t, r)
	return r
}

func (h *harness) stats() Stats {
	h.t.Helper()
	s, err := h.db.Stats()
	require.NoError(h.t, err)
	return s
}

func (h *harness) hash() string {
	h.t.Helper()
	s, err := h.db.StateHash()
	require.NoError(h.t, err)
	return s
}

func scope(key string) Scope { return Scope{Principal: "alice", Endpoint: "POST /payments", Key: key} }

func args(s Scope) ClaimArgs {
	return ClaimArgs{Scope: s, Fingerprint: "fp-1", ClaimID: "claim-1", CorrelationID: "corr-1",
		LeaseMs: testLease, RetentionMs: testRet}
}

func with(a ClaimArgs, f func(*ClaimArgs)) ClaimArgs { f(&a); return a }

func resp(body string) *Response {
	return &Response{Status: 201, ContentType: "application/json",
		Headers: map[string]string{"Location": "/payments/1", "X-Id": "7"}, Body: []byte(body)}
}

// rawKeys lists every key in [start, end) of committed state.
func rawKeys(t *testing.T, db *DB, start, end []byte) [][]byte {
	t.Helper()
	it, err := db.pdb.NewIter(&pebble.IterOptions{LowerBound: start, UpperBound: end})
	require.NoError(t, err)
	defer it.Close()
	var out [][]byte
	for ok := it.First(); ok; ok = it.Next() {
		out = append(out, append([]byte(nil), it.Key()...))
	}
	require.NoError(t, it.Error())
	return out
}

func recordBucket(expiresMs int64) partition.Bucket { return partition.Of(expiresMs, testWidth) }

func TestClaimFirstWinsOthersSeeInProgress(t *testing.T) {
	h := newHarness(t)
	s := scope("k1")
	first := h.claim(t0, args(s))
	require.Equal(t, OutcomeClaimed, first.Outcome)
	require.False(t, first.Takeover)
	r := first.Record
	require.Equal(t, StateInProgress, r.State)
	require.Equal(t, uint32(1), r.Attempt)
	require.Equal(t, h.idx, r.Token, "the token is the raft index of the claim")
	require.Equal(t, s, r.Scope)
	require.Equal(t, "fp-1", r.Fingerprint)
	require.Equal(t, "claim-1", r.ClaimID)
	require.Equal(t, "corr-1", r.CorrelationID)
	require.Equal(t, t0, r.CreatedMs)
	require.Equal(t, t0+testRet, r.ExpiresMs)
	require.Equal(t, t0+testLease, r.LeaseMs)
	require.Zero(t, r.CompletedMs)
	require.Nil(t, r.Response)

	second := h.claim(t0+1, with(args(s), func(a *ClaimArgs) { a.ClaimID = "claim-2" }))
	require.Equal(t, OutcomeInProgress, second.Outcome)
	require.Equal(t, first.Record.Token, second.Record.Token, "the loser sees the winner's record")
	require.Equal(t, uint32(1), second.Record.Attempt)

	// A claim without a claim id never matches the empty claim id of another.
	third := h.claim(t0+2, with(args(s), func(a *ClaimArgs) { a.ClaimID = "" }))
	require.Equal(t, OutcomeInProgress, third.Outcome)

	got := h.lookup(s, t0+3)
	require.NotNil(t, got)
	require.Equal(t, first.Record, got, "losing claims changed nothing")
}

func TestClaimEmptyClaimIDsDoNotMatch(t *testing.T) {
	h := newHarness(t)
	s := scope("k1")
	noID := with(args(s), func(a *ClaimArgs) { a.ClaimID = "" })
	require.Equal(t, OutcomeClaimed, h.claim(t0, noID).Outcome)
	require.Equal(t, OutcomeInProgress, h.claim(t0+1, noID).Outcome)
}

func TestClaimSameClaimIDWhileLeaseHeldIsClaimedAgain(t *testing.T) {
	h := newHarness(t)
	s := scope("k1")
	first := h.claim(t0, args(s))
	again := h.claim(t0+testLease-1, args(s))
	require.Equal(t, OutcomeClaimed, again.Outcome)
	require.False(t, again.Takeover)
	require.Equal(t, first.Record.Token, again.Record.Token, "the same attempt keeps its token")
	require.Equal(t, uint32(1), again.Record.Attempt)
	require.Equal(t, first.Record, h.lookup(s, t0+testLease-1), "asking again writes nothing")
}

func TestClaimFingerprintMismatch(t *testing.T) {
	other := func(a *ClaimArgs) { a.Fingerprint = "fp-other"; a.ClaimID = "claim-2" }
	t.Run("in progress", func(t *testing.T) {
		h := newHarness(t)
		s := scope("k1")
		h.claim(t0, args(s))
		res := h.claim(t0+1, with(args(s), other))
		require.Equal(t, OutcomeFingerprintMismatch, res.Outcome)
		require.Equal(t, "fp-1", res.Record.Fingerprint)
	})
	t.Run("same claim id does not bypass the fingerprint", func(t *testing.T) {
		h := newHarness(t)
		s := scope("k1")
		h.claim(t0, args(s))
		res := h.claim(t0+1, with(args(s), func(a *ClaimArgs) { a.Fingerprint = "fp-other" }))
		require.Equal(t, OutcomeFingerprintMismatch, res.Outcome)
	})
	t.Run("completed", func(t *testing.T) {
		h := newHarness(t)
		s := scope("k1")
		c := h.claim(t0, args(s))
		h.complete(t0+1, s, c.Record.Token, resp("ok"))
		res := h.claim(t0+2, with(args(s), other))
		require.Equal(t, OutcomeFingerprintMismatch, res.Outcome)
	})
	t.Run("released", func(t *testing.T) {
		h := newHarness(t)
		s := scope("k1")
		c := h.claim(t0, args(s))
		h.release(t0+1, s, c.Record.Token)
		res := h.claim(t0+2, with(args(s), other))
		require.Equal(t, OutcomeFingerprintMismatch, res.Outcome)
		require.Equal(t, StateFailed, h.lookup(s, t0+2).State, "a mismatching claim does not start an attempt")
	})
	t.Run("lease run out", func(t *testing.T) {
		h := newHarness(t)
		s := scope("k1")
		h.claim(t0, args(s))
		res := h.claim(t0+testLease+1, with(args(s), other))
		require.Equal(t, OutcomeFingerprintMismatch, res.Outcome)
	})
}

func TestCompleteThenReplay(t *testing.T) {
	h := newHarness(t)
	s := scope("k1")
	c := h.claim(t0, args(s))
	want := resp(`{"id":1}`)
	done := h.complete(t0+100, s, c.Record.Token, want)
	require.Equal(t, OutcomeCompleted, done.Outcome)
	require.Equal(t, StateCompleted, done.Record.State)
	require.Equal(t, t0+100, done.Record.CompletedMs)
	require.Zero(t, done.Record.LeaseMs, "a completed record holds no lease")
	require.True(t, want.Equal(done.Record.Response))

	for i, a := range []ClaimArgs{
		args(s), // the same client retrying
		with(args(s), func(a *ClaimArgs) { a.ClaimID = "claim-9" }),
		with(args(s), func(a *ClaimArgs) { a.ClaimID = "" }),
	} {
		res := h.claim(t0+200+int64(i), a)
		require.Equal(t, OutcomeReplay, res.Outcome, "claim %d", i)
		require.True(t, want.Equal(res.Record.Response), "claim %d: replayed response differs", i)
		require.Equal(t, c.Record.Token, res.Record.Token)
		require.Equal(t, uint32(1), res.Record.Attempt)
	}
	got := h.lookup(s, t0+300)
	require.Equal(t, StateCompleted, got.State)
	require.True(t, want.Equal(got.Response))
	require.Equal(t, t0+testRet, got.ExpiresMs, "completion does not move expiry")
}

func TestCompleteIsIdempotent(t *testing.T) {
	h := newHarness(t)
	s := scope("k1")
	c := h.claim(t0, args(s))
	want := resp("first")
	require.Equal(t, OutcomeCompleted, h.complete(t0+1, s, c.Record.Token, want).Outcome)
	before := h.lookup(s, t0+2)

	same := h.complete(t0+2, s, c.Record.Token, resp("first"))
	require.Equal(t, OutcomeCompleted, same.Outcome, "the same response again succeeds")
	require.Equal(t, before, h.lookup(s, t0+3), "and writes nothing")

	for name, r := range map[string]*Response{
		"body":    resp("second"),
		"status":  func() *Response { r := resp("first"); r.Status = 500; return r }(),
		"headers": func() *Response { r := resp("first"); r.Headers["X-Id"] = "8"; return r }(),
		"nil":     nil,
	} {
		res := h.complete(t0+3, s, c.Record.Token, r)
		require.Equal(t, OutcomeAlreadyCompleted, res.Outcome, name)
		require.True(t, want.Equal(res.Record.Response), "%s: result carries the stored response", name)
	}
	got := h.lookup(s, t0+4)
	require.True(t, want.Equal(got.Response), "the stored response never changes")
	require.Equal(t, before.CompletedMs, got.CompletedMs)
}

func TestWrongTokenIsRefused(t *testing.T) {
	h := newHarness(t)
	s := scope("k1")
	c := h.claim(t0, args(s))
	wrong := c.Record.Token + 1000
	before := h.lookup(s, t0)

	require.Equal(t, OutcomeTokenMismatch, h.complete(t0+1, s, wrong, resp("x")).Outcome)
	require.Equal(t, OutcomeTokenMismatch, h.release(t0+2, s, wrong).Outcome)
	require.Equal(t, OutcomeTokenMismatch, h.extend(t0+3, s, wrong, 30_000).Outcome)
	require.Equal(t, before, h.lookup(s, t0+4), "refused operations wrote nothing")

	// The right token still works afterwards.
	require.Equal(t, OutcomeCompleted, h.complete(t0+5, s, c.Record.Token, resp("x")).Outcome)
	// And a wrong token against a completed record is still a mismatch.
	require.Equal(t, OutcomeTokenMismatch, h.complete(t0+6, s, wrong, resp("x")).Outcome)
}

func TestOperationsOnMissingScopeAreNotFound(t *testing.T) {
	h := newHarness(t)
	s := scope("nobody")
	h.claim(t0, args(scope("someone-else")))
	require.Equal(t, OutcomeNotFound, h.complete(t0+1, s, 1, resp("x")).Outcome)
	require.Equal(t, OutcomeNotFound, h.release(t0+1, s, 1).Outcome)
	require.Equal(t, OutcomeNotFound, h.extend(t0+1, s, 1, 1000).Outcome)
	require.Equal(t, OutcomeNotFound, h.del(t0+1, s).Outcome)
	require.Nil(t, h.lookup(s, t0+1))
	require.Equal(t, int64(1), h.stats().Records)
}

func TestReleaseThenReclaim(t *testing.T) {
	h := newHarness(t)
	s := scope("k1")
	first := h.claim(t0, args(s))
	oldTok := first.Record.Token

	rel := h.release(t0+10, s, oldTok)
	require.Equal(t, OutcomeReleased, rel.Outcome)
	require.Equal(t, StateFailed, rel.Record.State)
	require.Zero(t, rel.Record.LeaseMs)
	require.Equal(t, StateFailed, h.lookup(s, t0+10).State)
	require.Equal(t, OutcomeReleased, h.release(t0+11, s, oldTok).Outcome, "release is idempotent")
	require.Equal(t, OutcomeTokenMismatch, h.complete(t0+12, s, oldTok, resp("late")).Outcome,
		"a released attempt cannot complete")
	require.Equal(t, OutcomeTokenMismatch, h.extend(t0+13, s, oldTok, 1000).Outcome,
		"a released attempt cannot extend")
	require.Equal(t, int64(0), h.stats().InProgress)

	second := h.claim(t0+20, with(args(s), func(a *ClaimArgs) { a.ClaimID = "claim-2"; a.CorrelationID = "" }))
	require.Equal(t, OutcomeClaimed, second.Outcome)
	require.False(t, second.Takeover, "a failed record is not a takeover")
	r := second.Record
	require.Equal(t, uint32(2), r.Attempt)
	require.Equal(t, h.idx, r.Token)
	require.NotEqual(t, oldTok, r.Token)
	require.Equal(t, StateInProgress, r.State)
	require.Equal(t, "claim-2", r.ClaimID)
	require.Equal(t, "corr-1", r.CorrelationID, "an empty correlation id keeps the old one")
	require.Equal(t, t0, r.CreatedMs, "a new attempt keeps the record's creation")
	require.Equal(t, t0+testRet, r.ExpiresMs, "a new attempt keeps the record's expiry")
	require.Equal(t, t0+20+testLease, r.LeaseMs)

	// The old token is fenced off.
	require.Equal(t, OutcomeTokenMismatch, h.complete(t0+21, s, oldTok, resp("late")).Outcome)
	require.Equal(t, OutcomeTokenMismatch, h.release(t0+22, s, oldTok).Outcome)
	require.Equal(t, OutcomeTokenMismatch, h.extend(t0+23, s, oldTok, 1000).Outcome)
	require.Equal(t, r, h.lookup(s, t0+24))

	require.Equal(t, OutcomeCompleted, h.complete(t0+25, s, r.Token, resp("ok")).Outcome)
	require.Equal(t, OutcomeAlreadyCompleted, h.release(t0+26, s, r.Token).Outcome, "a completed attempt cannot be released")
	require.Equal(t, StateCompleted, h.lookup(s, t0+27).State)
	st := h.stats()
	require.Equal(t, int64(1), st.Records)
	require.Equal(t, int64(0), st.InProgress)
}

func TestTakeoverAfterLeaseExpiry(t *testing.T) {
	h := newHarness(t)
	s := scope("k1")
	first := h.claim(t0, args(s))
	other := with(args(s), func(a *ClaimArgs) { a.ClaimID = "claim-2" })

	require.Equal(t, OutcomeInProgress, h.claim(t0+testLease-1, other).Outcome, "lease still held")
	take := h.claim(t0+testLease, other)
	require.Equal(t, OutcomeClaimed, take.Outcome, "the lease ran out at its deadline")
	require.True(t, take.Takeover)
	require.Equal(t, uint32(2), take.Record.Attempt)
	require.Equal(t, h.idx, take.Record.Token)
	require.Equal(t, "claim-2", take.Record.ClaimID)
	require.Equal(t, t0+testLease+testLease, take.Record.LeaseMs)

	require.Equal(t, OutcomeTokenMismatch, h.complete(t0+testLease+1, s, first.Record.Token, resp("late")).Outcome)
	require.Equal(t, OutcomeTokenMismatch, h.extend(t0+testLease+1, s, first.Record.Token, 1000).Outcome)

	// The original client asking again with its claim id now loses.
	require.Equal(t, OutcomeInProgress, h.claim(t0+testLease+2, args(s)).Outcome)

	st := h.stats()
	require.Equal(t, int64(1), st.Records)
	require.Equal(t, int64(1), st.InProgress, "the old lease entry was replaced")
	// Exactly one lease key exists, at the new deadline.
	b := recordBucket(t0 + testRet)
	lp := bucketKey(nil, b, kindLease)
	keys := rawKeys(t, h.db, lp, append(append([]byte(nil), lp...), 0xff))
	require.Len(t, keys, 1)
	require.Equal(t, leaseKey(b, take.Record.LeaseMs, AppendScope(nil, s, false)), keys[0])
}

func TestExtend(t *testing.T) {
	h := newHarness(t)
	s := scope("k1")
	c := h.claim(t0, args(s))
	tok := c.Record.Token

	ext := h.extend(t0+1000, s, tok, 20_000)
	require.Equal(t, OutcomeExtended, ext.Outcome)
	require.Equal(t, t0+21_000, ext.Record.LeaseMs)
	require.Equal(t, t0+21_000, h.lookup(s, t0+1000).LeaseMs)

	// Past the original deadline the lease is still held.
	other := with(args(s), func(a *ClaimArgs) { a.ClaimID = "claim-2" })
	require.Equal(t, OutcomeInProgress, h.claim(t0+testLease+1, other).Outcome)
	require.Equal(t, OutcomeInProgress, h.claim(t0+20_999, other).Outcome)

	// Extending is capped at the record's expiry.
	capped := h.extend(t0+21_000-1, s, tok, 10*testRet)
	require.Equal(t, OutcomeExtended, capped.Outcome)
	require.Equal(t, t0+testRet, capped.Record.LeaseMs)
	require.Equal(t, c.Record.ExpiresMs, capped.Record.ExpiresMs, "extend never moves expiry")

	require.Equal(t, int64(1), h.stats().InProgress, "one lease entry, however often extended")

	require.Equal(t, OutcomeCompleted, h.complete(t0+30_000, s, tok, resp("ok")).Outcome)
	require.Equal(t, OutcomeAlreadyCompleted, h.extend(t0+30_001, s, tok, 1000).Outcome)
	require.Equal(t, int64(0), h.stats().InProgress)
}

func TestClaimLeaseCappedAtExpiry(t *testing.T) {
	h := newHarness(t)
	s := scope("k1")
	c := h.claim(t0, with(args(s), func(a *ClaimArgs) { a.LeaseMs = 10 * testRet }))
	require.Equal(t, c.Record.ExpiresMs, c.Record.LeaseMs)
}

func TestQuota(t *testing.T) {
	h := newHarness(t)
	q := func(key string) ClaimArgs {
		return with(args(scope(key)), func(a *ClaimArgs) { a.MaxKeys = 2 })
	}
	require.Equal(t, OutcomeClaimed, h.claim(t0, q("k1")).Outcome)
	require.Equal(t, OutcomeClaimed, h.claim(t0+1, q("k2")).Outcome)
	before := h.stats()
	refused := h.claim(t0+2, q("k3"))
	require.Equal(t, OutcomeQuotaExceeded, refused.Outcome)
	require.Nil(t, refused.Record)
	require.Nil(t, h.lookup(scope("k3"), t0+2), "a refused claim writes no record")
	after := h.stats()
	require.Equal(t, before.Records, after.Records)
	require.Equal(t, before.Bytes, after.Bytes)
	require.Equal(t, before.InProgress, after.InProgress)

	// Keys that already exist are not new keys.
	require.Equal(t, OutcomeInProgress, h.claim(t0+3, with(q("k1"), func(a *ClaimArgs) { a.ClaimID = "x" })).Outcome)
	// Other principals have their own quota.
	bob := with(q("k3"), func(a *ClaimArgs) { a.Scope.Principal = "bob" })
	require.Equal(t, OutcomeClaimed, h.claim(t0+4, bob).Outcome)
	// Unlimited ignores the count.
	require.Equal(t, OutcomeClaimed, h.claim(t0+5, with(q("k4"), func(a *ClaimArgs) { a.MaxKeys = 0 })).Outcome)

	// Deleting a key frees a slot.
	require.Equal(t, OutcomeDeleted, h.del(t0+6, scope("k1")).Outcome)
	require.Equal(t, OutcomeDeleted, h.del(t0+7, scope("k4")).Outcome)
	require.Equal(t, OutcomeClaimed, h.claim(t0+8, q("k3")).Outcome)
	require.Equal(t, OutcomeQuotaExceeded, h.claim(t0+9, q("k5")).Outcome)
}

// A quota-refused claim is decided the same way on every replica and leaves
// the store exactly as a no-op entry would.
func TestQuotaRefusalWritesNoData(t *testing.T) {
	run := func(extra bool) string {
		h := newHarness(t)
		a := with(args(scope("k1")), func(a *ClaimArgs) { a.MaxKeys = 1 })
		h.claim(t0, a)
		if extra {
			res := h.claim(t0+1, with(a, func(a *ClaimArgs) { a.Scope.Key = "k2" }))
			require.Equal(t, OutcomeQuotaExceeded, res.Outcome)
		} else {
			h.apply(t0+1, func(_ *Txn, n int64, _ uint64) Result { return Result{NowMs: n} })
		}
		return h.hash()
	}
	require.Equal(t, run(false), run(true))
}

func TestDelete(t *testing.T) {
	h := newHarness(t)
	s := scope("k1")
	c := h.claim(t0, args(s))
	del := h.del(t0+1, s)
	require.Equal(t, OutcomeDeleted, del.Outcome)
	require.Equal(t, c.Record, del.Record, "the result carries the evicted record")
	require.Nil(t, h.lookup(s, t0+1))
	st := h.stats()
	require.Zero(t, st.Records)
	require.Zero(t, st.Bytes)
	require.Zero(t, st.InProgress)
	require.Equal(t, OutcomeNotFound, h.del(t0+2, s).Outcome)
	require.Equal(t, OutcomeNotFound, h.complete(t0+2, s, c.Record.Token, resp("x")).Outcome)

	again := h.claim(t0+3, args(s))
	require.Equal(t, OutcomeClaimed, again.Outcome)
	require.Equal(t, uint32(1), again.Record.Attempt)
	require.Equal(t, t0+3, again.Record.CreatedMs)

	// Completed records can be deleted too.
	h.complete(t0+4, s, again.Record.Token, resp("ok"))
	require.Equal(t, OutcomeDeleted, h.del(t0+5, s).Outcome)
	require.Nil(t, h.lookup(s, t0+5))
	require.Zero(t, h.stats().Records)
}

func TestExpiredRecordIsAbsent(t *testing.T) {
	h := newHarness(t)
	s := scope("k1")
	c := h.claim(t0, args(s))
	h.complete(t0+1, s, c.Record.Token, resp("ok"))
	exp := c.Record.ExpiresMs

	require.NotNil(t, h.lookup(s, exp-1), "live up to its expiry")
	require.Nil(t, h.lookup(s, exp), "gone at its expiry")
	require.Nil(t, h.lookup(s, exp+10*testRet))

	require.Equal(t, OutcomeNotFound, h.complete(exp, s, c.Record.Token, resp("ok")).Outcome)
	require.Equal(t, OutcomeNotFound, h.del(exp, s).Outcome)

	again := h.claim(exp, args(s))
	require.Equal(t, OutcomeClaimed, again.Outcome, "an expired record does not replay")
	require.Equal(t, uint32(1), again.Record.Attempt)
	require.NotEqual(t, c.Record.Token, again.Record.Token)
	require.Equal(t, exp, again.Record.CreatedMs)
	require.Equal(t, exp+testRet, again.Record.ExpiresMs)
	require.Equal(t, again.Record, h.lookup(s, exp+1))
}

// An in-progress record whose expiry passes is absent too; its lease is
// capped at the expiry so nobody holds it beyond.
func TestExpiredInProgressRecordIsAbsent(t *testing.T) {
	h := newHarness(t)
	s := scope("k1")
	c := h.claim(t0, with(args(s), func(a *ClaimArgs) { a.LeaseMs = 10 * testRet }))
	exp := c.Record.ExpiresMs
	require.Equal(t, OutcomeInProgress, h.claim(exp-1, with(args(s), func(a *ClaimArgs) { a.ClaimID = "x" })).Outcome)
	res := h.claim(exp, with(args(s), func(a *ClaimArgs) { a.ClaimID = "x" }))
	require.Equal(t, OutcomeClaimed, res.Outcome)
	require.False(t, res.Takeover, "a new record, not a takeover of an expired one")
	require.Equal(t, uint32(1), res.Record.Attempt)
}

// A record that expires and is claimed again while its bucket is still
// stored must not be counted twice nor leave its old lease entry behind.
func TestReclaimAfterExpiryInSameBucket(t *testing.T) {
	h := newHarness(t)
	const shortRet = 1_000 // ten new records fit in one testWidth bucket
	a := with(args(scope("k1")), func(a *ClaimArgs) { a.RetentionMs = shortRet; a.LeaseMs = shortRet; a.MaxKeys = 2 })
	first := h.claim(t0, a)
	require.Equal(t, OutcomeClaimed, first.Outcome)
	second := h.claim(t0+shortRet, a)
	require.Equal(t, OutcomeClaimed, second.Outcome)
	require.Equal(t, recordBucket(first.Record.ExpiresMs), recordBucket(second.Record.ExpiresMs), "test needs one bucket")

	st := h.stats()
	require.Equal(t, int64(1), st.Records, "one record is stored")
	require.Equal(t, int64(len(EncodeRecord(second.Record))), st.Bytes)
	require.Equal(t, int64(1), st.InProgress, "the expired attempt's lease entry is gone")

	// The principal holds one key, so a second key fits under MaxKeys=2.
	require.Equal(t, OutcomeClaimed, h.claim(t0+shortRet+1, with(a, func(a *ClaimArgs) { a.Scope.Key = "k2" })).Outcome)

	b := recordBucket(second.Record.ExpiresMs)
	drop := h.drop(b.End(testWidth), b)
	require.Equal(t, OutcomeDropped, drop.Outcome)
	require.Equal(t, int64(2), drop.Dropped)
}

func TestDropBucket(t *testing.T) {
	h := newHarness(t)
	bA := recordBucket(t0 + testRet)
	endA := bA.End(testWidth)
	require.Equal(t, t0+testRet+int64(testWidth), endA)

	// a expires at t0+60s and b at the last millisecond of bucket bA; d is
	// in the next bucket and c in a later one.
	a := h.claim(t0, args(scope("a")))
	b := h.claimRet(t0, with(args(scope("b")), func(a *ClaimArgs) { a.RetentionMs = testRet + 9_999 }))
	h.complete(t0+1, scope("b"), b.Record.Token, resp("b"))
	c := h.claimRet(t0+2, with(args(scope("c")), func(a *ClaimArgs) { a.RetentionMs = 2 * testRet }))
	d := h.claimRet(t0+3, with(args(scope("d")), func(a *ClaimArgs) { a.RetentionMs = testRet + 15_000 }))
	require.Equal(t, endA-1, b.Record.ExpiresMs)
	require.Equal(t, bA, recordBucket(a.Record.ExpiresMs))
	require.Equal(t, bA, recordBucket(b.Record.ExpiresMs))
	require.Equal(t, bA+1, recordBucket(d.Record.ExpiresMs))
	require.Greater(t, recordBucket(c.Record.ExpiresMs), bA+1)

	before := h.stats()
	require.Equal(t, int64(4), before.Records)
	bytesA := int64(len(EncodeRecord(h.lookup(scope("a"), t0+3)))) + int64(len(EncodeRecord(h.lookup(scope("b"), t0+3))))

	for _, now := range []int64{t0 + 10, t0 + testRet, endA - 2, endA - 1} {
		res := h.drop(now, bA)
		require.Equal(t, OutcomeDropRefused, res.Outcome, "drop at %d, bucket ends at %d", now, endA)
		require.Zero(t, res.Dropped)
	}
	require.Equal(t, before.Records, h.stats().Records, "refused drops remove nothing")
	require.NotEmpty(t, rawKeys(t, h.db, partition.Prefix(bA), partition.Prefix(bA+1)))

	// A drop of a later bucket is refused too, even when the earlier one is allowed.
	require.Equal(t, OutcomeDropRefused, h.drop(endA, bA+1).Outcome)

	res := h.drop(endA, bA)
	require.Equal(t, OutcomeDropped, res.Outcome)
	require.Equal(t, int64(2), res.Dropped)
	require.Equal(t, bytesA, res.Bytes)

	start, end := partition.Range(bA)
	require.Empty(t, rawKeys(t, h.db, start, end), "nothing of the bucket is left")
	require.NotEmpty(t, rawKeys(t, h.db, partition.Prefix(bA+1), partition.Prefix(bA+2)), "the next bucket is untouched")

	after := h.stats()
	require.Equal(t, before.Records-2, after.Records)
	require.Equal(t, before.Bytes-bytesA, after.Bytes)
	require.Equal(t, before.Buckets-1, after.Buckets)
	require.Equal(t, int64(2), after.InProgress, "c and d are still in progress")

	require.Equal(t, c.Record.Token, h.lookup(scope("c"), endA).Token)
	require.Equal(t, d.Record.Token, h.lookup(scope("d"), endA).Token)

	again := h.drop(endA+1, bA)
	require.Equal(t, OutcomeDropped, again.Outcome, "dropping an empty bucket is harmless")
	require.Zero(t, again.Dropped)
	require.Equal(t, after.Records, h.stats().Records)

	// The dropped scope can be claimed afresh.
	fresh := h.claim(endA+2, args(scope("a")))
	require.Equal(t, OutcomeClaimed, fresh.Outcome)
	require.Equal(t, uint32(1), fresh.Record.Attempt)
}

func TestDropBucketRefusedWithoutWidth(t *testing.T) {
	db := mustOpen(t)
	tx := db.Begin()
	now := tx.Advance(t0)
	require.Equal(t, OutcomeDropRefused, tx.DropBucket(0, now).Outcome)
	require.NoError(t, tx.Commit(1))
}

// Apply refuses a drop by cluster time, whatever the proposer thought.
func TestDropBucketUsesClusterTime(t *testing.T) {
	h := newHarness(t)
	c := h.claim(t0, args(scope("a")))
	b := recordBucket(c.Record.ExpiresMs)
	// Cluster time is t0; a proposal stamped early cannot drop the bucket.
	res := h.drop(t0+1, b)
	require.Equal(t, OutcomeDropRefused, res.Outcome)
	require.NotNil(t, h.lookup(scope("a"), t0+1))
}

func TestExpiredBuckets(t *testing.T) {
	h := newHarness(t)
	got, err := h.db.ExpiredBuckets(t0, 10)
	require.NoError(t, err)
	require.Empty(t, got, "empty store")

	var buckets []partition.Bucket
	for i := range 4 {
		r := h.claimRet(t0+int64(i), with(args(scope(fmt.Sprint("k", i))), func(a *ClaimArgs) {
			a.RetentionMs = testRet + int64(i)*int64(testWidth)
		}))
		buckets = append(buckets, recordBucket(r.Record.ExpiresMs))
	}
	require.Equal(t, []partition.Bucket{buckets[0], buckets[0] + 1, buckets[0] + 2, buckets[0] + 3}, buckets)

	at := func(now int64, max int) []partition.Bucket {
		out, err := h.db.ExpiredBuckets(now, max)
		require.NoError(t, err)
		return out
	}
	end1 := buckets[1].End(testWidth)
	require.Empty(t, at(buckets[0].End(testWidth)-1, 10))
	require.Equal(t, buckets[:1], at(buckets[0].End(testWidth), 10))
	require.Equal(t, buckets[:2], at(end1, 10))
	require.Equal(t, buckets[:1], at(end1, 1), "at most max buckets, oldest first")
	require.Empty(t, at(end1, 0))
	require.Equal(t, buckets, at(buckets[3].End(testWidth)+1_000_000, 10))

	h.drop(end1, buckets[0])
	require.Equal(t, buckets[1:2], at(end1, 10), "a dropped bucket is not proposed again")
}

func TestScopesNeverCollide(t *testing.T) {
	t.Run("length prefixes separate principal and endpoint", func(t *testing.T) {
		h := newHarness(t)
		s1 := Scope{Principal: "a", Endpoint: "bc", Key: "k"}
		s2 := Scope{Principal: "ab", Endpoint: "c", Key: "k"}
		r1 := h.claim(t0, with(args(s1), func(a *ClaimArgs) { a.Fingerprint = "f1" }))
		r2 := h.claim(t0+1, with(args(s2), func(a *ClaimArgs) { a.Fingerprint = "f2" }))
		require.Equal(t, OutcomeClaimed, r1.Outcome)
		require.Equal(t, OutcomeClaimed, r2.Outcome)
		require.NotEqual(t, r1.Record.Token, r2.Record.Token)
		h.complete(t0+2, s1, r1.Record.Token, resp("one"))
		require.Equal(t, StateCompleted, h.lookup(s1, t0+3).State)
		require.Equal(t, StateInProgress, h.lookup(s2, t0+3).State)
		require.Equal(t, s2, h.lookup(s2, t0+3).Scope)
	})
	t.Run("endpoint and key", func(t *testing.T) {
		h := newHarness(t)
		s1 := Scope{Principal: "p", Endpoint: "e", Key: "kk"}
		s2 := Scope{Principal: "p", Endpoint: "ek", Key: "k"}
		require.Equal(t, OutcomeClaimed, h.claim(t0, args(s1)).Outcome)
		require.Equal(t, OutcomeClaimed, h.claim(t0+1, args(s2)).Outcome)
	})
	t.Run("same key under two principals", func(t *testing.T) {
		h := newHarness(t)
		alice := Scope{Principal: "alice", Endpoint: "POST /x", Key: "same"}
		bob := Scope{Principal: "bob", Endpoint: "POST /x", Key: "same"}
		ra := h.claim(t0, args(alice))
		rb := h.claim(t0+1, args(bob))
		require.Equal(t, OutcomeClaimed, ra.Outcome)
		require.Equal(t, OutcomeClaimed, rb.Outcome)
		h.complete(t0+2, alice, ra.Record.Token, resp("alice"))
		require.Equal(t, OutcomeTokenMismatch, h.complete(t0+3, bob, ra.Record.Token, resp("x")).Outcome,
			"alice's token does not reach bob's record")
		require.Equal(t, StateInProgress, h.lookup(bob, t0+3).State)
		require.Equal(t, OutcomeDeleted, h.del(t0+4, bob).Outcome)
		require.Equal(t, StateCompleted, h.lookup(alice, t0+4).State)
	})
	t.Run("principal scope ignores the endpoint", func(t *testing.T) {
		h := newHarness(t)
		x := Scope{Principal: "p", Endpoint: "POST /x", Key: "k"}
		y := Scope{Principal: "p", Endpoint: "POST /y", Key: "k"}
		ps := func(s Scope) ClaimArgs {
			return with(args(s), func(a *ClaimArgs) { a.PrincipalScope = true; a.ClaimID = s.Endpoint })
		}
		first := h.claim(t0, ps(x))
		require.Equal(t, OutcomeClaimed, first.Outcome)
		require.Equal(t, "POST /x", first.Record.Endpoint, "the endpoint is stored")
		second := h.claim(t0+1, ps(y))
		require.Equal(t, OutcomeInProgress, second.Outcome, "same principal and key is the same scope")
		require.Equal(t, first.Record.Token, second.Record.Token)

		got, ok := h.db.Lookup(y, true, t0+2)
		require.True(t, ok)
		require.Equal(t, "POST /x", got.Endpoint)
		h.apply(t0+3, func(tx *Txn, n int64, _ uint64) Result {
			res := tx.Complete(TokenArgs{Scope: y, PrincipalScope: true, Token: first.Record.Token}, resp("ok"), n)
			require.Equal(t, OutcomeCompleted, res.Outcome)
			return res
		})
		require.Equal(t, OutcomeReplay, h.claim(t0+4, ps(y)).Outcome)

		// The store's mode is pinned by its first write: a request in the
		// other mode is applied in the pinned one, so it sees the record
		// instead of claiming the scope a second time.
		require.Equal(t, ScopePrincipal, h.db.Meta().Scope)
		_, ok = h.db.Lookup(x, false, t0+4)
		require.True(t, ok)
		require.Equal(t, OutcomeReplay, h.claim(t0+5, args(x)).Outcome)
		require.Equal(t, OutcomeReplay, h.claim(t0+6, args(y)).Outcome)
		// Another principal is another scope even in principal mode.
		require.Equal(t, OutcomeClaimed, h.claim(t0+7, ps(Scope{Principal: "q", Endpoint: "POST /x", Key: "k"})).Outcome)
	})
}

// The FSM applies a raft batch as one Txn: later commands see earlier ones.
func TestTwoClaimsInOneTxn(t *testing.T) {
	db := mustOpen(t)
	s := scope("k1")
	tx := db.Begin()
	tx.EnsureWidth(testWidth)
	now := tx.Advance(t0)
	first := tx.Claim(args(s), 10, now)
	require.Equal(t, OutcomeClaimed, first.Outcome)
	second := tx.Claim(with(args(s), func(a *ClaimArgs) { a.ClaimID = "claim-2" }), 11, now)
	require.Equal(t, OutcomeInProgress, second.Outcome, "the second claim sees the first, uncommitted")
	require.Equal(t, uint64(10), second.Record.Token)
	mismatch := tx.Claim(with(args(s), func(a *ClaimArgs) { a.Fingerprint = "other" }), 12, now)
	require.Equal(t, OutcomeFingerprintMismatch, mismatch.Outcome)
	done := tx.Complete(TokenArgs{Scope: s, Token: 10}, resp("ok"), now)
	require.Equal(t, OutcomeCompleted, done.Outcome)
	require.Equal(t, OutcomeReplay, tx.Claim(args(s), 13, now).Outcome)

	_, ok := db.Lookup(s, false, now)
	require.False(t, ok, "nothing is visible before commit")
	require.Zero(t, db.Meta().Applied)

	require.NoError(t, tx.Commit(13))
	got, ok := db.Lookup(s, false, now)
	require.True(t, ok)
	require.Equal(t, StateCompleted, got.State)
	require.Equal(t, uint64(10), got.Token)
	require.Equal(t, uint64(13), db.Meta().Applied)
	st, err := db.Stats()
	require.NoError(t, err)
	require.Equal(t, int64(1), st.Records)
	require.Equal(t, int64(0), st.InProgress)
	require.Equal(t, int64(len(EncodeRecord(got))), st.Bytes)
}

// A drop and a claim in one batch: the claim sees the range deletion.
func TestDropThenClaimInOneTxn(t *testing.T) {
	h := newHarness(t)
	c := h.claim(t0, args(scope("a")))
	b := recordBucket(c.Record.ExpiresMs)
	end := b.End(testWidth)
	res := h.apply(end, func(tx *Txn, n int64, idx uint64) Result {
		require.Equal(t, OutcomeDropped, tx.DropBucket(b, n).Outcome)
		_, ok := getValue(tx.b, RecordKey(b, AppendScope(nil, scope("a"), false)))
		require.False(t, ok, "reads in the batch see its range deletion")
		_, ok = getValue(tx.b, statsKey(b))
		require.False(t, ok)
		// The new record lands in a later bucket; the dropped one stays empty.
		return tx.Claim(args(scope("a")), idx, n)
	})
	require.Equal(t, OutcomeClaimed, res.Outcome)
	require.Equal(t, uint32(1), res.Record.Attempt)
	require.Equal(t, int64(1), h.stats().Records)
	start, stop := partition.Range(b)
	require.Empty(t, rawKeys(t, h.db, start, stop))
}

func TestAbortDiscards(t *testing.T) {
	h := newHarness(t)
	h.claim(t0, args(scope("a")))
	hash, meta := h.hash(), h.db.Meta()

	tx := h.db.Begin()
	tx.EnsureWidth(testWidth)
	now := tx.Advance(t0 + 1000)
	require.Equal(t, OutcomeClaimed, tx.Claim(args(scope("b")), 99, now).Outcome)
	require.Equal(t, OutcomeDeleted, tx.Delete(scope("a"), false, now).Outcome)
	tx.Abort()

	require.Equal(t, hash, h.hash())
	require.Equal(t, meta, h.db.Meta())
	require.NotNil(t, h.lookup(scope("a"), t0+1000))
	require.Nil(t, h.lookup(scope("b"), t0+1000))
}

func TestTxnMeta(t *testing.T) {
	db := mustOpen(t)
	tx := db.Begin()
	require.Equal(t, Meta{}, tx.Meta())
	require.Equal(t, testWidth, tx.EnsureWidth(testWidth))
	require.Equal(t, testWidth, tx.EnsureWidth(testWidth*2), "the width is fixed by the first command")
	require.Equal(t, t0, tx.Advance(t0))
	require.Equal(t, t0, tx.Advance(t0-5000), "cluster time never goes back")
	require.Equal(t, t0+1, tx.Advance(t0+1))
	tx.Claim(with(args(scope("a")), func(a *ClaimArgs) { a.RetentionMs = 90_000 }), 7, t0+1)
	tx.Claim(with(args(scope("b")), func(a *ClaimArgs) { a.RetentionMs = 30_000 }), 7, t0+1)
	want := Meta{Applied: 0, NowMs: t0 + 1, Width: testWidth, MaxRetentionMs: 90_000, Scope: ScopeEndpoint, RetentionMs: 90_000}
	require.Equal(t, want, tx.Meta())
	require.Equal(t, Meta{}, db.Meta(), "the DB's meta moves only on commit")
	require.NoError(t, tx.Commit(7))
	want.Applied = 7
	require.Equal(t, want, db.Meta())

	tx = db.Begin()
	require.Equal(t, testWidth, tx.EnsureWidth(1))
	tx.Advance(t0 - 1)
	require.NoError(t, tx.Commit(3), "an older index is harmless")
	require.Equal(t, want, db.Meta(), "the applied index never goes back")
}

func TestMetaPersistsAcrossReopen(t *testing.T) {
	dir := t.TempDir()
	db := mustOpenDir(t, dir)
	h := &harness{t: t, db: db, idx: 41}
	c := h.claimRet(t0, with(args(scope("a")), func(a *ClaimArgs) { a.RetentionMs = 90_000 }))
	h.complete(t0+500, scope("a"), c.Record.Token, resp("ok"))
	want := Meta{Applied: 43, NowMs: t0 + 500, Width: testWidth, MaxRetentionMs: 90_000, Scope: ScopeEndpoint, RetentionMs: 90_000}
	require.Equal(t, want, db.Meta())
	hash := h.hash()
	require.NoError(t, db.Close())
	require.NoError(t, db.Close(), "closing twice is harmless")

	db2 := mustOpenDir(t, dir)
	require.Equal(t, want, db2.Meta())
	h2 := &harness{t: t, db: db2, idx: db2.Meta().Applied}
	require.Equal(t, hash, h2.hash())
	got := h2.lookup(scope("a"), t0+600)
	require.NotNil(t, got)
	require.Equal(t, StateCompleted, got.State)
	require.True(t, resp("ok").Equal(got.Response))

	tx := db2.Begin()
	require.Equal(t, testWidth, tx.EnsureWidth(testWidth*3), "the width survives a restart")
	require.Equal(t, t0+500, tx.Advance(t0), "cluster time survives a restart")
	tx.Abort()

	require.Equal(t, OutcomeReplay, h2.claim(t0+700, args(scope("a"))).Outcome)
}

// Commits skip fsync (raft's log is durable); Snapshot syncs first, so a
// crash right after a snapshot keeps everything the snapshot covered, and
// the applied index always matches the data (docs/DESIGN.md invariant 5).
func TestCrashKeepsAppliedIndexWithItsData(t *testing.T) {
	fs := vfs.NewCrashableMem()
	db := mustOpenFS(t, fs, "db")
	h := &harness{t: t, db: db}
	for i := range 5 {
		h.claim(t0+int64(i), args(scope(fmt.Sprint("k", i))))
	}
	snap, err := db.Snapshot()
	require.NoError(t, err)
	require.NoError(t, snap.Close())
	for i := 5; i < 10; i++ {
		h.claim(t0+int64(i), args(scope(fmt.Sprint("k", i))))
	}

	rng := rand.New(rand.NewPCG(1, 2))
	for _, pct := range []int{0, 30, 70, 100} {
		crashed := fs.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: pct, RNG: rng})
		db2 := mustOpenFS(t, crashed, "db")
		applied := db2.Meta().Applied
		require.GreaterOrEqual(t, applied, uint64(5), "pct=%d: the synced snapshot point survives", pct)
		for i := range 10 {
			_, ok := db2.Lookup(scope(fmt.Sprint("k", i)), false, t0+10)
			require.Equal(t, uint64(i+1) <= applied, ok, "pct=%d applied=%d key k%d", pct, applied, i)
		}
		require.NoError(t, db2.Close())
	}

	require.NoError(t, db.Sync())
	db3 := mustOpenFS(t, fs.CrashClone(vfs.CrashCloneCfg{}), "db")
	require.Equal(t, uint64(10), db3.Meta().Applied, "Sync made every commit durable")
}

// populate builds a store with every kind of state: in progress, completed,
// failed, taken over, deleted, several buckets, two principals, a dropped bucket.
func populate(h *harness) {
	h.t.Helper()
	now := t0
	tick := func() int64 { now += 7; return now }
	h.claim(tick(), args(scope("old")))
	for i := range 6 {
		s := Scope{Principal: fmt.Sprint("p", i%2), Endpoint: "POST /e", Key: fmt.Sprint("k", i)}
		a := with(args(s), func(a *ClaimArgs) { a.RetentionMs = testRet + int64(i+1)*int64(testWidth); a.MaxKeys = 100 })
		c := h.claimRet(tick(), a)
		switch i % 3 {
		case 0:
			h.complete(tick(), s, c.Record.Token, &Response{Status: 200 + i, Body: []byte{0, 0xff, byte(i)},
				Headers: map[string]string{"A": "1", "B": fmt.Sprint(i)}})
		case 1:
			h.release(tick(), s, c.Record.Token)
		}
	}
	h.del(tick(), Scope{Principal: "p1", Endpoint: "POST /e", Key: "k1"})
	old := recordBucket(t0 + 7 + testRet)
	h.drop(old.End(testWidth), old)
	now = old.End(testWidth)
	h.claim(tick(), with(args(Scope{Principal: "p0", Endpoint: "POST /e", Key: "k2"}), func(a *ClaimArgs) { a.ClaimID = "t" }))
	h.claim(tick(), args(scope("late")))
}

func TestSnapshotRestoreRoundTrip(t *testing.T) {
	src := newHarness(t)
	populate(src)
	srcHash, srcMeta, srcStats := src.hash(), src.db.Meta(), src.stats()
	require.NotZero(t, srcStats.Records)

	snap, err := src.db.Snapshot()
	require.NoError(t, err)
	defer snap.Close()
	require.Equal(t, srcMeta, snap.Meta())
	var buf bytes.Buffer
	n, err := snap.WriteTo(&buf)
	require.NoError(t, err)
	require.Equal(t, int64(buf.Len()), n)
	require.True(t, bytes.HasPrefix(buf.Bytes(), []byte("IDEMSNP1")))

	t.Run("into a fresh store", func(t *testing.T) {
		dst := newHarness(t)
		require.NoError(t, dst.db.Restore(bytes.NewReader(buf.Bytes())))
		require.Equal(t, srcHash, dst.hash())
		require.Equal(t, srcMeta, dst.db.Meta())
		st := dst.stats()
		st.DiskBytes, srcStats.DiskBytes = 0, 0
		require.Equal(t, srcStats, st)
		for _, s := range []Scope{scope("late"), {Principal: "p1", Endpoint: "POST /e", Key: "k3"}, {Principal: "p1", Endpoint: "POST /e", Key: "k5"}, {Principal: "p0", Endpoint: "POST /e", Key: "k2"}} {
			want, _ := src.db.Lookup(s, false, srcMeta.NowMs)
			got, _ := dst.db.Lookup(s, false, srcMeta.NowMs)
			require.NotNil(t, want)
			require.Equal(t, want, got)
		}
	})
	t.Run("replacing existing state", func(t *testing.T) {
		dst := newHarness(t)
		for i := range 20 {
			dst.claim(t0+int64(i)*50_000, args(scope(fmt.Sprint("junk", i))))
		}
		require.NotEqual(t, srcHash, dst.hash())
		require.NoError(t, dst.db.Restore(bytes.NewReader(buf.Bytes())))
		require.Equal(t, srcHash, dst.hash(), "nothing of the old state is left")
		require.Equal(t, srcMeta, dst.db.Meta())
		require.Nil(t, dst.lookup(scope("junk19"), t0+19*50_000))

		// The restored store carries on exactly like the source.
		dst.idx = srcMeta.Applied
		src2 := &harness{t: t, db: src.db, idx: srcMeta.Applied}
		a := args(scope("after"))
		require.Equal(t, src2.claim(srcMeta.NowMs+1, a), dst.claim(srcMeta.NowMs+1, a))
		require.Equal(t, src2.hash(), dst.hash())
	})
	t.Run("on disk across reopen", func(t *testing.T) {
		dir := t.TempDir()
		dst := mustOpenDir(t, dir)
		require.NoError(t, dst.Restore(bytes.NewReader(buf.Bytes())))
		require.NoError(t, dst.Close())
		dst = mustOpenDir(t, dir)
		h, err := dst.StateHash()
		require.NoError(t, err)
		require.Equal(t, srcHash, h)
		require.Equal(t, srcMeta, dst.Meta())
	})
}

func TestSnapshotIsPointInTime(t *testing.T) {
	h := newHarness(t)
	h.claim(t0, args(scope("a")))
	hash := h.hash()
	snap, err := h.db.Snapshot()
	require.NoError(t, err)
	defer snap.Close()
	h.claim(t0+1, args(scope("b")))
	h.del(t0+2, scope("a"))
	require.NotEqual(t, hash, h.hash())

	var buf bytes.Buffer
	_, err = snap.WriteTo(&buf)
	require.NoError(t, err)
	dst := newHarness(t)
	require.NoError(t, dst.db.Restore(&buf))
	require.Equal(t, hash, dst.hash())
	require.NotNil(t, dst.lookup(scope("a"), t0+2))
	require.Nil(t, dst.lookup(scope("b"), t0+2))
}

func TestSnapshotOfEmptyStore(t *testing.T) {
	src := mustOpen(t)
	snap, err := src.Snapshot()
	require.NoError(t, err)
	var buf bytes.Buffer
	_, err = snap.WriteTo(&buf)
	require.NoError(t, err)
	require.NoError(t, snap.Close())

	dst := newHarness(t)
	dst.claim(t0, args(scope("a")))
	require.NoError(t, dst.db.Restore(&buf))
	want, err := src.StateHash()
	require.NoError(t, err)
	require.Equal(t, want, dst.hash())
	require.Equal(t, Meta{}, dst.db.Meta())
}

func TestRestoreRefusesDamagedStream(t *testing.T) {
	src := newHarness(t)
	populate(src)
	snap, err := src.db.Snapshot()
	require.NoError(t, err)
	var buf bytes.Buffer
	_, err = snap.WriteTo(&buf)
	require.NoError(t, err)
	require.NoError(t, snap.Close())
	good := buf.Bytes()

	dst := newHarness(t)
	dst.claim(t0, args(scope("mine")))
	dst.claim(t0+1, args(scope("also-mine")))
	wantHash, wantMeta := dst.hash(), dst.db.Meta()

	refuse := func(what string, stream []byte) {
		t.Helper()
		err := dst.db.Restore(bytes.NewReader(stream))
		require.Error(t, err, what)
		require.True(t, errors.Is(err, ErrSnapshot), "%s: want ErrSnapshot, got %v", what, err)
	}
	for n := 0; n < len(good); n++ {
		refuse(fmt.Sprintf("truncated to %d of %d bytes", n, len(good)), good[:n])
	}
	for i := range good {
		for _, bit := range []uint{uint(i % 8), 7} {
			bad := append([]byte(nil), good...)
			bad[i] ^= 1 << bit
			refuse(fmt.Sprintf("bit %d of byte %d flipped", bit, i), bad)
		}
	}
	refuse("not a snapshot", []byte("hello, this is not a snapshot stream at all"))

	require.Equal(t, wantHash, dst.hash(), "refused restores changed nothing")
	require.Equal(t, wantMeta, dst.db.Meta())
	require.NotNil(t, dst.lookup(scope("mine"), t0+1))

	require.NoError(t, dst.db.Restore(bytes.NewReader(good)), "the intact stream still restores")
	require.Equal(t, src.hash(), dst.hash())
}

func TestStats(t *testing.T) {
	h := newHarness(t)
	st := h.stats()
	require.Zero(t, st.Buckets)
	require.Zero(t, st.Records)
	require.Zero(t, st.Bytes)
	require.Zero(t, st.InProgress)
	require.Zero(t, st.OldestCreatedMs)
	require.Zero(t, st.OldestInProgressCreated)

	live := map[string]*Record{}
	sumBytes := func() int64 {
		var n int64
		for _, r := range live {
			n += int64(len(EncodeRecord(r)))
		}
		return n
	}
	a := h.claim(t0, args(scope("a")))
	b := h.claim(t0+1000, args(scope("b")))
	c := h.claimRet(t0+2000, with(args(scope("c")), func(a *ClaimArgs) { a.RetentionMs = 2 * testRet }))
	live["a"], live["b"], live["c"] = a.Record, b.Record, c.Record

	st = h.stats()
	require.Equal(t, 2, st.Buckets, "a and b share a bucket")
	require.Equal(t, int64(3), st.Records)
	require.Equal(t, sumBytes(), st.Bytes)
	require.Equal(t, int64(3), st.InProgress)
	require.Equal(t, t0, st.OldestCreatedMs)
	require.Equal(t, t0, st.OldestInProgressCreated)
	require.Positive(t, st.DiskBytes)

	done := h.complete(t0+3000, scope("a"), a.Record.Token, resp("a response body that makes the record bigger"))
	live["a"] = done.Record
	st = h.stats()
	require.Equal(t, int64(3), st.Records)
	require.Equal(t, sumBytes(), st.Bytes, "bytes follow the record's new size")
	require.Equal(t, int64(2), st.InProgress)
	require.Equal(t, t0+1000, st.OldestInProgressCreated)
	require.Equal(t, t0, st.OldestCreatedMs)

	rel := h.release(t0+4000, scope("b"), b.Record.Token)
	live["b"] = rel.Record
	ext := h.extend(t0+4001, scope("c"), c.Record.Token, 30_000)
	live["c"] = ext.Record
	st = h.stats()
	require.Equal(t, int64(1), st.InProgress)
	require.Equal(t, t0+2000, st.OldestInProgressCreated)
	require.Equal(t, sumBytes(), st.Bytes)

	h.del(t0+5000, scope("c"))
	delete(live, "c")
	st = h.stats()
	require.Equal(t, int64(2), st.Records)
	require.Equal(t, sumBytes(), st.Bytes)
	require.Zero(t, st.InProgress)
	require.Zero(t, st.OldestInProgressCreated)
}

func TestClosedDB(t *testing.T) {
	h := newHarness(t)
	h.claim(t0, args(scope("a")))
	db := h.db
	tx := db.Begin()
	tx.EnsureWidth(testWidth)
	now := tx.Advance(t0)
	tx.Claim(args(scope("a")), 1, now)
	require.NoError(t, db.Close())

	require.ErrorIs(t, tx.Commit(1), ErrClosed)
	_, ok := db.Lookup(scope("a"), false, t0)
	require.False(t, ok)
	_, err := db.Stats()
	require.ErrorIs(t, err, ErrClosed)
	_, err = db.StateHash()
	require.ErrorIs(t, err, ErrClosed)
	_, err = db.Snapshot()
	require.ErrorIs(t, err, ErrClosed)
	_, err = db.ExpiredBuckets(t0, 1)
	require.ErrorIs(t, err, ErrClosed)
	require.ErrorIs(t, db.Sync(), ErrClosed)
	require.NoError(t, db.Close())
}

// Replicas that apply the same log end in the same state (invariant 2).
func TestSameLogSameState(t *testing.T) {
	a, b := newHarness(t), newHarness(t)
	populate(a)
	populate(b)
	require.Equal(t, a.hash(), b.hash())
	a.claim(a.db.Meta().NowMs+1, args(scope("one-more")))
	require.NotEqual(t, a.hash(), b.hash(), "the hash sees one more record")
}

// A read whose time lags cluster time (a follower, a clock not yet
// anchored) still sees records created up to cluster time, and a claim made
// with such a time does not create a second winner.
func TestLaggingTimeStillFindsNewestRecords(t *testing.T) {
	h := newHarness(t)
	s := scope("k1")
	now := t0 + 50_000
	c := h.claim(now, args(s))
	require.Equal(t, OutcomeClaimed, c.Outcome)

	for _, lag := range []int64{1, 5_000, 9_999, 30_000} {
		got := h.lookup(s, now-lag)
		require.NotNil(t, got, "lookup %dms behind cluster time misses a live record", lag)
		require.Equal(t, c.Record.Token, got.Token)
	}
	tx := h.db.Begin()
	tx.EnsureWidth(testWidth)
	tx.Advance(now + 1)
	res := tx.Claim(with(args(s), func(a *ClaimArgs) { a.ClaimID = "claim-2" }), 99, now-5_000)
	require.Equal(t, OutcomeInProgress, res.Outcome, "a lagging claim must not win a second time")
	tx.Abort()
}

// Restore commits with a sync: raft deletes its log behind an installed
// snapshot, so a crash right after Restore must not lose it.
func TestRestoreSurvivesCrash(t *testing.T) {
	src := newHarness(t)
	populate(src)
	snap, err := src.db.Snapshot()
	require.NoError(t, err)
	var buf bytes.Buffer
	_, err = snap.WriteTo(&buf)
	require.NoError(t, err)
	require.NoError(t, snap.Close())

	fs := vfs.NewCrashableMem()
	dst := mustOpenFS(t, fs, "db")
	require.NoError(t, dst.Restore(&buf))
	crashed := mustOpenFS(t, fs.CrashClone(vfs.CrashCloneCfg{}), "db")
	got, err := crashed.StateHash()
	require.NoError(t, err)
	require.Equal(t, src.hash(), got)
	require.Equal(t, src.db.Meta(), crashed.Meta())
}

// Dropping a bucket gives its keys back to each principal's quota, and
// only its keys: the totals are kept per principal across buckets.
func TestDropBucketReleasesQuota(t *testing.T) {
	h := newHarness(t)
	q := func(p, key string, ret int64) ClaimArgs {
		return with(args(Scope{Principal: p, Endpoint: "POST /x", Key: key}), func(a *ClaimArgs) {
			a.MaxKeys, a.RetentionMs = 2, ret
		})
	}
	short, long := int64(testWidth), 5*int64(testWidth)
	require.Equal(t, OutcomeClaimed, h.claimRet(t0, q("alice", "a1", short)).Outcome)
	require.Equal(t, OutcomeClaimed, h.claimRet(t0, q("alice", "a2", long)).Outcome)
	require.Equal(t, OutcomeClaimed, h.claimRet(t0, q("bob", "b1", short)).Outcome)
	require.Equal(t, OutcomeClaimed, h.claimRet(t0, q("bob", "b2", short)).Outcome)
	require.Equal(t, OutcomeQuotaExceeded, h.claimRet(t0+1, q("alice", "a3", long)).Outcome)

	b := recordBucket(t0 + short)
	later := b.End(testWidth)
	require.Equal(t, OutcomeDropped, h.drop(later, b).Outcome)
	// alice got one slot back (a2 still lives), bob both.
	require.Equal(t, OutcomeClaimed, h.claim(later, q("alice", "a3", long)).Outcome)
	require.Equal(t, OutcomeQuotaExceeded, h.claim(later, q("alice", "a4", long)).Outcome)
	require.Equal(t, OutcomeClaimed, h.claim(later, q("bob", "b3", long)).Outcome)
	require.Equal(t, OutcomeClaimed, h.claim(later, q("bob", "b4", long)).Outcome)
	require.Equal(t, OutcomeQuotaExceeded, h.claim(later, q("bob", "b5", long)).Outcome)
}

// In-progress records whose lease ran out by the applied cluster time are
// counted apart: attempts nobody completed or released.
func TestStatsCountsLapsedLeases(t *testing.T) {
	h := newHarness(t)
	a := h.claim(t0, with(args(scope("a")), func(a *ClaimArgs) { a.LeaseMs = 1000 }))
	h.claim(t0, with(args(scope("b")), func(a *ClaimArgs) { a.LeaseMs = 5000 }))
	require.Zero(t, h.stats().LeaseExpired)
	h.claim(t0+1000, args(scope("c"))) // moves cluster time to a's lease deadline
	st := h.stats()
	require.Equal(t, int64(3), st.InProgress)
	require.Equal(t, int64(1), st.LeaseExpired)
	h.complete(t0+1001, scope("a"), a.Record.Token, resp("late but done"))
	require.Zero(t, h.stats().LeaseExpired, "a completed attempt is not stuck")
}

// The DB keeps committed counters between Txns; a restore replaces them
// all. A principal at its quota, restored to a state where it held no
// keys, can claim again (a stale cached total said 2 and refused).
func TestCountersFollowRestore(t *testing.T) {
	h := newHarness(t)
	q := func(key string) ClaimArgs {
		return with(args(scope(key)), func(a *ClaimArgs) { a.MaxKeys = 2 })
	}
	other := with(args(scope("o1")), func(a *ClaimArgs) { a.Scope.Principal = "someone-else" })
	require.Equal(t, OutcomeClaimed, h.claim(t0, other).Outcome)
	snap, err := h.db.Snapshot()
	require.NoError(t, err)
	var buf bytes.Buffer
	_, err = snap.WriteTo(&buf)
	require.NoError(t, err)
	snap.Close()

	require.Equal(t, OutcomeClaimed, h.claim(t0+1, q("k1")).Outcome)
	require.Equal(t, OutcomeClaimed, h.claimRet(t0+2, q("k2")).Outcome)
	require.Equal(t, OutcomeQuotaExceeded, h.claimRet(t0+3, q("k3")).Outcome)

	require.NoError(t, h.db.Restore(bytes.NewReader(buf.Bytes())))
	require.Equal(t, OutcomeClaimed, h.claimRet(t0+4, q("k3")).Outcome, "the restored state holds no key of the principal")
	require.Equal(t, OutcomeClaimed, h.claimRet(t0+5, q("k4")).Outcome)
	require.Equal(t, OutcomeQuotaExceeded, h.claimRet(t0+6, q("k5")).Outcome, "and counts again from there")
}

// A corrupt quota key stops the FSM with ErrCorrupt, and the message names
// the bucket and sizes, never the principal (a tenant's name or a hash of
// its credential): a panic's text reaches logs and tickets.
func TestCorruptQuotaKeyPanicNamesNoPrincipal(t *testing.T) {
	h := newHarness(t)
	const principal = "tenant-with-a-secret-name"
	s := Scope{Principal: principal, Endpoint: "POST /payments", Key: "k"}
	a := h.claim(t0, args(s))
	require.Equal(t, OutcomeClaimed, a.Outcome)
	b := recordBucket(a.Record.ExpiresMs)
	require.NoError(t, h.db.pdb.Set(quotaKey(b, principal), []byte{1, 2, 3}, nil), "a value of 3 bytes, not 8")

	var got any
	func() {
		defer func() { got = recover() }()
		tx := h.db.Begin()
		defer tx.Abort()
		tx.DropBucket(b, b.End(testWidth)+1)
	}()
	err, ok := got.(error)
	require.True(t, ok, "want a panic with an error, got %v", got)
	require.ErrorIs(t, err, ErrCorrupt)
	require.NotContains(t, err.Error(), principal)
	require.Contains(t, err.Error(), "3 bytes")
}

// keyForError names a bucket key's bucket and kind (which of the bucket's
// records, leases, quotas or stats is corrupt), and nothing a client chose.
func TestKeyForErrorNamesBucketAndKindOnly(t *testing.T) {
	const secret = "tenant-with-a-secret-name"
	k := quotaKey(partition.Bucket(7), secret)
	got := keyForError(k)
	require.NotContains(t, got, secret)
	require.Contains(t, got, fmt.Sprintf("of %d bytes", len(k)))
	require.Regexp(t, `/q"$`, got, "the kind of the key (a quota counter) ends the prefix, before the principal's length: %s", got)
	require.Equal(t, `of 1 bytes starting "m"`, keyForError([]byte("m")))
	require.Equal(t, `of 0 bytes starting ""`, keyForError(nil))
}
