package api

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"
)

// The token walk over json.Decoder that checkRaw replaced, kept as the oracle
// the byte scanner must agree with on every input encoding/json accepts.
// checkRawOracle refuses what encoding/json accepts silently: member names that
// match a field only case-insensitively, a member given twice (the last one
// wins), and strings with invalid UTF-8 or unpaired surrogate escapes (both
// become U+FFFD, so "cus\xff" and "cus\xfe" would be one principal). Any of
// these lets two different requests, or two tenants, collapse into one.
// body is known to hold exactly one valid JSON value of dst's shape.
func checkRawOracle(body []byte, dst reflect.Type) *problem {
	dec := json.NewDecoder(bytes.NewReader(body))
	return walkRaw(dec, body, dst, "")
}

func walkRaw(dec *json.Decoder, body []byte, t reflect.Type, path string) *problem {
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t == rawMessageType { // left to its own reader, unchecked
		var m json.RawMessage
		if err := dec.Decode(&m); err != nil {
			return invalid("request body is not valid JSON: %v", err)
		}
		return nil
	}
	name := func(p string) string {
		if p == "" {
			return "request body"
		}
		return fmt.Sprintf("field %q", p)
	}
	start := dec.InputOffset()
	tok, err := dec.Token()
	if err != nil {
		return invalid("request body is not valid JSON: %v", err)
	}
	switch v := tok.(type) {
	case string:
		if !cleanString(body[start:dec.InputOffset()]) {
			return invalid("%s must be valid UTF-8 without unpaired surrogates", name(path))
		}
	case json.Delim:
		if v == '[' {
			var elem reflect.Type
			if t != nil && (t.Kind() == reflect.Slice || t.Kind() == reflect.Array) {
				elem = t.Elem()
			}
			for dec.More() {
				if p := walkRaw(dec, body, elem, path); p != nil {
					return p
				}
			}
			dec.Token()
			return nil
		}
		var fields map[string]reflect.Type
		if t != nil && t.Kind() == reflect.Struct {
			fields = map[string]reflect.Type{}
			for _, f := range reflect.VisibleFields(t) { // outer fields hide embedded ones
				if n, _, _ := strings.Cut(f.Tag.Get("json"), ","); n != "" && n != "-" {
					fields[n] = f.Type
				}
			}
		}
		seen := map[string]bool{}
		for dec.More() {
			ks := dec.InputOffset()
			kt, err := dec.Token()
			if err != nil {
				return invalid("request body is not valid JSON: %v", err)
			}
			k, _ := kt.(string)
			if !cleanString(body[ks:dec.InputOffset()]) {
				return invalid("a member name in %s is not valid UTF-8", name(path))
			}
			sub := k
			if path != "" {
				sub = path + "." + k
			}
			sub = truncate(sub, maxPathBytes) // as checkRaw bounds what it names
			if seen[k] {
				return invalid("%s has the member %q more than once", name(path), truncate(k, maxPathBytes))
			}
			seen[k] = true
			var vt reflect.Type
			switch {
			case fields != nil:
				ft, ok := fields[k]
				if !ok {
					return unknownField(sub, k, fields) // the message is shared; finding it is not
				}
				vt = ft
			case t != nil && t.Kind() == reflect.Map:
				vt, sub = t.Elem(), path
			}
			if p := walkRaw(dec, body, vt, sub); p != nil {
				return p
			}
		}
		dec.Token()
	}
	return nil
}

// checkRawBoth decodes body as the handlers do and, when encoding/json
// accepts it, requires the scanner and the oracle to give the same answer.
func checkRawBoth(t *testing.T, body []byte, dst any) {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if dec.Decode(dst) != nil {
		return
	}
	typ := reflect.TypeOf(dst)
	got, want := checkRaw(body, typ), checkRawOracle(body, typ)
	if (got == nil) != (want == nil) || (got != nil && got.Detail != want.Detail) {
		t.Fatalf("%q as %v: scanner says %v, oracle says %v", body, typ, detail(got), detail(want))
	}
}

func detail(p *problem) string {
	if p == nil {
		return "ok"
	}
	return p.Detail
}

var rawSeeds = []string{
	`{"principal":"cus_42","endpoint":"POST /payments","key":"k1","fingerprint":"9f86d081884c7d65"}`,
	`{"principal":"cus_42","Principal":"x","endpoint":"e","key":"k","fingerprint":"f"}`,
	`{"principal":"cus_42","principal":"cus_43","endpoint":"e","key":"k","fingerprint":"f"}`,
	"{\"principal\":\"cus\xff42\",\"endpoint\":\"e\",\"key\":\"k\",\"fingerprint\":\"f\"}",
	`{"principal":"cus\ud800","endpoint":"e","key":"k","fingerprint":"f"}`,
	`{"principal":"cus\ud83d\ude00","endpoint":"e","key":"k","fingerprint":"f"}`,
	`{"\u0070rincipal":"a","principal":"b"}`,
	`{"pr\u0069ncipal":"a","endpoint":"e","key":"k","fingerprint":"f","lease_ms":1e3}`,
	` { "principal" : "a" , "lease_ms" : null , "key" : "k\"\\" } `,
	`{"principal":"a","endpoint":"e","key":"k","token":"7","response":{"status":201,"headers":{"A":"1","A":"2"},"body":"eyJ9"}}`,
	`{"principal":"a","endpoint":"e","key":"k","token":"7","response":{"status":201,"headers":{"A":"\udc00"}}}`,
	`{"principal":"a","endpoint":"e","key":"k","token":"7","response":{"status":201,"Headers":{}}}`,
	`{"principal":"a","endpoint":"e","key":"k","token":"7","response":{"status":201,"headers":{"\u00e9":"v"},"content_type":"text/plain"}}`,
	`{"principal":"a","endpoint":"e","key":"k","token":"7","response":{"status":201,"status":202}}`,
	`{}`, `null`, `{"lease_ms":-0.5e-3}`, `{"key":"\u00e9\t\/"}`,
	// names longer than a message names
	`{"` + strings.Repeat("k", 300) + `":1}`,
	`{"principal":"a","endpoint":"e","key":"k","token":"7","response":{"status":201,"headers":{"` + strings.Repeat("h", 300) + `":"1","` + strings.Repeat("h", 300) + `":"2"}}}`,
	// batch envelopes: the envelope is checked, the ops are not
	`{"ops":[{"op":"claim","key":"a","key":"b"}]}`,
	"{\"ops\":[\"\xff\",{\"\\ud800\":[]}, 1 , null]}",
	`{"ops":[1],"ops":[2]}`, `{"o\u0070s":[1],"ops":[2]}`, `{"OPS":[1]}`, `{"ops":[1],"Ops":[2]}`,
	"{\"ops\":[{\"a\":\"]}\\\"\"}], \"ops\" : null}",
}

func TestCheckRawAgreesWithTokenWalk(t *testing.T) {
	for _, s := range rawSeeds {
		checkRawBoth(t, []byte(s), &claimRequest{})
		checkRawBoth(t, []byte(s), &completeRequest{})
		checkRawBoth(t, []byte(s), &batchBody{})
	}
}

func FuzzCheckRaw(f *testing.F) {
	for _, s := range rawSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		checkRawBoth(t, body, &claimRequest{})
		checkRawBoth(t, body, &completeRequest{})
		checkRawBoth(t, body, &extendRequest{})
		checkRawBoth(t, body, &batchBody{})
	})
}

// An object of many members costs linear work: the names seen are kept
// in a map past a handful (a list made a 1 MiB body of short names take
// 36 s). Duplicates are still found, in the list and in the map.
func TestMemberSetWorkIsLinear(t *testing.T) {
	const n = 100_000
	var m memberSet
	for i := range n {
		if !m.add(fmt.Sprint("m", i)) {
			t.Fatalf("member %d reported seen", i)
		}
	}
	if limit := memberSetList*memberSetList + n; m.probes > limit {
		t.Fatalf("%d names took %d probes, over %d", n, m.probes, limit)
	}
	if m.add("m3") || m.add(fmt.Sprint("m", n-1)) {
		t.Fatal("a duplicate went unnoticed")
	}
	var small memberSet
	if !small.add("a") || !small.add("b") || small.add("a") {
		t.Fatal("a duplicate in a small object went unnoticed")
	}
	body := []byte(`{"x":0,` + manyMembers(5000) + `,"m4999":1}`)
	p := checkRaw(body, nil)
	if p == nil || !strings.Contains(p.Detail, `"m4999" more than once`) {
		t.Fatalf("duplicate after 5,000 members: %+v", p)
	}
}

func manyMembers(n int) string {
	var b strings.Builder
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `"m%d":0`, i)
	}
	return b.String()
}

// The member path an error names is bounded: each level of nesting held
// its whole path, so 10,000 levels of 100-byte names held ~5 GB.
func TestNestedMemberPathIsBounded(t *testing.T) {
	name := strings.Repeat("k", 100)
	depth := 300
	body := strings.Repeat(`{"`+name+`":`, depth) + "{\"\xff\":0}" + strings.Repeat("}", depth)
	p := checkRaw([]byte(body), nil)
	if p == nil || !strings.Contains(p.Detail, "not valid UTF-8") {
		t.Fatalf("invalid member name at depth %d: %+v", depth, p)
	}
	if len(p.Detail) > 2*maxPathBytes {
		t.Fatalf("the message names a path of %d bytes: %.300s…", len(p.Detail), p.Detail)
	}
}
