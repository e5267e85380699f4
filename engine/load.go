package engine

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/idem-store/idem/partition"
)

// ErrLoad is returned when a bulk load is refused: a store that is not
// fresh, a record out of order, or a record no claim could have produced.
var ErrLoad = errors.New("engine: bulk load refused")

// LoadOptions configure a bulk load (see Loader).
type LoadOptions struct {
	// Width is the bucket width the store will be served with.
	Width partition.Width
	// NowMs is the cluster time stored with the data: the time of the last
	// command the loaded records could have come from, so at least every
	// record's CreatedMs and CompletedMs.
	NowMs int64
	// RetentionMs is stored as the longest retention any record was created
	// with; every record's ExpiresMs-CreatedMs must be at most this.
	RetentionMs int64
	// PrincipalScope leaves the endpoint out of uniqueness, like
	// ClaimArgs.PrincipalScope (serve --scope principal).
	PrincipalScope bool
	// BatchBytes is the size at which a batch is committed; 0 means 4 MiB,
	// or a quarter of a smaller memtable (Options.MemTableBytes): well under
	// Pebble's large-batch threshold of half a memtable.
	BatchBytes int
}

// LoadStats is what a load wrote.
type LoadStats struct {
	Records    int64 // records written
	InProgress int64 // of which in progress (with a lease entry)
	Bytes      int64 // encoded record bytes, as the bucket stats count them
	Buckets    int   // buckets written
	Principals int   // distinct principals
}

// Loader writes records straight into Pebble, for building large stores
// for benchmarks and tests without going through raft. It keeps exactly the
// bookkeeping of the claim (+ complete) path: the record key, the lease
// entry of an in-progress record, each bucket's stats and per-principal
// key count, each principal's total and the metadata (width, cluster time,
// max retention). A store loaded with it and a store that applied the
// claims and completes of the same records hash the same (StateHash).
//
// It is for offline use, with no other writer: on the fsm directory of a
// data dir whose node is stopped. What it accepts, precisely:
//
//   - The store is fresh: no raft entry was ever applied (applied index 0)
//     and it holds no record, bucket or quota key. A data dir that was
//     ever served is refused; load into a new one, then start the node on
//     it (raft then bootstraps and its first entry applies at index 1 or 2,
//     above the stored applied index 0).
//   - Records come in strictly increasing key order: by bucket
//     (floor(ExpiresMs / Width)), then by encoded scope (AppendScope). So no
//     scope is loaded twice into one bucket, and Pebble gets sorted input.
//     One scope in two buckets is a claim made again after the first
//     record expired; the caller must keep such lifetimes apart (the later
//     CreatedMs at or after the earlier ExpiresMs), which the loader does
//     not check across buckets.
//   - Each record is completed (a response, no lease) or in progress (a
//     lease after CreatedMs, at most ExpiresMs, no response), with attempt
//     at least 1 and CreatedMs < ExpiresMs <= CreatedMs + RetentionMs.
//
// Tokens are the caller's: a served store hands out raft indexes, so
// tokens at or below 1 keep every scope's tokens increasing.
//
// Every record goes into its bucket's probe filter before it is written,
// so the open DB finds loaded records at once.
//
// Batches are unindexed and committed without fsync; Finish writes the
// counters and the metadata, then syncs. A load that fails part-way leaves
// a partial store: throw the directory away.
type Loader struct {
	d   *DB
	o   LoadOptions
	b   *pebble.Batch
	max int

	last    []byte // record key of the previous record
	cur     partition.Bucket
	started bool
	stats   bucketStats      // of cur
	counts  map[string]int64 // per principal, in cur
	totals  map[string]int64 // per principal, over all buckets
	st      LoadStats
	done    bool
}

// NewLoader starts a bulk load into d, refusing a store that is not fresh.
func (d *DB) NewLoader(o LoadOptions) (*Loader, error) {
	if err := partition.ValidateWidth(o.Width); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrLoad, err)
	}
	if o.RetentionMs <= 0 || o.NowMs <= 0 {
		return nil, fmt.Errorf("%w: retention and cluster time must be positive", ErrLoad)
	}
	if o.BatchBytes <= 0 {
		o.BatchBytes = int(min(4<<20, d.opts.MemTableSize/4))
	}
	d.mu.RLock()
	defer d.mu.RUnlock()
	if d.closed {
		return nil, ErrClosed
	}
	if d.meta.Applied != 0 {
		return nil, fmt.Errorf("%w: the store has applied raft entries up to index %d; load only into a fresh data dir", ErrLoad, d.meta.Applied)
	}
	if d.meta.Width != 0 && d.meta.Width != o.Width {
		return nil, fmt.Errorf("%w: the store's bucket width is %dms, not %dms", ErrLoad, d.meta.Width, o.Width)
	}
	lo, hi := partition.AllRange()
	for _, r := range [][2][]byte{{lo, hi}, {[]byte("q/"), []byte("q0")}} {
		it, err := d.pdb.NewIter(&pebble.IterOptions{LowerBound: r[0], UpperBound: r[1]})
		if err != nil {
			return nil, fmt.Errorf("engine: load: %w", err)
		}
		has := it.First()
		if err := errors.Join(it.Error(), it.Close()); err != nil {
			return nil, fmt.Errorf("engine: load: %w", err)
		}
		if has {
			return nil, fmt.Errorf("%w: the store already holds records; load only into a fresh data dir", ErrLoad)
		}
	}
	return &Loader{
		d: d, o: o, max: o.BatchBytes, b: d.pdb.NewBatch(pebble.WithInitialSizeBytes(o.BatchBytes+64<<10), pebble.WithMaxRetainedSizeBytes(2*o.BatchBytes+64<<10)),
		counts: map[string]int64{}, totals: map[string]int64{},
	}, nil
}

// Add writes one record. Records must come in increasing key order (see
// Loader). r is not retained.
func (l *Loader) Add(r *Record) error {
	if l.done {
		return fmt.Errorf("%w: Add after Finish", ErrLoad)
	}
	if err := l.check(r); err != nil {
		return err
	}
	b := partition.Of(r.ExpiresMs, l.o.Width)
	scope := AppendScope(nil, r.Scope, l.o.PrincipalScope)
	key := RecordKey(b, scope)
	if l.last != nil && bytes.Compare(key, l.last) <= 0 {
		return fmt.Errorf("%w: record %q/%q/%q (bucket %d) is not after the previous one in key order",
			ErrLoad, r.Principal, r.Endpoint, r.Key, b)
	}
	l.last = append(l.last[:0], key...)
	if !l.started || b != l.cur {
		if err := l.endBucket(); err != nil {
			return err
		}
		l.cur, l.started, l.stats = b, true, bucketStats{}
		l.st.Buckets++
	}
	l.d.filter.add(b, l.d.filter.hash(scope)) // before the write can be seen
	v := EncodeRecord(r)
	if err := l.b.Set(key, v, nil); err != nil {
		return fmt.Errorf("engine: load: %w", err)
	}
	if r.State == StateInProgress {
		if err := l.b.Set(leaseKey(b, r.LeaseMs, scope), u64(uint64(r.CreatedMs)), nil); err != nil {
			return fmt.Errorf("engine: load: %w", err)
		}
		l.st.InProgress++
	}
	// As Txn.addStats after the claim's put and the complete's put: one
	// more record, the final size, the earliest created time.
	l.stats.Records++
	l.stats.Bytes += int64(len(v))
	if r.CreatedMs != 0 && (l.stats.MinCreated == 0 || r.CreatedMs < l.stats.MinCreated) {
		l.stats.MinCreated = r.CreatedMs
	}
	l.counts[r.Principal]++
	l.totals[r.Principal]++
	l.st.Records++
	l.st.Bytes += int64(len(v))
	return l.maybeCommit()
}

func (l *Loader) check(r *Record) error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: record %q/%q/%q: "+format, append([]any{ErrLoad, r.Principal, r.Endpoint, r.Key}, args...)...)
	}
	switch {
	case r.Attempt < 1:
		return bad("attempt %d", r.Attempt)
	case r.CreatedMs <= 0 || r.ExpiresMs <= r.CreatedMs:
		return bad("expires_at %d is not after created_at %d", r.ExpiresMs, r.CreatedMs)
	case r.ExpiresMs-r.CreatedMs > l.o.RetentionMs:
		return bad("retention %dms is above RetentionMs %d", r.ExpiresMs-r.CreatedMs, l.o.RetentionMs)
	case r.CreatedMs > l.o.NowMs:
		return bad("created_at %d is after NowMs %d", r.CreatedMs, l.o.NowMs)
	}
	switch r.State {
	case StateCompleted:
		if r.Response == nil || r.LeaseMs != 0 || r.CompletedMs < r.CreatedMs ||
			r.CompletedMs >= r.ExpiresMs || r.CompletedMs > l.o.NowMs {
			return bad("a completed record needs a response, no lease, and created_at <= completed_at <= NowMs, before expires_at")
		}
	case StateInProgress:
		if r.Response != nil || r.CompletedMs != 0 || r.LeaseMs <= r.CreatedMs || r.LeaseMs > r.ExpiresMs {
			return bad("an in-progress record needs no response and a lease after created_at, at most expires_at")
		}
	default:
		return bad("state %s cannot be loaded", r.State)
	}
	return nil
}

// endBucket writes the finished bucket's per-principal counts and stats.
func (l *Loader) endBucket() error {
	if !l.started {
		return nil
	}
	for _, p := range sortedKeys(l.counts) {
		if err := l.b.Set(quotaKey(l.cur, p), u64(uint64(l.counts[p])), nil); err != nil {
			return fmt.Errorf("engine: load: %w", err)
		}
	}
	clear(l.counts)
	if err := l.b.Set(statsKey(l.cur), l.stats.encode(), nil); err != nil {
		return fmt.Errorf("engine: load: %w", err)
	}
	return l.maybeCommit()
}

func (l *Loader) maybeCommit() error {
	if l.b.Len() < l.max {
		return nil
	}
	return l.commit(pebble.NoSync)
}

func (l *Loader) commit(o *pebble.WriteOptions) error {
	l.d.mu.RLock()
	defer l.d.mu.RUnlock()
	if l.d.closed {
		return ErrClosed
	}
	if err := l.b.Commit(o); err != nil {
		return fmt.Errorf("engine: load commit: %w", err)
	}
	l.b.Reset()
	return nil
}

// Finish writes the last bucket's counters, every principal's total and
// the metadata, and syncs. The store is then what applying the claims (and
// completes) of the loaded records would have left, at applied index 0.
func (l *Loader) Finish() (LoadStats, error) {
	if l.done {
		return l.st, fmt.Errorf("%w: Finish called twice", ErrLoad)
	}
	l.done = true
	defer l.b.Close()
	if err := l.endBucket(); err != nil {
		return l.st, err
	}
	for _, p := range sortedKeys(l.totals) {
		if err := l.b.Set(totalQuotaKey(p), u64(uint64(l.totals[p])), nil); err != nil {
			return l.st, fmt.Errorf("engine: load: %w", err)
		}
	}
	l.st.Principals = len(l.totals)
	l.d.mu.Lock()
	defer l.d.mu.Unlock()
	if l.d.closed {
		return l.st, ErrClosed
	}
	m := l.d.meta
	m.NowMs = max(m.NowMs, l.o.NowMs)
	m.Width = l.o.Width
	m.MaxRetentionMs = max(m.MaxRetentionMs, l.o.RetentionMs)
	if m.Scope == ScopeUnset {
		m.Scope = ScopeModeOf(l.o.PrincipalScope)
	}
	if m.RetentionMs == 0 {
		m.RetentionMs = l.o.RetentionMs // as a first claim would pin it
	}
	// The same keys Txn.Commit writes.
	for _, kv := range [][2][]byte{
		{keyApplied, u64(m.Applied)}, {keyNow, u64(uint64(m.NowMs))}, {keyWidth, u64(uint64(m.Width))},
		{keyMaxRet, u64(uint64(m.MaxRetentionMs))}, {keySchema, u64(schemaVesion)}, {keyScope, u64(uint64(m.Scope))},
		{keyRetention, u64(uint64(m.RetentionMs))},
	} {
		if err := l.b.Set(kv[0], kv[1], nil); err != nil {
			return l.st, fmt.Errorf("engine: load: %w", err)
		}
	}
	if err := l.b.Commit(pebble.Sync); err != nil {
		return l.st, fmt.Errorf("engine: load commit: %w", err)
	}
	l.d.counters = nil // the load wrote counters past the cache
	l.d.meta = m
	l.d.principals = loadedPrincipals(l.totals) // the store was fresh: these are all
	l.d.prefixes = nil
	return l.st, nil
}

func sortedKeys(m map[string]int64) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

// Settle flushes the memtable and waits until Pebble has run no compaction
// for two seconds (none in progress and no new one finished), or ctx ends.
// After a bulk load it lets a node started on the store serve without first
// compacting what was just written. (Pebble's estimated debt is no guide:
// after a sorted load it stays in the gigabytes with nothing scheduled.)
func (d *DB) Settle(ctx context.Context) error {
	if !d.use() {
		return ErrClosed
	}
	defer d.users.Done()
	if err := d.pdb.Flush(); err != nil {
		return fmt.Errorf("engine: flush: %w", err)
	}
	var last int64 = -1
	quiet := time.Now()
	for {
		m := d.pdb.Metrics()
		if m.Compact.NumInProgress > 0 || m.Compact.Count != last {
			last, quiet = m.Compact.Count, time.Now()
		} else if time.Since(quiet) >= 2*time.Second {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-d.ctx.Done():
			return ErrClosed
		case <-time.After(200 * time.Millisecond):
		}
	}
}
