package engine

import (
	"encoding/binary"
	"fmt"
	"github.com/cockroachdb/pebble/v2"

	"github.com/idem-store/idem/partition"
)

// Meta keys.
var (
	keyApplied   = []byte("m/applied")
	keyNow       = []byte("m/now")
	keyWidth     = []byte("m/width")
	keyMaxRet    = []byte("m/maxret")
	keySchema    = []byte("m/schema")
	keyScope     = []byte("m/scope")
	keyRetention = []byte("m/retention")
	// keyGated (Meta.Gated) is absent until a gated entry is applied:
	// earlier releases read no such key and copy it along in snapshots.
	keyGated     = []byte("m/gated")
	schemaVesion = uint64(1)
)

// Kinds of bucketed keys (the byte after the bucket prefix).
const (
	kindRecord = 'r'
	kindLease  = 'l'
	kindQuota  = 'q'
	kindStats  = 's'
)

// AppendScope appends the length-prefixed encoding of a scope. With
// principalOnly the endpoint is left out of uniqueness (encoded empty).
func AppendScope(dst []byte, s Scope, principalOnly bool) []byte {
	dst = appendString(dst, s.Principal)
	if principalOnly {
		dst = appendString(dst, "")
	} else {
		dst = appendString(dst, s.Endpoint)
	}
	return appendString(dst, s.Key)
}

// DecodeScope decodes a scope encoded by AppendScope and returns the rest.
func DecodeScope(b []byte) (Scope, []byte, bool) {
	var s Scope
	var ok bool
	if s.Principal, b, ok = readString(b); !ok {
		return s, nil, false
	}
	if s.Endpoint, b, ok = readString(b); !ok {
		return s, nil, false
	}
	if s.Key, b, ok = readString(b); !ok {
		return s, nil, false
	}
	return s, b, true
}

func bucketKey(dst []byte, b partition.Bucket, kind byte) []byte {
	dst = partition.AppendPrefix(dst, b)
	return append(dst, kind, '/')
}

// RecordKey is the key of the record of scope in bucket b.
func RecordKey(b partition.Bucket, scope []byte) []byte {
	k := bucketKey(make([]byte, 0, 12+len(scope)), b, kindRecord)
	return append(k, scope...)
}

func leaseKey(b partition.Bucket, leaseMs int64, scope []byte) []byte {
	k := bucketKey(make([]byte, 0, 20+len(scope)), b, kindLease)
	k = binary.BigEndian.AppendUint64(k, uint64(leaseMs))
	return append(k, scope...)
}

func quotaKey(b partition.Bucket, principal string) []byte {
	k := bucketKey(make([]byte, 0, 14+len(principal)), b, kindQuota)
	return appendString(k, principal)
}

// totalQuotaKey holds the principal's count of stored keys over all buckets.
func totalQuotaKey(principal string) []byte {
	return appendString([]byte("q/"), principal)
}

func statsKey(b partition.Bucket) []byte {
	return bucketKey(make([]byte, 0, 12), b, kindStats)
}

func appendString(dst []byte, s string) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(s)))
	return append(dst, s...)
}

func readString(b []byte) (string, []byte, bool) {
	n, w := binary.Uvarint(b)
	if w <= 0 || n > uint64(len(b)-w) {
		return "", nil, false
	}
	return string(b[w : w+int(n)]), b[w+int(n):], true
}

func readBytes(b []byte) ([]byte, []byte, bool) {
	n, w := binary.Uvarint(b)
	if w <= 0 || n > uint64(len(b)-w) {
		return nil, nil, false
	}
	return append([]byte(nil), b[w:w+int(n)]...), b[w+int(n):], true
}

// Named meta values (node metadata and the like) live under m/x/.
const namedMetaPrefix = "m/x/"

// SetNamed stores a named meta value in the Txn (e.g. "node/<id>").
func (t *Txn) SetNamed(name string, v []byte) { t.set([]byte(namedMetaPrefix+name), v) }

// DeleteNamed removes a named meta value.
func (t *Txn) DeleteNamed(name string) { t.del([]byte(namedMetaPrefix + name)) }

// Named returns every named meta value whose name starts with prefix.
func (d *DB) Named(prefix string) (map[string][]byte, error) { return d.named(prefix, 0) }

// NamedWithin is Named, refusing (ErrSnapshot) once the values, each
// counted with its name and namedEntryOverhead, take more than
// MaxStreamNamedBytes: for a state just restored from a stream, which may
// hold GBs of them (damaged, or hostile), not from the cluster's own log.
func (d *DB) NamedWithin(prefix string) (map[string][]byte, error) {
	return d.named(prefix, MaxStreamNamedBytes)
}

func (d *DB) named(prefix string, limit int) (map[string][]byte, error) {
	d.mu.RLock()
	defer d.mu.RUnlock()
	if d.closed {
		return nil, ErrClosed
	}
	lo := []byte(namedMetaPrefix + prefix)
	hi := append(append([]byte(nil), lo...), 0xff)
	it, err := d.pdb.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: hi})
	if err != nil {
		return nil, err
	}
	defer it.Close()
	out := map[string][]byte{}
	held := 0
	for ok := it.First(); ok; ok = it.Next() {
		if limit > 0 {
			// The value's length without reading it (it may be large).
			lv := it.LazyValue()
			if held += len(it.Key()) + lv.Len() + namedEntryOverhead; held > limit {
				return nil, errTooManyNamed(prefix, limit)
			}
		}
		v, err := it.ValueAndErr()
		if err != nil {
			return nil, err
		}
		out[string(it.Key()[len(namedMetaPrefix):])] = append([]byte(nil), v...)
	}
	return out, it.Error()
}

// CompactBucket asks Pebble to compact the range of a dropped bucket so its
// space comes back now rather than whenever compaction gets there.
func (d *DB) CompactBucket(b partition.Bucket) error {
	start, end := partition.Range(b)
	if !d.use() {
		return ErrClosed
	}
	defer d.users.Done()
	if err := d.pdb.Compact(d.ctx, start, end, false); err != nil {
		if d.ctx.Err() != nil {
			return ErrClosed
		}
		return err
	}
	return nil
}

// keyForError names a stored key in an error: its size and its layout
// prefix (a bucket key's 'b', bucket number, '/' and kind byte, or another
// key's first byte), not the principal, endpoint or key a client chose
// that follow: errors reach logs and tickets.
func keyForError(k []byte) string {
	n := min(len(k), 1)
	if len(k) >= 9 && k[0] == partition.KeyPrefix {
		n = 9
		if len(k) >= 11 && k[9] == '/' {
			n = 11 // the kind: record, lease, quota or stats
		}
	}
	return fmt.Sprintf("of %d bytes starting %q", len(k), k[:n])
}
