package api

import (
	"net/http"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/idem-store/idem/wire"
)

// The claim is the hot route: a node under load spent about a sixth of its
// CPU decoding claims with encoding/json (reflection, then checkRaw's
// second pass) and encoding the 201 answer (a MarshalJSON that marshals a
// second struct, then the encoder's compaction of it). The two functions
// below do the common case by hand and give up on anything else, which
// then takes the general path: they never accept what decodeStrict would
// refuse, nor answer differently from writeJSON (fastjson_test.go holds
// both to that over many inputs).

// decodeClaim decodes a claim's body: by fastClaim when it can, else
// strictly (decodeStrict), which names what is wrong.
func decodeClaim(body []byte, dst *claimRequest) *problem {
	if fastClaim(body, dst) {
		return nil
	}
	*dst = claimRequest{}
	return decodeStrict(body, dst)
}

// fastClaim decodes body into dst when it is the common claim: one flat
// JSON object whose members are claimRequest's exact names, each at most
// once, string values without escapes, control characters or invalid
// UTF-8, and lease_ms an integer. It reports false, leaving dst in any
// state, for every other body.
func fastClaim(body []byte, dst *claimRequest) bool {
	s := fastScanner{rawScanner{b: body}}
	s.space()
	if !s.byte('{') {
		return false
	}
	var seen uint8
	s.space()
	if s.byte('}') {
		return s.end()
	}
	for {
		s.space()
		name, ok := s.plainString()
		if !ok {
			return false
		}
		s.space()
		if !s.byte(':') {
			return false
		}
		s.space()
		var bit uint8
		var dstStr *string
		switch string(name) {
		case "principal":
			bit, dstStr = 1, &dst.Principal
		case "endpoint":
			bit, dstStr = 2, &dst.Endpoint
		case "key":
			bit, dstStr = 4, &dst.Key
		case "fingerprint":
			bit, dstStr = 8, &dst.Fingerprint
		case "claim_id":
			bit, dstStr = 16, &dst.ClaimID
		case "correlation_id":
			bit, dstStr = 32, &dst.CorrelationID
		case "lease_ms":
			bit = 64
		default:
			return false // unknown, or a case-insensitive match: decodeStrict says which
		}
		if seen&bit != 0 {
			return false // given twice
		}
		seen |= bit
		if dstStr != nil {
			v, ok := s.plainString()
			if !ok {
				return false
			}
			*dstStr = string(v)
		} else {
			n, ok := s.integer()
			if !ok {
				return false
			}
			dst.LeaseMs = &n
		}
		s.space()
		if s.byte(',') {
			continue
		}
		if s.byte('}') {
			return s.end()
		}
		return false
	}
}

// fastScanner reads the JSON fastClaim accepts (white space as
// rawScanner skips it).
type fastScanner struct{ rawScanner }

func (s *fastScanner) byte(c byte) bool {
	if s.i < len(s.b) && s.b[s.i] == c {
		s.i++
		return true
	}
	return false
}

// end reports whether only white space follows.
func (s *fastScanner) end() bool {
	s.space()
	return s.i == len(s.b)
}

// plainString reads a string without escapes or control characters and
// returns its contents, which are valid UTF-8.
func (s *fastScanner) plainString() ([]byte, bool) {
	if !s.byte('"') {
		return nil, false
	}
	start := s.i
	ascii := true
	for s.i < len(s.b) {
		c := s.b[s.i]
		switch {
		case c == '"':
			v := s.b[start:s.i]
			s.i++
			if !ascii && !utf8.Valid(v) {
				return nil, false
			}
			return v, true
		case c == '\\' || c < 0x20:
			return nil, false
		case c >= 0x80:
			ascii = false
		}
		s.i++
	}
	return nil, false
}

// integer reads a JSON number that is an integer of at most 18 digits (so
// it fits an int64): -?(0|[1-9][0-9]*), with no fraction or exponent.
func (s *fastScanner) integer() (int64, bool) {
	start := s.i
	s.byte('-')
	digits := s.i
	for s.i < len(s.b) && s.b[s.i] >= '0' && s.b[s.i] <= '9' {
		s.i++
	}
	n := s.i - digits
	if n == 0 || n > 18 || (n > 1 && s.b[digits] == '0') {
		return 0, false
	}
	if s.i < len(s.b) {
		switch s.b[s.i] {
		case '.', 'e', 'E':
			return 0, false
		}
	}
	v, err := strconv.ParseInt(string(s.b[start:s.i]), 10, 64)
	return v, err == nil
}

// writeClaimedJSON writes the 201 answer of a claim exactly as
// writeJSON(w, 201, c) would, when c carries no record and its strings
// need no escaping; it reports false, having written nothing, otherwise.
func writeClaimedJSON(w http.ResponseWriter, c *wire.ClaimResponse) bool {
	if c.Record != nil || c.Outcome == "" || c.Token == "" || c.Attempt == 0 ||
		c.CreatedAt.IsZero() || c.ExpiresAt.IsZero() || c.LeaseExpiresAt.IsZero() ||
		!plainASCII(c.Outcome) || !plainASCII(c.Token) {
		return false
	}
	b := make([]byte, 0, 192)
	b = append(b, `{"outcome":"`...)
	b = append(b, c.Outcome...)
	b = append(b, `","token":"`...)
	b = append(b, c.Token...)
	b = append(b, `","attempt":`...)
	b = strconv.AppendInt(b, int64(c.Attempt), 10)
	b = append(b, `,"created_at":"`...)
	b = appendTime(b, c.CreatedAt)
	b = append(b, `","expires_at":"`...)
	b = appendTime(b, c.ExpiresAt)
	b = append(b, `","lease_expires_at":"`...)
	b = appendTime(b, c.LeaseExpiresAt)
	b = append(b, "\"}\n"...)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusCreated)
	w.Write(b)
	return true
}

// appendTime appends t as AppendFormat(b, wire.TimeLayout) of t.UTC()
// does (2006-01-02T15:04:05.000Z): three per claim answer, and the layout
// walk of AppendFormat was a twentieth of a node's CPU under load. Years
// outside 0000-9999 take AppendFormat.
func appendTime(b []byte, t time.Time) []byte {
	t = t.UTC()
	year, month, day := t.Date()
	if year < 0 || year > 9999 {
		return t.AppendFormat(b, wire.TimeLayout)
	}
	hour, min, sec := t.Clock()
	ms := t.Nanosecond() / int(time.Millisecond)
	b = append(b, byte('0'+year/1000), byte('0'+year/100%10), byte('0'+year/10%10), byte('0'+year%10), '-',
		byte('0'+int(month)/10), byte('0'+int(month)%10), '-', byte('0'+day/10), byte('0'+day%10), 'T',
		byte('0'+hour/10), byte('0'+hour%10), ':', byte('0'+min/10), byte('0'+min%10), ':',
		byte('0'+sec/10), byte('0'+sec%10), '.', byte('0'+ms/100), byte('0'+ms/10%10), byte('0'+ms%10), 'Z')
	return b
}

// plainASCII reports whether s is printable ASCII that JSON writes as it
// is, HTML escaping or not (<, > and & are left to writeJSON).
func plainASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < 0x20 || c > 0x7e || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			return false
		}
	}
	return true
}
