package engine

import (
	"bytes"
	"math"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idem-store/idem/partition"
)

// normalize is the scope as uniqueness sees it.
func normalize(s Scope, principalOnly bool) Scope {
	if principalOnly {
		s.Endpoint = ""
	}
	return s
}

func TestAppendScopeLayout(t *testing.T) {
	got := AppendScope([]byte("pre"), Scope{Principal: "ab", Endpoint: "", Key: "xyz"}, false)
	require.Equal(t, []byte("pre\x02ab\x00\x03xyz"), got)
	require.Equal(t, AppendScope(nil, Scope{Principal: "p", Endpoint: "e", Key: "k"}, true),
		AppendScope(nil, Scope{Principal: "p", Endpoint: "other", Key: "k"}, true))
	long := string(bytes.Repeat([]byte{'x'}, 200))
	require.Equal(t, append([]byte{0xc8, 0x01}, long...), AppendScope(nil, Scope{Principal: long}, false)[:202],
		"lengths are uvarints")
}

func TestScopesWithSharedConcatenationDiffer(t *testing.T) {
	scopes := []Scope{
		{Principal: "a", Endpoint: "bc", Key: "k"},
		{Principal: "ab", Endpoint: "c", Key: "k"},
		{Principal: "abc", Endpoint: "", Key: "k"},
		{Principal: "", Endpoint: "abc", Key: "k"},
		{Principal: "a", Endpoint: "b", Key: "ck"},
		{Principal: "", Endpoint: "", Key: "abck"},
		{Principal: "a\x01b", Endpoint: "c", Key: "k"},
	}
	seen := map[string]Scope{}
	for _, s := range scopes {
		k := string(RecordKey(7, AppendScope(nil, s, false)))
		prev, dup := seen[k]
		require.False(t, dup, "%+v and %+v share a key", s, prev)
		seen[k] = s
	}
}

func TestDecodeScopeRefusesTruncation(t *testing.T) {
	enc := AppendScope(nil, Scope{Principal: "alice", Endpoint: "POST /x", Key: "k1"}, false)
	for n := 0; n < len(enc); n++ {
		_, _, ok := DecodeScope(enc[:n])
		require.False(t, ok, "truncated to %d", n)
	}
	_, _, ok := DecodeScope([]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01})
	require.False(t, ok, "overlong length")
}

func TestKeyKindsStayInTheirBucket(t *testing.T) {
	sc := AppendScope(nil, Scope{Principal: "p", Endpoint: "e", Key: "k"}, false)
	for _, b := range []partition.Bucket{0, 1, 170_000_006, math.MaxUint64 - 1} {
		start, end := partition.Range(b)
		for _, k := range [][]byte{RecordKey(b, sc), leaseKey(b, 0, sc), leaseKey(b, math.MaxInt64, sc),
			quotaKey(b, "p"), quotaKey(b, "\xff\xff"), statsKey(b)} {
			require.True(t, bytes.Compare(start, k) <= 0 && bytes.Compare(k, end) < 0, "bucket %d key %x", b, k)
		}
	}
	lo, hi := partition.AllRange()
	for _, k := range [][]byte{keyApplied, keyNow, keyWidth, keyMaxRet, keySchema} {
		require.False(t, bytes.Compare(lo, k) <= 0 && bytes.Compare(k, hi) < 0, "meta key %q is not bucketed", k)
	}
}

func FuzzScopeKey(f *testing.F) {
	f.Add("a", "bc", "k", false, "ab", "c", "k", false, uint64(1), uint64(1))
	f.Add("p", "POST /x", "k", true, "p", "POST /y", "k", true, uint64(5), uint64(5))
	f.Add("p", "", "k", false, "p", "e", "k", true, uint64(0), uint64(0))
	f.Add("", "", "", false, "", "", "", false, uint64(0), uint64(math.MaxUint64))
	f.Add("\xff\xff", "\x00", "\x80\x01", false, "\xff", "\xff\x00", "\x80\x01", false, uint64(258), uint64(258))
	f.Fuzz(func(t *testing.T, p1, e1, k1 string, ps1 bool, p2, e2, k2 string, ps2 bool, b1, b2 uint64) {
		s1, s2 := Scope{p1, e1, k1}, Scope{p2, e2, k2}
		n1, n2 := normalize(s1, ps1), normalize(s2, ps2)
		enc1, enc2 := AppendScope(nil, s1, ps1), AppendScope(nil, s2, ps2)

		got, rest, ok := DecodeScope(enc1)
		if !ok || got != n1 || len(rest) != 0 {
			t.Fatalf("DecodeScope(AppendScope(%q)) = %q %x %v", n1, got, rest, ok)
		}
		// Self-delimiting: trailing bytes are returned untouched.
		withTail := append(append([]byte(nil), enc1...), enc2...)
		got, rest, ok = DecodeScope(withTail)
		if !ok || got != n1 || !bytes.Equal(rest, enc2) {
			t.Fatalf("DecodeScope with a tail = %q %x %v", got, rest, ok)
		}
		// Appending keeps dst.
		if pre := AppendScope([]byte("dst"), s1, ps1); !bytes.Equal(pre, append([]byte("dst"), enc1...)) {
			t.Fatalf("AppendScope clobbered dst")
		}

		// Injective and prefix-free.
		if (n1 == n2) != bytes.Equal(enc1, enc2) {
			t.Fatalf("scopes %q and %q: equal=%v but encodings %x / %x", n1, n2, n1 == n2, enc1, enc2)
		}
		if n1 != n2 && (bytes.HasPrefix(enc1, enc2) || bytes.HasPrefix(enc2, enc1)) {
			t.Fatalf("encoding of %q is a prefix of %q's or the reverse", n1, n2)
		}

		// Record keys: one per (bucket, scope), none a prefix of another,
		// each inside its bucket and parsing back to it.
		rk1 := RecordKey(partition.Bucket(b1), enc1)
		rk2 := RecordKey(partition.Bucket(b2), enc2)
		same := b1 == b2 && n1 == n2
		if same != bytes.Equal(rk1, rk2) {
			t.Fatalf("record keys %x / %x for (%d,%q) (%d,%q)", rk1, rk2, b1, n1, b2, n2)
		}
		if !same && (bytes.HasPrefix(rk1, rk2) || bytes.HasPrefix(rk2, rk1)) {
			t.Fatalf("record key %x and %x: one is a prefix of the other", rk1, rk2)
		}
		pb, prest, ok := partition.Parse(rk1)
		if !ok || uint64(pb) != b1 || !bytes.Equal(prest, append([]byte{kindRecord, '/'}, enc1...)) {
			t.Fatalf("Parse(%x) = %d %x %v", rk1, pb, prest, ok)
		}
		sc, rest, ok := DecodeScope(prest[2:])
		if !ok || sc != n1 || len(rest) != 0 {
			t.Fatalf("scope of record key %x = %q %x %v", rk1, sc, rest, ok)
		}
		// A record key is never a lease, quota or stats key.
		for _, other := range [][]byte{leaseKey(partition.Bucket(b2), 0, enc2), quotaKey(partition.Bucket(b2), p2), statsKey(partition.Bucket(b2))} {
			if bytes.Equal(rk1, other) {
				t.Fatalf("record key %x collides with %x", rk1, other)
			}
		}
	})
}

func FuzzKeyOrder(f *testing.F) {
	f.Add(uint64(0), uint64(1), int64(0), int64(1), "p", "e", "k", "q")
	f.Add(uint64(255), uint64(256), int64(255), int64(256), "", "", "", "")
	f.Add(uint64(7), uint64(7), int64(math.MaxInt64), int64(0), "\xff", "\xff", "\xff", "\x00")
	f.Add(uint64(math.MaxUint64-1), uint64(math.MaxUint64), int64(1_700_000_005_000), int64(1_700_000_060_000), "alice", "POST /p", "k1", "bob")
	f.Fuzz(func(t *testing.T, b1, b2 uint64, l1, l2 int64, p, e, k, p2 string) {
		if l1 < 0 || l2 < 0 {
			t.Skip("lease deadlines are cluster times, never negative")
		}
		sc1 := AppendScope(nil, Scope{p, e, k}, false)
		sc2 := AppendScope(nil, Scope{p2, k, e}, false)
		keysOf := func(b uint64, sc []byte, lease int64, principal string) [][]byte {
			bb := partition.Bucket(b)
			return [][]byte{RecordKey(bb, sc), leaseKey(bb, lease, sc), quotaKey(bb, principal), statsKey(bb)}
		}
		lo, hi := partition.AllRange()
		for _, key := range append(keysOf(b1, sc1, l1, p), keysOf(b2, sc2, l2, p2)...) {
			if bytes.Compare(key, lo) < 0 || bytes.Compare(key, hi) >= 0 {
				t.Fatalf("key %x outside AllRange", key)
			}
		}
		// Bucket order is key order, for every kind of key.
		if b1 != b2 {
			lower, upper := keysOf(b1, sc1, l1, p), keysOf(b2, sc2, l2, p2)
			if b1 > b2 {
				lower, upper = upper, lower
			}
			for _, x := range lower {
				for _, y := range upper {
					if bytes.Compare(x, y) >= 0 {
						t.Fatalf("key %x of the earlier bucket sorts at or after %x", x, y)
					}
				}
			}
		}
		// Within a bucket, the lease index is ordered by deadline.
		x, y := leaseKey(partition.Bucket(b1), l1, sc1), leaseKey(partition.Bucket(b1), l2, sc2)
		if l1 < l2 && bytes.Compare(x, y) >= 0 || l1 > l2 && bytes.Compare(x, y) <= 0 {
			t.Fatalf("lease %d key %x vs lease %d key %x out of order", l1, x, l2, y)
		}
		// Quota counters are per principal.
		if (p == p2) != bytes.Equal(quotaKey(partition.Bucket(b1), p), quotaKey(partition.Bucket(b1), p2)) {
			t.Fatalf("quota keys of %q and %q", p, p2)
		}
	})
}
