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
