package engine

import (
	"encoding/binary"
	"fmt"
	"slices"
)

const codecVersion = 1

// EncodeRecord returns the binary encoding of r. The encoding is
// deterministic (headers sorted), so equal records encode to equal bytes and
// replicas hash identically.
func EncodeRecord(r *Record) []byte {
	n := 64 + len(r.Principal) + len(r.Endpoint) + len(r.Key) + len(r.Fingerprint) +
		len(r.ClaimID) + len(r.CorrelationID)
	if r.Response != nil {
		n += 16 + len(r.Response.ContentType) + len(r.Response.Body)
		for k, v := range r.Response.Headers {
			n += 4 + len(k) + len(v)
		}
	}
	b := make([]byte, 0, n)
	b = append(b, codecVersion, byte(r.State))
	b = binary.AppendUvarint(b, uint64(r.Attempt))
	b = binary.AppendUvarint(b, r.Token)
	b = binary.AppendVarint(b, r.CreatedMs)
	b = binary.AppendVarint(b, r.ExpiresMs)
	b = binary.AppendVarint(b, r.LeaseMs)
	b = binary.AppendVarint(b, r.CompletedMs)
	for _, s := range [...]string{r.Principal, r.Endpoint, r.Key, r.Fingerprint, r.ClaimID, r.CorrelationID} {
		b = appendString(b, s)
	}
	if r.Response == nil {
		return append(b, 0)
	}
	b = append(b, 1)
	b = binary.AppendUvarint(b, uint64(r.Response.Status))
	b = appendString(b, r.Response.ContentType)
	keys := make([]string, 0, len(r.Response.Headers))
	for k := range r.Response.Headers {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	b = binary.AppendUvarint(b, uint64(len(keys)))
	for _, k := range keys {
		b = appendString(b, k)
		b = appendString(b, r.Response.Headers[k])
	}
	b = binary.AppendUvarint(b, uint64(len(r.Response.Body)))
	return append(b, r.Response.Body...)
}

// DecodeRecord decodes a record encoded by EncodeRecord.
func DecodeRecord(b []byte) (*Record, error) {
	bad := func(what string) (*Record, error) { return nil, fmt.Errorf("%w: record %s", ErrCorrupt, what) }
	if len(b) < 2 || b[0] != codecVersion {
		return bad("version")
	}
	r := &Record{State: State(b[1])}
	if r.State < StateInProgress || r.State > StateFailed {
		return bad("state")
	}
	b = b[2:]
	var ok bool
	u := func() uint64 {
		v, w := binary.Uvarint(b)
		if w <= 0 {
			ok = false
			return 0
		}
		b = b[w:]
		return v
	}
	i := func() int64 {
		v, w := binary.Varint(b)
		if w <= 0 {
			ok = false
			return 0
		}
		b = b[w:]
		return v
	}
	ok = true
	att := u()
	if att > 1<<32-1 {
		return bad("attempt")
	}
	r.Attempt = uint32(att)
	r.Token = u()
	r.CreatedMs, r.ExpiresMs, r.LeaseMs, r.CompletedMs = i(), i(), i(), i()
	if !ok {
		return bad("times")
	}
	for _, dst := range [...]*string{&r.Principal, &r.Endpoint, &r.Key, &r.Fingerprint, &r.ClaimID, &r.CorrelationID} {
		if *dst, b, ok = readString(b); !ok {
			return bad("strings")
		}
	}
	if len(b) < 1 {
		return bad("response flag")
	}
	has := b[0]
	b = b[1:]
	switch has {
	case 0:
		if len(b) != 0 {
			return bad("trailing bytes")
		}
		return r, nil
	case 1:
	default:
		return bad("response flag")
	}
	resp := &Response{}
	// Any status EncodeRecord wrote must come back: a record that cannot be
	// read would panic every replica on the next read of its scope.
	st := u()
	if !ok {
		return bad("status")
	}
	resp.Status = int(st)
	if resp.ContentType, b, ok = readString(b); !ok {
		return bad("content type")
	}
	nh := u()
	if !ok || nh > uint64(len(b)) {
		return bad("headers")
	}
	if nh > 0 {
		resp.Headers = make(map[string]string, nh)
		prev := ""
		for j := uint64(0); j < nh; j++ {
			var k, v string
			if k, b, ok = readString(b); !ok {
				return bad("header name")
			}
			if v, b, ok = readString(b); !ok {
				return bad("header value")
			}
			if j > 0 && k <= prev {
				return bad("header order")
			}
			prev = k
			resp.Headers[k] = v
		}
	}
	if resp.Body, b, ok = readBytes(b); !ok {
		return bad("body")
	}
	if len(b) != 0 {
		return bad("trailing bytes")
	}
	r.Response = resp
	return r, nil
}
