// Package partition maps record expiry times to time buckets and buckets to
// Pebble key prefixes and ranges. Everything about a record lives under the
// prefix of the bucket its expires_at falls in, so expiring a bucket is one
// range deletion with nothing left dangling.
//
// The package is pure: time comes in as Unix milliseconds and nothing here
// reads a clock.
package partition

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
)

// Bucket is the number of a time bucket: floor(expires_at_ms / width_ms).
type Bucket uint64

// ErrWidth is returned for a bucket width that is not positive.
var ErrWidth = errors.New("partition: bucket width must be at least 1ms")

// KeyPrefix starts every bucketed key.
const KeyPrefix = 'b'

// prefixLen is len("b") + 8 bytes of bucket + len("/").
const prefixLen = 1 + 8 + 1

// Width is a bucket width in milliseconds.
type Width int64

// ValidateWidth reports whether w can be used as a bucket width.
func ValidateWidth(w Width) error {
	if w < 1 {
		return fmt.Errorf("%w (got %dms)", ErrWidth, w)
	}
	return nil
}

// Of returns the bucket holding a record that expires at expiresMs.
// Times before the epoch land in bucket 0.
func Of(expiresMs int64, w Width) Bucket {
	if expiresMs <= 0 {
		return 0
	}
	return Bucket(expiresMs / int64(w))
}

// Start is the first millisecond (inclusive) that belongs to b.
func (b Bucket) Start(w Width) int64 { return satMul(int64(b), int64(w)) }

// End is the first millisecond after b: every record in b has expires_at < End.
func (b Bucket) End(w Width) int64 { return satMul(int64(b)+1, int64(w)) }

// WhollyExpired reports whether every record that can live in b has expired
// at cluster time nowMs. A record is live while now < expires_at and every
// expires_at in b is at most End-1, so the bucket is dead once now >= End-1.
// We wait for End to keep the rule obviously conservative.
func (b Bucket) WhollyExpired(nowMs int64, w Width) bool {
	return nowMs >= b.End(w)
}

// Span returns the buckets that can hold a record still live at nowMs, given
// that no record was ever created with a retention above maxRetentionMs and
// no record was created after nowMs: from Of(now) to Of(now+maxRetention).
func Span(nowMs, maxRetentionMs int64, w Width) (first, last Bucket) {
	return Of(nowMs, w), Of(satAdd(nowMs, maxRetentionMs), w)
}

// Prefix returns the key prefix "b<bucket BE>/" shared by every key of b.
func Prefix(b Bucket) []byte {
	return AppendPrefix(make([]byte, 0, prefixLen), b)
}

// AppendPrefix appends b's prefix to dst.
func AppendPrefix(dst []byte, b Bucket) []byte {
	dst = append(dst, KeyPrefix)
	dst = binary.BigEndian.AppendUint64(dst, uint64(b))
	return append(dst, '/')
}

// Range returns [start, end) covering every key of b and nothing else, for
// one DeleteRange.
func Range(b Bucket) (start, end []byte) {
	start = Prefix(b)
	end = Prefix(b)
	end[len(end)-1]++ // "/" -> "0": sorts after every key in b, before bucket b+1
	return start, end
}

// Parse returns the bucket of a bucketed key and the rest of the key after
// the prefix.
func Parse(key []byte) (Bucket, []byte, bool) {
	if len(key) < prefixLen || key[0] != KeyPrefix || key[prefixLen-1] != '/' {
		return 0, nil, false
	}
	return Bucket(binary.BigEndian.Uint64(key[1:9])), key[prefixLen:], true
}

// AllRange covers every bucketed key of every bucket.
func AllRange() (start, end []byte) {
	return []byte{KeyPrefix}, []byte{KeyPrefix + 1}
}

func satAdd(a, b int64) int64 {
	if b > 0 && a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}

func satMul(a, b int64) int64 {
	if a != 0 && b > math.MaxInt64/a {
		return math.MaxInt64
	}
	return a * b
}
