package wire

import (
	"strings"
	"testing"
)

// ValueEnd stops at the delimiter after a value at its own depth, past
// strings holding delimiters and escaped quotes.
func TestValueEnd(t *testing.T) {
	for in, want := range map[string]int{
		`1,2`: 1, `1 ]`: 2, `"a,\"]}" , x`: 9, `{"a":[1,{"b":"}"}]}]`: 19, `[1,2]}`: 5,
		`null`: 0, `"open`: 0, `{"a":1`: 0,
	} {
		if got := ValueEnd([]byte(in)); got != want {
			t.Errorf("ValueEnd(%q) = %d, want %d", in, got, want)
		}
	}
}

// What the MarshalJSON methods write keeps <, > and & as they are:
// encoding/json would keep their escapes when it embeds the output.
func TestMarshalJSONDoesNotEscapeHTML(t *testing.T) {
	resp := &Response{Status: 200, ContentType: "text/html; a=<b>&", Headers: map[string]string{}}
	resp.SetHeader("X-A", "<a&>")
	resp.SetHeader("X-L", "<1>", "&2")
	rec := Record{Principal: "p<&>", Endpoint: "POST /<x>", Key: "k&", CorrelationID: "<c&>", Response: resp}
	for name, v := range map[string]interface{ MarshalJSON() ([]byte, error) }{
		"record":   rec,
		"response": Response{ContentType: "<&>"},
		"claim":    ClaimResponse{Outcome: "replay", Record: &rec},
		"batch op": BatchOp{Op: OpClaim, Body: &ClaimRequest{Principal: "<&>"}},
	} {
		b, err := v.MarshalJSON()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if s := string(b); strings.Contains(s, `\u00`) || !strings.Contains(s, "<&>") || strings.HasSuffix(s, "\n") {
			t.Errorf("%s: %s", name, s)
		}
	}
}

// A claim op written by hand is byte for byte what encoding/json writes,
// and anything the hand path cannot write as it is goes to encoding/json.
func TestClaimOpFastPathMatchesEncodingJSON(t *testing.T) {
	strs := []string{"", "p", "cus_42", "POST /v1/charges", "k-1:2", "a b~", "<&>", `q"uote`, `back\slash`,
		"tab\t", "nul\x00", "é", "\u2028", "\xff", "\x7f", strings.Repeat("k", 300)}
	leases := []int64{0, 1, -5, 30000, 1 << 40}
	n := 0
	for i, p := range strs {
		for j, l := range leases {
			c := &ClaimRequest{Principal: p, Endpoint: strs[(i+j)%len(strs)], Key: strs[(i+2*j+1)%len(strs)],
				Fingerprint: strs[(i+3)%len(strs)], LeaseMs: l}
			if j%2 == 1 {
				c.ClaimID = strs[(i+j+5)%len(strs)]
			}
			if j%3 == 1 {
				c.CorrelationID = strs[(i+j+7)%len(strs)]
			}
			op := BatchOp{Op: OpClaim, Body: c}
			got, err := op.MarshalJSON()
			if err != nil {
				t.Fatal(err)
			}
			want, err := op.marshalReflect()
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != string(want) {
				t.Errorf("%+v:\n got  %s\n want %s", c, got, want)
			}
			if _, ok := appendClaimOp(nil, c); ok {
				n++
			}
		}
	}
	if n == 0 {
		t.Fatal("no case took the hand-written path")
	}
}

// A claim op whose body is a nil *ClaimRequest is an error, as any other
// body that is not a JSON object, not a panic in the hand-written path.
func TestBatchOpNilClaimBody(t *testing.T) {
	if _, err := (BatchOp{Op: OpClaim, Body: (*ClaimRequest)(nil)}).MarshalJSON(); err == nil {
		t.Fatal("a nil claim body encoded")
	}
}
