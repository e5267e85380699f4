package engine

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/stretchr/testify/require"

	"github.com/idem-store/idem/partition"
)

// loadCase is one record and the commands that would have produced it.
type loadCase struct {
	rec     Record
	leaseMs int64 // the claim's lease_ms
}

// genLoadCases returns n records over several buckets: completed (with
// headers and bodies) and in progress, principals and endpoints of mixed
// lengths (so length-prefixed key order differs from string order), and a
// few scopes claimed again after their first record expired.
func genLoadCases(seed uint64, n int, principalScope bool) ([]loadCase, int64) {
	rng := rand.New(rand.NewPCG(seed, 7))
	principals := []string{"a", "bc", "cus_42", "cus_420", "z", "tenant-Ω", strings.Repeat("p", 130)}
	endpoints := []string{"POST /payments", "POST /refunds", "PUT /x", ""}
	var out []loadCase
	last := int64(0)
	token := uint64(1000)
	add := func(s Scope, created int64) {
		token += uint64(1 + rng.IntN(5))
		r := Record{
			Scope: s, Fingerprint: fmt.Sprintf("%016x", rng.Uint64()), Attempt: 1, Token: token,
			CorrelationID: fmt.Sprintf("corr-%d", rng.IntN(3)),
			CreatedMs:     created, ExpiresMs: created + testRet,
		}
		lease := 1 + rng.Int64N(2*testRet) // sometimes beyond the expiry: capped
		if rng.IntN(4) == 0 {
			r.State, r.ClaimID = StateInProgress, fmt.Sprintf("cl-%d", rng.IntN(100))
			r.LeaseMs = min(created+lease, r.ExpiresMs)
		} else {
			r.State = StateCompleted
			r.CompletedMs = created + rng.Int64N(testRet/2)
			r.Response = &Response{Status: 200 + rng.IntN(3), ContentType: "application/json",
				Body: []byte(strings.Repeat("b", rng.IntN(300)))}
			if rng.IntN(2) == 0 {
				r.Response.Headers = map[string]string{"Location": "/p/" + s.Key, "X-A": "1"}
			}
		}
		last = max(last, r.CreatedMs, r.CompletedMs)
		out = append(out, loadCase{rec: r, leaseMs: lease})
	}
	for i := range n {
		s := Scope{Principal: principals[rng.IntN(len(principals))], Endpoint: endpoints[rng.IntN(len(endpoints))],
			Key: fmt.Sprintf("k%d", i)}
		if principalScope {
			s.Endpoint = endpoints[0] // stored, but left out of uniqueness
		}
		add(s, t0+rng.Int64N(5*int64(testWidth)))
		if i%97 == 0 { // the same scope again, after its first record expired
			add(s, out[len(out)-1].rec.ExpiresMs+rng.Int64N(int64(testWidth)))
		}
	}
	return out, last
}

// applyCases builds the reference store: each record's claim and complete
// applied through Txn, one command per Txn in time order, as the FSM would
// (at applied index 0, as a loaded store is).
func applyCases(t *testing.T, db *DB, cases []loadCase, principalScope bool) {
	type ev struct {
		at       int64
		complete bool
		c        *loadCase
	}
	var evs []ev
	for i := range cases {
		c := &cases[i]
		evs = append(evs, ev{at: c.rec.CreatedMs, c: c})
		if c.rec.State == StateCompleted {
			evs = append(evs, ev{at: c.rec.CompletedMs, complete: true, c: c})
		}
	}
	slices.SortStableFunc(evs, func(a, b ev) int {
		if a.at != b.at {
			return int(a.at - b.at)
		}
		if a.complete != b.complete { // a claim before the complete of the same instant
			if a.complete {
				return 1
			}
			return -1
		}
		return 0
	})
	for _, e := range evs {
		tx := db.Begin()
		tx.EnsureWidth(testWidth)
		now := tx.Advance(e.at)
		require.Equal(t, e.at, now)
		r := &e.c.rec
		var res Result
		if e.complete {
			res = tx.Complete(TokenArgs{Scope: r.Scope, PrincipalScope: principalScope, Token: r.Token}, r.Response, now)
			require.Equal(t, OutcomeCompleted, res.Outcome, "complete %v", r.Scope)
		} else {
			res = tx.Claim(ClaimArgs{Scope: r.Scope, PrincipalScope: principalScope, Fingerprint: r.Fingerprint,
				ClaimID: r.ClaimID, CorrelationID: r.CorrelationID, LeaseMs: e.c.leaseMs, RetentionMs: testRet},
				r.Token, now)
			require.Equal(t, OutcomeClaimed, res.Outcome, "claim %v", r.Scope)
			if r.State == StateCompleted {
				// The complete clears the claim id; the claim carried one.
				require.Empty(t, res.Record.ClaimID)
			}
		}
		require.NoError(t, tx.Commit(0))
	}
}

// loadCases loads the records in key order.
func loadCases(t *testing.T, db *DB, cases []loadCase, nowMs int64, principalScope bool) LoadStats {
	recs := make([]*Record, len(cases))
	for i := range cases {
		recs[i] = &cases[i].rec
	}
	key := func(r *Record) []byte {
		return RecordKey(partition.Of(r.ExpiresMs, testWidth), AppendScope(nil, r.Scope, principalScope))
	}
	slices.SortFunc(recs, func(a, b *Record) int { return bytes.Compare(key(a), key(b)) })
	l, err := db.NewLoader(LoadOptions{Width: testWidth, NowMs: nowMs, RetentionMs: testRet,
		PrincipalScope: principalScope, BatchBytes: 4 << 10})
	require.NoError(t, err)
	for _, r := range recs {
		require.NoError(t, l.Add(r))
	}
	st, err := l.Finish()
	require.NoError(t, err)
	return st
}

// TestLoaderMatchesClaimPath is the loader's contract: the same records
// loaded directly and applied as claims + completes give the same state,
// byte for byte (records, lease entries, bucket stats, per-bucket and
// total quota counters, metadata).
func TestLoaderMatchesClaimPath(t *testing.T) {
	for _, principalScope := range []bool{false, true} {
		t.Run(fmt.Sprintf("principal-scope=%v", principalScope), func(t *testing.T) {
			cases, last := genLoadCases(1, 3000, principalScope)
			// The claim path sets the claim id of a completed record to ""
			// and caps the lease; the generated records already say so.
			for i := range cases {
				if cases[i].rec.State == StateCompleted {
					cases[i].rec.ClaimID = ""
				}
			}
			ref := mustOpen(t)
			applyCases(t, ref, cases, principalScope)
			loaded := mustOpen(t)
			st := loadCases(t, loaded, cases, last, principalScope)
			require.Equal(t, int64(len(cases)), st.Records)
			require.Greater(t, st.InProgress, int64(0))
			require.Greater(t, st.Buckets, 5)

			require.Equal(t, ref.Meta(), loaded.Meta())
			hr, err := ref.StateHash()
			require.NoError(t, err)
			hl, err := loaded.StateHash()
			require.NoError(t, err)
			if hr != hl {
				diffStores(t, ref, loaded)
			}
			require.Equal(t, hr, hl, "a loaded store must equal the store the claim path builds")
			rs, err := ref.Stats()
			require.NoError(t, err)
			ls, err := loaded.Stats()
			require.NoError(t, err)
			rs.DiskBytes, ls.DiskBytes = 0, 0
			require.Equal(t, rs, ls)
		})
	}
}

// diffStores reports the first keys where two stores differ.
func diffStores(t *testing.T, a, b *DB) {
	t.Helper()
	kv := func(db *DB) map[string]string {
		it, err := db.pdb.NewIter(nil)
		require.NoError(t, err)
		defer it.Close()
		m := map[string]string{}
		for ok := it.First(); ok; ok = it.Next() {
			m[string(it.Key())] = string(it.Value())
		}
		return m
	}
	ma, mb := kv(a), kv(b)
	n := 0
	for k, v := range ma {
		if w, ok := mb[k]; !ok || w != v {
			if n++; n < 10 {
				t.Logf("key %q: claim path %x, loader %x (present %v)", k, v, w, ok)
			}
		}
	}
	for k := range mb {
		if _, ok := ma[k]; !ok {
			if n++; n < 20 {
				t.Logf("key %q only in the loaded store", k)
			}
		}
	}
}

// TestLoadedStoreServesLookupsAndRefusesDuplicates: after a load (and the
// reopen a served node does), every loaded scope is found, a claim of it
// does not win, and a new scope still does.
func TestLoadedStoreServesLookupsAndRefusesDuplicates(t *testing.T) {
	fs := vfs.NewMem()
	db := mustOpenFS(t, fs, "db")
	cases, last := genLoadCases(2, 2000, false)
	for i := range cases {
		if cases[i].rec.State == StateCompleted {
			cases[i].rec.ClaimID = ""
		}
	}
	loadCases(t, db, cases, last, false)
	// The newest record of each scope (a lookup finds the newest).
	newest := map[Scope]*Record{}
	for i := range cases {
		r := &cases[i].rec
		if o := newest[r.Scope]; o == nil || r.CreatedMs > o.CreatedMs {
			newest[r.Scope] = r
		}
	}
	for s, r := range newest { // found at once by the DB that loaded them (probe filters)
		got, ok := db.Lookup(s, false, r.CreatedMs)
		require.True(t, ok, "loaded scope %v not found before reopening", s)
		require.Equal(t, r.Token, got.Token)
	}
	require.NoError(t, db.Close())
	db = mustOpenFS(t, fs, "db")
	require.Equal(t, uint64(0), db.Meta().Applied)
	require.Equal(t, last, db.Meta().NowMs)
	checked := 0
	for s, r := range newest {
		got, ok := db.Lookup(s, false, r.CreatedMs)
		require.True(t, ok, "loaded scope %v not found", s)
		require.Equal(t, r.Token, got.Token)
		require.Equal(t, r.Fingerprint, got.Fingerprint)

		// Claim again at the record's last instant (a claim may run behind
		// the stored cluster time): it must not win.
		now := max(r.CreatedMs, r.CompletedMs)
		tx := db.Begin()
		res := tx.Claim(ClaimArgs{Scope: s, Fingerprint: r.Fingerprint, ClaimID: "other", LeaseMs: testLease, RetentionMs: testRet}, 1<<40, now)
		tx.Abort()
		checked++
		switch r.State {
		case StateCompleted:
			require.Equal(t, OutcomeReplay, res.Outcome, "%v", s)
			require.True(t, res.Record.Response.Equal(r.Response))
		case StateInProgress:
			require.Equal(t, OutcomeInProgress, res.Outcome, "%v", s)
			require.Equal(t, r.Token, res.Record.Token)
		}
	}
	require.Greater(t, checked, 100)

	tx := db.Begin()
	res := tx.Claim(ClaimArgs{Scope: Scope{Principal: "a", Endpoint: "POST /payments", Key: "new"}, Fingerprint: "aa",
		LeaseMs: testLease, RetentionMs: testRet}, 1<<40, tx.Advance(last))
	require.Equal(t, OutcomeClaimed, res.Outcome)
	require.NoError(t, tx.Commit(1))
}

func TestLoaderRefusals(t *testing.T) {
	opts := LoadOptions{Width: testWidth, NowMs: t0 + 1000, RetentionMs: testRet}
	rec := func(key string, created int64) *Record {
		return &Record{Scope: Scope{Principal: "p", Endpoint: "e", Key: key}, State: StateCompleted, Attempt: 1,
			Token: 1, CreatedMs: created, ExpiresMs: created + testRet, CompletedMs: created,
			Response: &Response{Status: 200}}
	}

	t.Run("applied entries", func(t *testing.T) {
		db := mustOpen(t)
		tx := db.Begin()
		tx.EnsureWidth(testWidth)
		tx.Advance(t0)
		require.NoError(t, tx.Commit(3))
		_, err := db.NewLoader(opts)
		require.ErrorIs(t, err, ErrLoad)
		require.ErrorContains(t, err, "applied raft entries up to index 3")
	})
	t.Run("records present", func(t *testing.T) {
		db := mustOpen(t)
		l, err := db.NewLoader(opts)
		require.NoError(t, err)
		require.NoError(t, l.Add(rec("a", t0)))
		_, err = l.Finish()
		require.NoError(t, err)
		_, err = db.NewLoader(opts)
		require.ErrorIs(t, err, ErrLoad)
		require.ErrorContains(t, err, "already holds records")
	})
	t.Run("other width", func(t *testing.T) {
		db := mustOpen(t)
		tx := db.Begin()
		tx.EnsureWidth(testWidth * 2)
		require.NoError(t, tx.Commit(0))
		_, err := db.NewLoader(opts)
		require.ErrorContains(t, err, "bucket width")
	})
	t.Run("bad records", func(t *testing.T) {
		db := mustOpen(t)
		l, err := db.NewLoader(opts)
		require.NoError(t, err)
		require.NoError(t, l.Add(rec("b", t0)))
		for name, r := range map[string]*Record{
			"same key":       rec("b", t0),
			"earlier key":    rec("a", t0),
			"after now":      rec("c", t0+2000),
			"long retention": func() *Record { r := rec("c", t0); r.ExpiresMs += 1; return r }(),
			"no response":    func() *Record { r := rec("c", t0); r.Response = nil; return r }(),
			"no lease": func() *Record {
				r := rec("c", t0)
				r.State, r.Response, r.CompletedMs = StateInProgress, nil, 0
				return r
			}(),
			"failed":          func() *Record { r := rec("c", t0); r.State, r.Response = StateFailed, nil; return r }(),
			"attempt 0":       func() *Record { r := rec("c", t0); r.Attempt = 0; return r }(),
			"completed later": func() *Record { r := rec("c", t0); r.CompletedMs = t0 + 5000; return r }(),
		} {
			require.ErrorIs(t, l.Add(r), ErrLoad, name)
		}
		require.NoError(t, l.Add(rec("c", t0)))
		st, err := l.Finish()
		require.NoError(t, err)
		require.Equal(t, int64(2), st.Records)
		require.ErrorIs(t, l.Add(rec("d", t0)), ErrLoad)
	})
}

// BenchmarkLoader measures the loader's rate on disk (records/s is
// reported as ns/op per record).
func BenchmarkLoader(b *testing.B) {
	db, err := Open(b.TempDir(), Options{})
	require.NoError(b, err)
	defer db.Close()
	l, err := db.NewLoader(LoadOptions{Width: testWidth, NowMs: t0, RetentionMs: testRet})
	require.NoError(b, err)
	body := bytes.Repeat([]byte("x"), 256)
	r := &Record{Scope: Scope{Principal: "acct_0000001", Endpoint: "POST /v1/payments"}, State: StateCompleted,
		Attempt: 1, Token: 1, Fingerprint: strings.Repeat("f", 64), CreatedMs: t0 - 1000, ExpiresMs: t0 - 1000 + testRet,
		CompletedMs: t0 - 900, Response: &Response{Status: 201, ContentType: "application/json", Body: body}}
	b.ResetTimer()
	for i := range b.N {
		r.Key = fmt.Sprintf("%016x", i)
		if err := l.Add(r); err != nil {
			b.Fatal(err)
		}
	}
	if _, err := l.Finish(); err != nil {
		b.Fatal(err)
	}
	if err := db.Settle(context.Background()); err != nil {
		b.Fatal(err)
	}
}
