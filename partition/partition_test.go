package partition_test

import (
	"bytes"
	"errors"
	"math"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idem-store/idem/partition"
)

func TestValidateWidth(t *testing.T) {
	tests := []struct {
		name string
		w    partition.Width
		ok   bool
	}{
		{"negative is refused", -1, false},
		{"most negative is refused", math.MinInt64, false},
		{"zero is refused", 0, false},
		{"one millisecond is the smallest width", 1, true},
		{"an hour is fine", 3_600_000, true},
		{"the largest width is fine", math.MaxInt64, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := partition.ValidateWidth(tc.w)
			if tc.ok {
				require.NoError(t, err)
				return
			}
			require.Error(t, err)
			require.True(t, errors.Is(err, partition.ErrWidth), "want ErrWidth, got %v", err)
			require.Contains(t, err.Error(), "partition:")
		})
	}
}

func TestOf(t *testing.T) {
	tests := []struct {
		name      string
		expiresMs int64
		w         partition.Width
		want      partition.Bucket
	}{
		{"epoch lands in bucket 0", 0, 10, 0},
		{"times before the epoch land in bucket 0", -1, 10, 0},
		{"most negative time lands in bucket 0", math.MinInt64, 10, 0},
		{"last millisecond of bucket 0", 9, 10, 0},
		{"first millisecond of bucket 1", 10, 10, 1},
		{"last millisecond of bucket 1", 19, 10, 1},
		{"width 1 is the identity", 12345, 1, 12345},
		{"real times with an hour width", 1_700_000_000_000, 3_600_000, 472_222},
		{"largest time", math.MaxInt64, 1000, partition.Bucket(math.MaxInt64 / 1000)},
		{"width larger than time", 5, math.MaxInt64, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, partition.Of(tc.expiresMs, tc.w))
		})
	}
}

func TestStartEnd(t *testing.T) {
	tests := []struct {
		name       string
		b          partition.Bucket
		w          partition.Width
		start, end int64
	}{
		{"bucket 0", 0, 10, 0, 10},
		{"bucket 1", 1, 10, 10, 20},
		{"width 1", 7, 1, 7, 8},
		{"hour bucket", 472_222, 3_600_000, 1_699_999_200_000, 1_700_002_800_000},
		{"end saturates", partition.Bucket(math.MaxInt64 / 10), 10, math.MaxInt64 / 10 * 10, math.MaxInt64},
		{"start and end saturate", partition.Bucket(math.MaxInt64/10 + 1), 10, math.MaxInt64, math.MaxInt64},
		{"largest signed bucket", partition.Bucket(math.MaxInt64), 10, math.MaxInt64, math.MaxInt64},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.start, tc.b.Start(tc.w), "start")
			require.Equal(t, tc.end, tc.b.End(tc.w), "end")
		})
	}
}

// Every positive millisecond lies in [Start, End) of its own bucket.
func TestOfStartEndAgree(t *testing.T) {
	for _, w := range []partition.Width{1, 7, 10, 1000, 3_600_000} {
		for _, ms := range []int64{1, 6, 7, 8, 999, 1000, 1001, 3_599_999, 3_600_000, 1_700_000_000_123, math.MaxInt64 - 1} {
			b := partition.Of(ms, w)
			require.LessOrEqual(t, b.Start(w), ms, "w=%d ms=%d", w, ms)
			if b.End(w) != math.MaxInt64 {
				require.Less(t, ms, b.End(w), "w=%d ms=%d", w, ms)
			}
			require.Equal(t, b, partition.Of(b.Start(w), w), "start of a bucket maps back to it")
		}
	}
}

func TestWhollyExpired(t *testing.T) {
	const w = partition.Width(10)
	tests := []struct {
		name string
		b    partition.Bucket
		now  int64
		want bool
	}{
		{"before the bucket starts", 1, 5, false},
		{"at the bucket start", 1, 10, false},
		{"at the last expiry the bucket can hold", 1, 19, false},
		{"at the bucket end", 1, 20, true},
		{"long after", 1, 1_000_000, true},
		{"bucket 0 at the epoch", 0, 0, false},
		{"bucket 0 at its end", 0, 10, true},
		{"a saturated bucket never expires", partition.Bucket(math.MaxInt64), math.MaxInt64 - 1, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, tc.b.WhollyExpired(tc.now, w))
		})
	}
}

// A bucket reported wholly expired holds no record that is still live
// (live means now < expires_at): docs/DESIGN.md invariant 3.
func TestWhollyExpiredNeverExpiresALiveRecord(t *testing.T) {
	for _, w := range []partition.Width{1, 3, 10, 97} {
		for expires := int64(1); expires < 5*int64(w)+3; expires++ {
			b := partition.Of(expires, w)
			for now := expires - 2*int64(w) - 2; now < expires; now++ {
				if b.WhollyExpired(now, w) {
					t.Fatalf("w=%d: bucket %d of a record expiring at %d is wholly expired at %d", w, b, expires, now)
				}
			}
			// And it does expire once the bucket has ended.
			require.True(t, b.WhollyExpired(b.End(w), w))
		}
	}
}

func TestSpan(t *testing.T) {
	tests := []struct {
		name        string
		now, maxRet int64
		w           partition.Width
		first, last partition.Bucket
	}{
		{"no retention probes one bucket", 1000, 0, 1000, 1, 1},
		{"retention of five widths", 1000, 5000, 1000, 1, 6},
		{"mid-bucket", 1500, 5000, 1000, 1, 6},
		{"retention smaller than a width crossing a boundary", 1999, 2, 1000, 1, 2},
		{"retention smaller than a width inside a bucket", 1000, 2, 1000, 1, 1},
		{"saturates near the end of time", math.MaxInt64 - 1, 10, 1000, partition.Bucket((math.MaxInt64 - 1) / 1000), partition.Bucket(math.MaxInt64 / 1000)},
		{"before the epoch", -5000, 1000, 1000, 0, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			first, last := partition.Span(tc.now, tc.maxRet, tc.w)
			require.Equal(t, tc.first, first, "first")
			require.Equal(t, tc.last, last, "last")
		})
	}
}

// Span covers the bucket of every record that is live at now, given it was
// created at or before now with a retention of at most maxRet.
func TestSpanCoversEveryLiveRecord(t *testing.T) {
	const w = partition.Width(10)
	const maxRet = 35
	for now := int64(0); now < 60; now++ {
		first, last := partition.Span(now, maxRet, w)
		for created := now - maxRet - 1; created <= now; created++ {
			for ret := int64(1); ret <= maxRet; ret++ {
				expires := created + ret
				if now >= expires {
					continue // not live
				}
				b := partition.Of(expires, w)
				require.True(t, first <= b && b <= last,
					"now=%d created=%d ret=%d: bucket %d outside [%d,%d]", now, created, ret, b, first, last)
			}
		}
	}
}

func TestPrefix(t *testing.T) {
	require.Equal(t, []byte{'b', 0, 0, 0, 0, 0, 0, 0, 0, '/'}, partition.Prefix(0))
	require.Equal(t, []byte{'b', 0, 0, 0, 0, 0, 0, 1, 2, '/'}, partition.Prefix(258))
	require.Equal(t, []byte{'b', 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, '/'}, partition.Prefix(math.MaxUint64))
	require.Equal(t, []byte("xyb\x00\x00\x00\x00\x00\x00\x00\x05/"), partition.AppendPrefix([]byte("xy"), 5))
	// Big-endian: bucket order is key order.
	for _, b := range []partition.Bucket{0, 1, 255, 256, 65535, 1 << 32, math.MaxUint64 - 1} {
		require.Negative(t, bytes.Compare(partition.Prefix(b), partition.Prefix(b+1)), "bucket %d", b)
	}
}

func inRange(k, start, end []byte) bool {
	return bytes.Compare(start, k) <= 0 && bytes.Compare(k, end) < 0
}

func keysOf(b partition.Bucket) [][]byte {
	p := partition.Prefix(b)
	suffixes := [][]byte{
		nil,
		{0},
		{0xff},
		bytes.Repeat([]byte{0xff}, 64),
		[]byte("r/\x01a\x01b\x01c"),
		[]byte("l/\xff\xff\xff\xff\xff\xff\xff\xff\x03abc"),
		[]byte("q/\x05alice"),
		[]byte("s/"),
		{'0'},
		{'/', 0xff},
		{0xfe, 0xff, 0xff, 0x00},
	}
	out := make([][]byte, 0, len(suffixes))
	for _, s := range suffixes {
		out = append(out, append(append([]byte(nil), p...), s...))
	}
	return out
}

func TestRangeCoversExactlyItsBucket(t *testing.T) {
	buckets := []partition.Bucket{0, 1, 2, 46, 47, 48, 255, 256, 257, 472_222, 1 << 32, math.MaxUint64 - 1, math.MaxUint64}
	for _, b := range buckets {
		start, end := partition.Range(b)
		for _, k := range keysOf(b) {
			require.True(t, inRange(k, start, end), "bucket %d: key %x must be in [%x,%x)", b, k, start, end)
		}
		if b > 0 {
			for _, k := range keysOf(b - 1) {
				require.False(t, inRange(k, start, end), "bucket %d: key %x of bucket %d must be outside", b, k, b-1)
			}
		}
		if b < math.MaxUint64 {
			for _, k := range keysOf(b + 1) {
				require.False(t, inRange(k, start, end), "bucket %d: key %x of bucket %d must be outside", b, k, b+1)
			}
		}
		// Meta keys are never inside a bucket's range.
		for _, k := range [][]byte{[]byte("m/applied"), []byte("m/now"), {}, {0xff}} {
			require.False(t, inRange(k, start, end), "bucket %d: key %q must be outside", b, k)
		}
	}
}

func TestAllRangeCoversEveryBucketAndNoMeta(t *testing.T) {
	start, end := partition.AllRange()
	for _, b := range []partition.Bucket{0, 1, 1 << 40, math.MaxUint64} {
		for _, k := range keysOf(b) {
			require.True(t, inRange(k, start, end), "key %x", k)
		}
	}
	for _, k := range [][]byte{[]byte("m/applied"), []byte("m/x/node/1"), {'a', 0xff}, {'c'}} {
		require.False(t, inRange(k, start, end), "key %q", k)
	}
}

func TestParse(t *testing.T) {
	for _, b := range []partition.Bucket{0, 1, 258, 1 << 40, math.MaxUint64} {
		for _, rest := range [][]byte{{}, []byte("r/\x01a"), {0xff, 0xff}} {
			key := append(partition.Prefix(b), rest...)
			got, gotRest, ok := partition.Parse(key)
			require.True(t, ok, "key %x", key)
			require.Equal(t, b, got)
			require.Equal(t, rest, gotRest)
		}
	}
	bad := map[string][]byte{
		"empty":            {},
		"meta key":         []byte("m/applied"),
		"short":            []byte("b\x00\x00\x00\x00\x00\x00\x00\x00"),
		"wrong separator":  []byte("b\x00\x00\x00\x00\x00\x00\x00\x00:"),
		"range end marker": []byte("b\x00\x00\x00\x00\x00\x00\x00\x000"),
		"wrong kind byte":  []byte("c\x00\x00\x00\x00\x00\x00\x00\x00/"),
	}
	for name, key := range bad {
		t.Run(name, func(t *testing.T) {
			_, _, ok := partition.Parse(key)
			require.False(t, ok)
		})
	}
}

// FuzzRange: any key starting with a bucket's prefix is in that bucket's
// Range, in AllRange, outside every other bucket's Range, and parses back.
func FuzzRange(f *testing.F) {
	f.Add(uint64(0), uint64(1), []byte{})
	f.Add(uint64(1), uint64(0), []byte{0xff, 0xff, 0xff})
	f.Add(uint64(math.MaxUint64), uint64(math.MaxUint64-1), []byte("r/\x01a\x01b\x01c"))
	f.Add(uint64(255), uint64(256), []byte{'0'})
	f.Fuzz(func(t *testing.T, b, other uint64, rest []byte) {
		key := append(partition.Prefix(partition.Bucket(b)), rest...)
		start, end := partition.Range(partition.Bucket(b))
		if !inRange(key, start, end) {
			t.Fatalf("key %x outside its bucket range [%x,%x)", key, start, end)
		}
		as, ae := partition.AllRange()
		if !inRange(key, as, ae) {
			t.Fatalf("key %x outside AllRange", key)
		}
		got, gotRest, ok := partition.Parse(key)
		if !ok || uint64(got) != b || !bytes.Equal(gotRest, rest) {
			t.Fatalf("Parse(%x) = %d %x %v", key, got, gotRest, ok)
		}
		if other != b {
			os, oe := partition.Range(partition.Bucket(other))
			if inRange(key, os, oe) {
				t.Fatalf("key %x of bucket %d inside range of bucket %d", key, b, other)
			}
		}
	})
}
