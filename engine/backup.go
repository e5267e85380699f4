package engine

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"

	"github.com/cockroachdb/pebble/v2"

	"github.com/idem-store/idem/partition"
)

// Records counts the records the snapshot holds from the per-bucket stats,
// seeking from bucket to bucket: cheap whatever the number of records, so a
// backup can say up front how many it carries.
func (s *Snapshot) Records() (int64, error) {
	lo, hi := partition.AllRange()
	it, err := s.snap.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: hi})
	if err != nil {
		return 0, fmt.Errorf("engine: snapshot iter: %w", err)
	}
	defer it.Close()
	var n int64
	for ok := it.First(); ok; {
		b, _, good := partition.Parse(it.Key())
		if !good {
			return 0, fmt.Errorf("%w: key %s", ErrCorrupt, keyForError(it.Key()))
		}
		sk := statsKey(b)
		if it.SeekGE(sk) && bytes.Equal(it.Key(), sk) {
			v, err := it.ValueAndErr()
			if err != nil {
				return 0, fmt.Errorf("engine: snapshot value: %w", err)
			}
			n += decodeStats(v).Records
		}
		_, next := partition.Range(b)
		ok = it.SeekGE(next)
	}
	return n, it.Error()
}

// StreamInfo is what a snapshot stream holds, as ScanStream found it.
type StreamInfo struct {
	Pairs   uint64 // keys of every kind
	Records int64  // idempotency records (one per live or expired scope)
	Meta    Meta   // the metadata stored in the stream
	Bytes   int64  // length of the stream
	// Named are the named meta values (Txn.SetNamed) in the stream: a few
	// small entries (node addresses, key use), for inspecting a backup.
	Named map[string][]byte
}

// MaxStreamNamedBytes bounds the named meta values ScanStream keeps (each
// counted with its name and namedEntryOverhead): a state holds a few small
// ones (members' addresses, a key-use counter per bucket and key id, at
// most a few MB), but a hostile or damaged stream may hold GBs of them.
const (
	MaxStreamNamedBytes = 64 << 20
	namedEntryOverhead  = 64
)

// errTooManyNamed is the refusal of a stream or restored state whose named
// meta values (those starting with prefix, if given) take more than limit.
func errTooManyNamed(prefix string, limit int) error {
	which := ""
	if prefix != "" {
		which = fmt.Sprintf(" %q", prefix+"*")
	}
	return fmt.Errorf("%w: its named meta values%s take more than %d MiB, far more than any state holds (damaged, or not a stream idem wrote)",
		ErrSnapshot, which, limit>>20)
}

// ScanStream reads a whole snapshot stream (Snapshot.WriteTo's format) and
// checks it as Restore does, without a store: magic, lengths, key order,
// pair count and checksum. It may read ahead of the stream's end: give it a
// reader that ends there.
func ScanStream(r io.Reader) (StreamInfo, error) {
	var info StreamInfo
	named := 0
	layout := newLayoutCheck()
	pairs, n, err := readStream(r, func(k, v []byte) error {
		if err := layout.pair(k, v); err != nil {
			return err
		}
		if _, rest, ok := partition.Parse(k); ok && len(rest) > 0 && rest[0] == kindRecord {
			info.Records++
		}
		if bytes.HasPrefix(k, []byte(namedMetaPrefix)) {
			if named += len(k) + len(v) + namedEntryOverhead; named > MaxStreamNamedBytes {
				return errTooManyNamed("", MaxStreamNamedBytes)
			}
			if info.Named == nil {
				info.Named = map[string][]byte{}
			}
			info.Named[string(k[len(namedMetaPrefix):])] = append([]byte(nil), v...)
		}
		if len(v) == 8 {
			u := binary.BigEndian.Uint64(v)
			switch {
			case bytes.Equal(k, keyApplied):
				info.Meta.Applied = u
			case bytes.Equal(k, keyNow):
				info.Meta.NowMs = int64(u)
			case bytes.Equal(k, keyWidth):
				info.Meta.Width = partition.Width(u)
			case bytes.Equal(k, keyMaxRet):
				info.Meta.MaxRetentionMs = int64(u)
			case bytes.Equal(k, keyScope):
				info.Meta.Scope = ScopeMode(u)
			case bytes.Equal(k, keyRetention):
				info.Meta.RetentionMs = int64(u)
			case bytes.Equal(k, keyGated):
				info.Meta.Gated = u
			}
		}
		return nil
	})
	info.Pairs, info.Bytes = pairs, n
	if err == nil {
		err = layout.end()
	}
	return info, err
}

func grow(b []byte, n int) []byte {
	if cap(b) < n {
		return make([]byte, n)
	}
	return b[:n]
}

type countReader struct {
	r io.Reader
	n int64
}

func (c *countReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}
