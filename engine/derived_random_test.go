package engine

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"log/slog"
	"maps"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/stretchr/testify/require"

	"github.com/idem-store/idem/partition"
	"github.com/idem-store/idem/ttl"
)

// The engine keeps state derived from Pebble in memory: the probe filters
// (a wrong "absent" lets a second claim of a stored key win), the DB's
// cache of bookkeeping counters and each Txn's, the count of live
// principals and the kept prefix counts (a wrong one refuses or admits
// wrongly, and differently on each replica). TestDerivedStateFollowsAModel
// applies long random histories in Txns of several ops (as a raft batch
// does), with aborts, clean reopens, crashes, filter rebuilds racing
// commits, and snapshots restored into a fresh store and over the current
// one; after every op it holds the outcome to a map model, and after
// every commit it holds everything derived to a recount of the store.
//
// IDEM_MODEL_SEEDS=n runs n seeds from IDEM_MODEL_SEED (default 1) instead
// of the fixed ones, for a longer search; IDEM_MODEL_TRACE=1 logs every op
// and event, to minimise a failure.

// mstore is the model: the records stored in each bucket, as the store
// keeps them until their bucket is dropped.
type mstore map[partition.Bucket]map[Scope]Record

func (m mstore) clone() mstore {
	c := make(mstore, len(m))
	for b, rs := range m {
		c[b] = maps.Clone(rs)
	}
	return c
}

// keys is the principal's stored records in every bucket not dropped.
func (m mstore) keys(principal string) int64 {
	var n int64
	for _, rs := range m {
		for s := range rs {
			if s.Principal == principal {
				n++
			}
		}
	}
	return n
}

// principals counts the principals holding a stored record.
func (m mstore) principals() map[string]int64 {
	out := map[string]int64{}
	for _, rs := range m {
		for s := range rs {
			out[s.Principal]++
		}
	}
	return out
}

// live returns the live record of s and its bucket.
func (m mstore) live(t *testing.T, s Scope, now int64) (Record, partition.Bucket, bool) {
	var out Record
	var at partition.Bucket
	found := false
	for b, rs := range m {
		if r, ok := rs[s]; ok && ttl.Live(r.ExpiresMs, now) {
			require.False(t, found, "model: two live records of %v", s)
			out, at, found = r, b, true
		}
	}
	return out, at, found
}

func (m mstore) put(b partition.Bucket, r Record) {
	if m[b] == nil {
		m[b] = map[Scope]Record{}
	}
	m[b][r.Scope] = r
}

// claim is Txn.Claim as the documentation states it.
func (m mstore) claim(t *testing.T, a ClaimArgs, token uint64, now int64, w partition.Width) Result {
	old, b, ok := m.live(t, a.Scope, now)
	if !ok {
		keys := m.keys(a.Scope.Principal)
		if a.MaxKeys > 0 && keys >= a.MaxKeys {
			return Result{Outcome: OutcomeQuotaExceeded}
		}
		live := m.principals()
		if a.MaxPrincipals > 0 && keys == 0 && int64(len(live)) >= a.MaxPrincipals {
			return Result{Outcome: OutcomePrincipalLimit}
		}
		if a.CredentialMaxPrincipals > 0 && keys == 0 && underAnyModel(a.Scope.Principal, a.CredentialPrefixes) {
			var n int64
			for p := range live {
				if underAnyModel(p, a.CredentialPrefixes) {
					n++
				}
			}
			if n >= a.CredentialMaxPrincipals {
				return Result{Outcome: OutcomePrincipalLimit, ByCredential: true}
			}
		}
		r := Record{Scope: a.Scope, State: StateInProgress, Fingerprint: a.Fingerprint, Attempt: 1,
			Token: token, ClaimID: a.ClaimID, CorrelationID: a.CorrelationID,
			CreatedMs: now, ExpiresMs: now + a.RetentionMs}
		r.LeaseMs = min(now+a.LeaseMs, r.ExpiresMs)
		m.put(partition.Of(r.ExpiresMs, w), r) // replaces an expired one there
		return Result{Outcome: OutcomeClaimed, Record: &r}
	}
	switch {
	case old.Fingerprint != a.Fingerprint:
		return Result{Outcome: OutcomeFingerprintMismatch, Record: &old}
	case old.State == StateCompleted:
		return Result{Outcome: OutcomeReplay, Record: &old}
	case old.State == StateInProgress && now < old.LeaseMs:
		if a.ClaimID != "" && a.ClaimID == old.ClaimID {
			return Result{Outcome: OutcomeClaimed, Record: &old}
		}
		return Result{Outcome: OutcomeInProgress, Record: &old}
	}
	r := old
	r.State, r.Attempt, r.Token, r.ClaimID = StateInProgress, old.Attempt+1, token, a.ClaimID
	if a.CorrelationID != "" {
		r.CorrelationID = a.CorrelationID
	}
	r.LeaseMs = min(now+a.LeaseMs, r.ExpiresMs)
	m.put(b, r)
	return Result{Outcome: OutcomeClaimed, Record: &r, Takeover: old.State == StateInProgress}
}

func underAnyModel(p string, prefixes []string) bool {
	return slices.ContainsFunc(prefixes, func(q string) bool { return strings.HasPrefix(p, q) })
}

// token is Complete, Release and Extend as documented: op is "complete",
// "release" or "extend".
func (m mstore) token(t *testing.T, op string, a TokenArgs, resp *Response, leaseMs, now int64) Result {
	old, b, ok := m.live(t, a.Scope, now)
	if !ok {
		return Result{Outcome: OutcomeNotFound}
	}
	if old.Token != a.Token {
		return Result{Outcome: OutcomeTokenMismatch, Record: &old}
	}
	r := old
	switch op {
	case "complete":
		switch old.State {
		case StateCompleted:
			if old.Response.Equal(resp) {
				return Result{Outcome: OutcomeCompleted, Record: &old}
			}
			return Result{Outcome: OutcomeAlreadyCompleted, Record: &old}
		case StateFailed:
			return Result{Outcome: OutcomeTokenMismatch, Record: &old}
		}
		r.State, r.Response, r.CompletedMs, r.LeaseMs, r.ClaimID = StateCompleted, resp, now, 0, ""
		m.put(b, r)
		return Result{Outcome: OutcomeCompleted, Record: &r}
	case "release":
		switch old.State {
		case StateFailed:
			return Result{Outcome: OutcomeReleased, Record: &old}
		case StateCompleted:
			return Result{Outcome: OutcomeAlreadyCompleted, Record: &old}
		}
		r.State, r.LeaseMs, r.ClaimID = StateFailed, 0, ""
		m.put(b, r)
		return Result{Outcome: OutcomeReleased, Record: &r}
	default:
		switch old.State {
		case StateCompleted:
			return Result{Outcome: OutcomeAlreadyCompleted, Record: &old}
		case StateFailed:
			return Result{Outcome: OutcomeTokenMismatch, Record: &old}
		}
		r.LeaseMs = min(now+leaseMs, r.ExpiresMs)
		m.put(b, r)
		return Result{Outcome: OutcomeExtended, Record: &r}
	}
}

func (m mstore) del(t *testing.T, s Scope, now int64) Result {
	old, b, ok := m.live(t, s, now)
	if !ok {
		return Result{Outcome: OutcomeNotFound}
	}
	delete(m[b], s)
	return Result{Outcome: OutcomeDeleted, Record: &old}
}

func (m mstore) drop(b partition.Bucket, now int64, w partition.Width) Result {
	if now < b.End(w) {
		return Result{Outcome: OutcomeDropRefused}
	}
	n := len(m[b])
	delete(m, b)
	return Result{Outcome: OutcomeDropped, Dropped: int64(n)}
}

// sameResult holds an engine result to the model's.
func sameResult(t *testing.T, want, got Result, what string) {
	t.Helper()
	require.Equal(t, want.Outcome.String(), got.Outcome.String(), "%s: outcome", what)
	require.Equal(t, want.ByCredential, got.ByCredential, "%s: by credential", what)
	require.Equal(t, want.Takeover, got.Takeover, "%s: takeover", what)
	require.Equal(t, want.Dropped, got.Dropped, "%s: records dropped", what)
	require.Equal(t, want.Record == nil, got.Record == nil, "%s: record", what)
	if want.Record != nil {
		w, g := *want.Record, *got.Record
		require.Equal(t, [4]any{w.State, w.Token, w.Attempt, w.LeaseMs}, [4]any{g.State, g.Token, g.Attempt, g.LeaseMs},
			"%s: record (state, token, attempt, lease)", what)
		require.Equal(t, w.ExpiresMs, g.ExpiresMs, "%s: expiry", what)
	}
}

// checkDerived holds the store to the model, and everything the engine
// derives from the store to a recount of it.
func checkDerived(t *testing.T, db *DB, m mstore, applied uint64, what string) {
	t.Helper()
	require.Equal(t, applied, db.Meta().Applied, "%s: applied index", what)
	type stat struct{ records, bytes int64 }
	recount := map[partition.Bucket]*stat{}
	quotas := map[string]int64{} // bucket/principal
	leases := map[string]bool{}
	stored := map[partition.Bucket]map[Scope]bool{}
	type kv struct{ k, v []byte }
	var all []kv
	lo, hi := partition.AllRange()
	it, err := db.pdb.NewIter(nil)
	require.NoError(t, err)
	for ok := it.SeekGE(lo); ok && bytes.Compare(it.Key(), hi) < 0; ok = it.Next() {
		v, err := it.ValueAndErr()
		if err != nil {
			break
		}
		all = append(all, kv{slices.Clone(it.Key()), slices.Clone(v)})
	}
	require.NoError(t, it.Close())
	leaseKeys := map[string]bool{}
	for _, e := range all {
		b, rest, good := partition.Parse(e.k)
		require.True(t, good && len(rest) >= 2, "%s: key %q", what, e.k)
		v := e.v
		payload := rest[2:]
		switch rest[0] {
		case kindRecord:
			r, err := DecodeRecord(v)
			require.NoError(t, err)
			s, tail, ok := DecodeScope(payload)
			require.True(t, ok && len(tail) == 0)
			require.Equal(t, r.Scope, s)
			want, ok := m[b][s]
			require.True(t, ok, "%s: bucket %d holds %v, the model does not", what, b, s)
			require.Equal(t, [5]any{want.State, want.Token, want.Attempt, want.LeaseMs, want.ExpiresMs},
				[5]any{r.State, r.Token, r.Attempt, r.LeaseMs, r.ExpiresMs}, "%s: stored %v", what, s)
			if stored[b] == nil {
				stored[b] = map[Scope]bool{}
			}
			stored[b][s] = true
			if recount[b] == nil {
				recount[b] = &stat{}
			}
			recount[b].records++
			recount[b].bytes += int64(len(v))
			// The filter never says "absent" for a stored record.
			require.True(t, db.filter.mayHold(b, db.filter.hash(payload)),
				"%s: the probe filter of bucket %d rules out stored %v", what, b, s)
			if r.State == StateInProgress {
				leases[string(leaseKey(b, r.LeaseMs, payload))] = true
			}
		case kindLease:
			leaseKeys[string(e.k)] = true
		case kindQuota:
			p, tail, ok := readString(payload)
			require.True(t, ok && len(tail) == 0 && len(v) == 8)
			quotas[fmt.Sprintf("%d/%s", b, p)] = int64(binary.BigEndian.Uint64(v))
		case kindStats:
			s := decodeStats(v)
			if recount[b] == nil {
				recount[b] = &stat{}
			}
			recount[b].records -= s.Records
			recount[b].bytes -= s.Bytes
		default:
			t.Fatalf("%s: unknown kind in %q", what, e.k)
		}
	}
	require.Equal(t, leases, leaseKeys, "%s: lease keys (of the in-progress records)", what)
	for b, s := range recount {
		require.Equal(t, stat{}, *s, "%s: bucket %d's stats (stored minus recount)", what, b)
	}
	wantQuotas := map[string]int64{}
	for b, rs := range m {
		for s := range rs {
			require.True(t, stored[b][s], "%s: the model holds %v in bucket %d, the store does not", what, s, b)
			wantQuotas[fmt.Sprintf("%d/%s", b, s.Principal)]++
		}
	}
	require.Equal(t, wantQuotas, quotas, "%s: per-bucket quota counters", what)

	// Totals, and the counts derived from them.
	principals := m.principals()
	totals := map[string]int64{}
	for _, k := range rawKeys(t, db, totalQuotaRange[0], totalQuotaRange[1]) {
		p, _, ok := readString(k[len(totalQuotaRange[0]):])
		require.True(t, ok)
		totals[p] = storedKeys(db.pdb, p)
	}
	require.Equal(t, principals, totals, "%s: total quota counters", what)
	db.mu.RLock()
	defer db.mu.RUnlock()
	require.Equal(t, int64(len(principals)), db.principals.live, "%s: live principals", what)
	for p, n := range principals {
		require.GreaterOrEqual(t, db.principals.mostKeys, n, "%s: mostKeys below %s's %d", what, p, n)
	}
	for p, n := range db.prefixes {
		var want int64
		for q := range principals {
			if strings.HasPrefix(q, p) {
				want++
			}
		}
		require.Equal(t, want, n, "%s: the kept count of prefix %q", what, p)
	}
	for k, e := range db.counters {
		v, ok := getValue(db.pdb, []byte(k))
		require.False(t, e.dirty, "%s: a dirty committed counter %q", what, k)
		require.Equal(t, ok, e.present, "%s: cached counter %q present", what, k)
		require.Equal(t, v, e.v, "%s: cached counter %q", what, k)
	}
}

// modelRun is one seeded history.
type modelRun struct {
	t   *testing.T
	rng *rand.Rand
	fs  *vfs.MemFS
	db  *DB
	m   mstore
	now int64
	idx uint64 // last token handed out (a raft index)

	applied uint64 // the store's applied index as the model sees it
	// Since the last point the store was durable, the model at each
	// commit: a crash may land on any of them.
	durable uint64
	history map[uint64]mstore
	snaps   []savedSnap
	counts  map[string]int
	// noFilter runs the store with its probe filters off (an operator's
	// --filter-bytes -1): the file a clean close saved before stays.
	noFilter bool
}

type savedSnap struct {
	stream  []byte
	m       mstore
	applied uint64
}

func (r *modelRun) open(fs *vfs.MemFS) {
	fb := 4 << 10
	if r.noFilter {
		fb = -1
	}
	db, err := Open("db", Options{FS: fs, CacheBytes: 1 << 20, FilterBytes: fb,
		Logger: slog.New(slog.NewTextHandler(tWriter{r.t}, &slog.HandlerOptions{Level: slog.LevelWarn}))})
	require.NoError(r.t, err)
	r.t.Cleanup(func() { _ = db.Close() })
	r.fs, r.db = fs, db
}

func (r *modelRun) markDurable() {
	r.durable = r.applied
	r.history = map[uint64]mstore{r.applied: r.m.clone()}
}

var (
	modelPrincipals = []string{"p0", "p1", "p2", "pq", "q0", "q1", "r"}
	modelPrefixes   = [][]string{{"p"}, {"q"}, {"p1", "q"}, {""}, {"p", "pq"}, {"r", "q0"}}
	modelRetentions = []int64{15_000, 30_000, 60_000}
	modelLeases     = []int64{1_000, 5_000, 20_000}
)

func (r *modelRun) scope() Scope {
	if r.rng.IntN(10) < 7 { // mostly a scope with a stored record
		var all []Scope
		for _, b := range slices.Sorted(maps.Keys(r.m)) {
			for _, s := range slices.SortedFunc(maps.Keys(r.m[b]), func(a, b Scope) int {
				return strings.Compare(a.Principal+a.Endpoint+a.Key, b.Principal+b.Endpoint+b.Key)
			}) {
				all = append(all, s)
			}
		}
		if len(all) > 0 {
			return all[r.rng.IntN(len(all))]
		}
	}
	return Scope{Principal: modelPrincipals[r.rng.IntN(len(modelPrincipals))],
		Endpoint: []string{"POST /a", "PUT /b"}[r.rng.IntN(2)], Key: strconv.Itoa(r.rng.IntN(8))}
}

func (r *modelRun) claimArgs() ClaimArgs {
	rng := r.rng
	a := ClaimArgs{Scope: r.scope(), Fingerprint: "fp", ClaimID: []string{"", "c1", "c2"}[rng.IntN(3)],
		CorrelationID: "x", LeaseMs: modelLeases[rng.IntN(len(modelLeases))],
		RetentionMs: modelRetentions[rng.IntN(len(modelRetentions))],
		MaxKeys:     []int64{0, 3, 6, 12}[rng.IntN(4)], MaxPrincipals: []int64{0, 0, 4, 6}[rng.IntN(4)]}
	if rng.IntN(10) == 0 {
		a.Fingerprint = "other"
	}
	if rng.IntN(3) == 0 {
		a.CredentialPrefixes = modelPrefixes[rng.IntN(len(modelPrefixes))]
		a.CredentialMaxPrincipals = int64(1 + rng.IntN(3))
	}
	return a
}

func (r *modelRun) tokenArgs(now int64) TokenArgs {
	s := r.scope()
	a := TokenArgs{Scope: s, Token: uint64(r.rng.IntN(int(r.idx) + 1))}
	if rec, _, ok := r.m.live(r.t, s, now); ok && r.rng.IntN(5) > 0 {
		a.Token = rec.Token
	}
	return a
}

// txn applies a group of ops in one Txn, checking each outcome, and
// commits it (or, rarely, aborts it).
func (r *modelRun) txn(step int) {
	t, rng := r.t, r.rng
	before := r.m.clone()
	tx := r.db.Begin()
	require.Equal(t, testWidth, tx.EnsureWidth(testWidth))
	tx.PinScope(false)
	var dropped []partition.Bucket
	for op := range 1 + rng.IntN(10) {
		r.now += int64(rng.IntN(1500))
		if rng.IntN(40) == 0 {
			r.now += 25_000
		}
		now := tx.Advance(r.now)
		r.idx++
		what := fmt.Sprintf("step %d op %d (token %d, now %d)", step, op, r.idx, now)
		var want, got Result
		switch k := rng.IntN(100); {
		case k < 45:
			a := r.claimArgs()
			what += fmt.Sprintf(" claim %+v", a)
			want, got = r.m.claim(t, a, r.idx, now, testWidth), tx.Claim(a, r.idx, now)
			if got.Outcome == OutcomeClaimed && !r.db.FilterReady() {
				r.counts["claims while the filters build"]++
			}
		case k < 60:
			a := r.tokenArgs(now)
			resp := &Response{Status: 200, Body: []byte{byte(rng.IntN(2))}}
			what += fmt.Sprintf(" complete %+v", a)
			want, got = r.m.token(t, "complete", a, resp, 0, now), tx.Complete(a, resp, now)
		case k < 72:
			a := r.tokenArgs(now)
			what += fmt.Sprintf(" release %+v", a)
			want, got = r.m.token(t, "release", a, nil, 0, now), tx.Release(a, now)
		case k < 82:
			a := r.tokenArgs(now)
			l := modelLeases[rng.IntN(len(modelLeases))]
			what += fmt.Sprintf(" extend %+v by %d", a, l)
			want, got = r.m.token(t, "extend", a, nil, l, now), tx.Extend(a, l, now)
		case k < 88:
			s := r.scope()
			what += fmt.Sprintf(" delete %+v", s)
			want, got = r.m.del(t, s, now), tx.Delete(s, false, now)
		default:
			// Mostly a bucket that holds records, expired or not.
			b := partition.Of(now, testWidth) - partition.Bucket(rng.IntN(4))
			if bs := slices.Sorted(maps.Keys(r.m)); len(bs) > 0 && rng.IntN(3) > 0 {
				b = bs[rng.IntN(len(bs))]
			}
			if len(dropped) > 0 && rng.IntN(3) == 0 {
				b = dropped[rng.IntN(len(dropped))] // again (a sweeper's retry in the same batch)
			}
			dropped = append(dropped, b)
			what += fmt.Sprintf(" drop %d", b)
			want, got = r.m.drop(b, now, testWidth), tx.DropBucket(b, now)
		}
		r.counts[got.Outcome.String()]++
		if modelTrace {
			t.Logf("%s -> %v %+v", what, got.Outcome, got.Record)
		}
		sameResult(t, want, got, what)
	}
	if rng.IntN(30) == 0 {
		tx.Abort()
		r.m = before
		r.counts["aborted txns"]++
		return
	}
	require.NoError(t, tx.Commit(r.idx))
	r.applied = r.idx
	r.history[r.applied] = r.m.clone()
	checkDerived(t, r.db, r.m, r.applied, fmt.Sprintf("step %d committed", step))
}

// event is one of the things that happen to a store between Txns.
func (r *modelRun) event(step int) {
	t, rng := r.t, r.rng
	what := fmt.Sprintf("step %d", step)
	k := rng.IntN(100)
	if modelTrace {
		defer func() { t.Logf("%s event %d, applied %d", what, k, r.applied) }()
	}
	switch {
	case k < 4: // a clean stop and start: the filters are saved and loaded
		ready := r.db.FilterReady() && !r.noFilter
		require.NoError(t, r.db.Close())
		if r.noFilter || rng.IntN(4) == 0 {
			// The next run has its filters off, or on again: the file
			// saved before they went off is stale by then.
			r.noFilter, ready = !r.noFilter, false
			r.counts["reopens turning the filters on or off"]++
		}
		r.open(r.fs)
		if ready {
			require.True(t, r.db.FilterReady(), "%s: filters saved at a clean close are loaded", what)
		}
		r.markDurable()
		r.counts["clean reopens"]++
		checkDerived(t, r.db, r.m, r.applied, what+" reopened")
	case k < 6: // a crash, the store synced or not
		if rng.IntN(2) == 0 {
			require.NoError(t, r.db.Sync())
			r.markDurable()
		}
		pct := []int{0, 50, 100}[rng.IntN(3)]
		crashed := r.fs.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: pct, RNG: rand.New(rand.NewPCG(rng.Uint64(), 1))})
		require.NoError(t, r.db.Close())
		r.open(crashed)
		got := r.db.Meta().Applied
		m, ok := r.history[got]
		require.True(t, ok, "%s: after a crash the store is at applied %d, not a committed state since %d", what, got, r.durable)
		require.GreaterOrEqual(t, got, r.durable, "%s: a crash lost synced commits", what)
		if got != r.applied {
			r.counts["crashes that lost commits"]++
		}
		r.m, r.applied = m.clone(), got
		r.markDurable()
		r.counts["crashes"]++
		checkDerived(t, r.db, r.m, r.applied, what+" after a crash")
	case k < 8: // the filters built again; commits race the build
		require.NoError(t, r.db.rebuildFilter())
		r.counts["filter rebuilds"]++
	case k < 11: // a snapshot, restored into a fresh store that takes over
		s := r.snapshot()
		old := r.db
		r.open(vfs.NewCrashableMem())
		require.NoError(t, r.db.Restore(bytes.NewReader(s.stream)))
		require.NoError(t, old.Close())
		r.markDurable()
		r.counts["restores into a fresh store"]++
		checkDerived(t, r.db, r.m, r.applied, what+" restored into a fresh store")
	case k < 13 && len(r.snaps) > 0: // an older snapshot restored over the state
		s := r.snaps[rng.IntN(len(r.snaps))]
		require.NoError(t, r.db.Restore(bytes.NewReader(s.stream)))
		r.m, r.applied = s.m.clone(), s.applied
		r.markDurable()
		r.counts["restores over the state"]++
		checkDerived(t, r.db, r.m, r.applied, what+" restored over the state")
	case k < 15: // the leader's checks fill the kept prefix counts
		a := r.claimArgs()
		a.CredentialPrefixes = modelPrefixes[rng.IntN(len(modelPrefixes))]
		a.CredentialMaxPrincipals = 2
		_, err := r.db.CredentialLimited(a)
		require.NoError(t, err)
		r.db.PeekClaim(a, r.now)
	}
}

func (r *modelRun) snapshot() savedSnap {
	stream := snapshotBytes(r.t, r.db)
	r.markDurable() // Snapshot syncs
	s := savedSnap{stream: stream, m: r.m.clone(), applied: r.applied}
	r.snaps = append(r.snaps, s)
	return s
}

var modelTrace = os.Getenv("IDEM_MODEL_TRACE") != ""

func runModel(t *testing.T, seed uint64, steps int) map[string]int {
	r := &modelRun{t: t, rng: rand.New(rand.NewPCG(seed, 0x1de)), m: mstore{}, now: t0, counts: map[string]int{}}
	r.open(vfs.NewCrashableMem())
	r.markDurable()
	for step := range steps {
		r.txn(step)
		r.event(step)
	}
	return r.counts
}

func TestDerivedStateFollowsAModel(t *testing.T) {
	seeds := []uint64{1, 2, 3, 4}
	steps := 400
	if n, err := strconv.Atoi(os.Getenv("IDEM_MODEL_SEEDS")); err == nil {
		first, _ := strconv.ParseUint(os.Getenv("IDEM_MODEL_SEED"), 10, 64)
		first = max(first, 1)
		seeds = nil
		for i := range uint64(n) {
			seeds = append(seeds, first+i)
		}
	}
	total := map[string]int{}
	for _, seed := range seeds {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			for k, n := range runModel(t, seed, steps) {
				total[k] += n
			}
		})
	}
	t.Logf("what the histories did: %v", total)
	// The histories reach every outcome and event they are meant to.
	for _, k := range []string{"claimed", "replay", "in_progress", "fingerprint_mismatch", "quota_exceeded",
		"principal_limit", "completed", "already_completed", "token_mismatch", "not_found", "released",
		"extended", "deleted", "dropped", "drop_refused", "clean reopens", "crashes", "filter rebuilds",
		"restores into a fresh store", "restores over the state", "aborted txns",
		"reopens turning the filters on or off"} {
		require.Positive(t, total[k], "no %s in the histories", k)
	}
}
