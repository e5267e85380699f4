package api

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"reflect"
	"strings"
	"testing"
	"unicode/utf16"
	"unicode/utf8"
)

// The leader proposes batch entries only to members whose /healthz lists
// them: a member of an older version (it lists the secret only) would skip
// the entry and fall out of step.
func TestBatchFeatureIsAdvertisedAndRequired(t *testing.T) {
	s := &Server{cfg: Config{}}
	s.fwd = newForwarder(s)
	current := httptest.NewServer(withFeatures(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "{}") }, featureSecret, featureBatch))
	defer current.Close()
	older := httptest.NewServer(withFeatures(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "{}") }))
	defer older.Close()
	addr := func(u string) string { return strings.TrimPrefix(u, "http://") }
	ctx := context.Background()
	has := func(addr, feature string) bool { h, _ := s.hasFeature(ctx, addr, feature); return h }
	if !has(addr(current.URL), featureBatch) || !has(addr(current.URL), featureSecret) {
		t.Fatal("this version's /healthz must list both batch entries and the secret")
	}
	if h, answered := s.hasFeature(ctx, addr(older.URL), featureBatch); h || !answered {
		t.Fatal("an older member must not count as knowing batch entries (and it answered)")
	}
	if h, answered := s.hasFeature(ctx, "127.0.0.1:1", featureBatch); h || answered {
		t.Fatal("a member that does not answer must not count as knowing batch entries, nor as answering")
	}
}

// cutOp leaves exactly the route's body, wherever "op" stands.
func TestCutOpLeavesTheRouteBody(t *testing.T) {
	for _, tc := range []struct{ in, kind, rest string }{
		{`{"op":"claim","key":"k"}`, "claim", `{"key":"k"}`},
		{`{ "op" : "get" , "key":"k" }`, "get", `{ "key":"k" }`},
		{`{"key":"k","op":"release"}`, "release", `{"key":"k"}`},
		{`{"a":{"op":1},"op":"extend","b":[1,"op"]}`, "extend", `{"a":{"op":1},"b":[1,"op"]}`},
		{`{"op":"complete"}`, "complete", `{}`},
		// "op" escaped is "op", as encoding/json reads the name
		{`{"\u006fp":"claim","key":"k"}`, "claim", `{"key":"k"}`},
		{`{"key":"k","o\u0070":"get"}`, "get", `{"key":"k"}`},
		// the other members are the route's to check, after its guard
		{"{\"op\":\"claim\",\"key\":\"\xff\",\"a\":{\"b\":1,\"b\":2}}", "claim", "{\"key\":\"\xff\",\"a\":{\"b\":1,\"b\":2}}"},
	} {
		kind, rest, p := cutOp([]byte(tc.in))
		if p != nil || kind != tc.kind || string(rest) != tc.rest {
			t.Errorf("cutOp(%s) = %q, %s, %v; want %q, %s", tc.in, kind, rest, p, tc.kind, tc.rest)
		}
	}
	for _, in := range []string{`[1]`, `"op"`, `{"key":"k"}`, `{"op":1}`, `{"op":"drop"}`, `{"op":"get","op":"get"}`, `{"op":"get","\u006fp":"get"}`, `{"OP":"get"}`} {
		if _, _, p := cutOp([]byte(in)); p == nil || p.Status != 400 {
			t.Errorf("cutOp(%s) is not refused with 400: %v", in, p)
		}
	}
}

// batchBodies are envelopes the fast split must take, and others it must
// leave to the decoder (which takes some of them and refuses the rest).
var batchBodies = []string{
	// taken: each op is split as the decoder splits it, whatever it holds
	// (the op's own checks come later, in cutOp and its route's decoder)
	`{"ops":[{"op":"claim","key":"a"}]}`,
	" {\n \"ops\" : [ {\"op\":\"claim\"} , [1,2] , \"x\" , 3.5e2 , null , {\"a\":{\"b\":[\"]\",\"\\\"\"]}} ] } \n",
	`{"ops":["\ud800"]}`, "{\"ops\":[\"\xff\"]}", `{"ops":[{"op":"claim","op":"get"}]}`, `{"ops":[true,false,-0.5E+3,"a\\"]}`,
	// left to the decoder
	`{"ops":[]}`, `{"ops":null}`, `{"ops":{}}`, `{"OPS":[1]}`, `{"ops":[1],"x":2}`, `{"ops":[1],"ops":[2]}`,
	`{"ops":[1]} {}`, `{"ops":[1]`, `[{"ops":[1]}]`, ``, ` `, `{"o\u0070s":[1]}`,
	// left to the decoder, which refuses them: a member twice or in another case
	`{"ops":[1],"OPS":[2]}`, `{"Ops":[1]}`, `{"o\u0070s":[1],"ops":[2]}`, `{"ops":[{"op":"get"}],"ops":[]}`,
	"{\"ops\":[1],\"\xff\":[2]}",
}

const batchBodiesTaken = 6

// envelopeMembers lists the member names of the top-level object of body,
// as a json.Decoder token walk reads them (escapes decoded); ok is false
// when body is not one JSON object.
func envelopeMembers(body []byte) (names []string, ok bool) {
	dec := json.NewDecoder(bytes.NewReader(body))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil, false
	}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, false
		}
		names = append(names, tok.(string))
		var v json.RawMessage
		if dec.Decode(&v) != nil {
			return nil, false
		}
	}
	if _, err := dec.Token(); err != nil {
		return nil, false
	}
	return names, true
}

// What fastBatchOps takes, the decoder takes and splits into the same ops;
// what the decoder takes is an object whose only member is "ops", once and
// in that case (encoding/json alone would take "OPS", or "ops" twice).
func FuzzFastBatchOps(f *testing.F) {
	for _, b := range batchBodies {
		f.Add([]byte(b))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		if _, p := decodeBatchOps(body); p == nil {
			if names, ok := envelopeMembers(body); !ok || len(names) != 1 || names[0] != "ops" {
				t.Fatalf("%q: the decoder took an envelope whose members are %q", body, names)
			}
		}
		fast, ok := fastBatchOps(body)
		if !ok {
			return
		}
		slow, p := decodeBatchOps(body)
		if p != nil {
			t.Fatalf("%q: the fast split took it, the decoder refused it: %s", body, p.Detail)
		}
		if len(fast) != len(slow) {
			t.Fatalf("%q: %d ops fast, %d decoded", body, len(fast), len(slow))
		}
		for i := range fast {
			if string(fast[i]) != string(slow[i]) {
				t.Fatalf("%q: op %d is %q fast, %q decoded", body, i, fast[i], slow[i])
			}
		}
	})
}

// The fast split takes what the Go client sends, so the fuzz's oracle is
// exercised, and leaves alone what it cannot split as the decoder would.
func TestFastBatchOpsTakesTheUsualForm(t *testing.T) {
	for _, b := range batchBodies[:batchBodiesTaken] {
		if _, ok := fastBatchOps([]byte(b)); !ok {
			t.Errorf("%q: not taken", b)
		}
	}
	for _, b := range batchBodies[batchBodiesTaken:] {
		if ops, ok := fastBatchOps([]byte(b)); ok {
			t.Errorf("%q: taken as %q", b, ops)
		}
	}
}

// A get op's members are read as the query parameters they stand for:
// names as written, string bytes as they are (a lone surrogate escape as
// invalid UTF-8, not U+FFFD), null empty, another type refused.
func TestReadLookupOpIsTheQuery(t *testing.T) {
	for _, tc := range []struct {
		in           string
		q            url.Values
		typeErr      bool
		principalBad bool
	}{
		{`{"principal":"p","endpoint":"e","key":"k"}`, url.Values{"principal": {"p"}, "endpoint": {"e"}, "key": {"k"}}, false, false},
		{"{ \"princip\\u0061l\" : \"a\\\"b\\n\\u00e9\\ud83d\\ude00\" }", url.Values{"principal": {"a\"b\n\u00e9\U0001F600"}}, false, false},
		{"{\"principal\":\"x\xff\",\"key\":\"\\ud800\",\"endpoint\":\"\\udc00\\u0041\"}", url.Values{"principal": {"x\xff"}, "key": {"\xed\xa0\x80"}, "endpoint": {"\xed\xb0\x80A"}}, false, false},
		{`{"Principal":"p","key":null,"key":"k"}`, url.Values{"Principal": {"p"}, "key": {"", "k"}}, false, false},
		{`{"principal":5,"key":"k"}`, url.Values{"principal": {""}, "key": {"k"}}, true, true},
		{`{"key":{"a":[1]},"principal":"p"}`, url.Values{"principal": {"p"}, "key": {""}}, true, false},
		{`{}`, url.Values{}, false, false},
	} {
		op := readLookupOp([]byte(tc.in))
		if !reflect.DeepEqual(op.q, tc.q) || (op.typeErr != nil) != tc.typeErr || op.principalBad != tc.principalBad {
			t.Errorf("readLookupOp(%q) = %q, %v, %v; want %q, %v, %v", tc.in, op.q, op.typeErr, op.principalBad, tc.q, tc.typeErr, tc.principalBad)
		}
	}
}

// jsonBytes reads a string as encoding/json does whenever encoding/json
// keeps it as it is (valid UTF-8, no lone surrogate), written plainly or
// every character escaped.
func FuzzJSONBytes(f *testing.F) {
	for _, s := range []string{"", "cus_42", "a\"b\\c/\b\f\n\r\t", "\u00e9\u2028\U0001F600", "\x00\x1f\x7f"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if !utf8.ValidString(s) {
			return
		}
		plain, _ := json.Marshal(s)
		var esc strings.Builder
		esc.WriteByte('"')
		for _, r := range s {
			if r1, r2 := utf16.EncodeRune(r); r1 != utf8.RuneError {
				fmt.Fprintf(&esc, `\u%04x\u%04X`, r1, r2)
			} else {
				fmt.Fprintf(&esc, `\u%04x`, r)
			}
		}
		esc.WriteByte('"')
		for _, raw := range []string{string(plain), esc.String()} {
			if got := string(jsonBytes([]byte(raw))); got != s {
				t.Fatalf("jsonBytes(%s) = %q, want %q", raw, got, s)
			}
		}
	})
}

// readLookupOp is only given a valid object, but refuses rather than
// panics on anything else.
func TestReadLookupOpBrokenInput(t *testing.T) {
	for _, in := range []string{`{`, `{"a"`, `{"a":`, `{"a" 1}`, `{a:1}`, `{"a":"b`, `{"a":}`} {
		if op := readLookupOp([]byte(in)); op.typeErr == nil || !op.principalBad {
			t.Errorf("readLookupOp(%q) not refused: %+v", in, op)
		}
	}
}

// The ops of a batch were each judged by the auth file in force when the
// op was read, so a SIGHUP during a batch split it between two versions
// (the first ops allowed, the rest refused, or the reverse), though a
// request is documented to finish under the tokens that admitted it. The
// ops are judged by the version that admitted the batch now.
func TestBatchOpsAreJudgedByTheVersionThatAdmittedTheBatch(t *testing.T) {
	parse := func(entries string) *Credentials {
		t.Helper()
		c, err := parseAuthJSON([]byte(`{"tokens":[` + entries + `]}`))
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	entry := func(name, token, principal string) string {
		return fmt.Sprintf(`{"name":%q,"sha256":%q,"role":"app","principals":[%q]}`, name, HashToken(token), principal)
	}
	before := parse(entry("old", "tok-old", "alpha"))
	after := parse(entry("new", "tok-new", "alpha")) // tok-old revoked
	auth := NewAuth(before)
	s := &Server{cfg: Config{Auth: auth}}
	s.cfg.Limits.MaxRequestBytes = 1 << 20
	claim := []byte(`{"principal":"alpha","endpoint":"e","key":"k","fingerprint":"ab"}`)
	var judged []int
	h := s.guard(func(w http.ResponseWriter, r *http.Request) {
		for i := range 2 {
			if i == 1 {
				auth.Set(after) // a SIGHUP between two ops of the batch
			}
			if rec := s.authorizeOp(r, "claim", claim, lookupOp{}); rec != nil {
				judged = append(judged, rec.result().Status)
			} else {
				judged = append(judged, http.StatusOK)
			}
		}
	}, func(*http.Request) (Role, principalIn) { return RoleApp, principalNowhere })
	req := httptest.NewRequest(http.MethodPost, "/v1/batch", strings.NewReader(`{"ops":[]}`))
	req.Header.Set("Authorization", "Bearer tok-old")
	h(httptest.NewRecorder(), req)
	if !reflect.DeepEqual(judged, []int{http.StatusOK, http.StatusOK}) {
		t.Fatalf("the two ops were judged %v; want both by the version that admitted the batch (200, 200)", judged)
	}
	// The next request is judged by the new version.
	rec := httptest.NewRecorder()
	req = httptest.NewRequest(http.MethodPost, "/v1/batch", strings.NewReader(`{"ops":[]}`))
	req.Header.Set("Authorization", "Bearer tok-old")
	s.guard(func(http.ResponseWriter, *http.Request) { t.Fatal("a revoked token was admitted") },
		func(*http.Request) (Role, principalIn) { return RoleApp, principalNowhere })(rec, req)
	if rec.Code != http.StatusUnauthorized {
		t.Fatalf("revoked token: %d, want 401", rec.Code)
	}
}

// One token's share of the batch-answer memory is half of what the other
// tokens' requests leave: half of it alone, a third each for two holding
// all they may, and a third token still has room (with a fixed half each,
// two tenants that never read their answers held it all).
func TestTokenShareOfBatchAnswersIsHalfOfWhatOthersLeave(t *testing.T) {
	const max = 600
	var a, b, c tokenHeld
	total := func() int64 { return a.n.Load() + b.n.Load() + c.n.Load() }
	fill := func(t *tokenHeld) {
		for !t.over(1, total(), max) {
			t.add(1)
		}
	}
	fill(&a)
	if got := a.n.Load(); got != 300 {
		t.Fatalf("one token alone holds %d of %d, want half", got, max)
	}
	fill(&b)
	fill(&a) // a holds past what it may now: it takes no more
	if got := b.n.Load(); got != 150 {
		t.Fatalf("a second token holds %d, want half of the 300 the first leaves", got)
	}
	if c.over(0, total(), max) || c.over(50, total(), max) {
		t.Fatalf("a third token has no room with %d of %d held", total(), max)
	}
	a.add(-200) // the first's answers are written
	fill(&b)
	if got := b.n.Load(); got != 250 {
		t.Fatalf("the second token holds %d once the first holds 100, want half of 500", got)
	}
}
