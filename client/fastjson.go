package client

import (
	"bytes"
	"encoding/json"
	"strconv"
	"time"

	"github.com/idem-store/idem/wire"
)

// fastClaimed decodes the answer a server gives a won claim, in the exact
// form it writes it (`{"outcome":"claimed","token":"…","attempt":N,
// "created_at":"…","expires_at":"…","lease_expires_at":"…"}`), without
// encoding/json's reflection: under batched load, decoding the answers was
// a quarter of a client's CPU. It reports false for any other text, which
// json.Unmarshal then decodes; what it accepts, json.Unmarshal decodes to
// the same value (fastjson_test.go).
func fastClaimed(raw []byte, out *ClaimResponse) bool {
	b := bytes.TrimRight(raw, " \t\r\n")
	var ok bool
	if b, ok = bytes.CutPrefix(b, []byte(`{"outcome":"claimed","token":"`)); !ok {
		return false
	}
	token, b, ok := cutPlain(b, `","attempt":`)
	if !ok {
		return false
	}
	attempt, b, ok := cutInt(b)
	if !ok || attempt < 1 {
		return false
	}
	var times [3]time.Time
	for k, name := range []string{`,"created_at":"`, `","expires_at":"`, `","lease_expires_at":"`} {
		if b, ok = bytes.CutPrefix(b, []byte(name)); !ok {
			return false
		}
		j := bytes.IndexByte(b, '"')
		if j < 0 {
			return false
		}
		t, ok := parseStamp(b[:j])
		if !ok {
			return false
		}
		times[k] = t
		b = b[j:]
	}
	if string(b) != `"}` {
		return false
	}
	*out = ClaimResponse{Outcome: OutcomeClaimed, Token: token, Attempt: attempt,
		CreatedAt: times[0], ExpiresAt: times[1], LeaseExpiresAt: times[2]}
	return true
}

// parseStamp reads a time in the layout a server writes (wire.TimeLayout,
// 2006-01-02T15:04:05.000Z) as time.Parse(time.RFC3339, …) would, without
// its layout walk: three per claim answer. Any other text, or a date that
// does not exist, takes time.Parse.
func parseStamp(b []byte) (time.Time, bool) {
	if len(b) != 24 || b[4] != '-' || b[7] != '-' || b[10] != 'T' || b[13] != ':' || b[16] != ':' || b[19] != '.' || b[23] != 'Z' {
		return parseRFC3339(b)
	}
	num := func(i, n int) int {
		v := 0
		for _, c := range b[i : i+n] {
			if c < '0' || c > '9' {
				return -1
			}
			v = v*10 + int(c-'0')
		}
		return v
	}
	y, mo, d, h, mi, sec, ms := num(0, 4), num(5, 2), num(8, 2), num(11, 2), num(14, 2), num(17, 2), num(20, 3)
	if y < 0 || mo < 1 || mo > 12 || d < 1 || h < 0 || h > 23 || mi < 0 || mi > 59 || sec < 0 || sec > 59 || ms < 0 {
		return parseRFC3339(b)
	}
	t := time.Date(y, time.Month(mo), d, h, mi, sec, ms*int(time.Millisecond), time.UTC)
	if t.Day() != d { // 2026-02-30: time.Date moves it on; time.Parse refuses it
		return parseRFC3339(b)
	}
	return t, true
}

func parseRFC3339(b []byte) (time.Time, bool) {
	t, err := time.Parse(time.RFC3339, string(b))
	return t, err == nil
}

// cutPlain returns the text before sep, if it is printable ASCII without
// a quote or backslash (so JSON holds it unescaped), and the rest from sep.
func cutPlain(b []byte, sep string) (string, []byte, bool) {
	i := bytes.Index(b, []byte(sep))
	if i < 1 {
		return "", nil, false
	}
	for _, c := range b[:i] {
		if c < 0x20 || c > 0x7e || c == '"' || c == '\\' {
			return "", nil, false
		}
	}
	return string(b[:i]), b[i+len(sep):], true
}

// fastBatchResults splits the answer to POST /v1/batch in the exact form a
// server writes it (`{"results":[{"status":N,"body":…},…]}`, an op's
// "retry_after" after its body) without encoding/json's reflection, which
// was a seventh of a batching client's CPU. It reports false for any
// other text, which json.Unmarshal then decodes; what it takes,
// json.Unmarshal decodes to the same results (fastjson_test.go). The
// bodies are slices of raw.
func fastBatchResults(raw []byte) ([]wire.BatchResult, bool) {
	// Valid JSON first: the walk below then only has to find where each
	// body ends, and a body is taken as json.Unmarshal would take it.
	if !json.Valid(raw) {
		return nil, false
	}
	return splitBatchResults(raw)
}

// splitBatchResults is fastBatchResults without the check that raw is
// valid JSON: of valid JSON it takes what fastBatchResults takes, and
// splits it the same way; of any other text its results mean nothing.
func splitBatchResults(raw []byte) ([]wire.BatchResult, bool) {
	b := bytes.TrimRight(raw, " \t\r\n")
	var ok bool
	if b, ok = bytes.CutPrefix(b, []byte(`{"results":[`)); !ok {
		return nil, false
	}
	if b, ok = bytes.CutSuffix(b, []byte(`]}`)); !ok {
		return nil, false
	}
	var out []wire.BatchResult
	for len(b) > 0 {
		if len(out) > 0 {
			if b, ok = bytes.CutPrefix(b, []byte(`,`)); !ok {
				return nil, false
			}
		}
		var r wire.BatchResult
		if b, ok = bytes.CutPrefix(b, []byte(`{"status":`)); !ok {
			return nil, false
		}
		if r.Status, b, ok = cutInt(b); !ok {
			return nil, false
		}
		if b, ok = bytes.CutPrefix(b, []byte(`,"body":`)); !ok || len(b) == 0 || b[0] <= ' ' {
			return nil, false
		}
		n := wire.ValueEnd(b)
		if n <= 0 {
			return nil, false
		}
		r.Body = json.RawMessage(bytes.TrimRight(b[:n], " \t\r\n"))
		b = b[n:]
		if rest, ok := bytes.CutPrefix(b, []byte(`,"retry_after":`)); ok {
			if r.RetryAfter, b, ok = cutInt(rest); !ok {
				return nil, false
			}
		}
		if b, ok = bytes.CutPrefix(b, []byte(`}`)); !ok {
			return nil, false
		}
		out = append(out, r)
	}
	return out, len(out) > 0
}

// cutInt reads the decimal integer b starts with (no sign, no leading
// zero, at most 9 digits, as the server writes them).
func cutInt(b []byte) (int, []byte, bool) {
	i := 0
	for i < len(b) && i < 10 && b[i] >= '0' && b[i] <= '9' {
		i++
	}
	if i == 0 || i > 9 || (i > 1 && b[0] == '0') {
		return 0, nil, false
	}
	n, err := strconv.Atoi(string(b[:i]))
	return n, b[i:], err == nil
}
