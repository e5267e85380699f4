package api_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"unicode/utf8"
)

// The fuzzers post arbitrary bytes to the real handler of a real node (one
// node per fuzz target, reused across inputs) and check the contract's
// promises about any input:
//
//   - never a 5xx, and the answer is always a JSON document;
//   - every 4xx is a problem document with a code;
//   - a 4xx decided by validation (400, 405, 413) changes nothing at all:
//     StateHash is identical;
//   - a 4xx decided by the store (404, 409, 422, 429) goes through the log,
//     which moves the applied index and cluster time, but changes no data.
//
// The node's idle tick and sweeper are off (mustNode), so only the request
// under test can change the state.

// live is the record every token seed addresses with its real token, so
// that mutations of a valid body reach the store's decisions too.
var live = scope{"cus_42", "POST /payments", "live"}

func fuzzNode(f *testing.F) (*testNode, string) {
	n := mustNode(f)
	tok := n.mustClaim(live, fp1, "lease_ms", 3600000)["token"].(string)
	return n, tok
}

func checkAnswer(t *testing.T, n *testNode, req *http.Request) *httptest.ResponseRecorder {
	t.Helper()
	db := n.node.DB()
	before, err := db.StateHash()
	if err != nil {
		t.Fatal(err)
	}
	beforeData, err := dataHash(n.node)
	if err != nil {
		t.Fatal(err)
	}
	w := httptest.NewRecorder()
	n.api.ServeHTTP(w, req)
	res := w.Result()
	out := w.Body.Bytes()
	if res.StatusCode >= 500 {
		t.Fatalf("%s %s: %d %s", req.Method, req.URL, res.StatusCode, out)
	}
	if !json.Valid(out) {
		t.Fatalf("%s %s: %d answer is not JSON: %q", req.Method, req.URL, res.StatusCode, out)
	}
	if res.StatusCode < 400 {
		return w
	}
	var p struct {
		Status int    `json:"status"`
		Code   string `json:"code"`
		Detail string `json:"detail"`
	}
	if err := json.Unmarshal(out, &p); err != nil || p.Code == "" || p.Detail == "" || p.Status != res.StatusCode ||
		res.Header.Get("Content-Type") != "application/problem+json" {
		t.Fatalf("%d is not a problem document: %s", res.StatusCode, out)
	}
	switch res.StatusCode {
	case http.StatusBadRequest, http.StatusMethodNotAllowed, http.StatusRequestEntityTooLarge:
		after, err := db.StateHash()
		if err != nil {
			t.Fatal(err)
		}
		if after != before {
			t.Fatalf("%d %s changed the state", res.StatusCode, p.Code)
		}
	default:
		after, err := dataHash(n.node)
		if err != nil {
			t.Fatal(err)
		}
		if after != beforeData {
			t.Fatalf("%d %s changed stored data", res.StatusCode, p.Code)
		}
	}
	return w
}

func fuzzPost(t *testing.T, n *testNode, path string, body []byte) {
	req := httptest.NewRequest("POST", path, bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	checkAnswer(t, n, req)
}

// nearValid apply to every POST route. The inputs encoding/json is lenient
// about (invalid UTF-8, unpaired surrogates, member names in another case,
// a member twice) are seed files in testdata/fuzz/<FuzzName>/.
var nearValid = []string{``, `{}`, `[]`, `null`, `"x"`, `{"principal":null}`}

func FuzzClaimJSON(f *testing.F) {
	n, _ := fuzzNode(f)
	for _, s := range append([]string{
		`{"principal":"cus_42","endpoint":"POST /payments","key":"k1","fingerprint":"9f86d081884c7d65"}`,
		`{"principal":"cus_42","endpoint":"POST /payments","key":"live","fingerprint":"9f86d081884c7d65","lease_ms":30000,"claim_id":"a1b2","correlation_id":"req-77"}`,
		`{"principal":"cus_42","endpoint":"POST /payments","key":"live","fingerprint":"60303ae22b998861"}`,
		`{"principal":"cus_42","endpoint":"POST /payments","key":"k2","fingerprint":"9F86","lease_ms":100}`,
		`{"principal":"cus_42","endpoint":"POST /payments","key":"k3","fingerprint":"9f86","lease_ms":"100"}`,
		`{"principal":"cus_42","endpoint":"POST /payments","key":"k\u0001","fingerprint":"9f86"}`,
		`{"principal":"cus_42","endpoint":"POST /payments","key":"k4","fingerprint":"9f8"}`,
		`{"principal":"cus_42","endpoint":"POST /payments","key":"k5","fingerprint":"9f86","lease_ms":3600001}`,
		`{"principal":"cus_42","endpoint":"POST /payments","key":"k6","fingerprint":"9f86","extra":1}`,
		`{"principal":"cus_42","endpoint":"POST /payments","key":"k7","fingerprint":"9f86"} x`,
	}, nearValid...) {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		req := httptest.NewRequest("POST", "/v1/claim", bytes.NewReader(body))
		w := checkAnswer(t, n, req)
		if w.Code != http.StatusCreated && w.Code != http.StatusOK {
			return
		}
		// What a claim accepted is stored exactly as sent: the body was
		// UTF-8, no text was replaced, and the record is found by its scope.
		if !utf8.Valid(body) {
			t.Fatalf("%d for a body that is not UTF-8", w.Code)
		}
		var c struct{ Principal, Endpoint, Key string }
		if err := json.Unmarshal(body, &c); err != nil {
			t.Fatalf("%d for a body that does not decode: %v", w.Code, err)
		}
		for _, v := range []string{c.Principal, c.Endpoint, c.Key} {
			if strings.ContainsRune(v, utf8.RuneError) && !bytes.Contains(body, []byte("\ufffd")) &&
				!bytes.Contains(bytes.ToLower(body), []byte(`\ufffd`)) {
				t.Fatalf("%d: %q holds U+FFFD the body did not send", w.Code, v)
			}
		}
		q := url.Values{"principal": {c.Principal}, "endpoint": {c.Endpoint}, "key": {c.Key}, "consistency": {"stale"}}
		lw := httptest.NewRecorder()
		n.api.ServeHTTP(lw, httptest.NewRequest("GET", "/v1/records?"+q.Encode(), nil))
		var got struct {
			Record struct{ Principal, Endpoint, Key string }
		}
		if lw.Code != http.StatusOK || json.Unmarshal(lw.Body.Bytes(), &got) != nil {
			t.Fatalf("claimed scope not found: %d %s", lw.Code, lw.Body)
		}
		if got.Record.Principal != c.Principal || got.Record.Key != c.Key ||
			(got.Record.Endpoint != c.Endpoint && w.Code == http.StatusCreated) {
			t.Fatalf("stored scope %+v differs from the claimed %+v", got.Record, c)
		}
	})
}

func FuzzCompleteJSON(f *testing.F) {
	n, tok := fuzzNode(f)
	target := `"principal":"cus_42","endpoint":"POST /payments","key":"live","token":"` + tok + `"`
	for _, s := range append([]string{
		`{` + target + `,"response":{"status":201,"content_type":"application/json","headers":{"Location":"/payments/py_1"},"body":"eyJpZCI6InB5XzEifQ=="}}`,
		`{` + target + `,"response":{"status":204}}`,
		`{` + target + `,"response":{"status":99}}`,
		`{` + target + `,"response":{"status":200,"body":"not base64"}}`,
		`{` + target + `,"response":{"status":200,"headers":{"":"v"}}}`,
		`{` + target + `,"response":null}`,
		`{"principal":"cus_42","endpoint":"POST /payments","key":"live","token":"abc","response":{"status":200}}`,
		`{"principal":"cus_42","endpoint":"POST /payments","key":"nope","token":"1","response":{"status":200}}`,
	}, nearValid...) {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) { fuzzPost(t, n, "/v1/complete", body) })
}

func FuzzReleaseJSON(f *testing.F) {
	n, tok := fuzzNode(f)
	target := `"principal":"cus_42","endpoint":"POST /payments","key":"live","token":"` + tok + `"`
	for _, s := range append([]string{
		`{` + target + `}`,
		`{` + target + `,"reason":"handler failed"}`,
		`{` + target + `,"reason":"` + string(bytes.Repeat([]byte("r"), 256)) + `"}`,
		`{` + target + `,"lease_ms":100}`,
		`{"principal":"cus_42","endpoint":"POST /payments","key":"live","token":"18446744073709551615"}`,
		`{"principal":"cus_42","endpoint":"POST /payments","key":"live","token":"18446744073709551616"}`,
		`{"principal":"cus_42","endpoint":"POST /payments","key":"live","token":4}`,
	}, nearValid...) {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) { fuzzPost(t, n, "/v1/release", body) })
}

func FuzzExtendJSON(f *testing.F) {
	n, tok := fuzzNode(f)
	target := `"principal":"cus_42","endpoint":"POST /payments","key":"live","token":"` + tok + `"`
	for _, s := range append([]string{
		`{` + target + `,"lease_ms":60000}`,
		`{` + target + `,"lease_ms":100}`,
		`{` + target + `,"lease_ms":3600000}`,
		`{` + target + `}`,
		`{` + target + `,"lease_ms":99}`,
		`{` + target + `,"lease_ms":3600001}`,
		`{` + target + `,"lease_ms":1e3}`,
		`{` + target + `,"lease_ms":-9223372036854775808}`,
		`{"principal":"cus_42","endpoint":"POST /payments","key":"nope","token":"1","lease_ms":1000}`,
	}, nearValid...) {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) { fuzzPost(t, n, "/v1/extend", body) })
}

func FuzzRecordsQuery(f *testing.F) {
	n, _ := fuzzNode(f)
	for _, s := range []string{
		"principal=cus_42&endpoint=POST%20%2Fpayments&key=live",
		"principal=cus_42&endpoint=POST%20%2Fpayments&key=live&consistency=stale",
		"principal=cus_42&endpoint=POST%20%2Fpayments&key=live&consistency=linearizable",
		"principal=cus_42&endpoint=POST%20%2Fpayments&key=live&consistency=bogus",
		"principal=cus_42&endpoint=POST+%2Fpayments&key=nope",
		"principal=cus%FF&endpoint=e&key=k",
		"principal=cus_42&principal=x&endpoint=e&key=k",
		"principal=a&endpoint=e&key=%0A",
		"principal=a;endpoint=e;key=k",
		"%zz",
		"",
	} {
		f.Add(s, false)
		f.Add(s, true)
	}
	f.Fuzz(func(t *testing.T, query string, del bool) {
		method := "GET"
		if del {
			method = "DELETE"
		}
		req := httptest.NewRequest(method, "/v1/records", nil)
		req.URL.RawQuery = query
		checkAnswer(t, n, req)
	})
}
