// Package conformance is a black-box test suite of an idempotent HTTP front:
// the Go middleware around a handler, or `idem proxy` in front of a service.
// It checks, over real HTTP, the MUSTs and SHOULDs of
// draft-ietf-httpapi-idempotency-key-header-07 that a resource server has
// and a client can observe (the key is one structured-field string; a
// missing key is 400 and a reused one 422, both problem documents whose type
// links to documentation; a retry during processing is 409; a processed
// request's answer is returned again), and idem's profile of it
// (docs/API.md, "idem proxy"): a missing or
// malformed key is a 400 problem, a key on GET is ignored, a retry replays
// the stored answer without running the handler, a concurrent duplicate gets
// 409, the same key with another request gets 422 and leaves the original
// alone, 4xx answers are replayed and 5xx ones are not stored, an answer too
// large to store is replayed without its body, a client that disconnects
// still finds its answer, a key runs again once it expires, and a front
// whose store is down answers 503 without running the handler.
//
// The front must forward every path to an Upstream, which counts how often
// each path ran:
//
//	up := conformance.NewUpstream()
//	front := httptest.NewServer(idem(up))   // or idem proxy --upstream <up's URL>
//	conformance.Run(t, conformance.Target{URL: front.URL, Upstream: up})
package conformance

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// Target is the front under test.
type Target struct {
	// URL is the base URL of the front, with a store that keeps records for
	// at least a minute.
	URL string
	// Upstream is the fixture behind every front of this Target.
	Upstream *Upstream
	// DownURL is a front like URL whose store is unreachable; "" skips the
	// store-down test.
	DownURL string
	// ShortRetentionURL is a front like URL whose store keeps records for
	// ShortRetention only (a few seconds); "" skips the expiry test.
	ShortRetentionURL string
	ShortRetention    time.Duration
	// MaxStoredBody is the largest answer body the front stores; default
	// 65,536 (the store's default --max-response-bytes).
	MaxStoredBody int
	// Header is added to every request (e.g. the principal header a proxy
	// reads, or credentials the front needs).
	Header http.Header
	// Client sends the requests; default a new http.Client.
	Client *http.Client
}

// The headers of the profile.
const (
	headerKey         = "Idempotency-Key"
	headerReplayed    = "Idempotency-Replayed"
	headerBodyOmitted = "Idempotency-Body-Omitted"
)

// Run runs the suite against tg; its tests run in parallel.
func Run(t *testing.T, tg Target) {
	t.Helper()
	if tg.URL == "" || tg.Upstream == nil {
		t.Fatal("conformance: Target.URL and Target.Upstream are required")
	}
	if tg.MaxStoredBody == 0 {
		tg.MaxStoredBody = 65536
	}
	if tg.Client == nil {
		tg.Client = &http.Client{Timeout: 30 * time.Second}
	}
	s := &suite{tg: tg}
	for _, c := range []struct {
		name string
		f    func(t *testing.T)
	}{
		{"KeyRequiredOnPostAndPatch", s.keyRequired},
		{"MalformedKeysAreRefused", s.malformedKeys},
		{"KeyOnGetIsIgnored", s.keyOnGetIgnored},
		{"RetryReplaysWithoutRunning", s.retryReplays},
		{"QuotedAndBareKeysAreOneKey", s.quotedAndBare},
		{"HeaderNameIsCaseInsensitive", s.headerCase},
		{"TwoKeysRunTwice", s.twoKeys},
		{"KeyIsBoundToItsEndpoint", s.keyPerEndpoint},
		{"ReuseWithAnotherBodyIs422AndKeepsTheOriginal", s.reuseOtherBody},
		{"ConcurrentDuplicateIs409", s.concurrentDuplicate},
		{"ClientErrorsAreReplayed", s.clientErrorsReplayed},
		{"ServerErrorsAreNotStored", s.serverErrorsNotStored},
		{"OversizedAnswerIsReplayedWithoutBody", s.oversized},
		{"StreamedAnswerIsNeverReplayedAsComplete", s.streamed},
		{"ClientDisconnectDoesNotLoseTheAnswer", s.disconnect},
		{"KeyRunsAgainAfterExpiry", s.expiry},
		{"StoreDownIs503AndNothingRuns", s.storeDown},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			c.f(t)
		})
	}
}

type suite struct{ tg Target }

// request is one request of a test. keys are Idempotency-Key field lines
// (none: no header); keyName overrides the header's spelling.
type request struct {
	base, method, path, body, contentType string
	keys                                  []string
	keyName                               string
	ctx                                   context.Context
}

type reply struct {
	status int
	header http.Header
	body   []byte
}

func (s *suite) do(t *testing.T, q request) (*reply, error) {
	t.Helper()
	base := q.base
	if base == "" {
		base = s.tg.URL
	}
	method := q.method
	if method == "" {
		method = http.MethodPost
	}
	ctx := q.ctx
	if ctx == nil {
		ctx = context.Background()
	}
	req, err := http.NewRequestWithContext(ctx, method, base+q.path, strings.NewReader(q.body))
	if err != nil {
		t.Fatalf("conformance: %v", err)
	}
	// A client presents a credential: a front keys its records by the
	// caller's (idem's middleware and proxy refuse a keyed request with
	// none, rather than share one tenant among every caller).
	req.Header.Set("Authorization", "Bearer conformance-client")
	for k, v := range s.tg.Header {
		req.Header[k] = v
	}
	ct := q.contentType
	if ct == "" {
		ct = "application/json"
	}
	req.Header.Set("Content-Type", ct)
	if len(q.keys) > 0 {
		name := q.keyName
		if name == "" {
			name = headerKey
		}
		// Set directly: Go writes each value as its own field line, in
		// the spelling given.
		req.Header[name] = q.keys
	}
	resp, err := s.tg.Client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	return &reply{status: resp.StatusCode, header: resp.Header, body: body}, nil
}

func (s *suite) must(t *testing.T, q request) *reply {
	t.Helper()
	r, err := s.do(t, q)
	if err != nil {
		t.Fatalf("%s %s: %v", q.method, q.path, err)
	}
	return r
}

func unique(prefix string) string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return prefix + "-" + hex.EncodeToString(b[:])
}

func path(name string) string { return "/conformance/" + unique(name) }

func quoted(key string) string { return `"` + key + `"` }

func (s *suite) runs(t *testing.T, p string, want int) {
	t.Helper()
	if got := s.tg.Upstream.Runs(p); got != want {
		t.Errorf("the handler of %s ran %d times, want %d", p, got, want)
	}
}

func wantStatus(t *testing.T, r *reply, want int, what string) {
	t.Helper()
	if r.status != want {
		t.Fatalf("%s: status %d, want %d (body %s)", what, r.status, want, truncate(r.body))
	}
}

func truncate(b []byte) string {
	if len(b) > 300 {
		return string(b[:300]) + "…"
	}
	return string(b)
}

// wantProblem checks an RFC 9457 problem document with a code member, as
// the draft asks for its error answers (a type that links to the docs).
func wantProblem(t *testing.T, r *reply, status int, code string) {
	t.Helper()
	wantStatus(t, r, status, "problem "+code)
	if ct := r.header.Get("Content-Type"); !strings.HasPrefix(ct, "application/problem+json") {
		t.Errorf("problem %s: Content-Type %q, want application/problem+json", code, ct)
	}
	var p struct {
		Type, Title, Detail, Code string
		Status                    int
	}
	if err := json.Unmarshal(r.body, &p); err != nil {
		t.Fatalf("problem %s: body is not JSON: %v (%s)", code, err, truncate(r.body))
	}
	if !strings.HasPrefix(p.Type, "https://") || p.Title == "" || p.Status != status || p.Detail == "" {
		t.Errorf("problem %s: want type (a link), title, status %d and detail, got %+v", code, status, p)
	}
	if code != "" && p.Code != code {
		t.Errorf("problem: code %q, want %q", p.Code, code)
	}
	if r.header.Get(headerReplayed) != "" {
		t.Errorf("problem %s marked as a replay", code)
	}
}

func wantRetryAfter(t *testing.T, r *reply) {
	t.Helper()
	if n, err := strconv.Atoi(r.header.Get("Retry-After")); err != nil || n < 1 {
		t.Errorf("Retry-After %q, want whole seconds >= 1", r.header.Get("Retry-After"))
	}
}

func wantReplayOf(t *testing.T, first, again *reply) {
	t.Helper()
	if first.header.Get(headerReplayed) != "" {
		t.Errorf("the first answer is marked %s", headerReplayed)
	}
	if again.header.Get(headerReplayed) != "true" {
		t.Errorf("the retry is not marked %s: true (headers %v)", headerReplayed, again.header)
	}
	if again.status != first.status {
		t.Errorf("replayed status %d, first %d", again.status, first.status)
	}
	if !bytes.Equal(again.body, first.body) {
		t.Errorf("replayed body differs:\n%s\nfirst:\n%s", truncate(again.body), truncate(first.body))
	}
	for _, h := range []string{"Content-Type", "Location", "X-Upstream-Run"} {
		if again.header.Get(h) != first.header.Get(h) {
			t.Errorf("replayed %s %q, first %q", h, again.header.Get(h), first.header.Get(h))
		}
	}
	if a, b := again.header.Values("Set-Cookie"), first.header.Values("Set-Cookie"); strings.Join(a, "\n") != strings.Join(b, "\n") {
		t.Errorf("replayed Set-Cookie %q, first %q (a header sent twice comes back twice)", a, b)
	}
}

// keyRequired: the draft's SHOULD: a missing key on an operation that
// needs it is 400 with a problem that links to the documentation.
func (s *suite) keyRequired(t *testing.T) {
	for _, m := range []string{http.MethodPost, http.MethodPatch} {
		p := path("missing-" + strings.ToLower(m))
		wantProblem(t, s.must(t, request{method: m, path: p, body: `{"amount":1}`}), http.StatusBadRequest, "idempotency_key_missing")
		s.runs(t, p, 0)
	}
}

func (s *suite) malformedKeys(t *testing.T) {
	cases := map[string][]string{
		"empty string":         {`""`},
		"empty field":          {""},
		"256 bytes":            {quoted(strings.Repeat("k", 256))},
		"sent twice":           {quoted("a"), quoted("a")},
		"a list of two":        {`"a", "b"`},
		"unterminated string":  {`"abc`},
		"non-ASCII in string":  {"\"caf\xc3\xa9\""},
		"a bare key with a sp": {"a b"},
	}
	for name, keys := range cases {
		p := path("malformed")
		r := s.must(t, request{path: p, keys: keys, body: `{}`})
		if r.status != http.StatusBadRequest {
			t.Errorf("key %s (%q): status %d, want 400", name, keys, r.status)
			continue
		}
		wantProblem(t, r, http.StatusBadRequest, "idempotency_key_invalid")
		s.runs(t, p, 0)
	}
	p := path("longest")
	wantStatus(t, s.must(t, request{path: p, keys: []string{quoted(strings.Repeat("k", 255))}, body: `{}`}), http.StatusCreated, "a 255-byte key")
	s.runs(t, p, 1)
}

func (s *suite) keyOnGetIgnored(t *testing.T) {
	p := path("get")
	key := quoted(unique("k"))
	for i := 1; i <= 2; i++ {
		r := s.must(t, request{method: http.MethodGet, path: p, keys: []string{key}})
		if r.header.Get(headerReplayed) != "" {
			t.Errorf("GET %d answered as a replay", i)
		}
	}
	s.runs(t, p, 2)
}

func (s *suite) retryReplays(t *testing.T) {
	p := path("retry")
	q := request{path: p, keys: []string{quoted(unique("k"))}, body: `{"amount":100}`}
	first := s.must(t, q)
	wantStatus(t, first, http.StatusCreated, "first")
	for range 2 {
		wantReplayOf(t, first, s.must(t, q))
	}
	s.runs(t, p, 1)
}

func (s *suite) quotedAndBare(t *testing.T) {
	p := path("forms")
	key := unique("k")
	first := s.must(t, request{path: p, keys: []string{quoted(key)}, body: `{}`})
	wantStatus(t, first, http.StatusCreated, "quoted")
	wantReplayOf(t, first, s.must(t, request{path: p, keys: []string{key}, body: `{}`}))
	s.runs(t, p, 1)
	// An escaped quote is part of the key.
	p2 := path("escaped")
	esc := s.must(t, request{path: p2, keys: []string{`"a\"b-` + key + `"`}, body: `{}`})
	wantStatus(t, esc, http.StatusCreated, "escaped")
	wantReplayOf(t, esc, s.must(t, request{path: p2, keys: []string{`"a\"b-` + key + `"`}, body: `{}`}))
	s.runs(t, p2, 1)
}

func (s *suite) headerCase(t *testing.T) {
	p := path("case")
	key := quoted(unique("k"))
	first := s.must(t, request{path: p, keys: []string{key}, keyName: "idempotency-key", body: `{}`})
	wantStatus(t, first, http.StatusCreated, "lower-case name")
	wantReplayOf(t, first, s.must(t, request{path: p, keys: []string{key}, keyName: "IDEMPOTENCY-KEY", body: `{}`}))
	s.runs(t, p, 1)
}

func (s *suite) twoKeys(t *testing.T) {
	p := path("two")
	for _, k := range []string{unique("a"), unique("b")} {
		r := s.must(t, request{path: p, keys: []string{quoted(k)}, body: `{"same":true}`})
		wantStatus(t, r, http.StatusCreated, "key "+k)
		if r.header.Get(headerReplayed) != "" {
			t.Errorf("key %s answered as a replay", k)
		}
	}
	s.runs(t, p, 2)
}

func (s *suite) keyPerEndpoint(t *testing.T) {
	key := quoted(unique("k"))
	for _, p := range []string{path("endpoint-a"), path("endpoint-b")} {
		r := s.must(t, request{path: p, keys: []string{key}, body: `{}`})
		wantStatus(t, r, http.StatusCreated, p)
		s.runs(t, p, 1)
	}
}

func (s *suite) reuseOtherBody(t *testing.T) {
	p := path("reuse")
	key := quoted(unique("k"))
	first := s.must(t, request{path: p, keys: []string{key}, body: `{"amount":100}`})
	wantStatus(t, first, http.StatusCreated, "first")
	wantProblem(t, s.must(t, request{path: p, keys: []string{key}, body: `{"amount":999}`}), http.StatusUnprocessableEntity, "fingerprint_mismatch")
	wantProblem(t, s.must(t, request{path: p + "?x=1", keys: []string{key}, body: `{"amount":100}`}), http.StatusUnprocessableEntity, "fingerprint_mismatch")
	wantReplayOf(t, first, s.must(t, request{path: p, keys: []string{key}, body: `{"amount":100}`}))
	s.runs(t, p, 1)
}

func (s *suite) concurrentDuplicate(t *testing.T) {
	p := path("concurrent")
	q := request{path: p + "?sleep=1500ms", keys: []string{quoted(unique("k"))}, body: `{}`}
	var first *reply
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		r, err := s.do(t, q)
		if err != nil {
			t.Errorf("first: %v", err)
			return
		}
		first = r
	}()
	deadline := time.Now().Add(5 * time.Second)
	for s.tg.Upstream.Runs(p) == 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	dup := s.must(t, q)
	wantProblem(t, dup, http.StatusConflict, "in_progress")
	wantRetryAfter(t, dup)
	wg.Wait()
	if first == nil {
		return
	}
	wantStatus(t, first, http.StatusCreated, "first")
	wantReplayOf(t, first, s.must(t, q))
	s.runs(t, p, 1)
}

func (s *suite) clientErrorsReplayed(t *testing.T) {
	for _, st := range []int{http.StatusBadRequest, http.StatusNotFound, http.StatusConflict} {
		p := path("status-" + strconv.Itoa(st))
		q := request{path: p + "?status=" + strconv.Itoa(st), keys: []string{quoted(unique("k"))}, body: `{}`}
		first := s.must(t, q)
		wantStatus(t, first, st, "first")
		wantReplayOf(t, first, s.must(t, q))
		s.runs(t, p, 1)
	}
}

func (s *suite) serverErrorsNotStored(t *testing.T) {
	for _, st := range []int{http.StatusInternalServerError, http.StatusServiceUnavailable} {
		p := path("status-" + strconv.Itoa(st))
		q := request{path: p + "?status=" + strconv.Itoa(st), keys: []string{quoted(unique("k"))}, body: `{}`}
		for i := 1; i <= 2; i++ {
			r := s.must(t, q)
			wantStatus(t, r, st, "attempt "+strconv.Itoa(i))
			if r.header.Get(headerReplayed) != "" {
				t.Errorf("a %d was replayed", st)
			}
		}
		s.runs(t, p, 2)
	}
}

func (s *suite) oversized(t *testing.T) {
	p := path("oversized")
	n := s.tg.MaxStoredBody + 1000
	q := request{path: p + "?bytes=" + strconv.Itoa(n), keys: []string{quoted(unique("k"))}, body: `{}`}
	first := s.must(t, q)
	wantStatus(t, first, http.StatusCreated, "first")
	if len(first.body) != n {
		t.Errorf("the first caller got %d bytes, want all %d", len(first.body), n)
	}
	again := s.must(t, q)
	wantStatus(t, again, http.StatusCreated, "replay")
	if again.header.Get(headerReplayed) != "true" || again.header.Get(headerBodyOmitted) == "" {
		t.Errorf("the replay must say it is one and that its body is omitted: %v", again.header)
	}
	if len(again.body) != 0 {
		t.Errorf("the replay has %d bytes of body, want none", len(again.body))
	}
	if again.header.Get("Location") != first.header.Get("Location") {
		t.Errorf("replayed Location %q, first %q", again.header.Get("Location"), first.header.Get("Location"))
	}
	s.runs(t, p, 1)
}

func (s *suite) streamed(t *testing.T) {
	p := path("stream")
	q := request{path: p + "?flush=1", keys: []string{quoted(unique("k"))}, body: `{}`}
	first := s.must(t, q)
	wantStatus(t, first, http.StatusCreated, "first")
	again := s.must(t, q)
	wantStatus(t, again, http.StatusCreated, "replay")
	if again.header.Get(headerReplayed) != "true" || again.header.Get(headerBodyOmitted) == "" {
		t.Errorf("a streamed answer must replay marked as incomplete: %v", again.header)
	}
	if bytes.Equal(again.body, first.body) && len(first.body) > 0 {
		t.Errorf("a streamed answer was replayed as if complete")
	}
	s.runs(t, p, 1)
}

func (s *suite) disconnect(t *testing.T) {
	p := path("disconnect")
	q := request{path: p + "?sleep=700ms", keys: []string{quoted(unique("k"))}, body: `{"amount":5}`}
	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Millisecond)
	defer cancel()
	cut := q
	cut.ctx = ctx
	if _, err := s.do(t, cut); err == nil {
		t.Fatalf("the request was meant to be cut off by the client")
	}
	deadline := time.Now().Add(10 * time.Second)
	for s.tg.Upstream.Finished(p) == 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	// The answer is stored just after the handler returns: a retry in
	// between may still see the attempt in progress.
	var again *reply
	for {
		again = s.must(t, q)
		if again.status != http.StatusConflict || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	wantStatus(t, again, http.StatusCreated, "retry after the disconnect")
	if again.header.Get(headerReplayed) != "true" {
		t.Errorf("the retry after a disconnect ran the handler again instead of replaying")
	}
	s.runs(t, p, 1)
}

func (s *suite) expiry(t *testing.T) {
	if s.tg.ShortRetentionURL == "" {
		t.Skip("no front with a short retention (Target.ShortRetentionURL)")
	}
	p := path("expiry")
	q := request{base: s.tg.ShortRetentionURL, path: p, keys: []string{quoted(unique("k"))}, body: `{}`}
	wantStatus(t, s.must(t, q), http.StatusCreated, "first")
	again := s.must(t, q)
	if again.header.Get(headerReplayed) != "true" {
		t.Fatalf("within the retention the retry must replay")
	}
	time.Sleep(s.tg.ShortRetention + time.Second)
	r := s.must(t, q)
	wantStatus(t, r, http.StatusCreated, "after expiry")
	if r.header.Get(headerReplayed) != "" {
		t.Errorf("an expired key was replayed")
	}
	s.runs(t, p, 2)
}

func (s *suite) storeDown(t *testing.T) {
	if s.tg.DownURL == "" {
		t.Skip("no front with its store down (Target.DownURL)")
	}
	p := path("down")
	r := s.must(t, request{base: s.tg.DownURL, path: p, keys: []string{quoted(unique("k"))}, body: `{}`})
	wantProblem(t, r, http.StatusServiceUnavailable, "unavailable")
	wantRetryAfter(t, r)
	s.runs(t, p, 0)
	// A request that needs no key needs no store either.
	g := path("down-get")
	wantStatus(t, s.must(t, request{base: s.tg.DownURL, method: http.MethodGet, path: g}), http.StatusCreated, "GET with the store down")
	s.runs(t, g, 1)
}
