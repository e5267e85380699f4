package engine

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"hash"
	"hash/crc32"
	"io"
	"slices"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/objstorage/objstorageprovider"
	"github.com/cockroachdb/pebble/v2/sstable"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// Snapshot stream format:
//
//	"IDEMSNP1"
//	repeated: uvarint len(key) > 0, key, uvarint len(value), value
//	uvarint 0 (end of pairs), u64 BE pair count, u32 BE CRC-32C of every byte before it
var snapMagic = []byte("IDEMSNP1")

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Snapshot is a point-in-time view of the whole store, cheap to take.
type Snapshot struct {
	snap *pebble.Snapshot
	meta Meta
}

// Snapshot syncs Pebble (so the durable state is at least as new as any
// snapshot raft records) and returns a consistent view.
func (d *DB) Snapshot() (*Snapshot, error) {
	d.mu.RLock()
	defer d.mu.RUnlock()
	if d.closed {
		return nil, ErrClosed
	}
	if err := d.sync(); err != nil {
		return nil, err
	}
	return &Snapshot{snap: d.pdb.NewSnapshot(), meta: d.meta}, nil
}

// Meta is the metadata the snapshot was taken at.
func (s *Snapshot) Meta() Meta { return s.meta }

// Close releases the snapshot.
func (s *Snapshot) Close() error { return s.snap.Close() }

// WriteTo streams every key of the snapshot with a checksum.
func (s *Snapshot) WriteTo(w io.Writer) (int64, error) {
	it, err := s.snap.NewIter(nil)
	if err != nil {
		return 0, fmt.Errorf("engine: snapshot iter: %w", err)
	}
	defer it.Close()
	crc := crc32.New(castagnoli)
	cw := &countWriter{w: io.MultiWriter(w, crc)}
	bw := bufio.NewWriterSize(cw, 1<<20)
	bw.Write(snapMagic)
	var n uint64
	var hdr [binary.MaxVarintLen64]byte
	for ok := it.First(); ok; ok = it.Next() {
		k := it.Key()
		v, err := it.ValueAndErr()
		if err != nil {
			return cw.n, fmt.Errorf("engine: snapshot value: %w", err)
		}
		bw.Write(hdr[:binary.PutUvarint(hdr[:], uint64(len(k)))])
		bw.Write(k)
		bw.Write(hdr[:binary.PutUvarint(hdr[:], uint64(len(v)))])
		bw.Write(v)
		n++
	}
	if err := it.Error(); err != nil {
		return cw.n, fmt.Errorf("engine: snapshot iter: %w", err)
	}
	bw.WriteByte(0)
	bw.Write(binary.BigEndian.AppendUint64(nil, n))
	if err := bw.Flush(); err != nil {
		return cw.n, fmt.Errorf("engine: snapshot write: %w", err)
	}
	if _, err := w.Write(binary.BigEndian.AppendUint32(nil, crc.Sum32())); err != nil {
		return cw.n, fmt.Errorf("engine: snapshot write: %w", err)
	}
	return cw.n + 4, nil
}

type countWriter struct {
	w io.Writer
	n int64
}

func (c *countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// restoreTableBytes is the size at which Restore starts a new table.
var restoreTableBytes int64 = 256 << 20

// Restore replaces the whole state with a snapshot stream. The stream's
// pairs (in key order) are written into sstables beside the store and
// checked to the last byte before anything changes, so a truncated or
// corrupt stream changes nothing. Then one synced range deletion removes
// the old state and the tables are ingested, both under d.mu, so no
// reader sees the state in between. A crash between the two leaves an
// empty store, applied index 0, below the snapshot raft recorded: the node
// restores it again at start (raftfsm's catchUpFromSnapshot).
//
// Tables rather than one batch: a Pebble batch holds at most 4 GiB, which
// is ~14 M records, and would hold the whole state in memory.
func (d *DB) Restore(r io.Reader) error {
	_, err := d.restore(r, false, false)
	return err
}

// RestoreChecked is Restore of a stream from outside the cluster (a
// backup file): besides its checksums, the keys and records it holds are
// checked to be ones a store writes (layoutCheck), before anything
// changes. A stream a leader sends is its own state, restored as it is.
func (d *DB) RestoreChecked(r io.Reader) error {
	_, err := d.restore(r, false, true)
	return err
}

// RestoreIfNewer is Restore when the stream's state is newer than the
// store's (a higher applied index), and otherwise changes nothing and
// reports false. The stream is checked to its last byte either way.
func (d *DB) RestoreIfNewer(r io.Reader) (bool, error) { return d.restore(r, true, false) }

func (d *DB) restore(r io.Reader, onlyNewer, checked bool) (bool, error) {
	tmp := d.dir + ".restore"
	if err := d.fs.RemoveAll(tmp); err != nil {
		return false, fmt.Errorf("engine: restore: %w", err)
	}
	if err := d.fs.MkdirAll(tmp, 0o755); err != nil {
		return false, fmt.Errorf("engine: restore: %w", err)
	}
	defer d.fs.RemoveAll(tmp)
	tw := &tableWriter{d: d, dir: tmp}
	defer tw.abort()
	var streamApplied uint64
	var layout *layoutCheck
	if checked {
		layout = newLayoutCheck()
	}
	if _, _, err := readStream(r, func(k, v []byte) error {
		if layout != nil {
			if err := layout.pair(k, v); err != nil {
				return err
			}
		}
		if err := tw.set(k, v); err != nil {
			return fmt.Errorf("engine: restore: %w", err)
		}
		if bytes.Equal(k, keyApplied) && len(v) == 8 {
			streamApplied = binary.BigEndian.Uint64(v)
		}
		return nil
	}); err != nil {
		return false, err
	}
	if layout != nil {
		if err := layout.end(); err != nil {
			return false, err
		}
	}
	paths, err := tw.finish()
	if err != nil {
		return false, fmt.Errorf("engine: restore: %w", err)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return false, ErrClosed
	}
	if onlyNewer && streamApplied <= d.meta.Applied {
		return false, nil
	}
	// From the range deletion on, the old state is gone: what describes
	// it in memory goes first, so a failure below leaves an empty store
	// described as empty (applied 0, every probe a "maybe"), which the
	// node restores again at start.
	d.filter.invalidate()
	d.counters = nil
	b := d.pdb.NewBatch()
	defer b.Close()
	// From the first non-empty key (no key is empty: a snapshot stream
	// cannot even hold one), not from the empty key: Pebble takes a span
	// whose start is nil for no span (keyspan.Span.Valid), and an empty
	// start copied into an empty buffer is nil, so in its race and
	// invariants builds the deletion was lost once flushed and the old
	// state's keys came back (TestRestoreOverAStateLeavesNothingOfIt).
	if err := b.DeleteRange([]byte{0}, []byte{0xff, 0xff, 0xff, 0xff}, nil); err != nil {
		return false, fmt.Errorf("engine: restore: %w", err)
	}
	if err := func() error { defer d.stopOnIOPanic(); return b.Commit(pebble.Sync) }(); err != nil {
		return false, fmt.Errorf("engine: restore commit: %w", err)
	}
	d.meta = Meta{}
	d.principals = principalStats{}
	d.prefixes = nil
	if err := restoreIngest(d.pdb, paths); err != nil {
		return false, fmt.Errorf("engine: restore ingest: %w", err)
	}
	m, err := d.readMeta()
	if err != nil {
		return false, err
	}
	d.meta = m
	if d.principals, err = d.countPrincipals(); err != nil {
		return false, err
	}
	return true, d.rebuildFilter()
}

// restoreIngest ingests the restored tables; a variable so tests can make
// it fail after the old state is deleted.
//
// It excises the whole key space as it ingests: the range deletion before
// it hides the old state's keys, but their tables stayed on disk under it
// until a compaction that did not come (Pebble ingests the new tables
// above the deletion and has nothing to merge): a follower that installed
// its leader's snapshot three times held three states' tables (464 MB for
// a 173 MB state, a disk-full walk) and had no room left for the next
// install. An excise drops every table within the span at once.
var restoreIngest = func(pdb *pebble.DB, paths []string) error {
	if len(paths) == 0 {
		return nil
	}
	_, err := pdb.IngestAndExcise(context.Background(), paths, nil, nil,
		pebble.KeyRange{Start: []byte{0}, End: []byte{0xff, 0xff, 0xff, 0xff}})
	return err
}

// readStream reads a snapshot stream (Snapshot.WriteTo's format) and calls
// pair for each key and value in order, checking everything a corrupt or
// truncated stream could get wrong: magic, lengths, key order, pair count
// and checksum. k and v are reused between calls. It returns the number of
// pairs and the bytes of the stream (it may read ahead of the stream's
// end: give it a reader that ends there). An error from pair is returned
// as it is; every other error is an ErrSnapshot.
func readStream(r io.Reader, pair func(k, v []byte) error) (uint64, int64, error) {
	cr := &countReader{r: r}
	hr := &hashReader{br: bufio.NewReaderSize(cr, 1<<20), crc: crc32.New(castagnoli)}
	var n uint64
	bad := func(what string, err error) (uint64, int64, error) {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		if err != nil {
			return n, 0, fmt.Errorf("%w: %s: %w", ErrSnapshot, what, err)
		}
		return n, 0, fmt.Errorf("%w: %s", ErrSnapshot, what)
	}
	magic := make([]byte, len(snapMagic))
	if _, err := io.ReadFull(hr, magic); err != nil || !bytes.Equal(magic, snapMagic) {
		return bad("magic", err)
	}
	var prev, k, v []byte
	for {
		kl, err := binary.ReadUvarint(hr)
		if err != nil {
			return bad("key length", err)
		}
		if kl == 0 {
			break
		}
		if kl > 1<<20 {
			return bad("key too long", nil)
		}
		if k, err = readStreamBytes(hr, k, int(kl)); err != nil {
			return bad("key", err)
		}
		vl, err := binary.ReadUvarint(hr)
		if err != nil || vl > 64<<20 {
			return bad("value length", err)
		}
		if v, err = readStreamBytes(hr, v, int(vl)); err != nil {
			return bad("value", err)
		}
		if prev != nil && bytes.Compare(k, prev) <= 0 {
			return bad("keys out of order", nil)
		}
		if err := pair(k, v); err != nil {
			return n, 0, err
		}
		prev = append(prev[:0], k...)
		n++
	}
	var cnt [8]byte
	if _, err := io.ReadFull(hr, cnt[:]); err != nil {
		return bad("count", err)
	}
	if binary.BigEndian.Uint64(cnt[:]) != n {
		return bad("pair count", nil)
	}
	want := hr.crc.Sum32()
	var sum [4]byte
	if _, err := io.ReadFull(hr.br, sum[:]); err != nil {
		return bad("checksum", err)
	}
	if binary.BigEndian.Uint32(sum[:]) != want {
		return bad("checksum mismatch", nil)
	}
	// What the buffer read ahead is not part of the stream.
	return n, cr.n - int64(hr.br.Buffered()), nil
}

// readChunk is the most readStreamBytes allocates ahead of the bytes it has.
const readChunk = 64 << 10

// readStreamBytes reads n bytes into buf (reused when it has room). A length
// past buf's room is read in steps that grow with what has arrived, not
// allocated whole up front: a damaged or hostile stream of a few bytes
// that claims a 64 MiB value made every restore or backup check allocate
// 64 MiB before it found the stream short.
func readStreamBytes(r io.Reader, buf []byte, n int) ([]byte, error) {
	if n <= cap(buf) || n <= readChunk {
		buf = grow(buf, n)
		_, err := io.ReadFull(r, buf)
		return buf, err
	}
	buf = buf[:0]
	for len(buf) < n {
		step := min(n-len(buf), max(len(buf), readChunk))
		buf = slices.Grow(buf, step)
		m, err := io.ReadFull(r, buf[len(buf):len(buf)+step])
		buf = buf[:len(buf)+m]
		if err != nil {
			return buf, err
		}
	}
	return buf, nil
}

// tableWriter writes sorted pairs into sstables of about restoreTableBytes
// each, for ingestion.
type tableWriter struct {
	d     *DB
	dir   string
	w     *sstable.Writer
	size  int64
	paths []string
}

func (t *tableWriter) set(k, v []byte) error {
	if t.w == nil || t.size >= restoreTableBytes {
		if err := t.closeTable(); err != nil {
			return err
		}
		path := t.d.fs.PathJoin(t.dir, fmt.Sprintf("%06d.sst", len(t.paths)))
		f, err := t.d.tableFS.Create(path, vfs.WriteCategoryUnspecified)
		if err != nil {
			return err
		}
		format := t.d.pdb.FormatMajorVersion().MaxTableFormat()
		t.w = sstable.NewWriter(objstorageprovider.NewFileWritable(f), t.d.opts.MakeWriterOptions(6, format))
		t.paths = append(t.paths, path)
		t.size = 0
	}
	t.size += int64(len(k) + len(v))
	return t.w.Set(k, v)
}

func (t *tableWriter) closeTable() error {
	if t.w == nil {
		return nil
	}
	err := t.w.Close()
	t.w = nil
	return err
}

func (t *tableWriter) finish() ([]string, error) {
	if err := t.closeTable(); err != nil {
		return nil, err
	}
	return t.paths, nil
}

// abort closes a table left open by an error (its files go with the dir).
func (t *tableWriter) abort() {
	if t.w != nil {
		t.w.Close()
		t.w = nil
	}
}

// hashReader checksums exactly the bytes consumed from it.
type hashReader struct {
	br  *bufio.Reader
	crc hash.Hash32
}

func (h *hashReader) Read(p []byte) (int, error) {
	n, err := h.br.Read(p)
	h.crc.Write(p[:n])
	return n, err
}

func (h *hashReader) ReadByte() (byte, error) {
	c, err := h.br.ReadByte()
	if err == nil {
		h.crc.Write([]byte{c})
	}
	return c, err
}

// StateHash is a SHA-256 over every key and value but Meta.Gated's: two
// replicas that applied the same log hash the same, whichever release
// applied it. For tests and the admin route.
func (d *DB) StateHash() (string, error) {
	h, _, err := d.StateHashApplied()
	return h, err
}

// StateHashApplied is StateHash with the applied index of the same
// point-in-time view, so replicas can be compared at equal indexes while
// they keep applying.
func (d *DB) StateHashApplied() (string, uint64, error) {
	h, _, applied, err := d.StateHashes()
	return h, applied, err
}

// StateHashes is StateHashApplied with, from the same view, withGated: the
// hash over every key and value, Meta.Gated's too, as releases before
// December 5, 2026 computed state_hash. Such a release writes no
// Meta.Gated but keeps one its data dir holds: rolled back in place after
// this release applied a gated kind there, it answers withGated, not hash
// (a rollback walk's --state-hashes read the two as replicas that differ).
func (d *DB) StateHashes() (sum, withGated string, applied uint64, err error) {
	if !d.use() {
		return "", "", 0, ErrClosed
	}
	defer d.users.Done()
	it, err := d.pdb.NewIter(nil) // a consistent view: data and applied index agree
	if err != nil {
		return "", "", 0, fmt.Errorf("engine: hash iter: %w", err)
	}
	defer it.Close()
	h, all := sha256.New(), sha256.New()
	var hdr [binary.MaxVarintLen64]byte
	n := 0
	for ok := it.First(); ok; ok = it.Next() {
		if n++; n%4096 == 0 && d.ctx.Err() != nil {
			return "", "", 0, ErrClosed
		}
		v, err := it.ValueAndErr()
		if err != nil {
			return "", "", 0, fmt.Errorf("engine: hash value: %w", err)
		}
		if bytes.Equal(it.Key(), keyApplied) && len(v) == 8 {
			applied = binary.BigEndian.Uint64(v)
		}
		outs := []hash.Hash{h, all}
		if bytes.Equal(it.Key(), keyGated) {
			// What kinds of entries were applied, not what they did: a
			// replica of a release before the record applies the same
			// entries without it, and its records are what is compared
			// (a rolling upgrade hashed the two differently).
			outs = outs[1:]
		}
		for _, o := range outs {
			o.Write(hdr[:binary.PutUvarint(hdr[:], uint64(len(it.Key())))])
			o.Write(it.Key())
			o.Write(hdr[:binary.PutUvarint(hdr[:], uint64(len(v)))])
			o.Write(v)
		}
	}
	if err := it.Error(); err != nil {
		return "", "", 0, fmt.Errorf("engine: hash iter: %w", err)
	}
	return hex.EncodeToString(h.Sum(nil)), hex.EncodeToString(all.Sum(nil)), applied, nil
}
