package engine

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cespare/xxhash/v2"
	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/idem-store/idem/partition"
)

// DefaultFilterBytes is the size of one bucket's probe filter: 2 MiB, so a
// 24 h retention at the default 2 h width (13 buckets, 15 with the one being
// filled and the one waiting for its drop) costs at most 30 MiB, whatever
// the number of records.
const DefaultFilterBytes = 2 << 20

// probeFilter answers "may bucket b hold a record of this scope?" from
// memory, so that a fresh claim does not pay one Pebble Get per bucket of
// the retention span (13 at the default width; the Gets were a third of a
// node's CPU under load). It is one blocked Bloom filter per bucket, of a
// fixed size set by configuration: memory does not grow with the number of
// records, the false-positive rate does (about 1% at 1.5 M records in a
// bucket of the default 2 MiB, 13% at 4 M). A false positive costs the Get
// it would have cost anyway.
//
// A "no" must never be wrong: a missing record would let a second claim of
// the same scope win. So every record key written goes into its bucket's
// filter before the write is committed (Txn.put and the bulk loader), and
// the filters are built from a consistent iterator opened before any write
// can happen (Open) or right after the state was replaced (Restore). Until
// that build has finished, every answer is "maybe". Records deleted or
// replaced leave their bits behind (a false positive at worst); a dropped
// bucket's filter is freed once the drop is committed.
type probeFilter struct {
	words  int // uint64 words per bucket, a power of two and at least 8
	log    *slog.Logger
	mu     sync.RWMutex
	filter map[partition.Bucket][]uint64
	ready  atomic.Bool

	// The build in progress, if any.
	stop chan struct{}
	done chan struct{}
}

// newProbeFilter returns a filter of bytesPerBucket (rounded down to a power
// of two, at least 64) per bucket, or nil (always "maybe") when
// bytesPerBucket is negative.
func newProbeFilter(bytesPerBucket int, log *slog.Logger) *probeFilter {
	if bytesPerBucket < 0 {
		return nil
	}
	if bytesPerBucket == 0 {
		bytesPerBucket = DefaultFilterBytes
	}
	words := 8
	for words*2*8 <= bytesPerBucket {
		words *= 2
	}
	return &probeFilter{words: words, log: log, filter: map[partition.Bucket][]uint64{}}
}

// hash is deterministic so that saved filters stay valid across restarts.
// Clients choose keys, so they could aim at one filter block: that costs
// them false positives (a Get each), never a wrong answer.
func (f *probeFilter) hash(scope []byte) uint64 {
	if f == nil {
		return 0
	}
	return xxhash.Sum64(scope)
}

// bits sets or tests the four bits of hash h, all in one 64-byte block of w
// (one cache line): the block from the low bits, the positions from the
// high 36 bits.
func (f *probeFilter) block(h uint64) (base int, pos [4]uint64) {
	base = int(h&uint64(f.words/8-1)) * 8
	for i := range pos {
		pos[i] = (h >> (28 + 9*i)) & 511
	}
	return base, pos
}

// add records that bucket b holds a record of the scope hashed to h.
func (f *probeFilter) add(b partition.Bucket, h uint64) {
	if f == nil {
		return
	}
	f.mu.RLock()
	w := f.filter[b]
	f.mu.RUnlock()
	if w == nil {
		f.mu.Lock()
		if w = f.filter[b]; w == nil {
			w = make([]uint64, f.words)
			f.filter[b] = w
		}
		f.mu.Unlock()
	}
	base, pos := f.block(h)
	for _, p := range pos {
		atomic.OrUint64(&w[base+int(p>>6)], 1<<(p&63))
	}
}

// mayHold is false only when bucket b certainly holds no record of the scope
// hashed to h.
func (f *probeFilter) mayHold(b partition.Bucket, h uint64) bool {
	if f == nil || !f.ready.Load() {
		return true
	}
	f.mu.RLock()
	w := f.filter[b]
	f.mu.RUnlock()
	if w == nil {
		return false
	}
	base, pos := f.block(h)
	for _, p := range pos {
		if atomic.LoadUint64(&w[base+int(p>>6)])&(1<<(p&63)) == 0 {
			return false
		}
	}
	return true
}

// drop frees bucket b's filter after its drop was committed. No record can
// be written to a wholly expired bucket, so it is never needed again.
func (f *probeFilter) drop(b partition.Bucket) {
	if f == nil {
		return
	}
	f.mu.Lock()
	delete(f.filter, b)
	f.mu.Unlock()
}

// rebuild forgets everything and builds the filters again from it, an
// iterator over the whole store opened by the caller before any later
// write can be committed (writes after it go through add). Answers are
// "maybe" until the build is done. rebuild takes ownership of it.
func (f *probeFilter) rebuild(it *pebble.Iterator) {
	if f == nil {
		it.Close()
		return
	}
	f.invalidate()
	f.stop, f.done = make(chan struct{}), make(chan struct{})
	go f.build(it, f.stop, f.done)
}

// invalidate stops a build in progress and forgets every filter: until a
// build completes, every answer is "maybe".
func (f *probeFilter) invalidate() {
	if f == nil {
		return
	}
	f.halt()
	f.ready.Store(false)
	f.mu.Lock()
	f.filter = map[partition.Bucket][]uint64{}
	f.mu.Unlock()
}

// halt stops a build in progress and waits for it to release its iterator.
func (f *probeFilter) halt() {
	if f == nil || f.stop == nil {
		return
	}
	close(f.stop)
	<-f.done
	f.stop, f.done = nil, nil
}

// build adds every record key seen by it, bucket by bucket, seeking over
// the other kinds of keys.
func (f *probeFilter) build(it *pebble.Iterator, stop, done chan struct{}) {
	defer close(done)
	defer it.Close()
	start := time.Now()
	n := 0
	ok := it.First()
	for ok {
		if n++; n%4096 == 0 {
			select {
			case <-stop:
				return
			default:
			}
		}
		b, rest, good := partition.Parse(it.Key())
		switch {
		case !good || len(rest) < 2:
			ok = it.Next() // not a bucketed key of ours: nothing to add
		case rest[0] < kindRecord:
			ok = it.SeekGE(bucketKey(nil, b, kindRecord))
		case rest[0] == kindRecord:
			f.add(b, f.hash(rest[2:]))
			ok = it.Next()
		default:
			_, next := partition.Range(b)
			ok = it.SeekGE(next)
		}
	}
	if err := it.Error(); err != nil {
		// Stay "maybe" for good: correct, only slower.
		f.log.Error("engine: probe filter build failed; every bucket will be probed", "err", err)
		return
	}
	f.ready.Store(true)
	f.log.Info("probe filters ready", "buckets", f.buckets(), "took", time.Since(start).Round(time.Millisecond))
}

// FilterReady reports whether the probe filters are built (true when they
// are disabled): until then every claim probes every bucket of its span.
func (d *DB) FilterReady() bool { return d.filter == nil || d.filter.ready.Load() }

// buckets returns how many bucket filters are held (for tests and metrics).
func (f *probeFilter) buckets() int {
	if f == nil {
		return 0
	}
	f.mu.RLock()
	defer f.mu.RUnlock()
	return len(f.filter)
}

// Saved filters let a clean restart skip the build (114 s at 50 M records).
// They are trusted only by the next Open after a clean Close: Open removes
// the file, durably, before the store takes any write, so after a crash
// there is no file and the filters are built again. The file also carries
// the applied index it was saved at, which must match the store's.
//
//	"IDEMFLT1", u64 applied, u32 words per bucket, u32 buckets,
//	per bucket: u64 bucket, words × u64; u32 CRC-32C of all before it
var filterMagic = []byte("IDEMFLT1")

// save writes the filters to path (through a temporary file and a rename).
// Only filters whose build finished hold every record; others are not saved.
func (f *probeFilter) save(fs vfs.FS, path string, applied uint64) error {
	if f == nil {
		return nil
	}
	if !f.ready.Load() {
		fs.Remove(path) // none should be there; never leave a stale one
		return nil
	}
	tmp := path + ".tmp"
	file, err := fs.Create(tmp, vfs.WriteCategoryUnspecified)
	if err != nil {
		return err
	}
	crc := crc32.New(castagnoli)
	// The checksum sees each buffer before the file does: Pebble's
	// in-memory FS scrambles what it was given once written, under the
	// race detector (its invariants builds), and a sum taken after that
	// did not match the file.
	bw := bufio.NewWriterSize(io.MultiWriter(crc, file), 1<<20)
	var buf []byte
	buf = append(buf, filterMagic...)
	buf = binary.BigEndian.AppendUint64(buf, applied)
	buf = binary.BigEndian.AppendUint32(buf, uint32(f.words))
	f.mu.RLock()
	buf = binary.BigEndian.AppendUint32(buf, uint32(len(f.filter)))
	bw.Write(buf)
	for b, w := range f.filter {
		buf = binary.BigEndian.AppendUint64(buf[:0], uint64(b))
		for _, x := range w {
			buf = binary.LittleEndian.AppendUint64(buf, x)
		}
		bw.Write(buf)
	}
	f.mu.RUnlock()
	err = bw.Flush()
	if err == nil {
		_, err = file.Write(binary.BigEndian.AppendUint32(nil, crc.Sum32()))
	}
	if err == nil {
		err = file.Sync()
	}
	if cerr := file.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = fs.Rename(tmp, path)
	}
	if err == nil {
		err = syncDir(fs, path)
	}
	if err != nil {
		fs.Remove(tmp)
		return fmt.Errorf("engine: save probe filters: %w", err)
	}
	return nil
}

// load takes the filters saved at path if they are whole and were saved at
// applied with this filter's size, removing the file first. It reports
// whether the filters are ready; if not, the caller builds them.
func (f *probeFilter) load(fs vfs.FS, path string, applied uint64) bool {
	if f == nil {
		return false
	}
	data, err := readAll(fs, path)
	if errors.Is(err, os.ErrNotExist) {
		return false
	}
	// Whatever it holds, the file must be gone before any write.
	if rerr := fs.Remove(path); rerr != nil || syncDir(fs, path) != nil {
		f.log.Warn("engine: could not remove saved probe filters; building them", "path", path, "error", rerr)
		return false
	}
	if err != nil {
		f.log.Warn("engine: saved probe filters unreadable; building them", "error", err)
		return false
	}
	bad := func(why string) bool {
		f.log.Warn("engine: saved probe filters not used; building them", "reason", why)
		return false
	}
	const head = 8 + 8 + 4 + 4
	if len(data) < head+4 || string(data[:8]) != string(filterMagic) {
		return bad("not a filter file")
	}
	body, sum := data[:len(data)-4], binary.BigEndian.Uint32(data[len(data)-4:])
	if crc32.Checksum(body, castagnoli) != sum {
		return bad("checksum mismatch")
	}
	if got := binary.BigEndian.Uint64(data[8:]); got != applied {
		return bad(fmt.Sprintf("saved at applied index %d, the store is at %d", got, applied))
	}
	if int(binary.BigEndian.Uint32(data[16:])) != f.words {
		return bad("saved with another filter size")
	}
	n := int(binary.BigEndian.Uint32(data[20:]))
	rest := body[head:]
	if len(rest) != n*(8+8*f.words) {
		return bad("truncated")
	}
	filters := make(map[partition.Bucket][]uint64, n)
	for range n {
		b := partition.Bucket(binary.BigEndian.Uint64(rest))
		w := make([]uint64, f.words)
		for i := range w {
			w[i] = binary.LittleEndian.Uint64(rest[8+8*i:])
		}
		filters[b] = w
		rest = rest[8+8*f.words:]
	}
	f.mu.Lock()
	f.filter = filters
	f.mu.Unlock()
	f.ready.Store(true)
	f.log.Info("probe filters loaded from the file saved when the store was last closed cleanly (by a stop, a restore or a recover)", "buckets", n)
	return true
}

func readAll(fs vfs.FS, path string) ([]byte, error) {
	file, err := fs.Open(path)
	if err != nil {
		return nil, err
	}
	defer file.Close()
	return io.ReadAll(file)
}

// syncDir makes a rename or removal in path's directory durable.
func syncDir(fs vfs.FS, path string) error {
	dir, err := fs.OpenDir(filepath.Dir(path))
	if err != nil {
		return err
	}
	defer dir.Close()
	return dir.Sync()
}
