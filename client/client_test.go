package client

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"reflect"
	"strings"
	"testing"
	"time"
)

// seen is one request as the fake server received it.
type seen struct {
	method, path string
	query        url.Values
	header       http.Header
	body         map[string]any // nil when there was no body
	rawBody      []byte
}

// fake serves every request with status, headers and body, and records it.
func fake(t *testing.T, status int, header map[string]string, body string) (*Client, *[]seen) {
	t.Helper()
	var got []seen
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		raw, _ := io.ReadAll(r.Body)
		s := seen{method: r.Method, path: r.URL.Path, query: r.URL.Query(), header: r.Header.Clone(), rawBody: raw}
		if len(raw) > 0 {
			if err := json.Unmarshal(raw, &s.body); err != nil {
				t.Errorf("request body is not a JSON object: %v: %s", err, raw)
			}
		}
		got = append(got, s)
		for k, v := range header {
			w.Header().Set(k, v)
		}
		w.WriteHeader(status)
		io.WriteString(w, body)
	}))
	t.Cleanup(srv.Close)
	c, err := New(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	return c, &got
}

func TestNewAddress(t *testing.T) {
	for _, tc := range []struct {
		addr, want string
		bad        bool
	}{
		{addr: "127.0.0.1:7070", want: "http://127.0.0.1:7070"},
		{addr: "node-1:7070", want: "http://node-1:7070"},
		{addr: "[::1]:7070", want: "http://[::1]:7070"},
		{addr: "http://10.0.0.1:7070/", want: "http://10.0.0.1:7070"},
		{addr: "https://idem.internal/prefix/", want: "https://idem.internal/prefix"},
		{addr: "", bad: true},
		{addr: "ftp://x:1", bad: true},
		{addr: "http://", bad: true},
		{addr: "http://x:1/?a=b", bad: true},
		// Several nodes of one cluster: the first is sent to first.
		{addr: "127.0.0.1:7070,127.0.0.2:7070", want: "http://127.0.0.1:7070"},
		{addr: " 127.0.0.2:7070 ,, 127.0.0.1:7070,", want: "http://127.0.0.2:7070"},
		{addr: ",", bad: true},
		{addr: "127.0.0.1:7070,ftp://x:1", bad: true},
	} {
		c, err := New(tc.addr)
		if tc.bad {
			if !errors.Is(err, ErrAddress) {
				t.Errorf("New(%q) = %v, want ErrAddress", tc.addr, err)
			}
			continue
		}
		if err != nil {
			t.Errorf("New(%q): %v", tc.addr, err)
			continue
		}
		if c.Addr() != tc.want {
			t.Errorf("New(%q).Addr() = %q, want %q", tc.addr, c.Addr(), tc.want)
		}
	}
}

// A client of several nodes sends to the one an answer names as leader,
// and skips a node it cannot connect to; it never sends a request that
// reached a node (here: answered 503) to another.
func TestSeveralNodesFollowTheLeader(t *testing.T) {
	hits := make([]int, 3)
	var srvs []*httptest.Server
	srvs = fakeNodes(t, 3, func(i int, w http.ResponseWriter, r *http.Request) {
		hits[i]++
		w.Header().Set(LeaderHeader, strings.TrimPrefix(srvs[2].URL, "http://"))
		if r.URL.Path == "/v1/unavailable" {
			writeUnavailable(w)
			return
		}
		io.WriteString(w, `{}`)
	})
	dead := httptest.NewServer(http.NotFoundHandler())
	deadURL := dead.URL
	dead.Close() // its port now refuses connections
	c, err := New(deadURL + "," + srvs[0].URL + "," + srvs[1].URL + "," + srvs[2].URL)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := c.Do(ctx, http.MethodGet, "/v1/x", nil, nil); err != nil {
		t.Fatalf("first request (dead node first): %v", err)
	}
	if hits[0] != 1 || c.Addr() != srvs[2].URL {
		t.Fatalf("after one request: hits %v, next %s; want one hit on the first live node, next the leader %s", hits, c.Addr(), srvs[2].URL)
	}
	for range 3 {
		if _, err := c.Do(ctx, http.MethodGet, "/v1/x", nil, nil); err != nil {
			t.Fatal(err)
		}
	}
	if hits[2] != 3 || hits[1] != 0 {
		t.Fatalf("hits %v: want the next three on the leader only", hits)
	}
	if _, err := c.Do(ctx, http.MethodGet, "/v1/unavailable", nil, nil); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("503: got %v, want ErrUnavailable", err)
	}
	if hits[2] != 4 || hits[0] != 1 || hits[1] != 0 {
		t.Fatalf("hits %v: a 503 must not be sent to another node", hits)
	}
}

// TestRequestShapes checks every route's method, path, query and body
// against docs/API.md, with exactly the documented members.
func TestRequestShapes(t *testing.T) {
	ctx := context.Background()
	scope := map[string]any{"principal": "cus_42", "endpoint": "POST /payments", "key": "retry-1"}
	with := func(extra map[string]any) map[string]any {
		m := map[string]any{}
		for k, v := range scope {
			m[k] = v
		}
		for k, v := range extra {
			m[k] = v
		}
		return m
	}
	scopeQuery := url.Values{"principal": {"cus_42"}, "endpoint": {"POST /payments"}, "key": {"retry-1"}}
	for _, tc := range []struct {
		name       string
		answer     string
		call       func(c *Client) error
		method     string
		path       string
		query      url.Values
		body       map[string]any
		noBodyJSON bool
		status     int // of the answer; 0: 200
	}{
		{
			name:   "claim with every member",
			answer: `{"outcome":"claimed","token":"17","attempt":1}`, status: http.StatusCreated,
			call: func(c *Client) error {
				_, err := c.Claim(ctx, ClaimRequest{Principal: "cus_42", Endpoint: "POST /payments", Key: "retry-1",
					Fingerprint: "9f86d0", LeaseMs: 30000, ClaimID: "a1b2", CorrelationID: "req-77"})
				return err
			},
			method: "POST", path: "/v1/claim",
			body: with(map[string]any{"fingerprint": "9f86d0", "lease_ms": 30000.0, "claim_id": "a1b2", "correlation_id": "req-77"}),
		},
		{
			name:   "claim leaves optional members out",
			answer: `{"outcome":"claimed","token":"17","attempt":1}`, status: http.StatusCreated,
			call: func(c *Client) error {
				_, err := c.Claim(ctx, ClaimRequest{Principal: "cus_42", Endpoint: "POST /payments", Key: "retry-1", Fingerprint: "9f86d0"})
				return err
			},
			method: "POST", path: "/v1/claim",
			body: with(map[string]any{"fingerprint": "9f86d0"}),
		},
		{
			name:   "complete",
			answer: `{"outcome":"completed","record":{"principal":"cus_42","endpoint":"POST /payments","key":"retry-1","state":"completed"}}`,
			call: func(c *Client) error {
				_, err := c.Complete(ctx, CompleteRequest{Principal: "cus_42", Endpoint: "POST /payments", Key: "retry-1", Token: "17",
					Response: Response{Status: 201, ContentType: "application/json",
						Headers: map[string]string{"Location": "/payments/py_1"}, Body: []byte(`{"id":"py_1"}`)}})
				return err
			},
			method: "POST", path: "/v1/complete",
			body: with(map[string]any{"token": "17", "response": map[string]any{
				"status": 201.0, "content_type": "application/json",
				"headers": map[string]any{"Location": "/payments/py_1"}, "body": "eyJpZCI6InB5XzEifQ=="}}),
		},
		{
			name:   "complete with an empty body sends an empty string",
			answer: `{"outcome":"completed","record":{"principal":"cus_42","endpoint":"POST /payments","key":"retry-1","state":"completed"}}`,
			call: func(c *Client) error {
				_, err := c.Complete(ctx, CompleteRequest{Principal: "cus_42", Endpoint: "POST /payments", Key: "retry-1", Token: "17",
					Response: Response{Status: 204}})
				return err
			},
			method: "POST", path: "/v1/complete",
			body: with(map[string]any{"token": "17", "response": map[string]any{"status": 204.0, "content_type": "", "body": ""}}),
		},
		{
			name:   "release",
			answer: `{"outcome":"released"}`,
			call: func(c *Client) error {
				_, err := c.Release(ctx, ReleaseRequest{Principal: "cus_42", Endpoint: "POST /payments", Key: "retry-1", Token: "17", Reason: "db down"})
				return err
			},
			method: "POST", path: "/v1/release",
			body: with(map[string]any{"token": "17", "reason": "db down"}),
		},
		{
			name:   "release without a reason",
			answer: `{"outcome":"released"}`,
			call: func(c *Client) error {
				_, err := c.Release(ctx, ReleaseRequest{Principal: "cus_42", Endpoint: "POST /payments", Key: "retry-1", Token: "17"})
				return err
			},
			method: "POST", path: "/v1/release",
			body: with(map[string]any{"token": "17"}),
		},
		{
			name:   "extend",
			answer: `{"outcome":"extended","lease_expires_at":"2025-01-02T03:04:05.678Z"}`,
			call: func(c *Client) error {
				_, err := c.Extend(ctx, ExtendRequest{Principal: "cus_42", Endpoint: "POST /payments", Key: "retry-1", Token: "17", LeaseMs: 60000})
				return err
			},
			method: "POST", path: "/v1/extend",
			body: with(map[string]any{"token": "17", "lease_ms": 60000.0}),
		},
		{
			name:   "get with the default consistency",
			answer: `{"record":{"principal":"cus_42","endpoint":"POST /payments","key":"retry-1","state":"in_progress"}}`,
			call: func(c *Client) error {
				_, err := c.Get(ctx, "cus_42", "POST /payments", "retry-1", "")
				return err
			},
			method: "GET", path: "/v1/records", query: scopeQuery,
		},
		{
			name:   "get stale",
			answer: `{"record":{"principal":"cus_42","endpoint":"POST /payments","key":"retry-1","state":"in_progress"}}`,
			call: func(c *Client) error {
				_, err := c.Get(ctx, "cus_42", "POST /payments", "retry-1", ConsistencyStale)
				return err
			},
			method: "GET", path: "/v1/records",
			query: url.Values{"principal": {"cus_42"}, "endpoint": {"POST /payments"}, "key": {"retry-1"}, "consistency": {"stale"}},
		},
		{
			name:   "delete",
			answer: `{"outcome":"deleted"}`,
			call: func(c *Client) error {
				_, err := c.Delete(ctx, "cus_42", "POST /payments", "retry-1")
				return err
			},
			method: "DELETE", path: "/v1/records", query: scopeQuery,
		},
		{
			name:   "config",
			answer: `{"retention":"24h0m0s","retention_seconds":86400,"lease_default_ms":30000,"scope":"endpoint","limits":{}}`,
			call:   func(c *Client) error { _, err := c.Config(ctx); return err },
			method: "GET", path: "/v1/config",
		},
		{
			name:   "cluster",
			answer: `{"leader":null,"nodes":[],"term":1,"commit_index":2,"applied_index":2}`,
			call:   func(c *Client) error { _, err := c.Cluster(ctx); return err },
			method: "GET", path: "/v1/cluster",
		},
		{
			name:   "join",
			answer: `{}`,
			call: func(c *Client) error {
				_, err := c.Join(ctx, JoinRequest{ID: "n2", RaftAddr: "10.0.0.2:7071", HTTPAddr: "10.0.0.2:7070"})
				return err
			},
			method: "POST", path: "/v1/cluster/join",
			body: map[string]any{"id": "n2", "raft_addr": "10.0.0.2:7071", "http_addr": "10.0.0.2:7070"},
		},
		{
			name:   "remove",
			answer: `{}`,
			call:   func(c *Client) error { _, err := c.Remove(ctx, "n2"); return err },
			method: "POST", path: "/v1/cluster/remove",
			body: map[string]any{"id": "n2"},
		},
		{
			name:   "healthz",
			answer: `{"status":"ok"}`,
			call:   func(c *Client) error { return c.Healthz(ctx) },
			method: "GET", path: "/healthz",
		},
		{
			name:   "readyz",
			answer: `{"status":"ready"}`,
			call:   func(c *Client) error { return c.Readyz(ctx) },
			method: "GET", path: "/readyz",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status := tc.status
			if status == 0 {
				status = http.StatusOK
			}
			c, got := fake(t, status, map[string]string{"Content-Type": "application/json"}, tc.answer)
			if err := tc.call(c); err != nil {
				t.Fatal(err)
			}
			if len(*got) != 1 {
				t.Fatalf("%d requests, want 1", len(*got))
			}
			r := (*got)[0]
			if r.method != tc.method || r.path != tc.path {
				t.Errorf("request %s %s, want %s %s", r.method, r.path, tc.method, tc.path)
			}
			if len(r.query) > 0 || len(tc.query) > 0 {
				if !reflect.DeepEqual(r.query, tc.query) {
					t.Errorf("query %v, want %v", r.query, tc.query)
				}
			}
			if !reflect.DeepEqual(r.body, tc.body) {
				t.Errorf("body %s\nwant %v", r.rawBody, tc.body)
			}
			if tc.body != nil && r.header.Get("Content-Type") != "application/json" {
				t.Errorf("Content-Type %q, want application/json", r.header.Get("Content-Type"))
			}
			if a := r.header.Get("Authorization"); a != "" {
				t.Errorf("Authorization %q sent without a token", a)
			}
		})
	}
}

func TestBearerToken(t *testing.T) {
	var auth []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		auth = append(auth, r.Header.Get("Authorization"))
		io.WriteString(w, `{"status":"ok"}`)
	}))
	defer srv.Close()
	c, err := New(srv.URL, WithToken("s3cret"), WithHTTPClient(srv.Client()))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := c.Healthz(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Config(ctx); err != nil {
		t.Fatal(err)
	}
	if want := []string{"Bearer s3cret", "Bearer s3cret"}; !reflect.DeepEqual(auth, want) {
		t.Fatalf("Authorization headers %q, want %q", auth, want)
	}
}

func TestClaimOutcomes(t *testing.T) {
	ctx := context.Background()
	req := ClaimRequest{Principal: "p", Endpoint: "e", Key: "k", Fingerprint: "ab"}

	t.Run("201 claimed", func(t *testing.T) {
		answer := `{"outcome":"claimed","token":"42","attempt":2,"created_at":"2025-01-02T03:04:05.678Z",` +
			`"expires_at":"2025-01-03T03:04:05.678Z","lease_expires_at":"2025-01-02T03:04:35.678Z"}`
		c, _ := fake(t, http.StatusCreated, nil, answer)
		res, err := c.Claim(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		created := time.Date(2025, 1, 2, 3, 4, 5, 678e6, time.UTC)
		if res.Outcome != OutcomeClaimed || res.Token != "42" || res.Attempt != 2 || res.StatusCode != 201 || res.Record != nil {
			t.Errorf("claim = %+v", res)
		}
		if !res.CreatedAt.Equal(created) || !res.ExpiresAt.Equal(created.Add(24*time.Hour)) ||
			!res.LeaseExpiresAt.Equal(created.Add(30*time.Second)) {
			t.Errorf("times %v %v %v", res.CreatedAt, res.ExpiresAt, res.LeaseExpiresAt)
		}
		if string(res.Raw) != answer {
			t.Errorf("Raw %s, want the answer as received", res.Raw)
		}
	})

	t.Run("200 replay", func(t *testing.T) {
		answer := `{"outcome":"replay","record":{"principal":"p","endpoint":"e","key":"k","state":"completed",` +
			`"fingerprint":"ab","attempt":1,"correlation_id":"req-77","created_at":"2025-01-02T03:04:05.678Z",` +
			`"expires_at":"2025-01-03T03:04:05.678Z","completed_at":"2025-01-02T03:04:06.000Z",` +
			`"response":{"status":201,"content_type":"application/json","headers":{"Location":"/payments/py_1"},"body":"eyJpZCI6InB5XzEifQ=="}}}`
		c, _ := fake(t, http.StatusOK, nil, answer)
		res, err := c.Claim(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		if res.Outcome != OutcomeReplay || res.StatusCode != 200 || res.Token != "" || res.Record == nil {
			t.Fatalf("replay = %+v", res)
		}
		r := res.Record
		want := Record{Principal: "p", Endpoint: "e", Key: "k", State: StateCompleted, Fingerprint: "ab", Attempt: 1,
			CorrelationID: "req-77",
			CreatedAt:     time.Date(2025, 1, 2, 3, 4, 5, 678e6, time.UTC),
			ExpiresAt:     time.Date(2025, 1, 3, 3, 4, 5, 678e6, time.UTC),
			CompletedAt:   time.Date(2025, 1, 2, 3, 4, 6, 0, time.UTC),
			Response: &Response{Status: 201, ContentType: "application/json",
				Headers: map[string]string{"Location": "/payments/py_1"}, Body: []byte(`{"id":"py_1"}`)}}
		if !reflect.DeepEqual(*r, want) {
			t.Errorf("record\n%+v\nwant\n%+v", *r, want)
		}
		if !r.LeaseExpiresAt.IsZero() {
			t.Errorf("lease_expires_at %v on a completed record", r.LeaseExpiresAt)
		}
	})

	// A won claim is 201 with a token. A 200, or no token, was taken for
	// one: the middleware ran the handler with no token to complete it
	// with, unprotected, where it answers 503 for an answer that is not a
	// store's.
	for name, a := range map[string]struct {
		status int
		body   string
	}{
		"claimed without a token": {http.StatusCreated, `{"outcome":"claimed","attempt":1}`},
		"claimed, empty token":    {http.StatusCreated, `{"outcome":"claimed","token":"","attempt":1}`},
		"claimed answered 200":    {http.StatusOK, `{"outcome":"claimed","token":"42","attempt":1}`},
		"claimed answered 202":    {http.StatusAccepted, `{"outcome":"claimed","token":"42","attempt":1}`},
	} {
		t.Run(name, func(t *testing.T) {
			c, _ := fake(t, a.status, nil, a.body)
			if res, err := c.Claim(ctx, req); !errors.Is(err, ErrBadAnswer) {
				t.Fatalf("claim = %+v, %v; want ErrBadAnswer", res, err)
			}
		})
	}

	t.Run("unknown outcome", func(t *testing.T) {
		c, _ := fake(t, http.StatusOK, nil, `{"outcome":"maybe"}`)
		if _, err := c.Claim(ctx, req); !errors.Is(err, ErrBadAnswer) {
			t.Fatalf("err = %v, want ErrBadAnswer", err)
		}
	})
}

// TestBodyBase64RoundTrip stores arbitrary bytes and reads them back through
// a fake that keeps the response exactly as it received it on the wire.
func TestBodyBase64RoundTrip(t *testing.T) {
	body := make([]byte, 0, 512)
	for i := range 256 {
		body = append(body, byte(i), byte(255-i))
	}
	var stored json.RawMessage
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/v1/complete":
			var req struct {
				Response json.RawMessage `json:"response"`
			}
			if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
				t.Error(err)
			}
			var resp struct {
				Body string `json:"body"`
			}
			json.Unmarshal(req.Response, &resp)
			if resp.Body != base64.StdEncoding.EncodeToString(body) {
				t.Errorf("body on the wire %q is not standard base64 of the bytes", resp.Body)
			}
			stored = req.Response
			w.Write([]byte(`{"outcome":"completed","record":{"principal":"p","endpoint":"e","key":"k","state":"completed","response":` + string(stored) + `}}`))
		case "/v1/records":
			w.Write([]byte(`{"record":{"principal":"p","endpoint":"e","key":"k","state":"completed","response":` + string(stored) + `}}`))
		}
	}))
	defer srv.Close()
	c, err := New(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	done, err := c.Complete(ctx, CompleteRequest{Principal: "p", Endpoint: "e", Key: "k", Token: "1",
		Response: Response{Status: 200, ContentType: "application/octet-stream", Body: body}})
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(done.Record.Response.Body, body) {
		t.Errorf("complete answered another body")
	}
	rec, err := c.Get(ctx, "p", "e", "k", "")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(rec.Response.Body, body) {
		t.Errorf("get returned %x, want %x", rec.Response.Body, body)
	}
}

func TestProblems(t *testing.T) {
	ctx := context.Background()
	req := ClaimRequest{Principal: "p", Endpoint: "e", Key: "k", Fingerprint: "ab"}
	problemJSON := map[string]string{"Content-Type": "application/problem+json"}
	future := time.Now().Add(90 * time.Second).UTC().Format(http.TimeFormat)
	for _, tc := range []struct {
		name     string
		status   int
		header   map[string]string
		body     string
		sentinel error
		want     Problem
	}{
		{
			name: "409 in_progress with its lease and Retry-After", status: 409,
			header: map[string]string{"Content-Type": "application/problem+json", "Retry-After": "3"},
			body: `{"type":"https://idem.dev/problems/in_progress","title":"Another attempt is in progress","status":409,` +
				`"detail":"another attempt holds the lease","code":"in_progress","lease_expires_at":"2025-01-02T03:04:35.678Z"}`,
			sentinel: ErrInProgress,
			want: Problem{Type: "https://idem.dev/problems/in_progress", Title: "Another attempt is in progress", Status: 409,
				Detail: "another attempt holds the lease", Code: CodeInProgress,
				LeaseExpiresAt: time.Date(2025, 1, 2, 3, 4, 35, 678e6, time.UTC), RetryAfter: 3 * time.Second},
		},
		{
			name: "422 fingerprint_mismatch", status: 422, header: problemJSON,
			body:     `{"type":"t","title":"Key reused with a different request","status":422,"detail":"d","code":"fingerprint_mismatch"}`,
			sentinel: ErrFingerprintMismatch,
			want:     Problem{Type: "t", Title: "Key reused with a different request", Status: 422, Detail: "d", Code: CodeFingerprintMismatch},
		},
		{
			name: "429 quota_exceeded with Retry-After", status: 429,
			header:   map[string]string{"Content-Type": "application/problem+json", "Retry-After": "60"},
			body:     `{"type":"t","title":"Live-key quota exceeded","status":429,"detail":"d","code":"quota_exceeded"}`,
			sentinel: ErrQuotaExceeded,
			want:     Problem{Type: "t", Title: "Live-key quota exceeded", Status: 429, Detail: "d", Code: CodeQuotaExceeded, RetryAfter: time.Minute},
		},
		{
			name: "401 unauthorized", status: 401, header: problemJSON,
			body:     `{"type":"t","title":"Unauthorized","status":401,"detail":"a valid Authorization: Bearer token is required","code":"unauthorized"}`,
			sentinel: ErrUnauthorized,
			want:     Problem{Type: "t", Title: "Unauthorized", Status: 401, Detail: "a valid Authorization: Bearer token is required", Code: CodeUnauthorized},
		},
		{
			name: "502 from a proxy that is not a problem document", status: 502,
			header: map[string]string{"Content-Type": "text/html"},
			body:   "<html>bad gateway</html>\n",
			want:   Problem{Title: "Bad Gateway", Status: 502, Detail: "<html>bad gateway</html>"},
		},
		{
			// More seconds than a Duration holds came out negative (an
			// overflow): a caller waiting it out retried at once.
			name: "503 from a proxy with a Retry-After beyond a Duration", status: 503,
			header:   map[string]string{"Retry-After": "9223372037"},
			body:     `{"type":"t","title":"Service unavailable","status":503,"detail":"busy","code":"unavailable"}`,
			sentinel: ErrUnavailable,
			want: Problem{Type: "t", Title: "Service unavailable", Status: 503, Detail: "busy", Code: CodeUnavailable,
				RetryAfter: time.Duration(math.MaxInt64/time.Second) * time.Second},
		},
		{
			name: "503 from a proxy with a Retry-After beyond an int64", status: 503,
			header:   map[string]string{"Retry-After": "99999999999999999999"},
			body:     `{"type":"t","title":"Service unavailable","status":503,"detail":"busy","code":"unavailable"}`,
			sentinel: ErrUnavailable,
			want: Problem{Type: "t", Title: "Service unavailable", Status: 503, Detail: "busy", Code: CodeUnavailable,
				RetryAfter: time.Duration(math.MaxInt64/time.Second) * time.Second},
		},
		{
			name: "503 with Retry-After as an HTTP date", status: 503,
			header:   map[string]string{"Retry-After": future},
			body:     `{"type":"t","title":"Service unavailable","status":503,"detail":"no leader","code":"unavailable"}`,
			sentinel: ErrUnavailable,
			want:     Problem{Type: "t", Title: "Service unavailable", Status: 503, Detail: "no leader", Code: CodeUnavailable},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, _ := fake(t, tc.status, tc.header, tc.body)
			res, err := c.Claim(ctx, req)
			if res != nil {
				t.Fatalf("claim answered %+v on %d", res, tc.status)
			}
			var p *Problem
			if !errors.As(err, &p) {
				t.Fatalf("err = %T %v, want a *Problem", err, err)
			}
			if string(p.Raw) != tc.body {
				t.Errorf("Raw %q, want %q", p.Raw, tc.body)
			}
			got := *p
			got.Raw = nil
			if strings.Contains(tc.name, "HTTP date") {
				if got.RetryAfter < 80*time.Second || got.RetryAfter > 91*time.Second {
					t.Errorf("RetryAfter %v from %q, want about 90s", got.RetryAfter, future)
				}
				got.RetryAfter = 0
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("problem\n%+v\nwant\n%+v", got, tc.want)
			}
			if tc.sentinel != nil && !errors.Is(err, tc.sentinel) {
				t.Errorf("errors.Is(%v, %v) = false", err, tc.sentinel)
			}
			if errors.Is(err, ErrNotFound) {
				t.Errorf("errors.Is(%v, ErrNotFound) = true", err)
			}
		})
	}
}

func TestProblemError(t *testing.T) {
	p := &Problem{Status: 404, Code: CodeNotFound, Title: "Not found", Detail: "no live record"}
	if got, want := p.Error(), "client: 404 not_found: no live record"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
	p = &Problem{Status: 502, Title: "Bad Gateway"}
	if got, want := p.Error(), "client: 502: Bad Gateway"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
}

func TestReadyzNotReady(t *testing.T) {
	c, _ := fake(t, http.StatusServiceUnavailable, map[string]string{"Content-Type": "application/problem+json"},
		`{"type":"t","title":"Service unavailable","status":503,"detail":"no leader","code":"unavailable"}`)
	err := c.Readyz(context.Background())
	if !errors.Is(err, ErrUnavailable) {
		t.Fatalf("Readyz = %v, want unavailable", err)
	}
}

func TestGetNotFound(t *testing.T) {
	c, _ := fake(t, http.StatusNotFound, map[string]string{"Content-Type": "application/problem+json"},
		`{"type":"t","title":"Not found","status":404,"detail":"no live record","code":"not_found"}`)
	rec, err := c.Get(context.Background(), "p", "e", "k", "")
	if rec != nil || !errors.Is(err, ErrNotFound) {
		t.Fatalf("Get = %v, %v; want not_found", rec, err)
	}
}

func TestContextDeadline(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		<-r.Context().Done()
	}))
	defer srv.Close()
	c, err := New(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := c.Healthz(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Healthz = %v, want a deadline error", err)
	}
}

func TestDoReturnsRawAnswer(t *testing.T) {
	answer := "# HELP idem_claims_total x\nidem_claims_total 3\n"
	c, got := fake(t, http.StatusOK, map[string]string{"Content-Type": "text/plain"}, answer)
	raw, err := c.Do(context.Background(), http.MethodGet, "/metrics", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if string(raw) != answer || (*got)[0].path != "/metrics" {
		t.Fatalf("Do = %q from %s", raw, (*got)[0].path)
	}
}

func TestPathPrefix(t *testing.T) {
	var path string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		path = r.URL.Path
		io.WriteString(w, `{"status":"ok"}`)
	}))
	defer srv.Close()
	c, err := New(srv.URL + "/idem/")
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Healthz(context.Background()); err != nil {
		t.Fatal(err)
	}
	if path != "/idem/healthz" {
		t.Fatalf("path %q, want /idem/healthz", path)
	}
}

// A node that answers 503 without naming a leader (cut off from the
// majority, or removed) keeps no client: the request is not sent again,
// but the next one goes to the next node.
func TestSeveralNodesLeaveANodeWithoutALeader(t *testing.T) {
	hits := make([]int, 2)
	srvs := fakeNodes(t, 2, func(i int, w http.ResponseWriter, r *http.Request) {
		hits[i]++
		if i == 0 {
			writeUnavailable(w)
			return
		}
		io.WriteString(w, `{}`)
	})
	c, err := New(srvs[0].URL + "," + srvs[1].URL)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Do(context.Background(), http.MethodPost, "/v1/claim", nil, map[string]string{}); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("first: %v, want the 503", err)
	}
	if hits[0] != 1 || hits[1] != 0 {
		t.Fatalf("hits %v: the 503 must not be sent again elsewhere", hits)
	}
	if _, err := c.Do(context.Background(), http.MethodPost, "/v1/claim", nil, map[string]string{}); err != nil {
		t.Fatalf("second: %v", err)
	}
	if hits[0] != 1 || hits[1] != 1 {
		t.Fatalf("hits %v: the second request goes to the other node", hits)
	}
}

// fakeNodes starts n HTTP servers standing for nodes; handle answers each
// request with the index of the node it reached.
func fakeNodes(t *testing.T, n int, handle func(i int, w http.ResponseWriter, r *http.Request)) []*httptest.Server {
	t.Helper()
	srvs := make([]*httptest.Server, n)
	for i := range n {
		srvs[i] = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { handle(i, w, r) }))
		t.Cleanup(srvs[i].Close)
	}
	return srvs
}

// writeUnavailable answers as a node without a leader does: 503 unavailable.
func writeUnavailable(w http.ResponseWriter) {
	w.Header().Set("Content-Type", "application/problem+json")
	w.WriteHeader(http.StatusServiceUnavailable)
	io.WriteString(w, `{"status":503,"code":"unavailable"}`)
}

// A HEAD answer declares the length of the body a GET would have (net/http
// sets Content-Length from what the handler wrote, as GET /v1/records
// does under HEAD) and has none: Do must not take the missing body for a
// truncated one.
func TestDoHeadAnswer(t *testing.T) {
	c, got := fake(t, http.StatusOK, map[string]string{"Content-Type": "application/json"}, `{"record":{"state":"completed"}}`)
	raw, err := c.Do(context.Background(), http.MethodHead, "/v1/records", url.Values{"principal": {"p"}, "endpoint": {"e"}, "key": {"k"}}, nil)
	if err != nil {
		t.Fatalf("HEAD: %v", err)
	}
	if len(raw) != 0 || (*got)[0].method != http.MethodHead {
		t.Fatalf("HEAD = %q (%s)", raw, (*got)[0].method)
	}
}

// An address refused for the user info it carries does not print its
// password: the CLI writes the error to a terminal, and idem proxy's
// --store to its log (a leak walk: "http://u:pass@node:7070" came back
// whole in `client: bad address "http://u:pass@node:7070"`).
func TestBadAddressErrorHidesThePassword(t *testing.T) {
	for _, addr := range []string{
		"http://ops:hunter2-secret@10.0.0.1:7070",
		"ops:hunter2-secret@10.0.0.1:7070",
		"https://ops:hunter2-secret@idem.internal/prefix",
		"http://ops:hunter2-secret@10.0.0.1:bad",
		"127.0.0.1:7070,http://ops:hunter2-secret@10.0.0.2:7070",
		// A password holding '/', '?' or '#' (base64 has '/') ends the
		// host where url.Parse looks for it: its error quoted it whole.
		"http://ops:hunter2-secret/x@10.0.0.1:7070",
		"ops:hunter2/secret@10.0.0.1:7070",
		"http://ops:hunter2?secret@10.0.0.1:7070",
		"http://ops:hunter2#secret@10.0.0.1:7070",
		// A password of digits (or none) before its '/', '?' or '#' is a
		// valid port, and url.Parse takes the rest for a path, query or
		// fragment: accepted (a client of host "ops"), or refused with
		// the address printed whole.
		"http://ops:2024/hunter2secret@10.0.0.1:7070",
		"http://ops:/hunter2secret@10.0.0.1:7070",
		"http://ops:2024?hunter2secret@10.0.0.1:7070",
		"http://ops:2024#hunter2secret@10.0.0.1:7070",
		"ops:2024/hunter2secret@10.0.0.1:7070",
	} {
		_, err := New(addr)
		if !errors.Is(err, ErrAddress) {
			t.Errorf("New(%q) = %v, want ErrAddress", addr, err)
			continue
		}
		if strings.Contains(err.Error(), "hunter2") || strings.Contains(err.Error(), "secret") {
			t.Errorf("New(%q): the error shows the password: %v", addr, err)
		}
		if !strings.Contains(err.Error(), "ops:xxxxx@") {
			t.Errorf("New(%q): the error does not name the address it refused: %v", addr, err)
		}
	}
}

// A bearer token of 2 MiB was sent: the node, reading at most 1 MiB of
// headers (net/http's default, which idem serve keeps), answered 431 or
// dropped the connection, and the caller got an unknown outcome ("maybe
// applied", retryable) for a request that could never work. New refuses a
// token over MaxTokenBytes before any request; one of MaxTokenBytes
// reaches a server with net/http's default header limit whole.
func TestNewRefusesATokenNoNodeCouldRead(t *testing.T) {
	_, err := New("127.0.0.1:7070", WithToken(strings.Repeat("t", 2<<20)))
	if !errors.Is(err, ErrToken) || !strings.Contains(err.Error(), "2097152 bytes, more than MaxTokenBytes (65536)") {
		t.Fatalf("New with a 2 MiB token: %v, want ErrToken naming both sizes", err)
	}
	if _, err := New("127.0.0.1:7070", WithToken(strings.Repeat("t", MaxTokenBytes+1))); !errors.Is(err, ErrToken) {
		t.Fatalf("New with a token of MaxTokenBytes+1: %v, want ErrToken", err)
	}
	// A token read from a file with its line end failed every request in
	// net/http ("invalid value for header"), naming neither it nor the byte.
	for _, tok := range []string{"sk_live_abc\n", "sk_live_abc\r\n", "sk\x00live", "sk\x7f"} {
		_, err := New("127.0.0.1:7070", WithToken(tok))
		if !errors.Is(err, ErrToken) || !strings.Contains(err.Error(), "control character") {
			t.Fatalf("New with token %q: %v, want ErrToken naming the control character", tok, err)
		}
	}

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan int, 1)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- len(strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer "))
		io.WriteString(w, `{"status":"ok"}`)
	})}
	go srv.Serve(ln)
	defer srv.Close()
	c, err := New(ln.Addr().String(), WithToken(strings.Repeat("t", MaxTokenBytes)))
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Healthz(context.Background()); err != nil {
		t.Fatalf("a token of MaxTokenBytes: %v", err)
	}
	if n := <-got; n != MaxTokenBytes {
		t.Fatalf("the server read a token of %d bytes, want %d", n, MaxTokenBytes)
	}
}
