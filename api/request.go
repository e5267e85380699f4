package api

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/idem-store/idem/engine"
	"github.com/idem-store/idem/internal/editdist"
	"github.com/idem-store/idem/wire"
)

// The bodies are wire's, the one definition the client shares. claim and
// extend decode lease_ms as a pointer, so an explicit 0 or null is refused
// rather than taken for "absent"; complete decodes response as a pointer, so
// a missing one is named. The outer field wins over the embedded one.
type claimRequest struct {
	wire.ClaimRequest
	LeaseMs *int64 `json:"lease_ms"`
}

// encoding/json decodes null into a pointer as if the member were absent:
// the pointer alone cannot tell "lease_ms":null from no lease_ms, and a
// claim took null for its default lease. decodeStrict asks the body.
func (r *claimRequest) refuseNull(body []byte) *problem  { return nullLease(body, r.LeaseMs) }
func (r *extendRequest) refuseNull(body []byte) *problem { return nullLease(body, r.LeaseMs) }

type responseBody = wire.Response

type completeRequest struct {
	wire.CompleteRequest
	Response *responseBody `json:"response"`
}

type releaseRequest = wire.ReleaseRequest

type extendRequest struct {
	wire.ExtendRequest
	LeaseMs *int64 `json:"lease_ms"`
}

// readJSON reads the request body within the limit and decodes it strictly
// into dst. The raw body is returned for forwarding to the leader.
func (s *Server) readJSON(w http.ResponseWriter, r *http.Request, dst any) ([]byte, *problem) {
	body, p := s.readBody(w, r)
	if p == nil {
		p = decodeStrict(body, dst)
	}
	return body, p
}

// readBody reads the whole request body within the limit. A body whose
// declared Content-Length is already over it is refused unread, at once:
// read, it would hold the request (and its --max-inflight slot) until the
// whole limit arrived or --body-read-timeout ran out.
func (s *Server) readBody(w http.ResponseWriter, r *http.Request) ([]byte, *problem) {
	if ce := r.Header.Get("Content-Encoding"); ce != "" && !strings.EqualFold(ce, "identity") {
		// The body would be read as JSON and refused as "not valid JSON",
		// which sends its author looking in the wrong place.
		return nil, invalid("Content-Encoding %q is not supported: send the request body as plain JSON", truncate(ce, 40))
	}
	if rb, ok := r.Body.(*readBytes); ok {
		return rb.b, nil // read already (principalOf), within the limit
	}
	max := s.cfg.Limits.MaxRequestBytes
	if r.ContentLength > max {
		dropBody(w, r)
		return nil, requestTooLarge(max)
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, max))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return nil, requestTooLarge(mbe.Limit)
		}
		return nil, invalid("request body could not be read: %v", err)
	}
	return body, nil
}

// readBytes is a body read already (by the auth guard, for the principal
// it names) and put back for the handler: readBody gives the handler the
// same bytes rather than a second copy, which held every body of an app
// token twice while it ran.
type readBytes struct {
	*bytes.Reader
	b []byte
}

func (*readBytes) Close() error { return nil }

// requestTooLarge is the answer to a body over --max-request-bytes.
func requestTooLarge(limit int64) *problem {
	return newProblem(http.StatusRequestEntityTooLarge, codeRequestTooLarge,
		fmt.Sprintf("request body is larger than %d bytes", limit))
}

// decodeStrict decodes exactly one JSON object with no unknown fields and
// names the offending field in its error.
func decodeStrict(body []byte, dst any) *problem {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(dst); err != nil {
		var se *json.SyntaxError
		var te *json.UnmarshalTypeError
		var be base64.CorruptInputError
		switch {
		case errors.Is(err, io.EOF):
			return invalid("request body is empty; expected a JSON object")
		case errors.As(err, &se), errors.Is(err, io.ErrUnexpectedEOF):
			return invalid("request body is not valid JSON: %v", err)
		case errors.As(err, &te):
			if te.Field == "" {
				return invalid("request body must be a JSON object, not %s", te.Value)
			}
			kind := jsonKind(te.Type.Kind().String())
			if n, ok := strings.CutPrefix(te.Value, "number "); ok && kind == "an integer" && !strings.ContainsAny(n, ".eE") {
				// An integer, too large for the field (or negative for an unsigned one).
				return invalid("field %q is out of range: %s", memberPath(reflect.TypeOf(dst), te.Field), n)
			}
			return invalid("field %q must be %s, not %s", memberPath(reflect.TypeOf(dst), te.Field), kind, te.Value)
		case errors.As(err, &be):
			// The only []byte field of any request is response.body.
			return invalid("field \"response.body\" must be standard base64 (%v)", err)
		case strings.HasPrefix(err.Error(), "json: unknown field "):
			name := strings.TrimPrefix(err.Error(), "json: unknown field ")
			return invalid("unknown field %s%s", name, didYouMean(body, reflect.TypeOf(dst), name))
		case strings.HasPrefix(err.Error(), "wire: response."):
			// wire.Response's own decoding, which names the member.
			return invalid("%s", strings.TrimPrefix(err.Error(), "wire: "))
		default:
			return invalid("request body is not valid: %v", err)
		}
	}
	if p := notObject(body); p != nil {
		return p
	}
	if dec.More() {
		return invalid("request body has data after the JSON object")
	}
	if _, err := dec.Token(); err != io.EOF {
		return invalid("request body has data after the JSON object")
	}
	if p := checkRaw(body, reflect.TypeOf(dst)); p != nil {
		return p
	}
	if n, ok := dst.(interface{ refuseNull([]byte) *problem }); ok {
		return n.refuseNull(body)
	}
	return nil
}

// nullLease refuses "lease_ms":null (v is nil for it as for an absent
// member), in claim and extend alike. body is one JSON object already
// accepted by decodeStrict, whose member names checkRaw holds exact; it is
// only looked at when v is nil. A json.RawMessage keeps the null a *int64
// drops.
func nullLease(body []byte, v *int64) *problem {
	if v != nil {
		return nil
	}
	var m struct {
		LeaseMs json.RawMessage `json:"lease_ms"`
	}
	if json.Unmarshal(body, &m) == nil && string(m.LeaseMs) == "null" {
		return invalid(`field "lease_ms" must be an integer, not null`)
	}
	return nil
}

// notObject refuses a body that decoded into a struct without error but is
// not a JSON object: null (any other value is a type error), which
// encoding/json decodes as nothing at all, so it read as a request with
// every member missing.
func notObject(body []byte) *problem {
	if b := bytes.TrimLeft(body, " \t\r\n"); len(b) > 0 && b[0] != '{' {
		return invalid("request body must be a JSON object, not null")
	}
	return nil
}

// memberPath turns the path encoding/json gives for a type error into the
// members a client sent. encoding/json names an embedded struct by its Go
// type ("ClaimRequest.principal" for claimRequest's embedded
// wire.ClaimRequest), which is no member of any body: those parts are
// dropped.
func memberPath(t reflect.Type, field string) string {
	var out []string
	for part := range strings.SplitSeq(field, ".") {
		for t != nil && (t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice || t.Kind() == reflect.Array) {
			t = t.Elem()
		}
		switch {
		case t != nil && t.Kind() == reflect.Struct:
			if f, ok := t.FieldByName(part); ok && f.Anonymous && f.Tag.Get("json") == "" {
				t = f.Type
				continue
			}
			t = fieldsOf(t)[part] // nil when unknown: the rest is kept as it is
		case t != nil && t.Kind() == reflect.Map:
			t = t.Elem()
		}
		out = append(out, part)
	}
	return strings.Join(out, ".")
}

// checkRaw refuses what encoding/json accepts silently: member names that
// match a field only case-insensitively, a member given twice (the last one
// wins), and strings with invalid UTF-8 or unpaired surrogate escapes (both
// become U+FFFD, so "cus\xff" and "cus\xfe" would be one principal). Any of
// these lets two different requests, or two tenants, collapse into one.
// body is known to hold exactly one valid JSON value of dst's shape.
//
// It is a byte scanner rather than a walk of json.Decoder tokens: the token
// walk was a tenth of a node's CPU under load. The walk is kept in the tests
// as the oracle this scanner must agree with.
func checkRaw(body []byte, dst reflect.Type) *problem {
	sc := rawScanner{b: body}
	return sc.value(dst, "")
}

// rawScanner walks JSON text already accepted by encoding/json.
type rawScanner struct {
	b []byte
	i int
	// unknownKey is the member name it stopped at as unknown, and
	// unknownIn the members its object may have (didYouMean).
	unknownKey string
	unknownIn  map[string]reflect.Type
}

// didYouMean is what an unknown-field detail adds for the member
// encoding/json named (quoted, as its error does): the known name of the
// same object nearest to it, as " (did you mean "lease_ms"?)", or "".
// encoding/json names neither the object nor its members, so the scanner
// finds the member: its walk stops at the first member it does not know,
// the one encoding/json stopped at unless an earlier one differs from a
// known name only in case (encoding/json takes that one), when nothing
// is suggested. Only on a refused body: a walk of it costs what checkRaw
// does on every accepted one.
func didYouMean(body []byte, dst reflect.Type, quoted string) string {
	sc := rawScanner{b: body}
	sc.value(dst, "")
	if sc.unknownIn == nil || strconv.Quote(sc.unknownKey) != quoted {
		return ""
	}
	if f := nearestField(sc.unknownKey, sc.unknownIn); f != "" {
		return fmt.Sprintf(" (did you mean %q?)", f)
	}
	return ""
}

// unknownField is the detail for member k, at path sub, of an object
// whose members are fields: a name that is one of them but for case is
// refused too (encoding/json would take it, and two spellings of one
// request must not be two requests).
func unknownField(sub, k string, fields map[string]reflect.Type) *problem {
	switch f := nearestField(k, fields); {
	case f == "":
		return invalid("unknown field %q (names are case-sensitive)", sub)
	case strings.EqualFold(f, k):
		return invalid("unknown field %q (names are case-sensitive; did you mean %q?)", sub, f)
	default:
		return invalid("unknown field %q (did you mean %q?)", sub, f)
	}
}

// nearestField is the known member name an unknown name k most likely
// meant, "" when none is near: one that differs from it only in case;
// else the nearest within two edits (insertions, deletions,
// substitutions; fewer edits than k has bytes, so that a one-letter name
// is not "near" every short one); else k with its unit, the suffix
// "_ms" or "_seconds" (`lease` for `lease_ms`, three edits). Ties go to
// the first name in order.
func nearestField(k string, fields map[string]reflect.Type) string {
	best, bestD := "", 3
	for _, f := range slices.Sorted(maps.Keys(fields)) {
		if strings.EqualFold(k, f) {
			return f
		}
		if d := editdist.Distance(k, f, 2); d < bestD && d < len(k) {
			best, bestD = f, d
		}
	}
	if best != "" {
		return best
	}
	for _, unit := range []string{"_ms", "_seconds"} {
		if _, ok := fields[k+unit]; ok {
			return k + unit
		}
	}
	return ""
}

func notJSON() *problem { return invalid("request body is not valid JSON") }

func (s *rawScanner) space() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

// str consumes the string at s.i and returns its raw text, quotes included.
func (s *rawScanner) str() ([]byte, bool) {
	start := s.i
	if s.i >= len(s.b) || s.b[s.i] != '"' {
		return nil, false
	}
	for s.i++; s.i < len(s.b); s.i++ {
		switch s.b[s.i] {
		case '\\':
			s.i++
		case '"':
			s.i++
			return s.b[start:s.i], true
		}
	}
	return nil, false
}

// maxPathBytes bounds the member path an error message names.
const maxPathBytes = 200

// memberSet holds the member names of one object seen so far: a slice for
// the handful a request has, a map once there are more (a slice alone
// made an object of many members quadratic: 36 s for a 1 MiB body).
type memberSet struct {
	list  []string
	index map[string]struct{}
	// probes counts the names compared or looked up, for the test that
	// holds the work to linear.
	probes int
}

const memberSetList = 16

// add records k and reports whether it was new.
func (m *memberSet) add(k string) bool {
	if m.index != nil {
		m.probes++
		if _, ok := m.index[k]; ok {
			return false
		}
		m.index[k] = struct{}{}
		return true
	}
	m.probes += len(m.list)
	if slices.Contains(m.list, k) {
		return false
	}
	if len(m.list) < memberSetList {
		m.list = append(m.list, k)
		return true
	}
	m.index = make(map[string]struct{}, 2*memberSetList)
	for _, n := range m.list {
		m.index[n] = struct{}{}
	}
	m.index[k] = struct{}{}
	m.list = nil
	return true
}

// fieldTypes maps a struct's JSON member names to their types, per type.
var fieldTypes sync.Map // reflect.Type -> map[string]reflect.Type

func fieldsOf(t reflect.Type) map[string]reflect.Type {
	if v, ok := fieldTypes.Load(t); ok {
		return v.(map[string]reflect.Type)
	}
	fields := map[string]reflect.Type{}
	// Members of an embedded struct first, so the outer struct's own
	// fields win as they do in encoding/json.
	for i := 0; i < t.NumField(); i++ {
		if f := t.Field(i); f.Anonymous && f.Tag.Get("json") == "" && f.Type.Kind() == reflect.Struct {
			maps.Copy(fields, fieldsOf(f.Type))
		}
	}
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		if n, _, _ := strings.Cut(f.Tag.Get("json"), ","); n != "" && n != "-" {
			fields[n] = f.Type
		}
	}
	fieldTypes.Store(t, fields)
	return fields
}

// rawMessageType is a member whose reader decodes (and checks) it later:
// a batch's ops, each read by its own route's decoding.
var rawMessageType = reflect.TypeFor[json.RawMessage]()

func (s *rawScanner) value(t reflect.Type, path string) *problem {
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t == rawMessageType {
		if !s.skip() {
			return notJSON()
		}
		return nil
	}
	name := func(p string) string {
		if p == "" {
			return "request body"
		}
		return fmt.Sprintf("field %q", p)
	}
	s.space()
	if s.i >= len(s.b) {
		return notJSON()
	}
	switch s.b[s.i] {
	case '"':
		raw, ok := s.str()
		if !ok {
			return notJSON()
		}
		if !cleanString(raw) {
			return invalid("%s must be valid UTF-8 without unpaired surrogates", name(path))
		}
		return nil
	case '[':
		var elem reflect.Type
		if t != nil && (t.Kind() == reflect.Slice || t.Kind() == reflect.Array) {
			elem = t.Elem()
		}
		s.i++
		for {
			s.space()
			if s.i >= len(s.b) {
				return notJSON()
			}
			if s.b[s.i] == ']' {
				s.i++
				return nil
			}
			if s.b[s.i] == ',' {
				s.i++
			}
			if p := s.value(elem, path); p != nil {
				return p
			}
		}
	case '{':
		var fields map[string]reflect.Type
		if t != nil && t.Kind() == reflect.Struct {
			fields = fieldsOf(t)
		}
		var seen memberSet
		s.i++
		for {
			s.space()
			if s.i >= len(s.b) {
				return notJSON()
			}
			if s.b[s.i] == '}' {
				s.i++
				return nil
			}
			if s.b[s.i] == ',' {
				s.i++
				s.space()
			}
			raw, ok := s.str()
			if !ok {
				return notJSON()
			}
			if !cleanString(raw) {
				return invalid("a member name in %s is not valid UTF-8", name(path))
			}
			k := string(raw[1 : len(raw)-1])
			if bytes.IndexByte(raw, '\\') >= 0 {
				if json.Unmarshal(raw, &k) != nil {
					return notJSON()
				}
			}
			s.space()
			if s.i >= len(s.b) || s.b[s.i] != ':' {
				return notJSON()
			}
			s.i++
			sub := k
			if path != "" {
				sub = path + "." + k
			}
			// Kept for messages only, and bounded: each level of nesting
			// held its whole path, so deep input was quadratic in memory.
			sub = truncate(sub, maxPathBytes)
			if !seen.add(k) {
				return invalid("%s has the member %q more than once", name(path), truncate(k, maxPathBytes))
			}
			var vt reflect.Type
			switch {
			case fields != nil:
				ft, ok := fields[k]
				if !ok {
					s.unknownKey, s.unknownIn = k, fields
					return unknownField(sub, k, fields)
				}
				vt = ft
			case t != nil && t.Kind() == reflect.Map:
				vt, sub = t.Elem(), path
			}
			if p := s.value(vt, sub); p != nil {
				return p
			}
		}
	default: // a number, true, false or null
		s.scalar()
		return nil
	}
}

// member is one member of an object read by rawScanner.next: its raw
// name (quotes included), where it begins (at the ',' before it, or just
// after the '{') and where its value begins; the value ends at the
// scanner's position.
type member struct {
	name       []byte
	start, val int
}

// open consumes the '{' that begins an object; next then reads its
// members.
func (s *rawScanner) open() bool {
	s.space()
	if s.i >= len(s.b) || s.b[s.i] != '{' {
		return false
	}
	s.i++
	return true
}

// next reads the next member of the object open consumed the '{' of, in
// text already accepted as JSON. done is true at the object's '}' (which
// it consumes); ok is false when the text breaks off, which valid JSON
// never does.
func (s *rawScanner) next() (m member, done, ok bool) {
	m.start = s.i
	s.space()
	if s.i >= len(s.b) {
		return m, false, false
	}
	if s.b[s.i] == '}' {
		s.i++
		return m, true, true
	}
	if s.b[s.i] == ',' {
		s.i++
		s.space()
	}
	if m.name, ok = s.str(); !ok {
		return m, false, false
	}
	s.space()
	if s.i >= len(s.b) || s.b[s.i] != ':' {
		return m, false, false
	}
	s.i++
	s.space()
	m.val = s.i
	if !s.skip() || s.i == m.val {
		return m, false, false
	}
	return m, false, true
}

// skip consumes one JSON value without checking what it holds.
func (s *rawScanner) skip() bool {
	s.space()
	if s.i >= len(s.b) {
		return false
	}
	switch s.b[s.i] {
	case '"':
		_, ok := s.str()
		return ok
	case '{', '[':
		depth := 0
		for s.i < len(s.b) {
			switch s.b[s.i] {
			case '"':
				if _, ok := s.str(); !ok {
					return false
				}
				continue
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					s.i++
					return true
				}
			}
			s.i++
		}
		return false
	default: // a number, true, false or null
		s.scalar()
		return true
	}
}

// scalar consumes a number, true, false or null: up to the next separator.
func (s *rawScanner) scalar() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ',', '}', ']', ' ', '\t', '\n', '\r':
			return
		}
		s.i++
	}
}

// cleanString reports whether raw JSON text (a string token with the
// separators before it) is valid UTF-8 and every \u escape of a surrogate
// is part of a pair.
func cleanString(raw []byte) bool {
	if !utf8.Valid(raw) {
		return false
	}
	for i := 0; i < len(raw); i++ {
		if raw[i] != '\\' {
			continue
		}
		i++
		if i >= len(raw) || raw[i] != 'u' || i+4 >= len(raw) {
			continue
		}
		r, err := strconv.ParseUint(string(raw[i+1:i+5]), 16, 16)
		if err != nil || r < 0xd800 || r > 0xdfff {
			i += 4
			continue
		}
		if r >= 0xdc00 || i+10 >= len(raw) || raw[i+5] != '\\' || raw[i+6] != 'u' {
			return false
		}
		lo, err := strconv.ParseUint(string(raw[i+7:i+11]), 16, 16)
		if err != nil || lo < 0xdc00 || lo > 0xdfff {
			return false
		}
		i += 10
	}
	return true
}

func jsonKind(k string) string {
	switch k {
	case "string":
		return "a string"
	case "int", "int64", "int32", "uint64", "uint32":
		return "an integer"
	case "map", "struct", "ptr":
		return "an object"
	case "slice":
		return "a base64 string"
	}
	return k
}

func invalid(format string, args ...any) *problem {
	return newProblem(http.StatusBadRequest, codeInvalid, fmt.Sprintf(format, args...))
}

// MaxScopeBytesLimit is the most --max-scope-bytes can be (idem serve
// lowers a larger value to it): GET /v1/records carries principal,
// endpoint and key in its URL, which a node reads with the request's
// headers, at most 1 MiB.
const MaxScopeBytesLimit = 64 << 10

// scope validates the three parts of a scope against --max-scope-bytes.
func (s *Server) scope(principal, endpoint, key string) (engine.Scope, *problem) {
	return scopeUpTo(principal, endpoint, key, s.cfg.Limits.MaxScopeBytes)
}

// storedScope validates the scope of a request that acts on a record
// already stored (a read, a delete, a complete, release or extend with its
// token) against MaxScopeBytesLimit, not --max-scope-bytes: a record
// stored before the limit was lowered, or by a leader with a higher one,
// was answered 400 to its every retry (a walk of mixed settings), and such
// a request stores no new scope: without a record it finds nothing.
func (s *Server) storedScope(principal, endpoint, key string) (engine.Scope, *problem) {
	return scopeUpTo(principal, endpoint, key, max(s.cfg.Limits.MaxScopeBytes, MaxScopeBytesLimit))
}

// scopeUpTo validates the three parts of a scope, each 1 to max bytes.
func scopeUpTo(principal, endpoint, key string, max int) (engine.Scope, *problem) {
	if p := checkText("principal", principal, max); p != nil {
		return engine.Scope{}, p
	}
	if p := checkText("endpoint", endpoint, max); p != nil {
		return engine.Scope{}, p
	}
	if len(key) < 1 || len(key) > max {
		return engine.Scope{}, invalid("key must be 1 to %d bytes (got %d)", max, len(key))
	}
	for i := 0; i < len(key); i++ {
		if key[i] < 0x20 || key[i] > 0x7e {
			return engine.Scope{}, invalid("key must be printable ASCII (0x20-0x7E); byte %d is 0x%02x", i, key[i])
		}
	}
	return engine.Scope{Principal: principal, Endpoint: endpoint, Key: key}, nil
}

// checkText: 1..max bytes of UTF-8 without control characters.
func checkText(field, v string, max int) *problem {
	if len(v) < 1 || len(v) > max {
		return invalid("%s must be 1 to %d bytes (got %d)", field, max, len(v))
	}
	if !utf8.ValidString(v) {
		return invalid("%s must be valid UTF-8", field)
	}
	for _, r := range v {
		if r < 0x20 || (r >= 0x7f && r < 0xa0) {
			return invalid("%s must not contain control characters", field)
		}
	}
	return nil
}

func (s *Server) checkID(field, v string) *problem {
	if len(v) > s.cfg.Limits.MaxIDBytes {
		return invalid("%s must be at most %d bytes (got %d)", field, s.cfg.Limits.MaxIDBytes, len(v))
	}
	if !utf8.ValidString(v) {
		return invalid("%s must be valid UTF-8", field)
	}
	return nil
}

func (s *Server) checkFingerprint(v string) *problem {
	return fingerprintUpTo(v, s.cfg.Limits.MaxFingerprintChars)
}

func fingerprintUpTo(v string, max int) *problem {
	if len(v) < 2 || len(v) > max || len(v)%2 != 0 {
		return invalid("fingerprint must be hex of even length, 2 to %d characters (got %d)", max, len(v))
	}
	for i := 0; i < len(v); i++ {
		c := v[i]
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F') {
			return invalid("fingerprint must be hex; character %d is %q", i, c)
		}
	}
	return nil
}

func (s *Server) checkLease(field string, v *int64, required bool) (int64, *problem) {
	if v == nil {
		if required {
			return 0, invalid("%s is required", field)
		}
		return s.cfg.DefaultLease.Milliseconds(), nil
	}
	lo, hi := s.cfg.Limits.MinLease.Milliseconds(), s.cfg.Limits.MaxLease.Milliseconds()
	if *v < lo || *v > hi {
		return 0, invalid("%s must be between %d and %d (got %d)", field, lo, hi, *v)
	}
	return *v, nil
}

// maxTokenBytes bounds a token; the ones this server issues are far shorter.
const maxTokenBytes = 255

// parseToken reads a fencing token. Tokens are opaque to clients: one this
// server never issued is not malformed input but a token that is not the
// current attempt's, decided as such (token 0 matches no attempt), so the
// answer is the same 404 or 409 token_mismatch any stale token gets.
func parseToken(v string) (uint64, *problem) {
	if v == "" {
		return 0, invalid("token is required")
	}
	if len(v) > maxTokenBytes {
		return 0, invalid("token is longer than %d bytes", maxTokenBytes)
	}
	t, err := strconv.ParseUint(v, 10, 64)
	if err != nil {
		return 0, nil
	}
	return t, nil
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}

// checkResponse validates a response to store against the limits.
func (s *Server) checkResponse(r *responseBody) (*engine.Response, *problem) {
	if r == nil {
		return nil, invalid("response is required")
	}
	if r.Status < 100 || r.Status > 599 {
		return nil, invalid("response.status must be an HTTP status 100-599 (got %d)", r.Status)
	}
	l := s.cfg.Limits
	if len(r.Body) > l.MaxResponseBytes {
		return nil, newProblem(http.StatusRequestEntityTooLarge, codeResponseTooLarge,
			fmt.Sprintf("response.body is %d bytes decoded; at most %d are stored (store a reference instead)", len(r.Body), l.MaxResponseBytes))
	}
	// Every value counts against the limits: a header sent twice is two
	// entries and twice its name's bytes, as it is on the wire.
	if n := r.HeaderCount(); n > l.MaxResponseHeaders {
		return nil, newProblem(http.StatusRequestEntityTooLarge, codeResponseTooLarge,
			fmt.Sprintf("response.headers has %d values; at most %d are stored", n, l.MaxResponseHeaders))
	}
	total := 0
	check := func(k, v string) *problem {
		if !utf8.ValidString(v) {
			return invalid("response.headers must be valid UTF-8")
		}
		if !wire.ValidHeaderValue(v) {
			return invalid("response.headers[%q] contains a control character (only tab is allowed)", truncate(k, 40))
		}
		total += len(k) + len(v)
		return nil
	}
	checkName := func(k string) *problem {
		if k == "" {
			return invalid("response.headers has an empty header name")
		}
		if !utf8.ValidString(k) {
			return invalid("response.headers must be valid UTF-8")
		}
		// A stored header is replayed by the caller into a real response:
		// refuse what would split it (header injection).
		if !wire.ValidHeaderName(k) {
			return invalid("response.headers name %q is not a valid HTTP header name", truncate(k, 40))
		}
		return nil
	}
	for k, v := range r.Headers {
		if p := checkName(k); p != nil {
			return nil, p
		}
		if p := check(k, v); p != nil {
			return nil, p
		}
	}
	for k, vs := range r.HeaderLists {
		if p := checkName(k); p != nil {
			return nil, p
		}
		if _, dup := r.Headers[k]; dup || len(vs) == 0 {
			return nil, invalid("response.headers[%q] must be a string or a non-empty array of strings", truncate(k, 40))
		}
		for _, v := range vs {
			if p := check(k, v); p != nil {
				return nil, p
			}
		}
	}
	if total > l.MaxResponseHeaderBytes {
		return nil, newProblem(http.StatusRequestEntityTooLarge, codeResponseTooLarge,
			fmt.Sprintf("response.headers are %d bytes together; at most %d are stored", total, l.MaxResponseHeaderBytes))
	}
	if len(r.ContentType) > l.MaxResponseHeaderBytes || !utf8.ValidString(r.ContentType) || !wire.ValidHeaderValue(r.ContentType) {
		return nil, invalid("response.content_type must be valid UTF-8 without control characters, at most %d bytes", l.MaxResponseHeaderBytes)
	}
	resp := &engine.Response{Status: r.Status, ContentType: r.ContentType, Body: r.Body}
	if len(r.Headers) > 0 {
		resp.Headers = r.Headers
	}
	if len(r.HeaderLists) > 0 {
		if p := s.headerListsProblem(); p != nil {
			return nil, p
		}
		resp.HeaderLists = r.HeaderLists
	}
	return resp, nil
}
