package raftfsm

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"hash/crc32"
	"reflect"
	"runtime"
	"testing"

	"github.com/idem-store/idem/engine"
)

// fuzzBackup writes a backup in WriteBackup's format around an engine
// stream of pairs, its payload split into frames of at most frame bytes.
func fuzzBackup(h BackupHeader, frame int, pairs ...[2]string) []byte {
	s := []byte("IDEMSNP1")
	for _, p := range pairs {
		s = binary.AppendUvarint(s, uint64(len(p[0])))
		s = append(s, p[0]...)
		s = binary.AppendUvarint(s, uint64(len(p[1])))
		s = append(s, p[1]...)
	}
	s = append(s, 0)
	s = binary.BigEndian.AppendUint64(s, uint64(len(pairs)))
	s = binary.BigEndian.AppendUint32(s, crc32.Checksum(s, crc32.MakeTable(crc32.Castagnoli)))
	hb, _ := json.Marshal(h)
	b := append([]byte(nil), backupMagic...)
	b = binary.BigEndian.AppendUint32(b, BackupFormat)
	b = binary.BigEndian.AppendUint32(b, uint32(len(hb)))
	b = append(b, hb...)
	for len(s) > 0 {
		n := min(frame, len(s))
		b = binary.BigEndian.AppendUint32(b, uint32(n))
		b = append(b, s[:n]...)
		s = s[n:]
	}
	b = binary.BigEndian.AppendUint32(b, 0)
	sum := sha256.Sum256(b)
	return append(b, sum[:]...)
}

// A damaged or hostile backup file is refused with ErrBackup, never a
// panic, having allocated about what the file holds (the readers' own
// buffers aside), whatever lengths it claims.
func FuzzVerifyBackup(f *testing.F) {
	h := BackupHeader{Format: BackupFormat, NodeID: "n1"}
	if _, err := VerifyBackup(bytes.NewReader(fuzzBackup(h, 3, [2]string{"a", "1"}))); err != nil {
		f.Fatalf("the seed backup does not verify: %v", err)
	}
	f.Add(fuzzBackup(h, 1<<20))
	f.Add(fuzzBackup(h, 3, [2]string{"a", "1"}, [2]string{"b", "2"}))
	f.Add(fuzzBackup(BackupHeader{Format: BackupFormat, AppliedIndex: 7}, 5, [2]string{"\x00meta/applied", "\x00\x00\x00\x00\x00\x00\x00\x07"}))
	f.Add([]byte("IDEMBACK\x00\x00\x00\x01\xff\xff\xff\xff"))
	f.Add([]byte("IDEMBACK\x00\x00\x00\x01\x00\x00\x00\x02{}\x00\x3f\xff\xff"))
	f.Fuzz(func(t *testing.T, b []byte) {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		info, err := VerifyBackup(bytes.NewReader(b))
		runtime.ReadMemStats(&after)
		if err != nil && !errors.Is(err, ErrBackup) {
			t.Fatalf("error is not ErrBackup: %v", err)
		}
		if err == nil && info.Bytes != int64(len(b)) {
			t.Fatalf("a backup of %d bytes read as %d", len(b), info.Bytes)
		}
		// Two 1 MiB read buffers (the backup's and the stream's).
		if n := after.TotalAlloc - before.TotalAlloc; n > 3<<20+8*uint64(len(b)) {
			t.Fatalf("a backup of %d bytes made VerifyBackup allocate %d bytes", len(b), n)
		}
	})
}

// decodeResponse reads back what encodeResponse writes, and refuses any
// other bytes without a panic.
func FuzzSealedResponseCodec(f *testing.F) {
	f.Add([]byte{1, 0xc8, 0x01, 0, 0}, 200, "text/plain", "X-A", "1", "X-L", "a", []byte("body"))
	f.Add([]byte{2, 0xc8, 0x01, 0, 0, 1, 1, 'x', 2, 0, 0}, 0, "", "", "", "", "", []byte(nil))
	f.Add([]byte{2, 0, 0, 0, 1, 0, 0xff, 0xff, 0xff, 0xff, 0x0f}, 999, "\xff", "\x00", "\x00", "k", "\xff", []byte{0})
	f.Fuzz(func(t *testing.T, raw []byte, status int, ctype, hk, hv, lk, lv string, body []byte) {
		if r, err := decodeResponse(raw); err == nil {
			again, err := decodeResponse(encodeResponse(r))
			if err != nil || !reflect.DeepEqual(normResponse(r), normResponse(again)) {
				t.Fatalf("%x decodes to %+v, which re-encodes to %+v, %v", raw, r, again, err)
			}
		}
		r := &engine.Response{Status: max(status%1000, -(status % 1000)), ContentType: ctype, Body: body}
		if hk != "" {
			r.Headers = map[string]string{hk: hv}
		}
		if lk != "" {
			r.HeaderLists = map[string][]string{lk: {lv, hv}}
		}
		got, err := decodeResponse(encodeResponse(r))
		if err != nil || !reflect.DeepEqual(normResponse(r), normResponse(got)) {
			t.Fatalf("%+v round-trips to %+v, %v", r, got, err)
		}
	})
}

func normResponse(r *engine.Response) engine.Response {
	c := *r
	if len(c.Headers) == 0 {
		c.Headers = nil
	}
	if len(c.HeaderLists) == 0 {
		c.HeaderLists = nil
	}
	if len(c.Body) == 0 {
		c.Body = nil
	}
	return c
}
