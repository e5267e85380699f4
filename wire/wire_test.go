package wire

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// A header keeps the form it was given: a string stays a string, an array
// (even of one value) stays an array, so a replay is the original.
func TestResponseHeadersKeepTheirForm(t *testing.T) {
	in := `{"status":200,"content_type":"text/plain","headers":{"Location":"/p/1","Set-Cookie":["a=1","b=2"],"Vary":["Accept"]},"body":"b2s="}`
	var r Response
	if err := json.Unmarshal([]byte(in), &r); err != nil {
		t.Fatal(err)
	}
	if r.Headers["Location"] != "/p/1" || len(r.Headers) != 1 {
		t.Fatalf("string headers %v", r.Headers)
	}
	if got := r.Values("Set-Cookie"); len(got) != 2 || got[0] != "a=1" || got[1] != "b=2" {
		t.Fatalf("Set-Cookie %v", got)
	}
	if got := r.HeaderLists["Vary"]; len(got) != 1 {
		t.Fatalf("Vary %v", got)
	}
	if r.HeaderCount() != 4 {
		t.Fatalf("count %d", r.HeaderCount())
	}
	out, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	var a, b any
	_ = json.Unmarshal([]byte(in), &a)
	_ = json.Unmarshal(out, &b)
	if ja, jb := mustJSON(t, a), mustJSON(t, b); ja != jb {
		t.Fatalf("re-encoded\n%s\nwant\n%s", jb, ja)
	}
	h := r.HTTPHeader()
	if len(h["Set-Cookie"]) != 2 || h.Get("Location") != "/p/1" {
		t.Fatalf("http header %v", h)
	}
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestResponseRefusesOtherHeaderValues(t *testing.T) {
	for _, in := range []string{
		`{"status":200,"headers":{"X":1}}`,
		`{"status":200,"headers":{"X":null}}`,
		`{"status":200,"headers":{"X":["a",2]}}`,
		`{"status":200,"headers":{"X":["a",null]}}`,
		`{"status":200,"headers":{"X":{"a":"b"}}}`,
	} {
		var r Response
		err := json.Unmarshal([]byte(in), &r)
		if err == nil || !strings.Contains(err.Error(), "headers") {
			t.Errorf("%s: %v", in, err)
		}
	}
}

func TestResponseWritesEmptyHeadersAndBody(t *testing.T) {
	out, err := json.Marshal(Response{Status: 204})
	if err != nil {
		t.Fatal(err)
	}
	if string(out) != `{"status":204,"content_type":"","body":""}` {
		t.Fatalf("got %s", out)
	}
	out, _ = json.Marshal(Response{Status: 204, Headers: map[string]string{}})
	if string(out) != `{"status":204,"content_type":"","headers":{},"body":""}` {
		t.Fatalf("got %s", out)
	}
	var r Response
	r.SetHeader("Set-Cookie", "a=1", "b=2")
	r.SetHeader("Location", "/x")
	r.SetHeader("Location", "/y", "/z")
	if len(r.Headers) != 0 || len(r.HeaderLists) != 2 {
		t.Fatalf("SetHeader: %+v", r)
	}
	r.SetHeader("Location", "/only")
	if r.Headers["Location"] != "/only" || r.HeaderLists["Location"] != nil {
		t.Fatalf("SetHeader one value: %+v", r)
	}
}

// Times are RFC 3339 UTC with exactly three fractional digits, also when
// they are zero (encoding/json's own form would drop them).
func TestTimesHaveMilliseconds(t *testing.T) {
	at := time.Date(2026, 12, 1, 6, 14, 58, 850e6, time.FixedZone("x", 3600))
	rec := Record{State: StateInProgress, CreatedAt: at, ExpiresAt: at.Add(time.Second / 2), LeaseExpiresAt: at.Truncate(time.Second)}
	out, err := json.Marshal(rec)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"created_at":"2026-12-01T05:14:58.850Z"`, `"expires_at":"2026-12-01T05:14:59.350Z"`, `"lease_expires_at":"2026-12-01T05:14:58.000Z"`} {
		if !strings.Contains(string(out), want) {
			t.Errorf("%s lacks %s", out, want)
		}
	}
	if strings.Contains(string(out), "completed_at") || strings.Contains(string(out), "response") {
		t.Errorf("zero members written: %s", out)
	}
	var back Record
	if err := json.Unmarshal(out, &back); err != nil || !back.CreatedAt.Equal(at) {
		t.Fatalf("read back %v %v", back.CreatedAt, err)
	}
	c, _ := json.Marshal(ClaimResponse{Outcome: OutcomeReplay, Record: &rec, StatusCode: 200})
	if strings.Contains(string(c), "created_at\":\"0001") || strings.Contains(string(c), "StatusCode") {
		t.Errorf("claim response %s", c)
	}
}

// Any headers object that decodes re-encodes to one that decodes to the
// same response: no header changes its form or its values on the way.
func FuzzResponseHeaders(f *testing.F) {
	f.Add(`{"A":"1","Set-Cookie":["a","b"],"V":["x"]}`)
	f.Add(`{}`)
	f.Add(`{"A":[]}`)
	f.Fuzz(func(t *testing.T, headers string) {
		var r Response
		if json.Unmarshal([]byte(`{"status":200,"headers":`+headers+`}`), &r) != nil {
			return
		}
		out, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		var back Response
		if err := json.Unmarshal(out, &back); err != nil {
			t.Fatalf("%s does not decode: %v", out, err)
		}
		if len(back.Headers) != len(r.Headers) || len(back.HeaderLists) != len(r.HeaderLists) {
			t.Fatalf("forms changed: %+v -> %+v", r, back)
		}
		for k, v := range r.Headers {
			if back.Headers[k] != v {
				t.Fatalf("%q: %q -> %q", k, v, back.Headers[k])
			}
		}
		for k, v := range r.HeaderLists {
			if strings.Join(back.HeaderLists[k], "\x00") != strings.Join(v, "\x00") || len(back.HeaderLists[k]) != len(v) {
				t.Fatalf("%q: %q -> %q", k, v, back.HeaderLists[k])
			}
		}
	})
}
