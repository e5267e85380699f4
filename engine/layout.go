package engine

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"

	"github.com/idem-store/idem/partition"
)

// layoutCheck checks, pair by pair, that a snapshot stream holds the keys
// a store writes: every bucketed key parses (the sweeper lists buckets by
// them, and a backup counts records by them), and every record decodes,
// under the key of its own scope, in the bucket of its expiry. The stream's
// checksums say only that the bytes are the ones written: a backup with a
// valid checksum and hostile or mangled contents (rewritten, checksums and
// all) was restored and verified "ok", and the restored node then failed
// every request touching such a record (a panic, the connection closed),
// its sweeper and every backup failed on such a key, and a record listed
// in another bucket than its expiry's said it would live for ever while
// its bucket's deletion took it early.
//
// The bucket width is stored after the records (m/ keys sort after b), so
// the check keeps the range of widths every record so far agrees with and
// compares the stream's width at the end, holding nothing per record.
type layoutCheck struct {
	// lo and hi bound the widths the records' buckets agree with.
	lo, hi int64
	// keyedByPrincipal is set by a record whose key leaves its endpoint
	// out (principal scope), endpointKeyed by one whose key holds it:
	// only a stream of the principal mode may hold the first.
	keyedByPrincipal, endpointKeyed bool
	width                           int64
	scope                           ScopeMode
	haveWidth, haveScope            bool
	// The longest retention a record was given and the latest creation,
	// against the stream's max retention and cluster time: a record
	// created later than the state's clock, or kept longer than any
	// retention it gave, would outlive what the cluster promises.
	longest, latest int64
	maxRet, now     int64
}

func newLayoutCheck() *layoutCheck { return &layoutCheck{lo: 1, hi: math.MaxInt64} }

func (c *layoutCheck) bad(k []byte, format string, args ...any) error {
	return fmt.Errorf("%w: key %s: %s (damaged, or not a state idem wrote)", ErrSnapshot, keyForError(k), fmt.Sprintf(format, args...))
}

func (c *layoutCheck) pair(k, v []byte) error {
	switch {
	case bytes.Equal(k, keyWidth) && len(v) == 8:
		c.width, c.haveWidth = int64(binary.BigEndian.Uint64(v)), true
	case bytes.Equal(k, keyScope) && len(v) == 8:
		c.scope, c.haveScope = ScopeMode(binary.BigEndian.Uint64(v)), true
	case bytes.Equal(k, keyMaxRet) && len(v) == 8:
		c.maxRet = int64(binary.BigEndian.Uint64(v))
	case bytes.Equal(k, keyNow) && len(v) == 8:
		c.now = int64(binary.BigEndian.Uint64(v))
	}
	if len(k) == 0 || k[0] != partition.KeyPrefix {
		return nil
	}
	b, rest, ok := partition.Parse(k)
	if !ok || len(rest) < 2 || rest[1] != '/' {
		return c.bad(k, "not a bucketed key")
	}
	if rest[0] != kindRecord {
		return nil
	}
	r, err := DecodeRecord(v)
	if err != nil {
		return c.bad(k, "%v", err)
	}
	s, tail, ok := DecodeScope(rest[2:])
	if !ok || len(tail) != 0 || s.Principal != r.Principal || s.Key != r.Key || (s.Endpoint != r.Endpoint && s.Endpoint != "") {
		return c.bad(k, "the record it holds is not the record of the key's scope")
	}
	switch {
	case s.Endpoint != "":
		c.endpointKeyed = true
	case r.Endpoint != "":
		c.keyedByPrincipal = true
	}
	if r.ExpiresMs <= r.CreatedMs {
		return c.bad(k, "its record expires (%d ms) no later than it was created (%d ms)", r.ExpiresMs, r.CreatedMs)
	}
	c.longest = max(c.longest, r.ExpiresMs-r.CreatedMs)
	c.latest = max(c.latest, r.CreatedMs)
	// Of(e, W) = b: b*W <= e < (b+1)*W, and e <= 0 only in bucket 0.
	e := r.ExpiresMs
	if e <= 0 {
		if b != 0 {
			return c.bad(k, "a record expiring at %d ms is in bucket %d, not 0", e, b)
		}
		return nil
	}
	if uint64(b) >= uint64(math.MaxInt64) {
		return c.bad(k, "bucket %d is out of range", b)
	}
	c.lo = max(c.lo, e/(int64(b)+1)+1)
	if b > 0 {
		c.hi = min(c.hi, e/int64(b))
	}
	if c.lo > c.hi {
		return c.bad(k, "its record expires at %d ms, in no bucket width that agrees with the records before it (bucket %d)", e, b)
	}
	return nil
}

// end checks what only the whole stream says: that its bucket width is one
// every record's bucket agrees with, and that records keyed without their
// endpoint come from a state of the principal scope.
func (c *layoutCheck) end() error {
	if c.lo > 1 || c.hi < math.MaxInt64 {
		if !c.haveWidth {
			return fmt.Errorf("%w: it holds records but no bucket width (damaged, or not a state idem wrote)", ErrSnapshot)
		}
		if c.width < c.lo || c.width > c.hi {
			return fmt.Errorf("%w: its records lie in buckets of another width than its own %d ms (damaged, or not a state idem wrote)", ErrSnapshot, c.width)
		}
	}
	if c.maxRet > 0 && c.longest > c.maxRet {
		return fmt.Errorf("%w: a record is kept %d ms, longer than the longest retention its state gave (%d ms) (damaged, or not a state idem wrote)", ErrSnapshot, c.longest, c.maxRet)
	}
	if c.now > 0 && c.latest > c.now {
		return fmt.Errorf("%w: a record was created at %d ms, after its state's cluster time (%d ms) (damaged, or not a state idem wrote)", ErrSnapshot, c.latest, c.now)
	}
	if c.keyedByPrincipal && (c.endpointKeyed || (c.haveScope && c.scope != ScopePrincipal)) {
		return fmt.Errorf("%w: it holds records keyed without their endpoint in a state whose scope is not the principal's (damaged, or not a state idem wrote)", ErrSnapshot)
	}
	return nil
}
