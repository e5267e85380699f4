package api

import (
	"bytes"
	"encoding/json"
	"reflect"
	"regexp"
	"testing"
	"unicode/utf8"
)

// jsonMember is one member of an object as a json.Decoder token walk
// reads it: the name decoded, the value compacted.
type jsonMember struct {
	name  string
	value string
}

// objectMembers is the oracle's reading of an object; ok is false when
// raw is not one JSON object.
func objectMembers(raw []byte) (members []jsonMember, ok bool) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil, false
	}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, false
		}
		var v json.RawMessage
		if dec.Decode(&v) != nil {
			return nil, false
		}
		var c bytes.Buffer
		if json.Compact(&c, v) != nil {
			return nil, false
		}
		members = append(members, jsonMember{tok.(string), c.String()})
	}
	if _, err := dec.Token(); err != nil {
		return nil, false
	}
	if _, err := dec.Token(); err == nil {
		return nil, false
	}
	return members, true
}

var surrogateEscape = regexp.MustCompile(`(?i)\\u[d][89a-f]`)

// cutOp cuts exactly the "op" member out of any op (valid JSON, as the
// envelope's split gives it), leaving the other members as they were; it
// refuses an op without exactly one "op" naming a route. readLookupOp
// then reads the rest's members as encoding/json does (where encoding/json
// keeps strings as they are).
func FuzzCutOp(f *testing.F) {
	for _, s := range []string{
		`{"op":"claim","key":"k"}`, `{ "op" : "get" , "key":"k" }`, `{"key":"k","op":"release"}`,
		`{"a":{"op":1},"op":"extend","b":[1,"op"]}`, `{"op":"complete"}`, `{"\u006fp":"claim","key":"k"}`,
		`{"key":"k","o\u0070":"get"}`, `{"op":"get","op":"get"}`, `{"op":null}`, `{"op":"get","principal":null,"key":5}`,
		`{"op":"get","principal":"a\"b\u00e9","Principal":"x","principal":"y"}`, " {\t\"a\" :1 ,\n\"op\":\"get\" ,\"b\":true } ",
		`[1]`, `"op"`, `{}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		if !json.Valid(raw) {
			return
		}
		kind, rest, p := cutOp(raw)
		members, isObject := objectMembers(raw)
		var opValues []string
		var others []jsonMember
		for _, m := range members {
			if m.name == "op" {
				opValues = append(opValues, m.value)
			} else {
				others = append(others, m)
			}
		}
		wantKind := ""
		if isObject && len(opValues) == 1 {
			var k string
			if json.Unmarshal([]byte(opValues[0]), &k) == nil {
				switch k {
				case "claim", "complete", "release", "extend", "get":
					wantKind = k
				}
			}
		}
		if wantKind == "" {
			if p == nil || p.Status != 400 {
				t.Fatalf("cutOp(%q) = %q, %q, %v; want a 400", raw, kind, rest, p)
			}
			return
		}
		if p != nil || kind != wantKind {
			t.Fatalf("cutOp(%q) = %q, %v; want %q", raw, kind, p, wantKind)
		}
		got, ok := objectMembers(rest)
		if !ok {
			t.Fatalf("cutOp(%q) left %q, not one JSON object", raw, rest)
		}
		if len(got) != len(others) || (len(got) > 0 && !reflect.DeepEqual(got, others)) {
			t.Fatalf("cutOp(%q) left %q: members %q, want %q", raw, rest, got, others)
		}

		if !utf8.Valid(rest) || surrogateEscape.Match(rest) {
			return // jsonBytes keeps what encoding/json would replace
		}
		op := readLookupOp(rest)
		q := map[string][]string{}
		var typeErr, principalBad bool
		for _, m := range others {
			var s *string
			if err := json.Unmarshal([]byte(m.value), &s); err != nil {
				typeErr = true
				principalBad = principalBad || m.name == "principal"
				q[m.name] = append(q[m.name], "")
				continue
			}
			v := ""
			if s != nil {
				v = *s
			}
			q[m.name] = append(q[m.name], v)
		}
		if (op.typeErr != nil) != typeErr || op.principalBad != principalBad || len(op.q) != len(q) ||
			(len(q) > 0 && !reflect.DeepEqual(map[string][]string(op.q), q)) {
			t.Fatalf("readLookupOp(%q) = %q, %v, %v; want %q, %v, %v", rest, op.q, op.typeErr, op.principalBad, q, typeErr, principalBad)
		}
	})
}
