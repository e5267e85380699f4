package api_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/idem-store/idem/api"
	"github.com/idem-store/idem/engine"
	"github.com/idem-store/idem/raftfsm"
)

// testNode is one real node (raft + Pebble in a temp dir) behind the real
// HTTP handler on a loopback httptest server.
type testNode struct {
	tb     testing.TB
	node   *raftfsm.Node
	api    *api.Server
	srv    *httptest.Server
	url    string
	client *http.Client
	bearer string
}

type nodeConfig struct {
	raft raftfsm.Config
	api  api.Config
	// noWait skips waiting for leadership (a node that can never lead).
	noWait bool
	// connListener serves through api.Listen's listener, as idem serve
	// does: a handler then sees its request's connection.
	connListener bool
}

// asServed serves the node as idem serve does, through api.Listen.
func asServed() nodeOpt { return func(c *nodeConfig) { c.connListener = true } }

type nodeOpt func(*nodeConfig)

func withAPI(f func(*api.Config)) nodeOpt    { return func(c *nodeConfig) { f(&c.api) } }
func withLimits(f func(*api.Limits)) nodeOpt { return func(c *nodeConfig) { f(&c.api.Limits) } }
func withRetention(d time.Duration) nodeOpt  { return withAPI(func(c *api.Config) { c.Retention = d }) }
func withBearer(tokens ...string) nodeOpt {
	return withAPI(func(c *api.Config) { c.AuthTokens = tokens })
}
func principalScope() nodeOpt { return withAPI(func(c *api.Config) { c.PrincipalScope = true }) }

// leaderless opens a node that never bootstraps, so it never has a leader.
func leaderless(wait time.Duration) nodeOpt {
	return func(c *nodeConfig) {
		c.raft.Bootstrap = false
		c.api.LeaderWait = wait
		c.noWait = true
	}
}

// logWriter sends the node's warnings to the test log, and nothing once
// the test is over (raft's goroutines may outlive a log call by a moment).
type logWriter struct {
	mu   sync.Mutex
	tb   testing.TB
	done bool
}

func (w *logWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.done {
		return len(p), nil
	}
	if _, ok := w.tb.(*testing.F); ok {
		// f.Log inside the fuzz function panics ("use t.Log instead"),
		// and a node's goroutines log whenever they log: a warning while
		// an input ran killed the fuzzing process (exit status 2, with
		// the input it happened to be running "written" as a failure).
		fmt.Fprintln(os.Stderr, strings.TrimRight(string(p), "\n"))
		return len(p), nil
	}
	w.tb.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

func (w *logWriter) stop() {
	w.mu.Lock()
	w.done = true
	w.mu.Unlock()
}

// testIP is the loopback address the test nodes listen on: IDEM_TEST_IP,
// a shared machine's own, else 127.0.0.1.
func testIP() string {
	if v := os.Getenv("IDEM_TEST_IP"); v != "" {
		return v
	}
	return "127.0.0.1"
}

// mustNode opens a one-node cluster in t.TempDir(), waits until it leads and
// serves it over HTTP. The leader's idle tick and the sweeper are set to an
// hour so that nothing but a request changes the state (StateHash is exact).
func mustNode(tb testing.TB, opts ...nodeOpt) *testNode {
	tb.Helper()
	lw := &logWriter{tb: tb}
	logger := slog.New(slog.NewTextHandler(lw, &slog.HandlerOptions{Level: slog.LevelWarn}))
	reg := prometheus.NewRegistry()

	rc := raftfsm.DefaultConfig()
	rc.DataDir = tb.TempDir()
	// The kernel picks a free port: no race with other processes. On the
	// test's own loopback address (IDEM_TEST_IP) on a shared machine.
	rc.RaftAddr = net.JoinHostPort(testIP(), "0")
	rc.Bootstrap = true
	rc.BucketWidth = time.Hour
	rc.TickInterval = time.Hour
	rc.SweepInterval = time.Hour
	rc.Registry = reg
	rc.Logger = logger
	c := nodeConfig{
		raft: rc,
		api: api.Config{
			Retention:    24 * time.Hour,
			DefaultLease: 30 * time.Second,
			Limits:       api.DefaultLimits(),
			Logger:       logger,
			Gatherer:     reg,
		},
	}
	for _, o := range opts {
		o(&c)
	}
	c.api.BucketWidth = c.raft.BucketWidth

	ln, err := net.Listen("tcp", net.JoinHostPort(testIP(), "0"))
	require.NoError(tb, err)
	srv := &httptest.Server{Listener: ln, Config: &http.Server{}}
	if c.connListener {
		cl := api.Listen(ln, 4096, logger)
		srv.Listener = cl
		srv.Config.ConnContext, srv.Config.ConnState = cl.ConnContext, cl.ConnState
	}
	c.raft.HTTPAdvertise = srv.Listener.Addr().String()
	node, err := raftfsm.Open(c.raft)
	require.NoError(tb, err)
	tn := &testNode{tb: tb, node: node, srv: srv, url: "http://" + c.raft.HTTPAdvertise}
	tn.api = api.New(node, c.api)
	reg.MustRegister(tn.api.Collectors()...) // as cmd/idem/serve.go does
	srv.Config.Handler = tn.api
	srv.Start()
	tn.client = &http.Client{
		Timeout: 20 * time.Second,
		Transport: &http.Transport{
			MaxIdleConns: 256, MaxIdleConnsPerHost: 256, IdleConnTimeout: 30 * time.Second,
		},
	}
	if len(c.api.AuthTokens) > 0 {
		tn.bearer = c.api.AuthTokens[0]
	}
	tb.Cleanup(func() {
		srv.Close()
		tn.client.CloseIdleConnections()
		if err := node.Close(); err != nil {
			tb.Errorf("close node: %v", err)
		}
		lw.stop()
	})
	if c.noWait {
		return tn
	}
	deadline := time.Now().Add(10 * time.Second)
	for !node.IsLeader() || !node.Ready() {
		if time.Now().After(deadline) {
			tb.Fatalf("node did not become a ready leader within 10s")
		}
		time.Sleep(10 * time.Millisecond)
	}
	// raft's applied index counts entries handed to the FSM, not applied by
	// it: a linearizable read (a Barrier in a new term) waits until the FSM
	// has applied the bootstrap entries, so the state is quiet from here on.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, _, err = node.Lookup(ctx, engine.Scope{Principal: "p", Endpoint: "e", Key: "k"}, false, true)
	require.NoError(tb, err)
	return tn
}

// reply is one HTTP answer.
type reply struct {
	status int
	header http.Header
	raw    []byte
}

// obj decodes the answer as a JSON object, keeping numbers exact.
func (r reply) obj(tb testing.TB) map[string]any {
	tb.Helper()
	var m map[string]any
	dec := json.NewDecoder(bytes.NewReader(r.raw))
	dec.UseNumber()
	require.NoError(tb, dec.Decode(&m), "answer is not a JSON object: %s", r.raw)
	return m
}

func (r reply) String() string { return fmt.Sprintf("%d %s", r.status, bytes.TrimSpace(r.raw)) }

// do sends a request. body is sent as is when it is a string or []byte and
// as JSON otherwise.
func (n *testNode) do(method, path string, body any) reply {
	n.tb.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	case []byte:
		rd = bytes.NewReader(b)
	default:
		j, err := json.Marshal(b)
		require.NoError(n.tb, err)
		rd = bytes.NewReader(j)
	}
	r, err := n.send(method, path, rd)
	require.NoError(n.tb, err)
	return r
}

// send is do with the body as a reader, returning the transport's error
// instead of failing the test on it.
func (n *testNode) send(method, path string, rd io.Reader) (reply, error) {
	n.tb.Helper()
	req, err := http.NewRequest(method, n.url+path, rd)
	require.NoError(n.tb, err)
	if rd != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if n.bearer != "" {
		req.Header.Set("Authorization", "Bearer "+n.bearer)
	}
	resp, err := n.client.Do(req)
	if err != nil {
		return reply{}, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return reply{}, err
	}
	return reply{status: resp.StatusCode, header: resp.Header, raw: raw}, nil
}

func (n *testNode) post(path string, body any) reply { n.tb.Helper(); return n.do("POST", path, body) }

// scope is a (principal, endpoint, key) for building requests.
type scope struct{ principal, endpoint, key string }

func (s scope) query(extra ...string) string {
	q := "principal=" + urlEsc(s.principal) + "&endpoint=" + urlEsc(s.endpoint) + "&key=" + urlEsc(s.key)
	for _, e := range extra {
		q += "&" + e
	}
	return "/v1/records?" + q
}

func urlEsc(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.' {
			b.WriteByte(c)
		} else {
			fmt.Fprintf(&b, "%%%02X", c)
		}
	}
	return b.String()
}

func (s scope) body(kv ...any) map[string]any {
	m := map[string]any{"principal": s.principal, "endpoint": s.endpoint, "key": s.key}
	for i := 0; i < len(kv); i += 2 {
		m[kv[i].(string)] = kv[i+1]
	}
	return m
}

func sc(key string) scope { return scope{"cus_42", "POST /payments", key} }

const fp1, fp2 = "9f86d081884c7d65", "60303ae22b998861"

func (n *testNode) claim(s scope, fp string, kv ...any) reply {
	n.tb.Helper()
	return n.post("/v1/claim", s.body(append([]any{"fingerprint", fp}, kv...)...))
}

// mustClaim claims s and returns the 201 answer.
func (n *testNode) mustClaim(s scope, fp string, kv ...any) map[string]any {
	n.tb.Helper()
	r := n.claim(s, fp, kv...)
	require.Equal(n.tb, http.StatusCreated, r.status, "%s", r)
	return r.obj(n.tb)
}

func (n *testNode) complete(s scope, token string, resp any) reply {
	n.tb.Helper()
	return n.post("/v1/complete", s.body("token", token, "response", resp))
}

func (n *testNode) lookup(s scope, extra ...string) reply {
	n.tb.Helper()
	return n.do("GET", s.query(extra...), nil)
}

// record looks s up and returns its record (200 required).
func (n *testNode) record(s scope) map[string]any {
	n.tb.Helper()
	r := n.lookup(s)
	require.Equal(n.tb, http.StatusOK, r.status, "%s", r)
	return r.obj(n.tb)["record"].(map[string]any)
}

func (n *testNode) stateHash() string {
	n.tb.Helper()
	h, err := n.node.DB().StateHash()
	require.NoError(n.tb, err)
	return h
}

// dataHash hashes every stored key and value except the FSM metadata (m/...):
// a decision that loses (409, 404, 422, 429) must change no data, whether the
// leader refused it from its own state without a log entry (engine's peeks)
// or it went through the log and only moved the applied index and cluster time.
func (n *testNode) dataHash() string {
	n.tb.Helper()
	h, err := dataHash(n.node)
	require.NoError(n.tb, err)
	return h
}

func dataHash(node *raftfsm.Node) (string, error) {
	snap, err := node.DB().Snapshot()
	if err != nil {
		return "", err
	}
	defer snap.Close()
	var buf bytes.Buffer
	if _, err := snap.WriteTo(&buf); err != nil {
		return "", err
	}
	br := bufio.NewReader(&buf)
	if _, err := br.Discard(8); err != nil {
		return "", err
	}
	h := sha256.New()
	for {
		kl, err := binary.ReadUvarint(br)
		if err != nil {
			return "", err
		}
		if kl == 0 {
			break
		}
		k := make([]byte, kl)
		if _, err := io.ReadFull(br, k); err != nil {
			return "", err
		}
		vl, err := binary.ReadUvarint(br)
		if err != nil {
			return "", err
		}
		v := make([]byte, vl)
		if _, err := io.ReadFull(br, v); err != nil {
			return "", err
		}
		if bytes.HasPrefix(k, []byte("m/")) && !bytes.HasPrefix(k, []byte("m/x/")) {
			continue
		}
		fmt.Fprintf(h, "%d:%x=%d:%x;", len(k), k, len(v), v)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

var timeRE = regexp.MustCompile(`^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$`)

// ts checks that m[field] is an RFC 3339 UTC time with milliseconds.
func ts(tb testing.TB, m map[string]any, field string) time.Time {
	tb.Helper()
	s, ok := m[field].(string)
	require.True(tb, ok, "%s missing or not a string in %v", field, m)
	require.Regexp(tb, timeRE, s, field)
	t, err := time.Parse(time.RFC3339Nano, s)
	require.NoError(tb, err)
	return t
}

func num(tb testing.TB, v any) int64 {
	tb.Helper()
	n, ok := v.(json.Number)
	require.True(tb, ok, "%v (%T) is not a number", v, v)
	i, err := n.Int64()
	require.NoError(tb, err)
	return i
}

func keys(m map[string]any) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

// requireProblem checks an RFC 9457 problem document with idem's code.
func requireProblem(tb testing.TB, r reply, status int, code string) map[string]any {
	tb.Helper()
	require.Equal(tb, status, r.status, "%s", r)
	require.Equal(tb, "application/problem+json", r.header.Get("Content-Type"), "%s", r)
	p := r.obj(tb)
	for _, f := range []string{"type", "title", "detail", "code"} {
		s, ok := p[f].(string)
		require.True(tb, ok && s != "", "problem member %q missing: %s", f, r)
	}
	require.Equal(tb, int64(status), num(tb, p["status"]))
	require.Equal(tb, code, p["code"], "%s", r)
	return p
}

func retryAfter(tb testing.TB, r reply) int {
	tb.Helper()
	v := r.header.Get("Retry-After")
	s, err := strconv.Atoi(v)
	require.NoError(tb, err, "Retry-After %q", v)
	require.GreaterOrEqual(tb, s, 1)
	return s
}

// hasTokenField reports whether any object in v has a "token" member.
func hasTokenField(v any) bool {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			if k == "token" || hasTokenField(e) {
				return true
			}
		}
	case []any:
		for _, e := range x {
			if hasTokenField(e) {
				return true
			}
		}
	}
	return false
}

var okResponse = map[string]any{
	"status": 201, "content_type": "application/json",
	"headers": map[string]any{"Location": "/payments/py_1"},
	"body":    base64.StdEncoding.EncodeToString([]byte(`{"id":"py_1"}`)),
}

// --- claim -------------------------------------------------------------

func TestClaimCreatesRecordWithPublishedTimes(t *testing.T) {
	t.Parallel()
	n := mustNode(t)
	r := n.claim(sc("shape"), fp1, "lease_ms", 30000, "correlation_id", "req-77")
	require.Equal(t, http.StatusCreated, r.status, "%s", r)
	require.Equal(t, "application/json", r.header.Get("Content-Type"))
	c := r.obj(t)
	require.ElementsMatch(t, []string{"outcome", "token", "attempt", "created_at", "expires_at", "lease_expires_at"}, keys(c))
	require.Equal(t, "claimed", c["outcome"])
	require.Regexp(t, `^[0-9]{20}\.[0-9a-f]{32}$`, c["token"], "raft index, then the MAC over scope and index")
	require.Equal(t, int64(1), num(t, c["attempt"]))
	created, expires, lease := ts(t, c, "created_at"), ts(t, c, "expires_at"), ts(t, c, "lease_expires_at")
	require.Equal(t, 24*time.Hour, expires.Sub(created))
	require.Equal(t, 30*time.Second, lease.Sub(created))
	require.WithinDuration(t, time.Now(), created, 5*time.Second)

	rec := n.record(sc("shape"))
	require.Equal(t, "in_progress", rec["state"])
	require.Equal(t, c["created_at"], rec["created_at"])
	require.Equal(t, c["expires_at"], rec["expires_at"])
	require.Equal(t, c["lease_expires_at"], rec["lease_expires_at"])
	require.Equal(t, "req-77", rec["correlation_id"])
	require.NotContains(t, rec, "response")
	require.NotContains(t, rec, "completed_at")
}

func TestClaimReplaysCompletedResponseByteForByte(t *testing.T) {
	t.Parallel()
	n := mustNode(t)
	s := sc("replay")
	c := n.mustClaim(s, fp1)
	body := []byte{0x00, 0xff, 0xfe, '{', '"', '}', 0x80, '\n'}
	respJSON := `{"status":201,"content_type":"application/json",` +
		`"headers":{"Location":"/payments/py_1","X-Request-Id":"r-1"},` +
		`"body":"` + base64.StdEncoding.EncodeToString(body) + `"}`
	done := n.post("/v1/complete", `{"principal":"cus_42","endpoint":"POST /payments","key":"replay",`+
		`"token":"`+c["token"].(string)+`","response":`+respJSON+`}`)
	require.Equal(t, http.StatusOK, done.status, "%s", done)
	require.Equal(t, "completed", done.obj(t)["outcome"])

	r := n.claim(s, fp1)
	require.Equal(t, http.StatusOK, r.status, "%s", r)
	var out struct {
		Outcome string
		Record  struct {
			State    string          `json:"state"`
			Attempt  int             `json:"attempt"`
			Response json.RawMessage `json:"response"`
		}
	}
	require.NoError(t, json.Unmarshal(r.raw, &out))
	require.Equal(t, "replay", out.Outcome)
	require.Equal(t, "completed", out.Record.State)
	require.Equal(t, 1, out.Record.Attempt)
	require.Equal(t, respJSON, string(out.Record.Response), "replayed response JSON differs from the completed one")
	var decoded struct{ Body []byte }
	require.NoError(t, json.Unmarshal(out.Record.Response, &decoded))
	require.Equal(t, body, decoded.Body)
	rec := r.obj(t)["record"].(map[string]any)
	ts(t, rec, "completed_at")
	require.NotContains(t, rec, "lease_expires_at")
	require.False(t, hasTokenField(r.obj(t)))

	// The replay is stable and equal to a lookup.
	require.Equal(t, string(r.raw), string(n.claim(s, fp1).raw))
	require.Equal(t, string(out.Record.Response), string(mustRaw(t, n.lookup(s).raw, "record", "response")))
}

func mustRaw(t *testing.T, raw []byte, path ...string) json.RawMessage {
	t.Helper()
	cur := json.RawMessage(raw)
	for _, p := range path {
		var m map[string]json.RawMessage
		require.NoError(t, json.Unmarshal(cur, &m))
		cur = m[p]
	}
	return cur
}

func TestClaimReplayOfEmptyResponse(t *testing.T) {
	t.Parallel()
	n := mustNode(t)
	s := sc("empty")
	c := n.mustClaim(s, fp1)
	r := n.complete(s, c["token"].(string), map[string]any{"status": 204})
	require.Equal(t, http.StatusOK, r.status, "%s", r)
	got := mustRaw(t, n.claim(s, fp1).raw, "record", "response")
	require.JSONEq(t, `{"status":204,"content_type":"","headers":{},"body":""}`, string(got))
}

func TestClaimLosersAndConflicts(t *testing.T) {
	t.Parallel()
	n := mustNode(t)
	s := sc("conflict")
	c := n.mustClaim(s, fp1, "lease_ms", 20000)

	before := n.dataHash()
	r := n.claim(s, fp1)
	p := requireProblem(t, r, http.StatusConflict, "in_progress")
	require.Equal(t, c["lease_expires_at"], p["lease_expires_at"])
	ra := retryAfter(t, r)
	require.LessOrEqual(t, ra, 20)

	r = n.claim(s, fp2)
	requireProblem(t, r, http.StatusUnprocessableEntity, "fingerprint_mismatch")
	require.Equal(t, before, n.dataHash(), "a losing claim wrote data")

	// Fingerprints are hex: case does not make a different request.
	requireProblem(t, n.claim(s, strings.ToUpper(fp1)), http.StatusConflict, "in_progress")

	// After completion a different fingerprint is still refused.
	require.Equal(t, http.StatusOK, n.complete(s, c["token"].(string), okResponse).status)
	requireProblem(t, n.claim(s, fp2), http.StatusUnprocessableEntity, "fingerprint_mismatch")
}

func TestClaimQuotaPerPrincipal(t *testing.T) {
	t.Parallel()
	n := mustNode(t, withLimits(func(l *api.Limits) { l.MaxKeysPerPrincipal = 2 }))
	n.mustClaim(sc("q1"), fp1)
	n.mustClaim(sc("q2"), fp1)
	before := n.dataHash()
	r := n.claim(sc("q3"), fp1)
	// The limit, not a count: a principal holding more than a lowered
	// limit was told it held the limit's number of keys.
	require.Contains(t, requireProblem(t, r, http.StatusTooManyRequests, "quota_exceeded")["detail"], `principal "cus_42" holds the most live keys allowed (2, or more if the limit was lowered since)`)
	retryAfter(t, r)
	require.Equal(t, before, n.dataHash())
	requireProblem(t, n.lookup(sc("q3")), http.StatusNotFound, "not_found")

	// Existing keys still answer; other principals have their own quota.
	requireProblem(t, n.claim(sc("q1"), fp1), http.StatusConflict, "in_progress")
	n.mustClaim(scope{"cus_43", "POST /payments", "q3"}, fp1)
	// Deleting a key frees its slot.
	require.Equal(t, http.StatusOK, n.do("DELETE", sc("q1").query(), nil).status)
	n.mustClaim(sc("q3"), fp1)
}

func TestClaimAfterReleaseIsANewAttempt(t *testing.T) {
	t.Parallel()
	n := mustNode(t)
	s := sc("released")
	c1 := n.mustClaim(s, fp1)
	r := n.post("/v1/release", s.body("token", c1["token"], "reason", "db down"))
	require.Equal(t, http.StatusOK, r.status, "%s", r)
	rec := n.record(s)
	require.Equal(t, "failed", rec["state"])
	require.NotContains(t, rec, "lease_expires_at")
	require.NotContains(t, rec, "response")

	requireProblem(t, n.claim(s, fp2), http.StatusUnprocessableEntity, "fingerprint_mismatch")
	c2 := n.mustClaim(s, fp1)
	require.Equal(t, int64(2), num(t, c2["attempt"]))
	require.NotEqual(t, c1["token"], c2["token"])
	require.Equal(t, c1["created_at"], c2["created_at"], "retention counts from the first claim")
	require.Equal(t, c1["expires_at"], c2["expires_at"])
	requireProblem(t, n.complete(s, c1["token"].(string), okResponse), http.StatusConflict, "token_mismatch")
	require.Equal(t, http.StatusOK, n.complete(s, c2["token"].(string), okResponse).status)
}

func TestClaimTakesOverAnExpiredLease(t *testing.T) {
	t.Parallel()
	n := mustNode(t, withLimits(func(l *api.Limits) { l.MinLease = 100 * time.Millisecond }))
	s := sc("takeover")
	c1 := n.mustClaim(s, fp1, "lease_ms", 100)
	time.Sleep(200 * time.Millisecond)
	c2 := n.mustClaim(s, fp1, "lease_ms", 30000)
	require.Equal(t, int64(2), num(t, c2["attempt"]))
	require.NotEqual(t, c1["token"], c2["token"])
	old := c1["token"].(string)

	before := n.dataHash()
	requireProblem(t, n.complete(s, old, okResponse), http.StatusConflict, "token_mismatch")
	requireProblem(t, n.post("/v1/release", s.body("token", old)), http.StatusConflict, "token_mismatch")
	requireProblem(t, n.post("/v1/extend", s.body("token", old, "lease_ms", 60000)), http.StatusConflict, "token_mismatch")
	require.Equal(t, before, n.dataHash(), "a dead token changed data")
	require.Equal(t, "in_progress", n.record(s)["state"])

	require.Equal(t, http.StatusOK, n.complete(s, c2["token"].(string), okResponse).status)
	require.Equal(t, int64(2), num(t, n.record(s)["attempt"]))
}

func TestClaimRepeatedWithSameClaimID(t *testing.T) {
	t.Parallel()
	n := mustNode(t)
	s := sc("claim-id")
	c1 := n.mustClaim(s, fp1, "claim_id", "a1b2")
	c2 := n.mustClaim(s, fp1, "claim_id", "a1b2")
	require.Equal(t, c1, c2, "the same claim_id must get the same claim back")
	requireProblem(t, n.claim(s, fp1, "claim_id", "other"), http.StatusConflict, "in_progress")
	requireProblem(t, n.claim(s, fp1), http.StatusConflict, "in_progress")
	// Once completed, the same claim_id gets the replay like anyone else.
	require.Equal(t, http.StatusOK, n.complete(s, c1["token"].(string), okResponse).status)
	r := n.claim(s, fp1, "claim_id", "a1b2")
	require.Equal(t, http.StatusOK, r.status, "%s", r)
	require.Equal(t, "replay", r.obj(t)["outcome"])
}

func TestClaimWithoutLeaderIs503(t *testing.T) {
	t.Parallel()
	n := mustNode(t, leaderless(300*time.Millisecond))
	r := n.claim(sc("no-leader"), fp1)
	requireProblem(t, r, http.StatusServiceUnavailable, "unavailable")
	retryAfter(t, r)
	requireProblem(t, n.lookup(sc("no-leader")), http.StatusServiceUnavailable, "unavailable")
	requireProblem(t, n.do("GET", "/readyz", nil), http.StatusServiceUnavailable, "unavailable")
	require.Equal(t, http.StatusOK, n.do("GET", "/healthz", nil).status)
}

// --- complete, release, extend -----------------------------------------

func TestComplete(t *testing.T) {
	t.Parallel()
	n := mustNode(t)
	s := sc("complete")
	c := n.mustClaim(s, fp1, "correlation_id", "req-1")
	tok := c["token"].(string)

	requireProblem(t, n.complete(sc("nobody"), tok, okResponse), http.StatusNotFound, "not_found")
	wrong := strconv.FormatUint(mustUint(t, tok)+1000, 10)
	requireProblem(t, n.complete(s, wrong, okResponse), http.StatusConflict, "token_mismatch")

	r := n.complete(s, tok, okResponse)
	require.Equal(t, http.StatusOK, r.status, "%s", r)
	o := r.obj(t)
	require.Equal(t, "completed", o["outcome"])
	rec := o["record"].(map[string]any)
	require.Equal(t, "completed", rec["state"])
	require.Equal(t, "req-1", rec["correlation_id"])
	require.Equal(t, fp1, rec["fingerprint"])
	require.Equal(t, int64(1), num(t, rec["attempt"]))
	ts(t, rec, "completed_at")
	require.NotContains(t, rec, "lease_expires_at")
	require.False(t, hasTokenField(o))

	before := n.dataHash()
	again := n.complete(s, tok, okResponse)
	require.Equal(t, http.StatusOK, again.status, "complete is idempotent: %s", again)
	require.Equal(t, string(r.raw), string(again.raw))

	other := map[string]any{"status": 500, "body": ""}
	requireProblem(t, n.complete(s, tok, other), http.StatusConflict, "already_completed")
	requireProblem(t, n.complete(s, wrong, okResponse), http.StatusConflict, "token_mismatch")
	require.Equal(t, before, n.dataHash())
	// Releasing or extending a completed attempt changes nothing.
	require.Equal(t, http.StatusConflict, n.post("/v1/release", s.body("token", tok)).status)
	require.Equal(t, http.StatusConflict, n.post("/v1/extend", s.body("token", tok, "lease_ms", 1000)).status)
	require.Equal(t, before, n.dataHash())
}

func mustUint(t *testing.T, s string) uint64 {
	t.Helper()
	index, _, _ := strings.Cut(s, ".") // a token is "<raft index>.<MAC>"
	v, err := strconv.ParseUint(index, 10, 64)
	require.NoError(t, err)
	return v
}

func TestCompleteTooLargeStoresNothing(t *testing.T) {
	t.Parallel()
	n := mustNode(t, withLimits(func(l *api.Limits) { l.MaxResponseBytes = 1024 }))
	s := sc("too-large")
	tok := n.mustClaim(s, fp1)["token"].(string)

	manyHeaders := map[string]any{}
	for i := range 33 {
		manyHeaders[fmt.Sprintf("X-H%d", i)] = "v"
	}
	bigHeaders := map[string]any{"X-Big": strings.Repeat("v", 8<<10)}
	cases := map[string]map[string]any{
		"body over max-response-bytes": {"status": 200, "body": base64.StdEncoding.EncodeToString(make([]byte, 1025))},
		"33 headers":                   {"status": 200, "headers": manyHeaders},
		"headers over 8 KiB":           {"status": 200, "headers": bigHeaders},
	}
	for name, resp := range cases {
		t.Run(name, func(t *testing.T) {
			before := n.stateHash()
			p := requireProblem(t, n.complete(s, tok, resp), http.StatusRequestEntityTooLarge, "response_too_large")
			require.Contains(t, p["detail"], "response.")
			// The middleware reads a member's limit from these words, to
			// fit a folded answer to a member of smaller limits (its
			// headersLimit, bodyRefused).
			switch name {
			case "body over max-response-bytes":
				require.True(t, strings.HasPrefix(p["detail"].(string), "response.body is 1025 bytes decoded; at most 1024 are stored"), p["detail"])
			case "headers over 8 KiB":
				require.Equal(t, "response.headers are 8197 bytes together; at most 8192 are stored", p["detail"])
			}
			require.Equal(t, before, n.stateHash())
			require.Equal(t, "in_progress", n.record(s)["state"])
		})
	}
	// At the limits exactly, it is stored.
	atLimit := map[string]any{}
	for i := range 32 {
		atLimit[fmt.Sprintf("X-H%02d", i)] = "v"
	}
	r := n.complete(s, tok, map[string]any{"status": 200, "headers": atLimit,
		"body": base64.StdEncoding.EncodeToString(make([]byte, 1024))})
	require.Equal(t, http.StatusOK, r.status, "%s", r)
}

// A response within the node's limits whose raft log entry would be over
// what raft-wal reads back (64 MiB) is refused 413 with nothing changed: it
// was acknowledged, and the node then could not start on its log.
func TestCompleteOverTheRaftEntryLimitStoresNothing(t *testing.T) {
	n := mustNode(t, withLimits(func(l *api.Limits) { l.MaxResponseBytes = 100 << 20; l.MaxRequestBytes = 200 << 20 }))
	// 85 MiB of JSON to send and decode before the 413: 5 s here, 40 s
	// under -race or on a loaded machine, past the test client's 20 s.
	n.client.Timeout = 3 * time.Minute
	s := sc("over-entry")
	tok := n.mustClaim(s, fp1)["token"].(string)
	before := n.stateHash()
	resp := map[string]any{"status": 200, "body": base64.StdEncoding.EncodeToString(make([]byte, 64<<20))}
	p := requireProblem(t, n.complete(s, tok, resp), http.StatusRequestEntityTooLarge, "request_too_large")
	require.Contains(t, p["detail"], "raft log entry")
	require.Equal(t, before, n.stateHash())
	require.Equal(t, "in_progress", n.record(s)["state"])
}

func TestRelease(t *testing.T) {
	t.Parallel()
	n := mustNode(t)
	s := sc("release")
	tok := n.mustClaim(s, fp1)["token"].(string)
	requireProblem(t, n.post("/v1/release", sc("nobody").body("token", tok)), http.StatusNotFound, "not_found")
	requireProblem(t, n.post("/v1/release", s.body("token", "999999")), http.StatusConflict, "token_mismatch")

	r := n.post("/v1/release", s.body("token", tok, "reason", "handler failed"))
	require.Equal(t, http.StatusOK, r.status, "%s", r)
	require.JSONEq(t, `{"outcome":"released"}`, string(r.raw))
	before := n.dataHash()
	r = n.post("/v1/release", s.body("token", tok))
	require.Equal(t, http.StatusOK, r.status, "a repeat by the same token: %s", r)
	require.JSONEq(t, `{"outcome":"released"}`, string(r.raw))
	require.Equal(t, before, n.dataHash())
	// A released attempt cannot complete or extend.
	requireProblem(t, n.complete(s, tok, okResponse), http.StatusConflict, "token_mismatch")
	requireProblem(t, n.post("/v1/extend", s.body("token", tok, "lease_ms", 1000)), http.StatusConflict, "token_mismatch")

	tok2 := n.mustClaim(s, fp1)["token"].(string)
	requireProblem(t, n.post("/v1/release", s.body("token", tok)), http.StatusConflict, "token_mismatch")
	require.Equal(t, "in_progress", n.record(s)["state"])
	require.Equal(t, http.StatusOK, n.post("/v1/release", s.body("token", tok2)).status)
}

func TestExtend(t *testing.T) {
	t.Parallel()
	n := mustNode(t)
	s := sc("extend")
	c := n.mustClaim(s, fp1, "lease_ms", 1000)
	tok := c["token"].(string)
	first := ts(t, c, "lease_expires_at")

	r := n.post("/v1/extend", s.body("token", tok, "lease_ms", 60000))
	require.Equal(t, http.StatusOK, r.status, "%s", r)
	o := r.obj(t)
	require.ElementsMatch(t, []string{"outcome", "lease_expires_at"}, keys(o))
	require.Equal(t, "extended", o["outcome"])
	later := ts(t, o, "lease_expires_at")
	require.True(t, later.After(first.Add(50*time.Second)), "%s not later than %s", later, first)
	require.Equal(t, o["lease_expires_at"], n.record(s)["lease_expires_at"])

	requireProblem(t, n.post("/v1/extend", s.body("token", "424242", "lease_ms", 1000)), http.StatusConflict, "token_mismatch")
	requireProblem(t, n.post("/v1/extend", sc("nobody").body("token", tok, "lease_ms", 1000)), http.StatusNotFound, "not_found")
	for name, body := range map[string]map[string]any{
		"lease_ms missing": s.body("token", tok),
		"lease_ms 99":      s.body("token", tok, "lease_ms", 99),
		"lease_ms 3600001": s.body("token", tok, "lease_ms", 3600001),
		"lease_ms 0":       s.body("token", tok, "lease_ms", 0),
		"lease_ms -1":      s.body("token", tok, "lease_ms", -1),
	} {
		before := n.stateHash()
		p := requireProblem(t, n.post("/v1/extend", body), http.StatusBadRequest, "invalid_request")
		require.Contains(t, p["detail"], "lease_ms", name)
		require.Equal(t, before, n.stateHash(), name)
	}
	// The lease never outlives the record.
	r = n.post("/v1/extend", s.body("token", tok, "lease_ms", 3600000))
	require.Equal(t, http.StatusOK, r.status)
	require.False(t, ts(t, r.obj(t), "lease_expires_at").After(ts(t, c, "expires_at")))
}

// --- records -----------------------------------------------------------

func TestRecordsLookup(t *testing.T) {
	t.Parallel()
	n := mustNode(t)
	s := sc("lookup")
	requireProblem(t, n.lookup(s), http.StatusNotFound, "not_found")
	c := n.mustClaim(s, fp1, "claim_id", "secret-claim", "correlation_id", "corr")

	r := n.lookup(s)
	require.Equal(t, http.StatusOK, r.status, "%s", r)
	require.NotContains(t, string(r.raw), `"`+c["token"].(string)+`"`, "the token leaked into a lookup")
	require.NotContains(t, string(r.raw), `"token"`)
	o := r.obj(t)
	require.ElementsMatch(t, []string{"record"}, keys(o))
	rec := o["record"].(map[string]any)
	require.ElementsMatch(t, []string{"principal", "endpoint", "key", "state", "fingerprint", "attempt",
		"correlation_id", "created_at", "expires_at", "lease_expires_at"}, keys(rec))
	require.Equal(t, s.principal, rec["principal"])
	require.Equal(t, s.endpoint, rec["endpoint"])
	require.Equal(t, s.key, rec["key"])

	for _, c := range []string{"consistency=stale", "consistency=linearizable"} {
		r2 := n.lookup(s, c)
		require.Equal(t, http.StatusOK, r2.status, "%s: %s", c, r2)
		require.Equal(t, string(r.raw), string(r2.raw), c)
	}
	requireProblem(t, n.lookup(sc("other"), "consistency=stale"), http.StatusNotFound, "not_found")
	p := requireProblem(t, n.lookup(s, "consistency=bogus"), http.StatusBadRequest, "invalid_request")
	require.Contains(t, p["detail"], "consistency")

	require.Equal(t, http.StatusOK, n.complete(s, c["token"].(string), okResponse).status)
	r = n.lookup(s)
	require.NotContains(t, string(r.raw), `"token"`)
	require.False(t, hasTokenField(r.obj(t)))
	rec = r.obj(t)["record"].(map[string]any)
	require.ElementsMatch(t, []string{"principal", "endpoint", "key", "state", "fingerprint", "attempt",
		"correlation_id", "created_at", "expires_at", "completed_at", "response"}, keys(rec))
}

func TestRecordsExpire(t *testing.T) {
	t.Parallel()
	n := mustNode(t, withRetention(time.Second))
	s := sc("expire")
	c := n.mustClaim(s, fp1)
	require.Equal(t, time.Second, ts(t, c, "expires_at").Sub(ts(t, c, "created_at")))
	require.False(t, ts(t, c, "lease_expires_at").After(ts(t, c, "expires_at")), "lease capped at expiry")
	require.Equal(t, http.StatusOK, n.complete(s, c["token"].(string), okResponse).status)
	require.Equal(t, http.StatusOK, n.lookup(s).status)

	time.Sleep(1200 * time.Millisecond)
	// Reads judge expiry at the cluster time of the applied log, which
	// this node's ticks (off here) or any write move: until then the
	// record is still there, never gone early.
	require.Equal(t, http.StatusOK, n.lookup(s).status)
	n.mustClaim(sc("expire-other"), fp1)
	requireProblem(t, n.lookup(s), http.StatusNotFound, "not_found")
	requireProblem(t, n.lookup(s, "consistency=stale"), http.StatusNotFound, "not_found")
	requireProblem(t, n.complete(s, c["token"].(string), okResponse), http.StatusNotFound, "not_found")
	requireProblem(t, n.do("DELETE", s.query(), nil), http.StatusNotFound, "not_found")

	// An expired key is free again, even for another request.
	c2 := n.mustClaim(s, fp2)
	require.Equal(t, int64(1), num(t, c2["attempt"]))
	require.NotEqual(t, c["token"], c2["token"])
	require.Equal(t, "in_progress", n.record(s)["state"])
}

func TestRecordsDelete(t *testing.T) {
	t.Parallel()
	n := mustNode(t)
	s := sc("delete")
	c := n.mustClaim(s, fp1)
	require.Equal(t, http.StatusOK, n.complete(s, c["token"].(string), okResponse).status)
	r := n.do("DELETE", s.query(), nil)
	require.Equal(t, http.StatusOK, r.status, "%s", r)
	require.JSONEq(t, `{"outcome":"deleted"}`, string(r.raw))
	requireProblem(t, n.lookup(s), http.StatusNotFound, "not_found")
	requireProblem(t, n.do("DELETE", s.query(), nil), http.StatusNotFound, "not_found")
	requireProblem(t, n.complete(s, c["token"].(string), okResponse), http.StatusNotFound, "not_found")
	c2 := n.mustClaim(s, fp2)
	require.Equal(t, int64(1), num(t, c2["attempt"]))
}

// --- operations --------------------------------------------------------

func TestOperationsRoutes(t *testing.T) {
	t.Parallel()
	n := mustNode(t)

	for _, path := range []string{"/healthz", "/readyz"} {
		r := n.do("GET", path, nil)
		require.Equal(t, http.StatusOK, r.status, "%s: %s", path, r)
		require.Equal(t, "application/json", r.header.Get("Content-Type"))
	}

	r := n.do("GET", "/v1/config", nil)
	require.Equal(t, http.StatusOK, r.status, "%s", r)
	cfg := r.obj(t)
	require.Equal(t, "24h0m0s", cfg["retention"])
	require.Equal(t, int64(86400), num(t, cfg["retention_seconds"]))
	require.Equal(t, int64(30000), num(t, cfg["lease_default_ms"]))
	require.Equal(t, int64(5000), num(t, cfg["commit_timeout_ms"]), "--commit-timeout, its default: compared among the members")
	require.Equal(t, "endpoint", cfg["scope"])
	limits, ok := cfg["limits"].(map[string]any)
	require.True(t, ok, "limits is an object: %s", r)
	want := map[string]int64{
		"max_scope_bytes": 255, "max_fingerprint_chars": 128, "max_id_bytes": 255,
		"min_lease_ms": 100, "max_lease_ms": 3600000, "max_request_bytes": 1 << 20,
		"max_response_bytes": 65536, "max_response_headers": 32, "max_response_header_bytes": 8192,
		"max_keys_per_principal": 100000,
	}
	for k, v := range want {
		require.Equal(t, v, num(t, limits[k]), k)
	}

	r = n.do("GET", "/v1/cluster", nil)
	require.Equal(t, http.StatusOK, r.status, "%s", r)
	cl := r.obj(t)
	leader, ok := cl["leader"].(map[string]any)
	require.True(t, ok, "%s", r)
	require.Equal(t, "n1", leader["id"])
	require.Equal(t, strings.TrimPrefix(n.url, "http://"), leader["http_addr"])
	require.NotEmpty(t, leader["raft_addr"])
	nodes := cl["nodes"].([]any)
	require.Len(t, nodes, 1)
	n0 := nodes[0].(map[string]any)
	require.Equal(t, "voter", n0["suffrage"], "the API's suffrages are lowercase, as in its join answer")
	require.Equal(t, "n1", n0["id"])
	require.Equal(t, leader["raft_addr"], n0["raft_addr"])
	require.Equal(t, leader["http_addr"], n0["http_addr"])
	require.Equal(t, true, n0["healthy"])
	require.GreaterOrEqual(t, num(t, cl["term"]), int64(1))
	require.GreaterOrEqual(t, num(t, cl["commit_index"]), int64(1))
	require.GreaterOrEqual(t, num(t, cl["applied_index"]), int64(1))

	requireProblem(t, n.do("GET", "/v1/nope", nil), http.StatusNotFound, "not_found")
}

func TestPrincipalScopeConfig(t *testing.T) {
	t.Parallel()
	n := mustNode(t, principalScope(), withRetention(90*time.Minute))
	cfg := n.do("GET", "/v1/config", nil).obj(t)
	require.Equal(t, "principal", cfg["scope"])
	require.Equal(t, "1h30m0s", cfg["retention"])
	require.Equal(t, int64(5400), num(t, cfg["retention_seconds"]))
}

// metricNames are every metric raftfsm/metrics.go defines.
var metricNames = []string{
	"idem_claims_total", "idem_completes_total", "idem_releases_total", "idem_extends_total",
	"idem_takeovers_total", "idem_claim_duration_seconds", "idem_buckets_dropped_total",
	"idem_records_dropped_total", "idem_bucket_drops_refused_total", "idem_bad_commands_total",
	"idem_records", "idem_record_bytes", "idem_oldest_record_age_seconds", "idem_in_progress",
	"idem_oldest_in_progress_age_seconds", "idem_disk_bytes", "idem_buckets", "idem_raft_state",
	"idem_raft_term", "idem_raft_commit_index", "idem_raft_applied_index", "idem_fsm_applied_index",
	"idem_cluster_time_seconds", "idem_raft_has_leader", "idem_retention_seconds",
	"idem_store_write_stalls_total", "idem_store_write_stall_seconds_total",
}

func TestMetrics(t *testing.T) {
	t.Parallel()
	n := mustNode(t)
	// A fresh node exposes every metric, so alerts see a zero, not an absence.
	fresh := string(n.do("GET", "/metrics", nil).raw)
	for _, name := range metricNames {
		require.Contains(t, fresh, "# TYPE "+name+" ", "fresh node")
	}
	require.Contains(t, fresh, `idem_claims_total{outcome="claimed"} 0`)

	s := sc("metrics")
	tok := n.mustClaim(s, fp1)["token"].(string)
	n.claim(s, fp1)
	require.Equal(t, http.StatusOK, n.post("/v1/extend", s.body("token", tok, "lease_ms", 5000)).status)
	require.Equal(t, http.StatusOK, n.complete(s, tok, okResponse).status)
	n.claim(s, fp1)
	require.Equal(t, http.StatusConflict, n.post("/v1/release", s.body("token", tok)).status)

	r := n.do("GET", "/metrics", nil)
	require.Equal(t, http.StatusOK, r.status)
	require.Contains(t, r.header.Get("Content-Type"), "text/plain")
	body := string(r.raw)
	for _, name := range metricNames {
		require.Contains(t, body, "# TYPE "+name+" ")
	}
	for _, line := range []string{
		`idem_claims_total{outcome="claimed"} 1`,
		`idem_claims_total{outcome="in_progress"} 1`,
		`idem_claims_total{outcome="replay"} 1`,
		`idem_completes_total{outcome="completed"} 1`,
		`idem_extends_total{outcome="extended"} 1`,
		`idem_releases_total{outcome="already_completed"} 1`,
		`idem_raft_state{state="Leader"} 1`,
		`idem_raft_has_leader 1`,
		`idem_records 1`,
	} {
		require.Contains(t, body, line+"\n")
	}
}

func TestAuth(t *testing.T) {
	t.Parallel()
	n := mustNode(t, withBearer("s3cret", "other"))
	anon := *n
	anon.bearer = ""
	wrong := *n
	wrong.bearer = "s3cre"

	for _, c := range []*testNode{&anon, &wrong} {
		before := n.stateHash()
		r := c.claim(sc("auth"), fp1)
		p := requireProblem(t, r, http.StatusUnauthorized, "unauthorized")
		require.NotEmpty(t, p["detail"])
		require.Contains(t, r.header.Get("WWW-Authenticate"), "Bearer")
		for _, path := range []string{"/v1/config", "/v1/cluster", "/metrics", sc("auth").query()} {
			requireProblem(t, c.do("GET", path, nil), http.StatusUnauthorized, "unauthorized")
		}
		requireProblem(t, c.do("DELETE", sc("auth").query(), nil), http.StatusUnauthorized, "unauthorized")
		for _, path := range []string{"/v1/complete", "/v1/release", "/v1/extend", "/v1/cluster/join", "/v1/cluster/remove"} {
			requireProblem(t, c.post(path, "{}"), http.StatusUnauthorized, "unauthorized")
		}
		require.Equal(t, before, n.stateHash())
		require.Equal(t, http.StatusOK, c.do("GET", "/healthz", nil).status)
		require.Equal(t, http.StatusOK, c.do("GET", "/readyz", nil).status)
	}
	// A raw token without the Bearer scheme is not accepted.
	req, _ := http.NewRequest("GET", n.url+"/v1/config", nil)
	req.Header.Set("Authorization", "s3cret")
	resp, err := n.client.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode)

	n.mustClaim(sc("auth"), fp1)
	other := *n
	other.bearer = "other"
	require.Equal(t, http.StatusOK, other.lookup(sc("auth")).status)
}

// --- bad input ---------------------------------------------------------

type badCase struct {
	name   string
	method string
	path   string
	body   string
	status int
	code   string
	detail string // a substring the detail must contain (the field), if any
	// mayReset: the node answers without reading the body and closes, so
	// a client still sending it may see the connection reset instead of
	// the answer (docs/API.md; TestDeclaredBodyOverLimitIs413 reads the
	// 413 itself). The state must not change either way.
	mayReset bool
}

func TestBadInputIsRejectedAndWritesNothing(t *testing.T) {
	t.Parallel()
	n := mustNode(t)
	// A live in-progress record that every token request below addresses
	// with its real token: if validation let one through, it would write.
	live := sc("live")
	tok := n.mustClaim(live, fp1, "lease_ms", 600000)["token"].(string)
	require.Equal(t, http.StatusOK, n.lookup(live).status)

	claim := func(fields string) string {
		return `{"principal":"cus_42","endpoint":"POST /payments","key":"fresh","fingerprint":"9f86d0",` + fields + `"lease_ms":30000}`
	}
	withKey := func(k string) string {
		return `{"principal":"cus_42","endpoint":"POST /payments","key":` + k + `,"fingerprint":"9f86d0"}`
	}
	withPrincipal := func(p string) string {
		return `{"principal":` + p + `,"endpoint":"POST /payments","key":"fresh","fingerprint":"9f86d0"}`
	}
	withFP := func(f string) string {
		return `{"principal":"cus_42","endpoint":"POST /payments","key":"fresh","fingerprint":` + f + `}`
	}
	target := `"principal":"cus_42","endpoint":"POST /payments","key":"live","token":"` + tok + `"`
	complete := func(resp string) string { return `{` + target + `,"response":` + resp + `}` }
	long := strings.Repeat("p", 256)
	big := `{"principal":"` + strings.Repeat("a", 1<<20) + `","endpoint":"e","key":"k","fingerprint":"00"}`

	cases := []badCase{
		{name: "non-JSON body", path: "/v1/claim", body: `principal=cus_42`, detail: "JSON"},
		{name: "empty body", path: "/v1/claim", body: ``, detail: "empty"},
		{name: "whitespace body", path: "/v1/claim", body: " \n", detail: "empty"},
		{name: "JSON array", path: "/v1/claim", body: `[` + claim(``) + `]`, detail: "object"},
		{name: "JSON string", path: "/v1/claim", body: `"hello"`, detail: "object"},
		{name: "JSON null", path: "/v1/claim", body: `null`, detail: "object"},
		{name: "truncated JSON", path: "/v1/claim", body: claim(``)[:40], detail: "JSON"},
		{name: "lease_ms as a string", path: "/v1/claim", body: claim(``)[:len(claim(``))-len(`30000}`)] + `"30000"}`, detail: "lease_ms"},
		{name: "lease_ms fractional", path: "/v1/claim", body: claim(``)[:len(claim(``))-len(`30000}`)] + `300.5}`, detail: "lease_ms"},
		{name: "principal as a number", path: "/v1/claim", body: withPrincipal(`42`), detail: "principal"},
		{name: "key as an object", path: "/v1/claim", body: withKey(`{}`), detail: "key"},
		{name: "unknown field", path: "/v1/claim", body: claim(`"tenant":"x",`), detail: "tenant"},
		{name: "unknown field differing in case only", path: "/v1/claim", body: claim(`"Lease_MS":5,`), detail: "Lease_MS"},
		{name: "field name in other case", path: "/v1/claim", body: `{"PRINCIPAL":"cus_42","endpoint":"e","key":"k","fingerprint":"00"}`, detail: "PRINCIPAL"},
		{name: "principal given twice", path: "/v1/claim", body: `{"principal":"a","principal":"b","endpoint":"e","key":"k","fingerprint":"00"}`, detail: "principal"},
		{name: "principal given twice, other case", path: "/v1/claim", body: `{"principal":"a","Principal":"b","endpoint":"e","key":"k","fingerprint":"00"}`, detail: "Principal"},
		{name: "complete: response field in other case", path: "/v1/complete", body: complete(`{"Status":200}`), detail: "Status"},
		{name: "complete: header given twice", path: "/v1/complete", body: complete(`{"status":200,"headers":{"X":"a","X":"b"}}`), detail: "X"},
		{name: "complete: header with an unpaired surrogate", path: "/v1/complete", body: complete(`{"status":200,"headers":{"X":"\udc00"}}`), detail: "headers"},
		{name: "trailing garbage", path: "/v1/claim", body: claim(``) + `x`, detail: "after"},
		{name: "second object", path: "/v1/claim", body: claim(``) + claim(``), detail: "after"},
		{name: "trailing bracket", path: "/v1/claim", body: claim(``) + `]`, detail: "after"},
		{name: "missing principal", path: "/v1/claim", body: `{"endpoint":"e","key":"k","fingerprint":"00"}`, detail: "principal"},
		{name: "missing endpoint", path: "/v1/claim", body: `{"principal":"p","key":"k","fingerprint":"00"}`, detail: "endpoint"},
		{name: "missing key", path: "/v1/claim", body: `{"principal":"p","endpoint":"e","fingerprint":"00"}`, detail: "key"},
		{name: "missing fingerprint", path: "/v1/claim", body: `{"principal":"p","endpoint":"e","key":"k"}`, detail: "fingerprint"},
		{name: "empty principal", path: "/v1/claim", body: withPrincipal(`""`), detail: "principal"},
		{name: "key with a control char", path: "/v1/claim", body: withKey(`"a\u0007b"`), detail: "key"},
		{name: "key with DEL", path: "/v1/claim", body: withKey(`"a\u007fb"`), detail: "key"},
		{name: "key non-ASCII", path: "/v1/claim", body: withKey(`"ключ"`), detail: "key"},
		{name: "key over 255 bytes", path: "/v1/claim", body: withKey(`"` + long + `"`), detail: "key"},
		{name: "principal over 255 bytes", path: "/v1/claim", body: withPrincipal(`"` + long + `"`), detail: "principal"},
		{name: "principal over 255 bytes of UTF-8", path: "/v1/claim", body: withPrincipal(`"` + strings.Repeat("é", 128) + `"`), detail: "principal"},
		{name: "principal with a control char", path: "/v1/claim", body: withPrincipal(`"cus\n42"`), detail: "principal"},
		{name: "principal with a C1 control char", path: "/v1/claim", body: withPrincipal(`"cus\u008542"`), detail: "principal"},
		{name: "principal with NUL", path: "/v1/claim", body: withPrincipal(`"cus\u000042"`), detail: "principal"},
		{name: "endpoint with a control char", path: "/v1/claim", body: `{"principal":"p","endpoint":"POST\t/x","key":"k","fingerprint":"00"}`, detail: "endpoint"},
		{name: "principal invalid UTF-8", path: "/v1/claim", body: withPrincipal("\"cus\xff42\""), detail: "principal"},
		{name: "principal invalid UTF-8 (other byte)", path: "/v1/claim", body: withPrincipal("\"cus\xfe42\""), detail: "principal"},
		{name: "endpoint invalid UTF-8", path: "/v1/claim", body: "{\"principal\":\"p\",\"endpoint\":\"POST /\xc3\",\"key\":\"k\",\"fingerprint\":\"00\"}", detail: "endpoint"},
		{name: "correlation_id invalid UTF-8", path: "/v1/claim", body: claim("\"correlation_id\":\"\xe2\x82\",")},
		{name: "principal with an unpaired surrogate", path: "/v1/claim", body: withPrincipal(`"cus\ud800"`), detail: "principal"},
		{name: "fingerprint odd length", path: "/v1/claim", body: withFP(`"abc"`), detail: "fingerprint"},
		{name: "fingerprint one char", path: "/v1/claim", body: withFP(`"a"`), detail: "fingerprint"},
		{name: "fingerprint non-hex", path: "/v1/claim", body: withFP(`"zz"`), detail: "fingerprint"},
		{name: "fingerprint with 0x", path: "/v1/claim", body: withFP(`"0x00"`), detail: "fingerprint"},
		{name: "fingerprint too long", path: "/v1/claim", body: withFP(`"` + strings.Repeat("ab", 65) + `"`), detail: "fingerprint"},
		{name: "claim_id over 255 bytes", path: "/v1/claim", body: claim(`"claim_id":"` + long + `",`), detail: "claim_id"},
		{name: "correlation_id over 255 bytes", path: "/v1/claim", body: claim(`"correlation_id":"` + long + `",`), detail: "correlation_id"},
		{name: "lease_ms 99", path: "/v1/claim", body: claim(``)[:len(claim(``))-len(`30000}`)] + `99}`, detail: "lease_ms"},
		{name: "lease_ms 3600001", path: "/v1/claim", body: claim(``)[:len(claim(``))-len(`30000}`)] + `3600001}`, detail: "lease_ms"},
		{name: "lease_ms negative", path: "/v1/claim", body: claim(``)[:len(claim(``))-len(`30000}`)] + `-30000}`, detail: "lease_ms"},
		{name: "lease_ms overflows int64", path: "/v1/claim", body: claim(``)[:len(claim(``))-len(`30000}`)] + `99999999999999999999}`, detail: "lease_ms"},
		{name: "request body over 1 MiB", path: "/v1/claim", body: big, status: 413, code: "request_too_large", mayReset: true},

		{name: "complete: token as a number", path: "/v1/complete", body: `{"principal":"cus_42","endpoint":"POST /payments","key":"live","token":` + strconv.FormatUint(mustUint(t, tok), 10) + `,"response":{"status":200}}`, detail: "token"},
		{name: "complete: token missing", path: "/v1/complete", body: `{"principal":"cus_42","endpoint":"POST /payments","key":"live","response":{"status":200}}`, detail: "token"},
		{name: "complete: response missing", path: "/v1/complete", body: `{` + target + `}`, detail: "response"},
		{name: "complete: response null", path: "/v1/complete", body: complete(`null`), detail: "response"},
		{name: "complete: status 99", path: "/v1/complete", body: complete(`{"status":99}`), detail: "status"},
		{name: "complete: status 600", path: "/v1/complete", body: complete(`{"status":600}`), detail: "status"},
		{name: "complete: status missing", path: "/v1/complete", body: complete(`{"body":""}`), detail: "status"},
		{name: "complete: status as a string", path: "/v1/complete", body: complete(`{"status":"200"}`), detail: "status"},
		{name: "complete: bad base64 body", path: "/v1/complete", body: complete(`{"status":200,"body":"not base64!"}`), detail: "response.body"},
		{name: "complete: header value with CRLF (header injection)", path: "/v1/complete", body: complete(`{"status":200,"headers":{"X":"a\r\nSet-Cookie: s=1"}}`), detail: "control character"},
		{name: "complete: header name with a space", path: "/v1/complete", body: complete(`{"status":200,"headers":{"Bad Name":"v"}}`), detail: "header name"},
		{name: "complete: content_type with LF", path: "/v1/complete", body: complete(`{"status":200,"content_type":"text/plain\nX: y"}`), detail: "content_type"},
		{name: "complete: URL-safe base64 body", path: "/v1/complete", body: complete(`{"status":200,"body":"-_-_"}`), detail: "response.body"},
		{name: "complete: body as a number", path: "/v1/complete", body: complete(`{"status":200,"body":5}`), detail: "response.body"},
		{name: "complete: headers as an array", path: "/v1/complete", body: complete(`{"status":200,"headers":["a"]}`), detail: "headers"},
		{name: "complete: header value as a number", path: "/v1/complete", body: complete(`{"status":200,"headers":{"X":1}}`), detail: "headers"},
		{name: "complete: empty header name", path: "/v1/complete", body: complete(`{"status":200,"headers":{"":"v"}}`), detail: "headers"},
		{name: "complete: header invalid UTF-8", path: "/v1/complete", body: complete("{\"status\":200,\"headers\":{\"X\":\"\xff\"}}"), detail: "headers"},
		{name: "complete: unknown response field", path: "/v1/complete", body: complete(`{"status":200,"trailers":{}}`), detail: "trailers"},
		{name: "complete: missing key", path: "/v1/complete", body: `{"principal":"cus_42","endpoint":"POST /payments","token":"` + tok + `","response":{"status":200}}`, detail: "key"},
		{name: "complete: body over max-response-bytes", path: "/v1/complete", body: complete(`{"status":200,"body":"` + base64.StdEncoding.EncodeToString(make([]byte, 65537)) + `"}`), status: 413, code: "response_too_large", detail: "response.body"},

		{name: "release: reason over 255 bytes", path: "/v1/release", body: `{` + target + `,"reason":"` + long + `"}`, detail: "reason"},
		{name: "release: unknown field", path: "/v1/release", body: `{` + target + `,"lease_ms":100}`, detail: "lease_ms"},
		{name: "release: empty object", path: "/v1/release", body: `{}`, detail: "principal"},

		{name: "extend: lease_ms missing", path: "/v1/extend", body: `{` + target + `}`, detail: "lease_ms"},
		{name: "extend: lease_ms 99", path: "/v1/extend", body: `{` + target + `,"lease_ms":99}`, detail: "lease_ms"},
		{name: "extend: lease_ms 3600001", path: "/v1/extend", body: `{` + target + `,"lease_ms":3600001}`, detail: "lease_ms"},
		{name: "extend: lease_ms null", path: "/v1/extend", body: `{` + target + `,"lease_ms":null}`, detail: "lease_ms"},

		{name: "records: missing principal", method: "GET", path: "/v1/records?endpoint=e&key=live", detail: "principal"},
		{name: "records: missing key", method: "GET", path: "/v1/records?principal=cus_42&endpoint=POST%20%2Fpayments", detail: "key"},
		{name: "records: key with a control char", method: "GET", path: "/v1/records?principal=cus_42&endpoint=POST%20%2Fpayments&key=li%0Ave", detail: "key"},
		{name: "records: principal invalid UTF-8", method: "GET", path: "/v1/records?principal=cus%FF&endpoint=POST%20%2Fpayments&key=live", detail: "principal"},
		{name: "records: consistency=bogus", method: "GET", path: live.query("consistency=bogus"), detail: "consistency"},
		{name: "records: delete without key", method: "DELETE", path: "/v1/records?principal=cus_42&endpoint=POST%20%2Fpayments", detail: "key"},
		{name: "join: missing fields", path: "/v1/cluster/join", body: `{"id":"n2"}`, detail: "raft_addr"},
		{name: "join: raft_addr not host:port", path: "/v1/cluster/join", body: `{"id":"n7","raft_addr":"nonsense","http_addr":"127.0.0.9:7070"}`, detail: "raft_addr"},
		{name: "join: raft_addr with a scheme", path: "/v1/cluster/join", body: `{"id":"n8","raft_addr":"http://127.0.0.9:7071","http_addr":"127.0.0.9:7070"}`, detail: "raft_addr"},
		{name: "join: http_addr without a port", path: "/v1/cluster/join", body: `{"id":"n8","raft_addr":"127.0.0.9:7071","http_addr":"127.0.0.9"}`, detail: "http_addr"},
		{name: "join: http_addr port 0", path: "/v1/cluster/join", body: `{"id":"n8","raft_addr":"127.0.0.9:7071","http_addr":"127.0.0.9:0"}`, detail: "http_addr"},
		{name: "join: raft_addr with a signed port", path: "/v1/cluster/join", body: `{"id":"n8","raft_addr":"10.0.0.4:+80","http_addr":"127.0.0.9:7070"}`, detail: "raft_addr"},
		{name: "join: http_addr with a service name", path: "/v1/cluster/join", body: `{"id":"n8","raft_addr":"127.0.0.9:7071","http_addr":"node-4:http"}`, detail: "http_addr"},
		{name: "remove: missing id", path: "/v1/cluster/remove", body: `{}`, detail: "id"},

		{name: "GET /v1/claim", method: "GET", path: "/v1/claim", status: 405, code: "method_not_allowed"},
		{name: "PUT /v1/complete", method: "PUT", path: "/v1/complete", body: complete(`{"status":200}`), status: 405, code: "method_not_allowed"},
		{name: "DELETE /v1/release", method: "DELETE", path: "/v1/release", status: 405, code: "method_not_allowed"},
		{name: "PATCH /v1/extend", method: "PATCH", path: "/v1/extend", status: 405, code: "method_not_allowed"},
		{name: "POST /v1/records", method: "POST", path: live.query(), body: `{}`, status: 405, code: "method_not_allowed"},
		{name: "PUT /v1/records", method: "PUT", path: live.query(), status: 405, code: "method_not_allowed"},
		{name: "POST /v1/config", method: "POST", path: "/v1/config", status: 405, code: "method_not_allowed"},
		{name: "GET /v1/cluster/join", method: "GET", path: "/v1/cluster/join", status: 405, code: "method_not_allowed"},
		{name: "POST /healthz", method: "POST", path: "/healthz", status: 405, code: "method_not_allowed"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if c.method == "" {
				c.method = "POST"
			}
			if c.status == 0 {
				c.status, c.code = http.StatusBadRequest, "invalid_request"
			}
			before := n.stateHash()
			var body any
			if c.body != "" || c.method == "POST" {
				body = c.body
			}
			var r reply
			if c.mayReset {
				var err error
				if r, err = n.send("POST", c.path, strings.NewReader(c.body)); err != nil {
					require.True(t, errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE), "%v", err)
					t.Logf("the connection was reset while the body was sent: %v", err)
					require.Equal(t, before, n.stateHash(), "a rejected request wrote")
					return
				}
			} else {
				r = n.do(c.method, c.path, body)
			}
			p := requireProblem(t, r, c.status, c.code)
			if c.detail != "" {
				require.Contains(t, p["detail"], c.detail, "detail must name the field")
			}
			if c.status == http.StatusMethodNotAllowed {
				require.NotEmpty(t, r.header.Get("Allow"))
			}
			require.Equal(t, before, n.stateHash(), "a rejected request wrote")
		})
	}
	rec := n.record(live)
	require.Equal(t, "in_progress", rec["state"])
	require.Equal(t, int64(1), num(t, rec["attempt"]))
	requireProblem(t, n.lookup(sc("fresh")), http.StatusNotFound, "not_found")
}

// TestTextIsStoredVerbatim: what passes validation is stored and shown
// exactly as sent, so distinct scopes never collapse into one.
func TestTextIsStoredVerbatim(t *testing.T) {
	t.Parallel()
	n := mustNode(t)
	for _, s := range []scope{
		{"cus_42", "POST /payments", "k"},
		{"cus_42", "POST /payments", "k "},
		{"cus_42 ", "POST /payments", "k"},
		{"cus_4", "2POST /payments", "k"},
		{"顧客\U0001F600", "POST /支払い", "~!@#$%^&*()_+{}|:\"<>?`-=[]\\;',./"},
		{"\ufffd", "e", "k"},
	} {
		c := n.mustClaim(s, fp1)
		require.Equal(t, int64(1), num(t, c["attempt"]), "%q collided with an earlier scope", s)
		rec := n.record(s)
		require.Equal(t, s.principal, rec["principal"])
		require.Equal(t, s.endpoint, rec["endpoint"])
		require.Equal(t, s.key, rec["key"])
	}
}

// --- scope modes -------------------------------------------------------

func TestScopeModes(t *testing.T) {
	t.Parallel()
	t.Run("principal", func(t *testing.T) {
		t.Parallel()
		n := mustNode(t, principalScope())
		a := scope{"cus_1", "POST /payments", "k1"}
		b := scope{"cus_1", "POST /refunds", "k1"}
		c := n.mustClaim(a, fp1)
		requireProblem(t, n.claim(b, fp2), http.StatusUnprocessableEntity, "fingerprint_mismatch")
		requireProblem(t, n.claim(b, fp1), http.StatusConflict, "in_progress")
		// The token addresses the record from either endpoint.
		require.Equal(t, http.StatusOK, n.complete(b, c["token"].(string), okResponse).status)
		r := n.claim(b, fp1)
		require.Equal(t, http.StatusOK, r.status, "%s", r)
		rec := r.obj(t)["record"].(map[string]any)
		require.Equal(t, "replay", r.obj(t)["outcome"])
		require.Equal(t, a.endpoint, rec["endpoint"], "the endpoint of the first claim is stored")
		require.Equal(t, http.StatusOK, n.lookup(b).status)

		// Tenants never see each other.
		other := scope{"cus_2", a.endpoint, a.key}
		requireProblem(t, n.lookup(other), http.StatusNotFound, "not_found")
		requireProblem(t, n.lookup(other, "consistency=stale"), http.StatusNotFound, "not_found")
		requireProblem(t, n.complete(other, c["token"].(string), okResponse), http.StatusNotFound, "not_found")
		c2 := n.mustClaim(other, fp2)
		require.Equal(t, int64(1), num(t, c2["attempt"]))
	})
	t.Run("endpoint", func(t *testing.T) {
		t.Parallel()
		n := mustNode(t)
		a := scope{"cus_1", "POST /payments", "k1"}
		b := scope{"cus_1", "POST /refunds", "k1"}
		ca := n.mustClaim(a, fp1)
		cb := n.mustClaim(b, fp2)
		require.NotEqual(t, ca["token"], cb["token"])
		require.Equal(t, http.StatusOK, n.complete(a, ca["token"].(string), okResponse).status)
		require.Equal(t, "in_progress", n.record(b)["state"])
		requireProblem(t, n.complete(b, ca["token"].(string), okResponse), http.StatusConflict, "token_mismatch")

		other := scope{"cus_2", a.endpoint, a.key}
		requireProblem(t, n.lookup(other), http.StatusNotFound, "not_found")
		requireProblem(t, n.do("DELETE", other.query(), nil), http.StatusNotFound, "not_found")
		n.mustClaim(other, fp2)
		require.Equal(t, "completed", n.record(a)["state"])
	})
}

// --- concurrency -------------------------------------------------------

func TestConcurrentClaimsHaveOneWinner(t *testing.T) {
	t.Parallel()
	n := mustNode(t)
	const scopes, racers = 20, 64
	for i := range scopes {
		s := sc(fmt.Sprintf("race-%d", i))
		start := make(chan struct{})
		var wg sync.WaitGroup
		statuses := make([]int, racers)
		tokens := make([]string, racers)
		for g := range racers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				body, _ := json.Marshal(s.body("fingerprint", fp1, "claim_id", fmt.Sprintf("c%d", g)))
				<-start
				resp, err := n.client.Post(n.url+"/v1/claim", "application/json", bytes.NewReader(body))
				if err != nil {
					statuses[g] = -1
					return
				}
				defer resp.Body.Close()
				var out struct{ Token string }
				json.NewDecoder(resp.Body).Decode(&out)
				statuses[g], tokens[g] = resp.StatusCode, out.Token
			}()
		}
		close(start)
		wg.Wait()
		won, lost := 0, 0
		var winner string
		for g, st := range statuses {
			switch st {
			case http.StatusCreated:
				won++
				winner = tokens[g]
			case http.StatusConflict:
				lost++
			default:
				t.Fatalf("scope %d racer %d: status %d", i, g, st)
			}
		}
		require.Equal(t, 1, won, "scope %d", i)
		require.Equal(t, racers-1, lost, "scope %d", i)
		rec := n.record(s)
		require.Equal(t, int64(1), num(t, rec["attempt"]))
		// Only the winner's token completes.
		require.Equal(t, http.StatusOK, n.complete(s, winner, okResponse).status)
	}
}

// Tokens are opaque: one the server never issued is not malformed input but
// a token that is not the current attempt's, answered like any stale one
// (409 token_mismatch on a live record, 404 without one), and changes
// nothing.
func TestForeignTokenIsTokenMismatch(t *testing.T) {
	t.Parallel()
	n := mustNode(t)
	s := sc("foreign-token")
	c := n.mustClaim(s, fp1)
	before := n.dataHash()
	for _, tok := range []string{"not-the-token-49", "0", "-1", "18446744073709551616", "abc"} {
		requireProblem(t, n.complete(s, tok, okResponse), http.StatusConflict, "token_mismatch")
		requireProblem(t, n.post("/v1/release", s.body("token", tok)), http.StatusConflict, "token_mismatch")
		requireProblem(t, n.post("/v1/extend", s.body("token", tok, "lease_ms", 1000)), http.StatusConflict, "token_mismatch")
		requireProblem(t, n.complete(sc("foreign-none"), tok, okResponse), http.StatusNotFound, "not_found")
	}
	require.Equal(t, before, n.dataHash(), "nothing changed")
	require.Equal(t, "in_progress", n.record(s)["state"])
	requireProblem(t, n.complete(s, strings.Repeat("9", 256), okResponse), http.StatusBadRequest, "invalid_request")
	require.Equal(t, http.StatusOK, n.complete(s, c["token"].(string), okResponse).status)
}

// Release and extend of a completed record say what happened, not that a
// different response was given.
func TestReleaseOrExtendOfCompletedSaysSo(t *testing.T) {
	t.Parallel()
	n := mustNode(t)
	s := sc("completed-then-release")
	c := n.mustClaim(s, fp1)
	tok := c["token"].(string)
	require.Equal(t, http.StatusOK, n.complete(s, tok, okResponse).status)
	p := requireProblem(t, n.post("/v1/release", s.body("token", tok)), http.StatusConflict, "already_completed")
	require.Contains(t, p["detail"], "cannot be released")
	require.NotContains(t, p["detail"], "different response")
	p = requireProblem(t, n.post("/v1/extend", s.body("token", tok, "lease_ms", 1000)), http.StatusConflict, "already_completed")
	require.Contains(t, p["detail"], "cannot be extended")
}

// A member of the wrong JSON type is named by its JSON name, the same on
// every route and in a batch op's result: claim, complete and extend embed
// wire's request structs, and encoding/json puts the Go struct's name in
// the path it reports ("ClaimRequest.principal"), which no client sends.
func TestWrongTypeNamesTheJSONMember(t *testing.T) {
	t.Parallel()
	n := mustNode(t)
	const want = `field "principal" must be a string, not number`
	bodies := map[string]string{
		"claim":    `{"principal":5,"endpoint":"e","key":"k","fingerprint":"aa"}`,
		"complete": `{"principal":5,"endpoint":"e","key":"k","token":"1","response":{"status":200}}`,
		"release":  `{"principal":5,"endpoint":"e","key":"k","token":"1"}`,
		"extend":   `{"principal":5,"endpoint":"e","key":"k","token":"1","lease_ms":1000}`,
		"get":      `{"principal":5,"endpoint":"e","key":"k"}`,
	}
	var ops []any
	for _, route := range []string{"claim", "complete", "release", "extend", "get"} {
		body := bodies[route]
		if route != "get" {
			p := requireProblem(t, n.post("/v1/"+route, body), 400, "invalid_request")
			require.Equal(t, want, p["detail"], "POST /v1/%s", route)
		}
		ops = append(ops, json.RawMessage(`{"op":"`+route+`",`+body[1:]))
	}
	for i, r := range n.batch(ops...) {
		require.Equal(t, 400, r.Status, "op %d: %s", i, r.Body)
		var p struct{ Detail string }
		require.NoError(t, json.Unmarshal(r.Body, &p))
		require.Equal(t, want, p.Detail, "op %d", i)
	}
	for route, c := range map[string]struct{ body, want string }{
		"complete": {`{"principal":"p","endpoint":"e","key":"k","token":7,"response":{"status":200}}`, `field "token" must be a string, not number`},
		"extend":   {`{"principal":"p","endpoint":"e","key":"k","token":"1","lease_ms":"1000"}`, `field "lease_ms" must be an integer, not string`},
		"claim":    {`{"principal":"p","endpoint":"e","key":"k","fingerprint":["aa"]}`, `field "fingerprint" must be a string, not array`},
	} {
		p := requireProblem(t, n.post("/v1/"+route, c.body), 400, "invalid_request")
		require.Equal(t, c.want, p["detail"], "POST /v1/%s", route)
	}
	// An integer too large for its field is an integer: the detail said
	// "must be an integer, not number 99999999999999999999".
	for _, route := range []string{"claim", "extend"} {
		body := `{"principal":"p","endpoint":"e","key":"k","fingerprint":"aa","lease_ms":99999999999999999999}`
		if route == "extend" {
			body = `{"principal":"p","endpoint":"e","key":"k","token":"1","lease_ms":99999999999999999999}`
		}
		p := requireProblem(t, n.post("/v1/"+route, body), 400, "invalid_request")
		require.Equal(t, `field "lease_ms" is out of range: 99999999999999999999`, p["detail"], "POST /v1/%s", route)
	}
	p := requireProblem(t, n.post("/v1/complete", `{"principal":"p","endpoint":"e","key":"k","token":"1","response":{"status":"200"}}`), 400, "invalid_request")
	require.Equal(t, `field "response.status" must be an integer, not string`, p["detail"])
	p = requireProblem(t, n.post("/v1/complete", `{"principal":"p","endpoint":"e","key":"k","token":"1","response":{"status":200,"headers":{"X":1}}}`), 400, "invalid_request")
	require.NotContains(t, p["detail"], "wire", "the detail names a Go package")
}

// A body of null is not the JSON object every route reads: encoding/json
// decodes it into a struct as "nothing", which then read as a request with
// every member missing ("principal must be 1 to 255 bytes (got 0)").
func TestNullBodyIsNotAnObject(t *testing.T) {
	t.Parallel()
	n := mustNode(t)
	before := n.stateHash()
	for _, path := range []string{"/v1/claim", "/v1/complete", "/v1/release", "/v1/extend", "/v1/batch", "/v1/cluster/join", "/v1/cluster/remove"} {
		for _, body := range []string{`null`, " \n null \t"} {
			p := requireProblem(t, n.post(path, body), 400, "invalid_request")
			require.Equal(t, "request body must be a JSON object, not null", p["detail"], "POST %s %q", path, body)
		}
	}
	rs := n.batch(nil, json.RawMessage(`{"op":"get","principal":"p","endpoint":"e","key":"k"}`))
	require.Equal(t, 400, rs[0].Status, "%s", rs[0].Body)
	require.Contains(t, string(rs[0].Body), "must be a JSON object")
	require.Equal(t, 404, rs[1].Status, "%s", rs[1].Body)
	require.Equal(t, before, n.stateHash())

	// An app token is told the same, not 403 for naming no principal.
	app := mustNode(t, withAuthFile(t, authFile())).as(appToken)
	p := requireProblem(t, app.post("/v1/claim", `null`), 400, "invalid_request")
	require.Equal(t, "request body must be a JSON object, not null", p["detail"])
}

// The query of /v1/records is read as strictly as a body: one that does
// not decode is refused as such (it read as no principal at all), and a
// parameter given twice is refused like a member given twice (it was
// first-wins, so the guard and a proxy in front could read another
// principal than the one a later reader takes).
func TestRecordsQueryIsStrict(t *testing.T) {
	t.Parallel()
	n := mustNode(t, withAuthFile(t, authFile()))
	admin, app := n.as(adminToken), n.as(appToken)
	s := scope{"cus_a1", "e", "k"}
	admin.mustClaim(s, fp1)
	before := admin.stateHash()
	for _, c := range []struct{ method, query, detail string }{
		{"GET", "principal=p%zz&endpoint=e&key=k", `the query does not decode: invalid URL escape "%zz"`},
		{"GET", "principal=cus_a1&endpoint=e&key=k%", `the query does not decode: invalid URL escape "%"`},
		{"GET", "principal=cus_a1;endpoint=e;key=k", "the query does not decode"},
		{"GET", "principal=cus_a1&principal=cus_z&endpoint=e&key=k", `the query has the parameter "principal" more than once`},
		{"GET", "principal=cus_a1&endpoint=e&key=k&key=k", `the query has the parameter "key" more than once`},
		{"GET", "principal=cus_a1&endpoint=e&key=k&consistency=stale&consistency=linearizable", `the query has the parameter "consistency" more than once`},
		{"HEAD", "principal=cus_a1&principal=cus_a1&endpoint=e&key=k", ""},
		{"DELETE", "principal=cus_a1&endpoint=e&endpoint=x&key=k", `the query has the parameter "endpoint" more than once`},
		{"DELETE", "principal=cus_a1&endpoint=e&key=%G0", "the query does not decode"},
		// An unknown parameter is refused as an unknown member of a body is
		// (and as it is in a batch's get op, whose members are these
		// parameters): a misspelt consistency read linearizable.
		{"GET", "principal=cus_a1&endpoint=e&key=k&consistancy=stale", `unknown parameter "consistancy"`},
		{"GET", "principal=cus_a1&endpoint=e&key=k&Principal=cus_z", `unknown parameter "Principal"`},
		{"DELETE", "principal=cus_a1&endpoint=e&key=k&x=1", `unknown parameter "x"`},
		{"DELETE", "principal=cus_a1&endpoint=e&key=k&consistency=stale", `unknown parameter "consistency"`},
	} {
		for _, who := range []*testNode{admin, app} {
			if c.method == "DELETE" && who == app {
				continue // an app token may not delete: 403 before the query is read
			}
			r := who.do(c.method, "/v1/records?"+c.query, nil)
			if c.method == "HEAD" {
				require.Equal(t, 400, r.status, "HEAD %s", c.query)
				continue
			}
			p := requireProblem(t, r, 400, "invalid_request")
			require.Contains(t, p["detail"], c.detail, "%s %s", c.method, c.query)
		}
	}
	require.Equal(t, before, admin.stateHash(), "a refused query wrote")
	require.Equal(t, "in_progress", admin.record(s)["state"])
}

// A path that is not in its clean form is an unknown route: a problem
// document, never net/http's HTML redirect to the cleaned path (which a
// client following it would take for the route's own answer, and a POST
// would follow as a 307 with its body). With an auth file, an unknown
// route needs a valid token first, as every route but /healthz and
// /readyz does: 401 without one, then 404; so does a wrong method (405).
func TestUnknownAndUncleanPathsAreProblems(t *testing.T) {
	t.Parallel()
	serve := func(n *testNode, method, target, token string) *httptest.ResponseRecorder {
		req := httptest.NewRequest(method, target, strings.NewReader(`{}`))
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		w := httptest.NewRecorder()
		n.api.ServeHTTP(w, req)
		return w
	}
	expect := func(w *httptest.ResponseRecorder, status int, code, what string) {
		t.Helper()
		require.Equal(t, status, w.Code, "%s: %s", what, w.Body)
		require.Equal(t, "application/problem+json", w.Header().Get("Content-Type"), "%s", what)
		require.Empty(t, w.Header().Get("Location"), "%s", what)
		var p struct{ Code string }
		require.NoError(t, json.Unmarshal(w.Body.Bytes(), &p), "%s: %s", what, w.Body)
		require.Equal(t, code, p.Code, "%s", what)
	}
	unclean := []struct{ method, path string }{
		{"GET", "/v1//config"}, {"GET", "//v1/config"}, {"GET", "/v1/./config"}, {"GET", "/v1/config/."},
		{"GET", "/v1/../x"}, {"GET", "/v1/x/../config"}, {"POST", "/v1/claim/../claim"}, {"POST", "/v1//batch"},
		{"GET", "/v1/records/..?principal=p&endpoint=e&key=k"}, {"GET", "//healthz"},
	}

	open := mustNode(t)
	for _, c := range unclean {
		expect(serve(open, c.method, c.path, ""), 404, "not_found", c.method+" "+c.path)
	}
	expect(serve(open, "GET", "/v1/nope", ""), 404, "not_found", "GET /v1/nope")
	require.Equal(t, 200, serve(open, "GET", "/v1/config", "").Code)
	// Through a real connection too: nothing between the client and the
	// handler cleans the path.
	r := open.do("GET", "/v1//config", nil)
	requireProblem(t, r, 404, "not_found")

	guarded := mustNode(t, withAuthFile(t, authFile()))
	for _, c := range append(unclean, struct{ method, path string }{"GET", "/v1/nope"}, struct{ method, path string }{"DELETE", "/"}) {
		w := serve(guarded, c.method, c.path, "")
		expect(w, 401, "unauthorized", "no token: "+c.method+" "+c.path)
		require.NotEmpty(t, w.Header().Get("WWW-Authenticate"))
		expect(serve(guarded, c.method, c.path, unknownToken), 401, "unauthorized", "unknown token: "+c.method+" "+c.path)
		expect(serve(guarded, c.method, c.path, appToken), 404, "not_found", "app token: "+c.method+" "+c.path)
		expect(serve(guarded, c.method, c.path, adminToken), 404, "not_found", "admin token: "+c.method+" "+c.path)
	}
	require.Equal(t, 200, serve(guarded, "GET", "/healthz", "").Code)
	require.Equal(t, 200, serve(guarded, "GET", "/v1/config", operatorToken).Code)
	// A known route's wrong method likewise: 401 without a token, then
	// 405; /healthz and /readyz need none.
	for _, c := range []struct{ method, path string }{{"POST", "/v1/config"}, {"GET", "/v1/claim"}, {"DELETE", "/v1/admin/retention"}, {"PUT", "/v1/records"}} {
		expect(serve(guarded, c.method, c.path, ""), 401, "unauthorized", "no token: "+c.method+" "+c.path)
		w := serve(guarded, c.method, c.path, appToken)
		expect(w, 405, "method_not_allowed", "app token: "+c.method+" "+c.path)
		require.NotEmpty(t, w.Header().Get("Allow"))
	}
	expect(serve(guarded, "POST", "/healthz", ""), 405, "method_not_allowed", "POST /healthz")
	expect(serve(guarded, "POST", "/readyz", ""), 405, "method_not_allowed", "POST /readyz")
}
