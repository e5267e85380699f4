package engine

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/stretchr/testify/require"

	"github.com/idem-store/idem/partition"
)

// waitFilterReady waits for the background build of the probe filters.
func waitFilterReady(t *testing.T, db *DB) {
	t.Helper()
	require.Eventually(t, db.filter.ready.Load, 10*time.Second, time.Millisecond, "probe filter never became ready")
}

func TestProbeFilterNeverSaysNoForAnAddedScope(t *testing.T) {
	f := newProbeFilter(64<<10, slog.New(slog.DiscardHandler))
	f.ready.Store(true)
	const n = 20000
	for i := range n {
		f.add(partition.Bucket(i%3), f.hash([]byte(fmt.Sprintf("scope-%d", i))))
	}
	for i := range n {
		require.True(t, f.mayHold(partition.Bucket(i%3), f.hash([]byte(fmt.Sprintf("scope-%d", i)))), "scope %d", i)
	}
	// Absent scopes are mostly ruled out: ~6.7k keys in 512 Ki bits per
	// bucket gives about 0.2% false positives; allow ten times that.
	fp := 0
	for i := range n {
		if f.mayHold(partition.Bucket(i%3), f.hash([]byte(fmt.Sprintf("absent-%d", i)))) {
			fp++
		}
	}
	require.Less(t, fp, n/50, "false positives")
	// A bucket never written is certainly empty; a dropped one is freed.
	require.False(t, f.mayHold(7, f.hash([]byte("scope-1"))))
	require.Equal(t, 3, f.buckets())
	f.drop(1)
	require.Equal(t, 2, f.buckets())
}

func TestProbeFilterSizes(t *testing.T) {
	require.Nil(t, newProbeFilter(-1, nil), "negative disables")
	require.Equal(t, DefaultFilterBytes/8, newProbeFilter(0, nil).words)
	require.Equal(t, 8, newProbeFilter(1, nil).words, "at least one 64-byte block")
	require.Equal(t, 1<<20/8, newProbeFilter(1<<20+12345, nil).words, "rounded down to a power of two")
	var nilFilter *probeFilter
	require.True(t, nilFilter.mayHold(1, 2), "no filter means every bucket is probed")
}

// A store reopened with records on disk must rebuild its filters before
// saying "no": otherwise a second claim of a stored scope would win.
func TestProbeFilterRebuiltOnOpen(t *testing.T) {
	dir := t.TempDir()
	h := &harness{t: t, db: mustOpenDir(t, dir)}
	const n = 3000
	for i := range n {
		require.Equal(t, OutcomeClaimed, h.claim(t0+int64(i), args(scope(fmt.Sprintf("k%d", i)))).Outcome)
	}
	idx := h.idx
	require.NoError(t, h.db.Close())
	require.NoError(t, os.Remove(dir+".filters"), "as after a crash: no saved filters")

	h = &harness{t: t, db: mustOpenDir(t, dir), idx: idx}
	// Straight away, while the build may still run, and again once ready.
	for round := range 2 {
		for i := range n {
			res := h.claim(t0+n, args(scope(fmt.Sprintf("k%d", i))))
			require.Equal(t, OutcomeClaimed, res.Outcome, "same claim id while the lease is held: the same attempt")
			require.Equal(t, uint64(i+1), res.Record.Token, "round %d scope k%d: the stored attempt, not a new one", round, i)
		}
		waitFilterReady(t, h.db)
	}
	require.Equal(t, OutcomeClaimed, h.claim(t0+n, args(scope("fresh"))).Outcome)
}

// Claims that race the build (applies start as soon as Open returns) are
// never lost by it: the build's iterator predates them and put adds them.
func TestProbeFilterBuildRacesApplies(t *testing.T) {
	dir := t.TempDir()
	h := &harness{t: t, db: mustOpenDir(t, dir)}
	const n = 20000
	tx := h.db.Begin()
	tx.EnsureWidth(testWidth)
	now := tx.Advance(t0)
	for i := range n {
		require.Equal(t, OutcomeClaimed, tx.Claim(args(scope(fmt.Sprintf("old%d", i))), uint64(i+1), now).Outcome)
	}
	require.NoError(t, tx.Commit(1))
	require.NoError(t, h.db.Close())
	require.NoError(t, os.Remove(dir+".filters"), "as after a crash: no saved filters")

	h = &harness{t: t, db: mustOpenDir(t, dir), idx: 1}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // readers during the build
		defer wg.Done()
		for i := 0; i < n; i += 7 {
			if _, ok := h.db.Lookup(scope(fmt.Sprintf("old%d", i)), false, t0+1); !ok {
				t.Errorf("old%d absent during the build", i)
				return
			}
		}
	}()
	for i := range 500 {
		require.Equal(t, OutcomeClaimed, h.claim(t0+1, args(scope(fmt.Sprintf("new%d", i)))).Outcome)
	}
	wg.Wait()
	waitFilterReady(t, h.db)
	for i := range 500 {
		r := h.lookup(scope(fmt.Sprintf("new%d", i)), t0+2)
		require.NotNil(t, r, "new%d", i)
	}
	for i := 0; i < n; i += 13 {
		require.Equal(t, OutcomeInProgress, h.claim(t0+2, with(args(scope(fmt.Sprintf("old%d", i))), func(a *ClaimArgs) { a.ClaimID = "other" })).Outcome)
	}
}

// Restore replaces the state: scopes only the old state held must be free,
// scopes of the snapshot must be found.
func TestProbeFilterRebuiltOnRestore(t *testing.T) {
	src := newHarness(t)
	for i := range 100 {
		src.claim(t0, args(scope(fmt.Sprintf("src%d", i))))
	}
	snap, err := src.db.Snapshot()
	require.NoError(t, err)
	var buf bytes.Buffer
	_, err = snap.WriteTo(&buf)
	require.NoError(t, err)
	require.NoError(t, snap.Close())

	dst := &harness{t: t, db: mustOpenFS(t, vfs.NewMem(), "dst")}
	for i := range 100 {
		dst.claim(t0, args(scope(fmt.Sprintf("dst%d", i))))
	}
	waitFilterReady(t, dst.db)
	require.NoError(t, dst.db.Restore(bytes.NewReader(buf.Bytes())))
	dst.idx = src.idx
	for round := range 2 {
		for i := range 100 {
			require.NotNil(t, dst.lookup(scope(fmt.Sprintf("src%d", i)), t0+1), "round %d src%d", round, i)
			require.Nil(t, dst.lookup(scope(fmt.Sprintf("dst%d", i)), t0+1), "round %d dst%d", round, i)
		}
		waitFilterReady(t, dst.db)
	}
	require.Equal(t, src.hash(), dst.hash())
}

// A committed drop frees its bucket's filter; an aborted one keeps it.
func TestProbeFilterFreedByCommittedDrop(t *testing.T) {
	h := newHarness(t)
	waitFilterReady(t, h.db)
	res := h.claim(t0, args(scope("a")))
	b := recordBucket(res.Record.ExpiresMs)
	require.Equal(t, 1, h.db.filter.buckets())
	after := b.End(testWidth)

	tx := h.db.Begin()
	require.Equal(t, OutcomeDropped, tx.DropBucket(b, tx.Advance(after)).Outcome)
	tx.Abort()
	require.Equal(t, 1, h.db.filter.buckets())
	require.NotNil(t, h.lookup(scope("a"), t0+1))

	require.Equal(t, OutcomeDropped, h.drop(after, b).Outcome)
	require.Equal(t, 0, h.db.filter.buckets())
	require.Equal(t, OutcomeClaimed, h.claim(after, args(scope("a"))).Outcome)
}

// The filters change speed, never answers: the same operations give the
// same state with and without them.
func TestProbeFilterDoesNotChangeState(t *testing.T) {
	var hashes []string
	for _, fb := range []int{-1, 64, 0} {
		db, err := Open("db", Options{FS: vfs.NewMem(), CacheBytes: 1 << 20, FilterBytes: fb})
		require.NoError(t, err)
		h := &harness{t: t, db: db}
		for i := range 400 {
			now := t0 + int64(i)*500 // crosses buckets and expiries
			s := scope(fmt.Sprintf("k%d", i%97))
			res := h.claim(now, args(s))
			if res.Outcome == OutcomeClaimed && i%3 == 0 {
				h.complete(now, s, res.Record.Token, resp("ok"))
			}
			if i%50 == 49 {
				for _, b := range []partition.Bucket{recordBucket(now - testRet - int64(testWidth))} {
					h.drop(now, b)
				}
			}
		}
		hashes = append(hashes, h.hash())
		require.NoError(t, db.Close())
	}
	require.Equal(t, hashes[0], hashes[1], "64-byte filters (many false positives)")
	require.Equal(t, hashes[0], hashes[2], "default filters")
}

// A clean Close saves the filters and the next Open takes them at once
// (no build), consuming the file.
func TestProbeFiltersSavedAtCloseAreLoadedAtOpen(t *testing.T) {
	dir := t.TempDir()
	h := &harness{t: t, db: mustOpenDir(t, dir)}
	const n = 2000
	for i := range n {
		h.claim(t0+int64(i), args(scope(fmt.Sprintf("k%d", i))))
	}
	waitFilterReady(t, h.db)
	idx := h.idx
	require.NoError(t, h.db.Close())
	require.FileExists(t, dir+".filters")

	h = &harness{t: t, db: mustOpenDir(t, dir), idx: idx}
	require.True(t, h.db.FilterReady(), "loaded, not built")
	require.NoFileExists(t, dir+".filters", "consumed by Open")
	for i := range n {
		res := h.claim(t0+n, with(args(scope(fmt.Sprintf("k%d", i))), func(a *ClaimArgs) { a.ClaimID = "other" }))
		require.Equal(t, OutcomeInProgress, res.Outcome, "k%d", i)
	}
	// Most absent scopes are ruled out without a Get: the bits came back.
	no := 0
	for i := range 1000 {
		s := AppendScope(nil, scope(fmt.Sprintf("absent%d", i)), false)
		if !h.db.filter.mayHold(recordBucket(t0+testRet), h.db.filter.hash(s)) {
			no++
		}
	}
	require.Greater(t, no, 900)
}

// Saved filters are for the next Open only. After a crash there is no file
// (Open removed it durably), and a file saved at another applied index, or
// damaged, is not used: the filters are built.
func TestSavedFiltersAreNotTrustedAfterACrash(t *testing.T) {
	fs := vfs.NewCrashableMem()
	db := mustOpenFS(t, fs, "db")
	h := &harness{t: t, db: db}
	for i := range 100 {
		h.claim(t0+int64(i), args(scope(fmt.Sprintf("a%d", i))))
	}
	waitFilterReady(t, db)
	require.NoError(t, db.Close())

	db = mustOpenFS(t, fs, "db") // takes the saved filters
	require.True(t, db.FilterReady())
	h = &harness{t: t, db: db, idx: h.idx}
	for i := range 100 {
		h.claim(t0+200+int64(i), args(scope(fmt.Sprintf("b%d", i))))
	}
	require.NoError(t, db.Sync())
	crashed := fs.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: 0, RNG: rand.New(rand.NewPCG(1, 1))})
	_, err := crashed.Stat("db.filters")
	require.Error(t, err, "the consumed file does not come back after a crash")
	db2 := mustOpenFS(t, crashed, "db")
	waitFilterReady(t, db2)
	for _, p := range []string{"a", "b"} {
		for i := range 100 {
			_, ok := db2.Lookup(scope(fmt.Sprintf("%s%d", p, i)), false, t0+300)
			require.True(t, ok, "%s%d", p, i)
		}
	}

	// A file saved at another applied index is removed and not used.
	require.NoError(t, db2.filter.save(crashed, "db.filters", db2.Meta().Applied+1))
	require.NoError(t, db2.Close()) // saves the right one over it
	require.NoError(t, db2.filter.save(crashed, "db.filters", 12345))
	db3 := mustOpenFS(t, crashed, "db")
	_, err = crashed.Stat("db.filters")
	require.Error(t, err)
	waitFilterReady(t, db3)
	_, ok := db3.Lookup(scope("b99"), false, t0+300)
	require.True(t, ok)
}

// Bug: a Restore that failed after its synced range deletion left the
// metadata and the probe filters describing the deleted state, so the
// node would skip entries it no longer held and trust filters of records
// that were gone. Both must describe the empty store.
func TestFailedRestoreLeavesNoStaleMetaOrFilters(t *testing.T) {
	src := newHarness(t)
	for i := range 20 {
		src.claim(t0, args(scope(fmt.Sprintf("src%d", i))))
	}
	snap, err := src.db.Snapshot()
	require.NoError(t, err)
	var buf bytes.Buffer
	_, err = snap.WriteTo(&buf)
	require.NoError(t, err)
	require.NoError(t, snap.Close())

	dst := &harness{t: t, db: mustOpenFS(t, vfs.NewMem(), "dst")}
	for i := range 50 {
		dst.claim(t0, args(scope(fmt.Sprintf("dst%d", i))))
	}
	waitFilterReady(t, dst.db)
	require.Equal(t, uint64(50), dst.db.Meta().Applied)

	orig := restoreIngest
	restoreIngest = func(*pebble.DB, []string) error { return errors.New("injected ingest failure") }
	defer func() { restoreIngest = orig }()
	require.ErrorContains(t, dst.db.Restore(bytes.NewReader(buf.Bytes())), "injected ingest failure")
	require.Equal(t, Meta{}, dst.db.Meta(), "the metadata describes the empty store left behind")
	require.False(t, dst.db.FilterReady(), "filters of the deleted state are not trusted")
}

// Bug: rebuildFilter kept the old filters trusted when it could not open
// its iterator.
func TestFilterRebuildFailureDistrustsOldFilters(t *testing.T) {
	h := newHarness(t)
	h.claim(t0, args(scope("a")))
	waitFilterReady(t, h.db)
	orig := newFilterIter
	newFilterIter = func(*pebble.DB, *pebble.IterOptions) (*pebble.Iterator, error) {
		return nil, errors.New("injected iterator failure")
	}
	defer func() { newFilterIter = orig }()
	require.Error(t, h.db.rebuildFilter())
	require.False(t, h.db.FilterReady())
	require.NotNil(t, h.lookup(scope("a"), t0+1), "a maybe still finds the record")
}
