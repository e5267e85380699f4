package engine

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"runtime"
	"testing"
)

// streamOf writes pairs in Snapshot.WriteTo's format.
func streamOf(pairs ...[2]string) []byte {
	b := append([]byte(nil), snapMagic...)
	for _, p := range pairs {
		b = binary.AppendUvarint(b, uint64(len(p[0])))
		b = append(b, p[0]...)
		b = binary.AppendUvarint(b, uint64(len(p[1])))
		b = append(b, p[1]...)
	}
	b = append(b, 0)
	b = binary.BigEndian.AppendUint64(b, uint64(len(pairs)))
	return binary.BigEndian.AppendUint32(b, crc32.Checksum(b, castagnoli))
}

// A damaged or hostile stream (a backup, a snapshot sent by a peer) is
// refused with ErrSnapshot, never a panic, and what it makes ScanStream
// allocate is bounded by the bytes it holds, not by a length it claims.
func FuzzScanStream(f *testing.F) {
	f.Add(streamOf())
	f.Add(streamOf([2]string{"a", "1"}, [2]string{"b", ""}, [2]string{string(keyApplied), "\x00\x00\x00\x00\x00\x00\x00\x07"}))
	f.Add(append(append([]byte(nil), snapMagic...), 1, 'k', 0xff, 0xff, 0xff, 0x1f))                             // a value of 64 MiB claimed
	f.Add(append(append([]byte(nil), snapMagic...), 0x80, 0x80, 0x40))                                           // a key of 1 MiB claimed
	f.Add(append(append([]byte(nil), snapMagic...), 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01)) // 2^64-1
	f.Fuzz(func(t *testing.T, b []byte) {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		info, err := ScanStream(bytes.NewReader(b))
		runtime.ReadMemStats(&after)
		if err != nil && !errors.Is(err, ErrSnapshot) {
			t.Fatalf("error is not ErrSnapshot: %v", err)
		}
		// The stream ends at its checksum: what follows is another
		// format's (a backup's trailer), not read as part of it. The
		// stream alone reads the same.
		if err == nil {
			if info.Bytes > int64(len(b)) {
				t.Fatalf("stream of %d bytes read as %d", len(b), info.Bytes)
			}
			again, err := ScanStream(bytes.NewReader(b[:info.Bytes]))
			if err != nil || again.Bytes != info.Bytes || again.Pairs != info.Pairs || again.Records != info.Records {
				t.Fatalf("the stream's %d bytes alone read as %+v, %v; within %d bytes as %+v", info.Bytes, again, err, len(b), info)
			}
		}
		// The reader's own buffer is 1 MiB; beyond it, a few times the input.
		if n := after.TotalAlloc - before.TotalAlloc; n > 2<<20+8*uint64(len(b)) {
			t.Fatalf("a stream of %d bytes made ScanStream allocate %d bytes", len(b), n)
		}
	})
}

// Keys and values longer than a read step come back whole, after shorter
// ones and before them (the buffers are reused).
func TestReadStreamLongPairs(t *testing.T) {
	long := func(c byte, n int) string { return string(bytes.Repeat([]byte{c}, n)) }
	want := [][2]string{{"a", "1"}, {"b" + long('k', 3*readChunk+7), long('v', 5*readChunk+1)}, {"c", long('w', readChunk+1)}, {"d", "2"}}
	var got [][2]string
	n, _, err := readStream(bytes.NewReader(streamOf(want...)), func(k, v []byte) error {
		got = append(got, [2]string{string(k), string(v)})
		return nil
	})
	if err != nil || n != uint64(len(want)) {
		t.Fatalf("%d pairs, %v", n, err)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("pair %d: %d, %d bytes; want %d, %d", i, len(got[i][0]), len(got[i][1]), len(want[i][0]), len(want[i][1]))
		}
	}
}

// namedBombReader yields a snapshot stream of n named meta values of size
// bytes each, made as it is read (the test holds none of it).
type namedBombReader struct {
	n, size, i int
	buf        []byte
	zeros      int // of the current value, after buf
}

func (r *namedBombReader) Read(p []byte) (int, error) {
	if len(r.buf) == 0 && r.zeros > 0 {
		n := min(len(p), r.zeros)
		clear(p[:n])
		r.zeros -= n
		return n, nil
	}
	for len(r.buf) == 0 {
		switch {
		case r.i < 0:
			return 0, io.EOF
		case r.i == r.n:
			r.buf = binary.BigEndian.AppendUint64([]byte{0}, uint64(r.n))
			r.buf = append(r.buf, 0, 0, 0, 0)
			r.i = -1
		default:
			if r.i == 0 {
				r.buf = append(r.buf, snapMagic...)
			}
			k := fmt.Sprintf("%sn%08d", namedMetaPrefix, r.i)
			r.buf = binary.AppendUvarint(r.buf, uint64(len(k)))
			r.buf = append(r.buf, k...)
			r.buf = binary.AppendUvarint(r.buf, uint64(r.size))
			r.zeros = r.size
			r.i++
		}
	}
	n := copy(p, r.buf)
	r.buf = r.buf[n:]
	return n, nil
}

// A stream whose named meta values add up to far more than any state
// holds (a few small entries: addresses, key use) is refused before
// ScanStream has kept them all: `idem snapshot inspect` of a hostile 1 GB
// backup of 64 MiB named values held the whole gigabyte in memory.
func TestScanStreamNamedValuesBounded(t *testing.T) {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	_, err := ScanStream(&namedBombReader{n: 256, size: 1 << 20})
	runtime.ReadMemStats(&after)
	if !errors.Is(err, ErrSnapshot) {
		t.Fatalf("got %v, want ErrSnapshot", err)
	}
	if n := after.TotalAlloc - before.TotalAlloc; n > MaxStreamNamedBytes+16<<20 {
		t.Fatalf("256 MiB of named values made ScanStream allocate %d MiB", n>>20)
	}
}
