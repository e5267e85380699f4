package engine

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idem-store/idem/ttl"
)

// countQuotaTotals is the number of principals as the q/ keys say.
func countQuotaTotals(t *testing.T, db *DB) int64 {
	t.Helper()
	return int64(len(rawKeys(t, db, totalQuotaRange[0], totalQuotaRange[1])))
}

func TestPrincipalLimit(t *testing.T) {
	h := newHarness(t)
	p := func(principal, key string) ClaimArgs {
		return with(args(Scope{Principal: principal, Endpoint: "POST /e", Key: key}), func(a *ClaimArgs) { a.MaxPrincipals = 2 })
	}
	require.Equal(t, OutcomeClaimed, h.claim(t0, p("p1", "k1")).Outcome)
	require.Equal(t, OutcomeClaimed, h.claim(t0+1, p("p2", "k1")).Outcome)
	require.EqualValues(t, 2, h.db.Principals())

	before, stats := h.hash(), h.stats()
	refused := h.claim(t0+2, p("p3", "k1"))
	require.Equal(t, OutcomePrincipalLimit, refused.Outcome)
	require.Equal(t, "principal_limit", refused.Outcome.String())
	require.Nil(t, refused.Record)
	after := h.stats()
	require.Equal(t, stats.Records, after.Records)
	require.EqualValues(t, 2, h.db.Principals())
	// Only the applied index and cluster time moved.
	require.NotEqual(t, before, h.hash())
	h2 := newHarness(t)
	h2.claim(t0, p("p1", "k1"))
	h2.claim(t0+1, p("p2", "k1"))
	h2.apply(t0+2, func(_ *Txn, n int64, _ uint64) Result { return Result{NowMs: n} })
	require.Equal(t, h2.hash(), h.hash(), "a refused claim writes what a no-op entry writes")

	// A known principal may add keys; without the limit anyone may.
	require.Equal(t, OutcomeClaimed, h.claim(t0+3, p("p1", "k2")).Outcome)
	require.Equal(t, OutcomeClaimed, h.claim(t0+4, with(p("p3", "k1"), func(a *ClaimArgs) { a.MaxPrincipals = 0 })).Outcome)
	require.EqualValues(t, 3, h.db.Principals())
	require.Equal(t, OutcomePrincipalLimit, h.claim(t0+5, p("p4", "k1")).Outcome)

	// A principal whose last key goes is no longer counted.
	require.Equal(t, OutcomeDeleted, h.del(t0+6, Scope{Principal: "p3", Endpoint: "POST /e", Key: "k1"}).Outcome)
	require.Equal(t, OutcomeDeleted, h.del(t0+7, Scope{Principal: "p2", Endpoint: "POST /e", Key: "k1"}).Outcome)
	require.EqualValues(t, 1, h.db.Principals())
	require.Equal(t, OutcomeClaimed, h.claim(t0+8, p("p4", "k1")).Outcome)
	require.Equal(t, countQuotaTotals(t, h.db), h.db.Principals())

	// Dropping the buckets that hold them takes them away too.
	late := t0 + 8 + testRet + 2*int64(testWidth)
	buckets, err := h.db.ExpiredBuckets(late, 100)
	require.NoError(t, err)
	require.NotEmpty(t, buckets)
	for _, b := range buckets {
		require.Equal(t, OutcomeDropped, h.drop(late, b).Outcome)
	}
	require.Zero(t, h.db.Principals())
	require.Zero(t, countQuotaTotals(t, h.db))
}

// The count is derived from the state: the same after a reopen, a restore
// and a bulk load as the q/ keys say.
func TestPrincipalCountSurvivesReopenAndRestore(t *testing.T) {
	dir := t.TempDir()
	db, err := Open(dir, Options{CacheBytes: 1 << 20})
	require.NoError(t, err)
	h := &harness{t: t, db: db}
	for i := range 7 {
		h.claim(t0+int64(i), args(Scope{Principal: fmt.Sprint("p", i%5), Endpoint: "e", Key: fmt.Sprint("k", i)}))
	}
	require.EqualValues(t, 5, db.Principals())
	snap, err := db.Snapshot()
	require.NoError(t, err)
	var buf bytes.Buffer
	_, err = snap.WriteTo(&buf)
	require.NoError(t, err)
	snap.Close()
	require.NoError(t, db.Close())

	db = mustOpenDir(t, dir)
	require.EqualValues(t, 5, db.Principals(), "counted again at open")
	require.EqualValues(t, 2, db.livePrincipals().mostKeys, "p0 and p1 hold two keys each")

	dst := newHarness(t)
	dst.claim(t0, args(Scope{Principal: "other", Endpoint: "e", Key: "k"}))
	require.NoError(t, dst.db.Restore(bytes.NewReader(buf.Bytes())))
	require.EqualValues(t, 5, dst.db.Principals(), "counted again at restore")
}

// outcomeByCredential marks, in TestPeeksAgreeWithApply's outcomes seen, a
// principal limit that was a credential's cap.
const outcomeByCredential Outcome = 200

// TestPeeksAgreeWithApply holds every peek to its Txn operation over random
// histories: whenever a peek answers, Apply at the same cluster time on the
// same state decides the same outcome and record, and writes nothing; when
// it does not, Apply writes.
func TestPeeksAgreeWithApply(t *testing.T) {
	seen := map[Outcome]bool{}
	for seed := range uint64(8) {
		t.Run(fmt.Sprint("seed ", seed), func(t *testing.T) { peekHistory(t, seed, 600, seen) })
	}
	for _, o := range []Outcome{OutcomeQuotaExceeded, OutcomePrincipalLimit, OutcomeReplay, OutcomeInProgress,
		OutcomeFingerprintMismatch, OutcomeClaimed, OutcomeNotFound, OutcomeTokenMismatch, OutcomeAlreadyCompleted,
		OutcomeCompleted, OutcomeReleased, outcomeByCredential} {
		require.True(t, seen[o], "no peek answered %s: the histories do not cover it", o)
	}
}

func peekHistory(t *testing.T, seed uint64, n int, seen map[Outcome]bool) {
	r := rand.New(rand.NewPCG(seed, 99))
	rc := rand.New(rand.NewPCG(seed, 7)) // credential caps, apart so r draws as before
	capPrefixes := [][]string{{"p"}, {"p1"}, {"p1", "p2"}, {""}, {"p", "p3"}, {"q"}}
	h := newHarness(t)
	now := t0
	tokens := map[Scope]uint64{}
	answered, proposed := 0, 0
	for i := range n {
		now += int64(r.IntN(4000))
		s := Scope{Principal: fmt.Sprint("p", r.IntN(4)), Endpoint: "POST /e", Key: fmt.Sprint("k", r.IntN(3))}
		tok := tokens[s]
		if r.IntN(5) == 0 {
			tok = uint64(r.IntN(i + 2))
		}
		ta := TokenArgs{Scope: s, Token: tok}
		body := resp(fmt.Sprint("b", r.IntN(2)))
		var peek func() (Result, bool)
		var op func(tx *Txn, now int64, idx uint64) Result
		claim := false
		switch x := r.IntN(12); {
		case x < 5:
			claim = true
			a := ClaimArgs{Scope: s, Fingerprint: fmt.Sprint("f", r.IntN(2)), ClaimID: fmt.Sprint("c", r.IntN(2)),
				LeaseMs: int64(500 + r.IntN(6000)), RetentionMs: int64(20_000 + r.IntN(40_000)),
				MaxKeys: int64(1 + r.IntN(3)), MaxPrincipals: int64(1 + r.IntN(3))}
			if rc.IntN(2) == 0 {
				a.MaxPrincipals = 0 // so the credential's cap decides some
				a.CredentialPrefixes = capPrefixes[rc.IntN(len(capPrefixes))]
				a.CredentialMaxPrincipals = int64(1 + rc.IntN(3))
			}
			// As the leader stamps it: the cluster's retention once pinned,
			// before that the one the claim carries (the leader's flag).
			a.RetentionMs = h.db.Meta().ClaimRetention(a)
			peek = func() (Result, bool) { return h.db.PeekClaim(a, now) }
			op = func(tx *Txn, now int64, idx uint64) Result { return tx.Claim(a, idx, now) }
		case x < 7:
			peek = func() (Result, bool) { return h.db.PeekComplete(ta, body, now) }
			op = func(tx *Txn, now int64, _ uint64) Result { return tx.Complete(ta, body, now) }
		case x < 8:
			peek = func() (Result, bool) { return h.db.PeekRelease(ta, now) }
			op = func(tx *Txn, now int64, _ uint64) Result { return tx.Release(ta, now) }
		case x < 9:
			lease := int64(500 + r.IntN(6000))
			peek = func() (Result, bool) { return h.db.PeekExtend(ta, now) }
			op = func(tx *Txn, now int64, _ uint64) Result { return tx.Extend(ta, lease, now) }
		case x < 10:
			peek = func() (Result, bool) { return h.db.PeekDelete(s, now) }
			op = func(tx *Txn, now int64, _ uint64) Result { return tx.Delete(s, false, now) }
		case x < 11 && r.IntN(3) == 0:
			// The cluster's retention changes (OpSetRetention), longer or
			// shorter than what the claims carry: their own retention must
			// decide nothing once one is pinned, in the peek as in Apply.
			ms := int64(5_000 + r.IntN(120_000))
			h.apply(now, func(tx *Txn, n int64, _ uint64) Result { tx.SetRetention(ms); return Result{NowMs: n} })
			continue
		default:
			// Drop what has expired, as the leader's sweeper would.
			buckets, err := h.db.ExpiredBuckets(now, 4)
			require.NoError(t, err)
			for _, b := range buckets {
				h.drop(now, b)
			}
			continue
		}
		want, ok := peek()
		before := h.db.Meta()
		h.idx++
		tx := h.db.Begin()
		tx.EnsureWidth(testWidth)
		at := tx.Advance(ttl.Step(tx.Meta().NowMs, now)) // as the FSM stamps it
		got := op(tx, at, h.idx)
		tx.flush()
		wrote := !tx.b.Empty()
		if ok {
			answered++
			seen[want.Outcome] = true
			if want.ByCredential {
				seen[outcomeByCredential] = true
			}
			require.Equal(t, want, got, "op %d: the peek and Apply disagree", i)
			require.False(t, wrote, "op %d: the peek answered %s, but Apply wrote", i, want.Outcome)
			m := tx.Meta()
			m.Applied, m.NowMs = before.Applied, before.NowMs
			require.Equal(t, before, m, "op %d: the peek answered %s, but Apply changed the metadata", i, want.Outcome)
		} else {
			proposed++
			if h.db.Meta().Width != 0 && h.db.Meta().Scope != ScopeUnset {
				require.True(t, wrote, "op %d: the peek declined %s, which Apply decided without a write", i, got.Outcome)
			}
		}
		require.NoError(t, tx.Commit(h.idx))
		if claim && got.Outcome == OutcomeClaimed {
			tokens[s] = got.Record.Token
		}
		require.Equal(t, countQuotaTotals(t, h.db), h.db.Principals(), "op %d", i)
		for p, n := range h.db.prefixes {
			require.Equal(t, bruteCount(t, h.db, p), n, "op %d: the kept count of %q", i, p)
		}
		counted, err := h.db.countPrincipals()
		require.NoError(t, err)
		require.GreaterOrEqual(t, h.db.livePrincipals().mostKeys, counted.mostKeys, "op %d: mostKeys must bound every total", i)
	}
	require.NotZero(t, answered)
	require.NotZero(t, proposed)
}
