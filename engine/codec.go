package engine

import (
	"encoding/binary"
	"fmt"
	"slices"
)

// Record encodings. Version 2 adds, after the headers stored as strings, the
// headers stored as arrays (uvarint n, n×(name, uvarint m, m×value), names
// sorted). A record without them is still written as version 1, byte for
// byte what earlier builds wrote, so such records, their snapshots and
// replicas running an earlier build agree; both versions decode.
const (
	codecVersion1 = 1
	codecVersion2 = 2
)

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
		for k, vs := range r.Response.HeaderLists {
			n += 4 + len(k)
			for _, v := range vs {
				n += 2 + len(v)
			}
		}
	}
	version := byte(codecVersion1)
	if r.Response != nil && len(r.Response.HeaderLists) > 0 {
		version = codecVersion2
	}
	b := make([]byte, 0, n)
	b = append(b, version, byte(r.State))
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
	if version == codecVersion2 {
		keys = keys[:0]
		for k := range r.Response.HeaderLists {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		b = binary.AppendUvarint(b, uint64(len(keys)))
		for _, k := range keys {
			b = appendString(b, k)
			vs := r.Response.HeaderLists[k]
			b = binary.AppendUvarint(b, uint64(len(vs)))
			for _, v := range vs {
				b = appendString(b, v)
			}
		}
	}
	b = binary.AppendUvarint(b, uint64(len(r.Response.Body)))
	return append(b, r.Response.Body...)
}

// DecodeRecord decodes a record encoded by EncodeRecord.
func DecodeRecord(b []byte) (*Record, error) {
	bad := func(what string) (*Record, error) { return nil, fmt.Errorf("%w: record %s", ErrCorrupt, what) }
	if len(b) < 2 || (b[0] != codecVersion1 && b[0] != codecVersion2) {
		return bad("version")
	}
	version := b[0]
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
	if version == codecVersion2 {
		nl := u()
		// Version 2 is written only with at least one list.
		if !ok || nl == 0 || nl > uint64(len(b)) {
			return bad("header lists")
		}
		resp.HeaderLists = make(map[string][]string, nl)
		prev := ""
		for j := uint64(0); j < nl; j++ {
			var k string
			if k, b, ok = readString(b); !ok {
				return bad("header list name")
			}
			if j > 0 && k <= prev {
				return bad("header list order")
			}
			prev = k
			m := u()
			if !ok || m > uint64(len(b)) {
				return bad("header list")
			}
			vs := make([]string, m)
			for x := range vs {
				if vs[x], b, ok = readString(b); !ok {
					return bad("header list value")
				}
			}
			resp.HeaderLists[k] = vs
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
