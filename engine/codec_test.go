package engine

import (
	"bytes"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// recordsEqual compares records field by field; responses compare with
// Response.Equal, which treats a nil and an empty header map alike.
func recordsEqual(a, b *Record) bool {
	if a == nil || b == nil {
		return a == b
	}
	x, y := *a, *b
	x.Response, y.Response = nil, nil
	return x == y && a.Response.Equal(b.Response)
}

func sampleRecords() map[string]*Record {
	return map[string]*Record{
		"in progress": {
			Scope: Scope{Principal: "alice", Endpoint: "POST /payments", Key: "k1"},
			State: StateInProgress, Fingerprint: "sha256:abc", Attempt: 1, Token: 42,
			ClaimID: "c1", CorrelationID: "corr", CreatedMs: t0, ExpiresMs: t0 + testRet, LeaseMs: t0 + testLease,
		},
		"completed": {
			Scope: Scope{Principal: "bob", Endpoint: "", Key: "k"},
			State: StateCompleted, Fingerprint: "f", Attempt: 3, Token: math.MaxUint64,
			CreatedMs: t0, ExpiresMs: t0 + testRet, CompletedMs: t0 + 9,
			Response: &Response{Status: 201, ContentType: "application/json",
				Headers: map[string]string{"Location": "/p/1", "A": "", "": "empty name"}, Body: []byte{0, 1, 0xff}},
		},
		"completed with headers sent twice": {
			Scope: Scope{Principal: "carol", Endpoint: "POST /login", Key: "k2"},
			State: StateCompleted, Attempt: 1, Token: 7, CreatedMs: t0, ExpiresMs: t0 + testRet, CompletedMs: t0 + 1,
			Response: &Response{Status: 200, Headers: map[string]string{"Location": "/s/1"},
				HeaderLists: map[string][]string{"Set-Cookie": {"a=1; Path=/", "b=2"}, "Vary": {"Accept"}, "X-Empty": {}},
				Body:        []byte("ok")},
		},
		"completed without headers or body": {
			State: StateCompleted, Attempt: 1, Token: 1, Response: &Response{Status: 204},
		},
		"failed": {
			Scope: Scope{Principal: "\x00\xff", Endpoint: "\x80", Key: string(bytes.Repeat([]byte{'k'}, 300))},
			State: StateFailed, Attempt: math.MaxUint32, Token: 0,
			CreatedMs: -1, ExpiresMs: math.MaxInt64, LeaseMs: math.MinInt64,
		},
	}
}

func TestRecordCodecRoundTrip(t *testing.T) {
	for name, r := range sampleRecords() {
		t.Run(name, func(t *testing.T) {
			enc := EncodeRecord(r)
			got, err := DecodeRecord(enc)
			require.NoError(t, err)
			require.True(t, recordsEqual(r, got), "want %+v\ngot  %+v", r, got)
			require.Equal(t, enc, EncodeRecord(got), "re-encoding is byte-identical")
		})
	}
}

// Replicas must hash identically, so equal records encode to equal bytes
// whatever the map iteration order.
func TestRecordCodecIsDeterministic(t *testing.T) {
	h := map[string]string{}
	for _, k := range []string{"z", "a", "m", "b", "y", "c", "x", "d"} {
		h[k] = k + k
	}
	r := &Record{State: StateCompleted, Response: &Response{Status: 200, Headers: h}}
	first := EncodeRecord(r)
	for range 50 {
		cp := map[string]string{}
		for k, v := range h {
			cp[k] = v
		}
		r.Response.Headers = cp
		require.Equal(t, first, EncodeRecord(r))
	}
}

func TestDecodeRecordRefusesDamage(t *testing.T) {
	good := EncodeRecord(sampleRecords()["completed"])
	noResp := EncodeRecord(&Record{State: StateFailed})
	cases := map[string][]byte{
		"empty":           {},
		"version only":    {codecVersion1},
		"wrong version":   append([]byte{codecVersion2 + 1}, good[1:]...),
		"state zero":      append([]byte{codecVersion1, 0}, good[2:]...),
		"state unknown":   append([]byte{codecVersion1, 4}, good[2:]...),
		"trailing byte":   append(append([]byte(nil), good...), 0),
		"response flag 2": append(noResp[:len(noResp)-1:len(noResp)-1], 2),
	}
	for n := 0; n < len(good); n++ {
		cases[fmt.Sprint("truncated to ", n)] = good[:n]
	}
	for name, b := range cases {
		t.Run(name, func(t *testing.T) {
			r, err := DecodeRecord(b)
			require.Error(t, err)
			require.Nil(t, r)
			require.True(t, errors.Is(err, ErrCorrupt), "want ErrCorrupt, got %v", err)
		})
	}
}

// Records written by the builds before header lists (version 1) are on
// disks and in snapshots: they must keep decoding to the same record, and a
// record without lists must still be written byte for byte as they were.
// testdata/record-v1.hex was encoded by that code.
func TestRecordCodecReadsVersion1(t *testing.T) {
	raw, err := os.ReadFile("testdata/record-v1.hex")
	require.NoError(t, err)
	enc, err := hex.DecodeString(strings.TrimSpace(string(raw)))
	require.NoError(t, err)
	want := &Record{Scope: Scope{Principal: "cus_42", Endpoint: "POST /payments", Key: "retry-1"},
		State: StateCompleted, Fingerprint: "9f86d081884c7d65", Attempt: 2, Token: 17, ClaimID: "a1b2", CorrelationID: "req-77",
		CreatedMs: 1796019298856, ExpiresMs: 1796105698856, CompletedMs: 1796019299001,
		Response: &Response{Status: 201, ContentType: "application/json",
			Headers: map[string]string{"Location": "/payments/py_1", "Set-Cookie": "a=1"}, Body: []byte(`{"id":"py_1"}`)}}
	got, err := DecodeRecord(enc)
	require.NoError(t, err)
	require.True(t, recordsEqual(want, got), "got %+v", got)
	require.Equal(t, enc, EncodeRecord(want), "a record without header lists is still written as version 1")

	want.Response.HeaderLists = map[string][]string{"Vary": {"Accept", "Cookie"}}
	v2 := EncodeRecord(want)
	require.Equal(t, byte(codecVersion2), v2[0])
	got, err = DecodeRecord(v2)
	require.NoError(t, err)
	require.True(t, recordsEqual(want, got), "got %+v", got)
}

func TestDecodeRecordRefusesDamagedHeaderLists(t *testing.T) {
	good := EncodeRecord(sampleRecords()["completed with headers sent twice"])
	for n := 0; n < len(good); n++ {
		_, err := DecodeRecord(good[:n])
		require.ErrorIs(t, err, ErrCorrupt, "truncated to %d", n)
	}
	// Version 2 without any list is never written.
	r := &Record{State: StateCompleted, Response: &Response{Status: 200}}
	enc := EncodeRecord(r)
	enc[0] = codecVersion2
	_, err := DecodeRecord(append(enc[:len(enc)-1:len(enc)-1], 0, 0))
	require.ErrorIs(t, err, ErrCorrupt)
}

func TestDecodeRecordRefusesUnsortedHeaders(t *testing.T) {
	r := &Record{State: StateCompleted, Response: &Response{Status: 200, Headers: map[string]string{"a": "1", "b": "2"}}}
	enc := EncodeRecord(r)
	i := bytes.Index(enc, []byte("\x01a\x011\x01b\x012"))
	require.Positive(t, i)
	copy(enc[i:], "\x01b\x012\x01a\x011")
	_, err := DecodeRecord(enc)
	require.ErrorIs(t, err, ErrCorrupt)
}

// The stored response must come back for every status a caller can hand
// to Complete: a record the codec writes but cannot read would make every
// replica panic on the next read of that scope.
func TestRecordCodecKeepsAnyStatus(t *testing.T) {
	for _, st := range []int{0, 100, 599, 999, 1000, 65535, -1, math.MaxInt32, math.MinInt32} {
		r := &Record{State: StateCompleted, Attempt: 1, Response: &Response{Status: st}}
		got, err := DecodeRecord(EncodeRecord(r))
		require.NoError(t, err, "status %d", st)
		require.Equal(t, st, got.Response.Status)
	}
}

// headersFrom splits raw into name/value pairs on zero bytes.
func headersFrom(raw []byte) map[string]string {
	if len(raw) == 0 {
		return nil
	}
	parts := bytes.Split(raw, []byte{0})
	h := make(map[string]string, len(parts)/2)
	for i := 0; i+1 < len(parts); i += 2 {
		h[string(parts[i])] = string(parts[i+1])
	}
	return h
}

func FuzzRecordCodec(f *testing.F) {
	for _, r := range sampleRecords() {
		f.Add(EncodeRecord(r), byte(r.State), r.Attempt, r.Token, r.CreatedMs, r.ExpiresMs, r.LeaseMs, r.CompletedMs,
			r.Principal, r.Endpoint, r.Key, r.Fingerprint, r.ClaimID, r.CorrelationID,
			r.Response != nil, 200, "text/plain", []byte("a\x00b\x00c\x00"), []byte("body"))
	}
	f.Add([]byte{}, byte(0), uint32(0), uint64(0), int64(0), int64(0), int64(0), int64(0),
		"", "", "", "", "", "", false, 0, "", []byte(nil), []byte(nil))
	f.Add([]byte{codecVersion1, 2, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01}, byte(9), uint32(math.MaxUint32),
		uint64(math.MaxUint64), int64(math.MinInt64), int64(math.MaxInt64), int64(-1), int64(1),
		"\xff", "\x00", "k", "", "", "", true, -7, "", []byte{0, 0, 0}, []byte{})
	f.Fuzz(func(t *testing.T, raw []byte, state byte, attempt uint32, token uint64, created, expires, lease, completed int64,
		principal, endpoint, key, fp, claimID, corr string, hasResp bool, status int, ctype string, hdrs, body []byte) {
		// Arbitrary bytes: decoding never panics, and what decodes
		// re-encodes to something that decodes to the same record.
		if r, err := DecodeRecord(raw); err == nil {
			again, err := DecodeRecord(EncodeRecord(r))
			if err != nil {
				t.Fatalf("re-encoded record does not decode: %v (%+v)", err, r)
			}
			if !recordsEqual(r, again) {
				t.Fatalf("re-encoded record differs:\n%+v\n%+v", r, again)
			}
		} else if !errors.Is(err, ErrCorrupt) {
			t.Fatalf("decode error is not ErrCorrupt: %v", err)
		}

		// Records built from the inputs round-trip exactly.
		r := &Record{
			Scope:       Scope{Principal: principal, Endpoint: endpoint, Key: key},
			State:       StateInProgress + State(state%3),
			Fingerprint: fp, Attempt: attempt, Token: token, ClaimID: claimID, CorrelationID: corr,
			CreatedMs: created, ExpiresMs: expires, LeaseMs: lease, CompletedMs: completed,
		}
		if hasResp {
			r.Response = &Response{Status: status, ContentType: ctype, Headers: headersFrom(hdrs), Body: body}
		}
		enc := EncodeRecord(r)
		got, err := DecodeRecord(enc)
		if err != nil {
			t.Fatalf("encoded record does not decode: %v (%+v)", err, r)
		}
		if !recordsEqual(r, got) {
			t.Fatalf("round trip differs:\n%+v\n%+v", r, got)
		}
		if !bytes.Equal(enc, EncodeRecord(got)) {
			t.Fatalf("re-encoding is not byte-identical")
		}
	})
}
