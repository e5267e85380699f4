package engine

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/cockroachdb/pebble/v2"

	"github.com/idem-store/idem/partition"
	"github.com/idem-store/idem/ttl"
)

// getter is what both a DB read and a batch read offer.
type getter interface {
	Get(key []byte) ([]byte, io.Closer, error)
}

// Txn is one atomic unit of writes: an indexed Pebble batch, so reads inside
// it see its own earlier writes. The FSM opens one Txn per raft batch.
// A Txn is not safe for concurrent use.
type Txn struct {
	d       *DB
	b       *pebble.Batch
	meta    Meta
	dropped []partition.Bucket // whose probe filters go once committed

	// kv caches the bookkeeping keys (bucket stats, quota counters) for
	// the life of the Txn: every claim of a raft batch updates the same
	// few, and each read was a Pebble Get. Written to the batch by flush.
	kv map[string]cached

	// principals counts the principals with a total quota counter, as
	// this Txn sees them (principals.go); Commit hands it to the DB.
	principals principalStats
	// prefixes are the counts of live principals under the prefixes this
	// Txn asked for (credcap.go), and moves the principals that appeared
	// or went in it; Commit hands both to the DB.
	prefixes map[string]int64
	moves    []principalMove
}

type cached struct {
	v       []byte
	present bool
	dirty   bool
}

// get reads a bookkeeping key through the Txn's cache, then the DB's
// (bypassed once the Txn has dropped a bucket: the range deletion is in
// the batch, not yet in the committed values the DB's cache holds).
func (t *Txn) get(k []byte) ([]byte, bool) {
	if e, ok := t.kv[string(k)]; ok {
		return e.v, e.present
	}
	if len(t.dropped) == 0 {
		if e, ok := t.d.counter(k); ok {
			t.kv[string(k)] = e
			return e.v, e.present
		}
	}
	v, ok := getValue(t.b, k)
	t.kv[string(k)] = cached{v: v, present: ok}
	return v, ok
}

// maxCounterBytes bounds DB.counters by its keys' and values' bytes (plus
// a map entry's overhead each): principals may be long (--max-scope-bytes),
// so a bound on entries alone is not a bound on memory.
const maxCounterBytes = 8 << 20

const counterOverhead = 64 // a map entry and its string header, roughly

// counter is the committed value of a bookkeeping key, if cached.
func (d *DB) counter(k []byte) (cached, bool) {
	d.mu.RLock()
	defer d.mu.RUnlock()
	e, ok := d.counters[string(k)]
	return e, ok
}

// keepCounters records, under d.mu, the values a committed Txn read or
// wrote (its dirty entries are in Pebble now).
func (d *DB) keepCounters(kv map[string]cached, dropped bool) {
	if dropped || d.counters == nil || d.counterBytes > maxCounterBytes {
		d.counters, d.counterBytes = make(map[string]cached, len(kv)), 0
	}
	if dropped {
		return // the Txn's view of the dropped bucket's keys is gone
	}
	for k, e := range kv {
		if _, ok := d.counters[k]; !ok {
			d.counterBytes += len(k) + len(e.v) + counterOverhead
		}
		e.dirty = false
		d.counters[k] = e
	}
}

// put and remove write a bookkeeping key to the cache, for flush.
func (t *Txn) putCached(k, v []byte) {
	t.kv[string(k)] = cached{v: v, present: true, dirty: true}
}

func (t *Txn) removeCached(k []byte) {
	t.kv[string(k)] = cached{dirty: true}
}

// flush writes the cached changes into the batch: before Commit, and
// before anything reads the batch other than through get.
func (t *Txn) flush() {
	for k, e := range t.kv {
		if !e.dirty {
			continue
		}
		if e.present {
			t.set([]byte(k), e.v)
		} else {
			t.del([]byte(k))
		}
		e.dirty = false
		t.kv[k] = e
	}
}

// forget drops cached keys of bucket b, after a range deletion of it.
func (t *Txn) forget(b partition.Bucket) {
	p := string(partition.Prefix(b))
	for k := range t.kv {
		if strings.HasPrefix(k, p) {
			delete(t.kv, k)
		}
	}
}

// Begin starts a Txn.
func (d *DB) Begin() *Txn {
	return &Txn{d: d, b: d.pdb.NewIndexedBatch(), meta: d.Meta(), kv: map[string]cached{}, principals: d.livePrincipals()}
}

// Meta returns the metadata as this Txn sees it.
func (t *Txn) Meta() Meta { return t.meta }

// Advance moves cluster time to nowMs if that is later than the current
// cluster time, and returns the cluster time to use: time never goes back.
func (t *Txn) Advance(nowMs int64) int64 {
	if nowMs > t.meta.NowMs {
		t.meta.NowMs = nowMs
	}
	return t.meta.NowMs
}

// EnsureWidth fixes the bucket width on the first command that needs it and
// returns the width in force. The width never changes afterwards.
func (t *Txn) EnsureWidth(w partition.Width) partition.Width {
	if t.meta.Width == 0 {
		t.meta.Width = w
	}
	return t.meta.Width
}

// PinScope fixes the scope mode on the first write that names a scope and
// returns whether the mode in force is principal scope: every operation
// encodes its scope in the pinned mode, whatever mode its command asked
// for, so one scope is never encoded two ways (and replicas agree).
func (t *Txn) PinScope(principal bool) bool {
	if t.meta.Scope == ScopeUnset {
		t.meta.Scope = ScopeModeOf(principal)
	}
	return t.meta.Scope == ScopePrincipal
}

// SetRetention makes ms the retention of every record claimed from now
// on. Records already stored keep the expiry they were promised: a
// shorter retention never shortens one, and a longer one never stretches
// one (clients were told its expires_at).
//
// It widens MaxRetentionMs at once, as the first claim with the new
// retention would: once the retention is pinned, a claim then changes no
// metadata, so a claim the precheck peek settles without a log entry (a
// replay, a refusal) leaves the state exactly as its Apply would have.
// Widening only at the next applied claim made that claim's Apply write
// meta its peek skipped (TestPeeksAgreeWithApply).
func (t *Txn) SetRetention(ms int64) {
	if ms > 0 {
		t.meta.RetentionMs = ms
		if ms > t.meta.MaxRetentionMs {
			t.meta.MaxRetentionMs = ms
		}
	}
}

// MarkGated records in Meta.Gated that entries of the kinds bits were
// applied. Apply calls it as it decodes them, so replicas that applied the
// same log record the same.
func (t *Txn) MarkGated(bits uint64) { t.meta.Gated |= bits }

// Commit writes the metadata with the data and commits. Pebble's WAL is not
// synced: the raft log is the durable copy and entries above the stored
// applied index are replayed after a crash (docs/DESIGN.md invariant 5).
func (t *Txn) Commit(applied uint64) error {
	t.flush()
	if applied > t.meta.Applied {
		t.meta.Applied = applied
	}
	t.set(keyApplied, u64(t.meta.Applied))
	t.set(keyNow, u64(uint64(t.meta.NowMs)))
	t.set(keyWidth, u64(uint64(t.meta.Width)))
	t.set(keyMaxRet, u64(uint64(t.meta.MaxRetentionMs)))
	t.set(keySchema, u64(schemaVesion))
	if t.meta.Scope != ScopeUnset {
		t.set(keyScope, u64(uint64(t.meta.Scope)))
	}
	if t.meta.RetentionMs > 0 {
		t.set(keyRetention, u64(uint64(t.meta.RetentionMs)))
	}
	if t.meta.Gated != 0 {
		t.set(keyGated, u64(t.meta.Gated))
	}
	t.d.mu.Lock()
	defer t.d.mu.Unlock()
	if t.d.closed {
		t.b.Close()
		return ErrClosed
	}
	if err := t.commit(); err != nil {
		return fmt.Errorf("engine: commit: %w", err)
	}
	t.d.meta = t.meta
	t.d.principals = t.principals
	t.commitPrefixes()
	t.d.keepCounters(t.kv, len(t.dropped) > 0)
	for _, b := range t.dropped {
		t.d.filter.drop(b)
	}
	return t.b.Close()
}

func (t *Txn) commit() error {
	defer t.d.stopOnIOPanic()
	return t.b.Commit(pebble.NoSync)
}

// Abort discards the Txn.
func (t *Txn) Abort() { t.b.Close() }

// Storage errors inside a Txn are not results: the FSM must stop rather
// than let replicas diverge, so they panic with a wrapped error.
func (t *Txn) set(k, v []byte) {
	if err := t.b.Set(k, v, nil); err != nil {
		panic(fmt.Errorf("engine: batch set: %w", err))
	}
}

func (t *Txn) del(k []byte) {
	if err := t.b.Delete(k, nil); err != nil {
		panic(fmt.Errorf("engine: batch delete: %w", err))
	}
}

func getValue(g getter, k []byte) ([]byte, bool) {
	v, c, err := g.Get(k)
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, false
	}
	if err != nil {
		panic(fmt.Errorf("engine: get: %w", err))
	}
	out := append([]byte(nil), v...)
	c.Close()
	return out, true
}

// found is a live record and where it is stored.
type found struct {
	rec    *Record
	bucket partition.Bucket
	size   int
}

// findLive returns the live record of scope at nowMs. Expired records not
// yet dropped are absent to every caller (docs/DESIGN.md invariant 3).
func findLive(g getter, pf *probeFilter, m Meta, scope []byte, nowMs int64) (found, bool) {
	f, ok := probe(g, pf, m, scope, nowMs)
	if !ok || !ttl.Live(f.rec.ExpiresMs, nowMs) {
		return found{}, false
	}
	return f, true
}

// probe returns the newest record stored for scope in the buckets that can
// hold a record live at nowMs, live or not, with point Gets from the newest
// bucket down. The first record found has the latest expiry of any stored
// for the scope: if it has expired, every older one has too, so the probe
// stops there. A scope with no record costs one Get per bucket whose probe
// filter (pf, nil for none) cannot rule the scope out.
func probe(g getter, pf *probeFilter, m Meta, scope []byte, nowMs int64) (found, bool) {
	if m.Width == 0 {
		return found{}, false
	}
	first, last := span(m, nowMs)
	key := RecordKey(last, scope)
	h := pf.hash(scope)
	for b := last; ; b-- {
		binary.BigEndian.PutUint64(key[1:9], uint64(b))
		if pf.mayHold(b, h) {
			if v, ok := getValue(g, key); ok {
				r, err := DecodeRecord(v)
				if err != nil {
					panic(fmt.Errorf("engine: bucket %d: %w", b, err))
				}
				return found{rec: r, bucket: b, size: len(v)}, true
			}
		}
		if b == first {
			return found{}, false
		}
	}
}

// span is the buckets that can hold a record live at nowMs. Records were
// created up to cluster time m.NowMs, which can be later than nowMs (a read
// racing an apply, a lagging caller), so the last bucket is counted from the
// later of the two.
func span(m Meta, nowMs int64) (first, last partition.Bucket) {
	first, _ = partition.Span(nowMs, m.MaxRetentionMs, m.Width)
	_, last = partition.Span(max(nowMs, m.NowMs), m.MaxRetentionMs, m.Width)
	return first, last
}

// bucketStats is the bookkeeping of one bucket, kept so that metrics and
// drops never have to count records one by one.
type bucketStats struct {
	Records    int64
	Bytes      int64
	MinCreated int64
}

func decodeStats(v []byte) bucketStats {
	if len(v) != 24 {
		return bucketStats{}
	}
	return bucketStats{
		Records:    int64(binary.BigEndian.Uint64(v)),
		Bytes:      int64(binary.BigEndian.Uint64(v[8:])),
		MinCreated: int64(binary.BigEndian.Uint64(v[16:])),
	}
}

func (s bucketStats) encode() []byte {
	b := make([]byte, 0, 24)
	b = binary.BigEndian.AppendUint64(b, uint64(s.Records))
	b = binary.BigEndian.AppendUint64(b, uint64(s.Bytes))
	return binary.BigEndian.AppendUint64(b, uint64(s.MinCreated))
}

func (t *Txn) addStats(b partition.Bucket, records, bytes, created int64) {
	k := statsKey(b)
	v, _ := t.get(k)
	s := decodeStats(v)
	s.Records += records
	s.Bytes += bytes
	if created != 0 && (s.MinCreated == 0 || created < s.MinCreated) {
		s.MinCreated = created
	}
	t.putCached(k, s.encode())
}

// addQuota moves the principal's key count in bucket b and its total by
// delta. The per-bucket counts let a drop subtract what it removes from the
// totals: one update per principal in the bucket, never one per key.
func (t *Txn) addQuota(b partition.Bucket, principal string, delta int64) {
	t.addCounter(quotaKey(b, principal), delta)
	t.addTotal(principal, delta)
}

func (t *Txn) addCounter(k []byte, delta int64) {
	v, _ := t.get(k)
	var n int64
	if len(v) == 8 {
		n = int64(binary.BigEndian.Uint64(v))
	}
	n += delta
	if n <= 0 {
		t.removeCached(k)
		return
	}
	t.putCached(k, u64(uint64(n)))
}

// liveKeys is the principal's count of stored keys. Expired records still
// count until their bucket is dropped (at most one bucket width after they
// expire): the quota errs on the side of refusing.
func (t *Txn) liveKeys(principal string) int64 {
	if v, ok := t.get(totalQuotaKey(principal)); ok && len(v) == 8 {
		return int64(binary.BigEndian.Uint64(v))
	}
	return 0
}

// put writes r into bucket b, replacing a stored copy of oldSize bytes
// (0 when new), and keeps the lease index in step with the state.
func (t *Txn) put(b partition.Bucket, scope []byte, r *Record, old *Record, oldSize int) {
	t.d.filter.add(b, t.d.filter.hash(scope)) // before the write can be seen
	v := EncodeRecord(r)
	t.set(RecordKey(b, scope), v)
	if old != nil && old.State == StateInProgress {
		t.del(leaseKey(b, old.LeaseMs, scope))
	}
	if r.State == StateInProgress {
		t.set(leaseKey(b, r.LeaseMs, scope), u64(uint64(r.CreatedMs)))
	}
	var added int64
	if old == nil {
		added = 1
	}
	t.addStats(b, added, int64(len(v)-oldSize), r.CreatedMs)
}
