package api_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idem-store/idem/api"
	"github.com/idem-store/idem/raftfsm"
)

// A header sent more than once (two Set-Cookie) is stored as an array and
// every lookup and replay gives it back in the form it was sent: arrays as
// arrays (even of one value), strings as strings.
func TestCompleteStoresHeadersSentMoreThanOnce(t *testing.T) {
	t.Parallel()
	n := mustNode(t)
	s := sc("set-cookie-twice")
	tok := n.mustClaim(s, fp1)["token"].(string)
	headers := map[string]any{"Location": "/p/1", "Set-Cookie": []any{"a=1; Path=/", "b=2"}, "Vary": []any{"Accept"}}
	r := n.complete(s, tok, map[string]any{"status": 201, "headers": headers, "body": base64.StdEncoding.EncodeToString([]byte("ok"))})
	require.Equal(t, http.StatusOK, r.status, "%s", r)

	want := `{"Location":"/p/1","Set-Cookie":["a=1; Path=/","b=2"],"Vary":["Accept"]}`
	got := n.record(s)["response"].(map[string]any)["headers"]
	require.JSONEq(t, want, mustJSON(t, got))
	replay := n.claim(s, fp1)
	require.Equal(t, http.StatusOK, replay.status)
	got = replay.obj(t)["record"].(map[string]any)["response"].(map[string]any)["headers"]
	require.JSONEq(t, want, mustJSON(t, got))

	// The same complete again is the same response: 200, nothing changes.
	before := n.stateHash()
	r = n.complete(s, tok, map[string]any{"status": 201, "headers": headers, "body": base64.StdEncoding.EncodeToString([]byte("ok"))})
	require.Equal(t, http.StatusOK, r.status, "%s", r)
	require.Equal(t, before, n.stateHash())
	// The same values in the other form are another response.
	r = n.complete(s, tok, map[string]any{"status": 201, "headers": map[string]any{"Location": "/p/1", "Set-Cookie": []any{"a=1; Path=/", "b=2"}, "Vary": "Accept"},
		"body": base64.StdEncoding.EncodeToString([]byte("ok"))})
	requireProblem(t, r, http.StatusConflict, "already_completed")
}

// The limits count every value of a header: 33 values under one name are
// over 32 entries, and each value counts its name's bytes again.
func TestHeaderLimitsCountEveryValue(t *testing.T) {
	t.Parallel()
	n := mustNode(t)
	s := sc("header-values")
	tok := n.mustClaim(s, fp1)["token"].(string)
	many := make([]any, 33)
	for i := range many {
		many[i] = fmt.Sprint(i)
	}
	big := []any{strings.Repeat("v", 4090), strings.Repeat("v", 4090)} // 2×(10+4090) > 8 KiB
	bad := map[string]struct {
		headers map[string]any
		status  int
		code    string
		detail  string
	}{
		"33 values of one header":       {map[string]any{"Set-Cookie": many}, 413, "response_too_large", "values"},
		"31 strings and a list of two":  {manyStrings(31, "Set-Cookie", []any{"a", "b"}), 413, "response_too_large", "values"},
		"values over 8 KiB together":    {map[string]any{"Set-Cookie": big}, 413, "response_too_large", "bytes"},
		"an empty list":                 {map[string]any{"Set-Cookie": []any{}}, 400, "invalid_request", "Set-Cookie"},
		"a number in a list":            {map[string]any{"Set-Cookie": []any{"a", 1}}, 400, "invalid_request", "headers"},
		"null in a list":                {map[string]any{"Set-Cookie": []any{"a", nil}}, 400, "invalid_request", "headers"},
		"a value with CRLF in a list":   {map[string]any{"Set-Cookie": []any{"a", "b\r\nX: y"}}, 400, "invalid_request", "control character"},
		"a bad name with a list":        {map[string]any{"Bad Name": []any{"a", "b"}}, 400, "invalid_request", "header name"},
		"a list nested in a list":       {map[string]any{"Set-Cookie": []any{[]any{"a"}}}, 400, "invalid_request", "headers"},
		"an object as a header's value": {map[string]any{"Set-Cookie": map[string]any{"a": "b"}}, 400, "invalid_request", "headers"},
	}
	for name, c := range bad {
		t.Run(name, func(t *testing.T) {
			before := n.stateHash()
			p := requireProblem(t, n.complete(s, tok, map[string]any{"status": 200, "headers": c.headers}), c.status, c.code)
			require.Contains(t, p["detail"], c.detail)
			require.Equal(t, before, n.stateHash())
		})
	}
	r := n.complete(s, tok, map[string]any{"status": 200, "headers": manyStrings(30, "Set-Cookie", []any{"a", "b"})})
	require.Equal(t, http.StatusOK, r.status, "32 values at the limit: %s", r)
}

func manyStrings(n int, list string, values []any) map[string]any {
	h := map[string]any{list: values}
	for i := range n {
		h[fmt.Sprintf("X-H%02d", i)] = "v"
	}
	return h
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	require.NoError(t, err)
	return string(b)
}

// joinOlderMember adds to n's cluster, as a non-voter, a member of an older
// release: its /healthz lists base, and extra too once the returned flag
// is set (the member was upgraded).
func joinOlderMember(t *testing.T, n *testNode, base, extra string) *atomic.Bool {
	t.Helper()
	var upgraded atomic.Bool
	ln, err := net.Listen("tcp", net.JoinHostPort(testIP(), "0")) // the test's own loopback address
	require.NoError(t, err)
	member := &httptest.Server{Listener: ln, Config: &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		features := base
		if upgraded.Load() {
			features += "," + extra
		}
		w.Header().Set("X-Idem-Features", features)
		io.WriteString(w, "{}")
	})}}
	member.Start()
	t.Cleanup(member.Close)
	_, err = n.node.Join(raftfsm.NodeInfo{ID: "n-old", RaftAddr: "127.0.0.1:1", HTTPAddr: strings.TrimPrefix(member.URL, "http://")}, true, false)
	require.NoError(t, err)
	return &upgraded
}

// A complete with a header stored as an array is written in an encoding an
// older member would refuse: while a member does not list header-lists on
// its /healthz, it is refused with 503 and nothing is written; once every
// member lists it, it is stored.
func TestHeaderListsWaitForEveryMember(t *testing.T) {
	old := api.SetListsGateRetry(100 * time.Millisecond)
	t.Cleanup(func() { api.SetListsGateRetry(old) })
	n := mustNode(t)
	upgraded := joinOlderMember(t, n, "cluster-secret,batch-entry", "header-lists")

	s := sc("rolling-upgrade")
	tok := n.mustClaim(s, fp1)["token"].(string)
	lists := map[string]any{"status": 200, "headers": map[string]any{"Set-Cookie": []any{"a=1", "b=2"}}}
	before := n.dataHash()
	p := requireProblem(t, n.complete(s, tok, lists), http.StatusServiceUnavailable, "unavailable")
	require.Contains(t, p["detail"], "n-old")
	// The middleware tells this 503 from the store's others (no leader, a
	// load limit shedding) by these words alone, and folds the answer's
	// arrays after a minute of it (its arraysRefusedDetail): kept as they
	// are.
	require.True(t, strings.HasPrefix(p["detail"].(string), "a header stored as an array (sent more than once) needs every member"), p["detail"])
	require.Equal(t, before, n.dataHash(), "nothing written")
	require.Equal(t, "in_progress", n.record(s)["state"])

	upgraded.Store(true)
	require.Eventually(t, func() bool { return n.complete(s, tok, lists).status == http.StatusOK }, 5*time.Second, 50*time.Millisecond)
	require.JSONEq(t, `{"Set-Cookie":["a=1","b=2"]}`, mustJSON(t, n.record(s)["response"].(map[string]any)["headers"]))
}

// A member seen listing header-lists that then stops answering (down, cut
// off) keeps the gate open: with one node of three down, every complete
// storing a header sent twice was refused 503 at the gate's next check
// while the cluster ran on (a client walk). A member that answers without
// it (started again on an older version) closes it.
func TestHeaderListsGateOutlivesAMemberThatStopsAnswering(t *testing.T) {
	oldRetry, oldRecheck := api.SetListsGateRetry(50*time.Millisecond), api.SetListsGateRecheck(50*time.Millisecond)
	t.Cleanup(func() { api.SetListsGateRetry(oldRetry); api.SetListsGateRecheck(oldRecheck) })
	var logs syncBuffer
	n := mustNode(t, withAPI(func(c *api.Config) { c.Logger = slog.New(slog.NewTextHandler(&logs, nil)) }))
	var mode atomic.Int32 // 0: answers with the feature, 1: down, 2: answers without it
	member := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch mode.Load() {
		case 1:
			if hj, ok := w.(http.Hijacker); ok {
				if c, _, err := hj.Hijack(); err == nil {
					c.Close() // no answer
					return
				}
			}
		case 2:
			w.Header().Set("X-Idem-Features", "cluster-secret,batch-entry")
		default:
			w.Header().Set("X-Idem-Features", "cluster-secret,batch-entry,header-lists")
		}
		io.WriteString(w, "{}")
	}))
	t.Cleanup(member.Close)
	_, err := n.node.Join(raftfsm.NodeInfo{ID: "n-2", RaftAddr: "127.0.0.1:1", HTTPAddr: strings.TrimPrefix(member.URL, "http://")}, true, false)
	require.NoError(t, err)
	lists := map[string]any{"status": 200, "headers": map[string]any{"Set-Cookie": []any{"a=1", "b=2"}}}
	complete := func(key string) reply {
		s := sc(key)
		tok := n.mustClaim(s, fp1)["token"].(string)
		return n.complete(s, tok, lists)
	}
	require.Equal(t, http.StatusOK, complete("seen").status)

	mode.Store(1)
	time.Sleep(150 * time.Millisecond) // past the recheck
	for i := range 3 {
		r := complete(fmt.Sprintf("down-%d", i))
		require.Equal(t, http.StatusOK, r.status, "a member seen with the feature, now down: %s", r)
		time.Sleep(60 * time.Millisecond)
	}

	mode.Store(2)
	require.Eventually(t, func() bool {
		return complete(fmt.Sprintf("older-%d", time.Now().UnixNano())).status == http.StatusServiceUnavailable
	}, 5*time.Second, 60*time.Millisecond, "a member that answers without the feature closes the gate")
	// Having listed it, it was started again on an earlier release: the
	// entries written while it was down reach it anyway, and it skips
	// them. Said at ERROR, once.
	time.Sleep(200 * time.Millisecond)
	require.Equal(t, 1, strings.Count(logs.String(), "downgrade in place"), "%s", logs.String())
	require.Contains(t, logs.String(), "level=ERROR")
	require.Contains(t, logs.String(), "feature=header-lists")
}

func TestHealthzListsHeaderLists(t *testing.T) {
	t.Parallel()
	n := mustNode(t)
	r := n.do("GET", "/healthz", nil)
	require.Equal(t, http.StatusOK, r.status)
	require.Contains(t, strings.Split(r.header.Get("X-Idem-Features"), ","), "header-lists")
}

// No cache between a client and a node may keep an answer of the API: a
// lookup and a replay carry the stored response (payment data), a claim
// its token. The probes and metrics are not the API's.
func TestAPIAnswersAreNotStored(t *testing.T) {
	t.Parallel()
	n := mustNode(t)
	s := sc("no-store")
	tok := n.mustClaim(s, fp1)["token"].(string)
	r := n.complete(s, tok, map[string]any{"status": 201, "body": base64.StdEncoding.EncodeToString([]byte("card 4242"))})
	require.Equal(t, http.StatusOK, r.status, "%s", r)
	for name, r := range map[string]reply{
		"lookup":  n.do("GET", s.query(), nil),
		"replay":  n.claim(s, fp1),
		"problem": n.do("GET", "/v1/records?principal=x", nil),
		"config":  n.do("GET", "/v1/config", nil),
		"unclean": n.do("GET", "/v1//config", nil),
	} {
		require.Equal(t, "no-store", r.header.Get("Cache-Control"), "%s: %s", name, r)
	}
	require.Empty(t, n.do("GET", "/healthz", nil).header.Get("Cache-Control"))
}

// A compressed request body is refused for what it is, not as "not valid
// JSON" (which sent its author looking at the JSON), and decides nothing.
func TestCompressedRequestBodyIsRefusedByName(t *testing.T) {
	t.Parallel()
	n := mustNode(t)
	before := n.stateHash()
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write([]byte(`{"principal":"p","endpoint":"e","key":"gz","fingerprint":"aa"}`))
	zw.Close()
	req, err := http.NewRequest("POST", n.url+"/v1/claim", bytes.NewReader(gz.Bytes()))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Content-Encoding", "gzip")
	resp, err := n.client.Do(req)
	require.NoError(t, err)
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	p := requireProblem(t, reply{status: resp.StatusCode, header: resp.Header, raw: raw}, http.StatusBadRequest, "invalid_request")
	require.Contains(t, p["detail"], `Content-Encoding "gzip" is not supported`)
	require.Equal(t, before, n.stateHash())
	// identity is no encoding.
	req, _ = http.NewRequest("POST", n.url+"/v1/claim", strings.NewReader(`{"principal":"p","endpoint":"e","key":"id","fingerprint":"aa"}`))
	req.Header.Set("Content-Encoding", "identity")
	resp, err = n.client.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusCreated, resp.StatusCode)
}

// A member rolled back to a release without a feature while another
// member never listed it is no downgrade in place: the gate stayed shut,
// so no entry needing the feature was written for it to skip (a rollback
// walk: OPERATIONS.md calls this rollback safe, and the leader said it at
// ERROR).
func TestRollbackWhileAMemberLacksTheFeatureIsNoDowngrade(t *testing.T) {
	oldRetry, oldRecheck := api.SetListsGateRetry(50*time.Millisecond), api.SetListsGateRecheck(50*time.Millisecond)
	t.Cleanup(func() { api.SetListsGateRetry(oldRetry); api.SetListsGateRecheck(oldRecheck) })
	var logs syncBuffer
	n := mustNode(t, withAPI(func(c *api.Config) { c.Logger = slog.New(slog.NewTextHandler(&logs, nil)) }))
	var upgraded atomic.Bool
	member := func(lists func() bool) string {
		ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if lists() {
				w.Header().Set("X-Idem-Features", "cluster-secret,batch-entry,header-lists")
			} else {
				w.Header().Set("X-Idem-Features", "cluster-secret,batch-entry")
			}
			io.WriteString(w, "{}")
		}))
		t.Cleanup(ts.Close)
		return strings.TrimPrefix(ts.URL, "http://")
	}
	for i, lists := range []func() bool{func() bool { return false }, upgraded.Load} {
		_, err := n.node.Join(raftfsm.NodeInfo{ID: fmt.Sprint("n-", i+2), RaftAddr: fmt.Sprint("127.0.0.1:", i+1), HTTPAddr: member(lists)}, true, false)
		require.NoError(t, err)
	}
	lists := map[string]any{"status": 200, "headers": map[string]any{"Set-Cookie": []any{"a=1", "b=2"}}}
	complete := func(key string) reply {
		s := sc(key)
		tok := n.mustClaim(s, fp1)["token"].(string)
		return n.complete(s, tok, lists)
	}
	upgraded.Store(true) // n-3 upgraded, n-2 not yet: the gate stays shut
	for i := range 3 {
		require.Equal(t, http.StatusServiceUnavailable, complete(fmt.Sprintf("up-%d", i)).status)
		time.Sleep(60 * time.Millisecond)
	}
	upgraded.Store(false) // n-3 rolled back
	for i := range 3 {
		require.Equal(t, http.StatusServiceUnavailable, complete(fmt.Sprintf("back-%d", i)).status)
		time.Sleep(60 * time.Millisecond)
	}
	require.NotContains(t, logs.String(), "downgrade in place")
}

// A member that gives no answer is named as such by the feature gates: a
// chaos soak's node logs said "batches are proposed one entry per op
// until every member runs a version that knows batch entries
// members=n4" of a node an operator had joined and never started, and of
// members down for a moment, sending the reader looking for an old
// release.
func TestFeatureGatesNameAMemberThatGivesNoAnswer(t *testing.T) {
	var logs syncBuffer
	n := mustNode(t, withAPI(func(c *api.Config) { c.Logger = slog.New(slog.NewTextHandler(&logs, nil)) }))
	joinOlderMember(t, n, "cluster-secret,batch-entry", "header-lists")
	silent := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if hj, ok := w.(http.Hijacker); ok {
			if c, _, err := hj.Hijack(); err == nil {
				c.Close() // no answer
			}
		}
	}))
	t.Cleanup(silent.Close)
	_, err := n.node.Join(raftfsm.NodeInfo{ID: "n-gone", RaftAddr: "127.0.0.1:2", HTTPAddr: strings.TrimPrefix(silent.URL, "http://")}, true, false)
	require.NoError(t, err)

	s := sc("gate-names")
	tok := n.mustClaim(s, fp1)["token"].(string)
	lists := map[string]any{"status": 200, "headers": map[string]any{"Set-Cookie": []any{"a=1", "b=2"}}}
	p := requireProblem(t, n.complete(s, tok, lists), http.StatusServiceUnavailable, "unavailable")
	require.Contains(t, p["detail"], "n-gone (no answer),n-old not yet")
	require.Contains(t, logs.String(), `members="n-gone (no answer),n-old"`)
	require.Contains(t, logs.String(), "down, unreachable, or run an older version")
}

// A member down with the old leader, which the new leader had never asked
// (no complete storing a header sent twice had come to it while the member
// answered), counted as lacking header lists: after a leader was killed,
// every such complete was refused 503 until it came back, and the
// middleware's retries ran their requests again. Every node now learns
// the members' features in the background, leader or not.
func TestHeaderListsGateOfANewLeaderKnowsAMemberDownWithTheOldOne(t *testing.T) {
	oldFirst, oldSettle, oldEvery := api.SetFeatureWatch(10*time.Millisecond, time.Minute, 50*time.Millisecond)
	t.Cleanup(func() { api.SetFeatureWatch(oldFirst, oldSettle, oldEvery) })
	n := mustNode(t)
	var down atomic.Bool
	joinFeaturedMember(t, n, down.Load)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go n.api.WatchFeatures(ctx) // as idem serve runs it on every node
	time.Sleep(200 * time.Millisecond)

	down.Store(true)
	s := sc("after-failover")
	tok := n.mustClaim(s, fp1)["token"].(string)
	r := n.complete(s, tok, map[string]any{"status": 201, "headers": map[string]any{"Set-Cookie": []any{"a=1", "b=2"}}})
	require.Equal(t, http.StatusOK, r.status, "a member seen listing header lists before it went down: %s", r)
}

// A node's first look at the members, moments after its start, may miss
// one (not answering yet, or this node not reaching it yet); the next came
// only 30 s later, and a leader killed meanwhile left a successor that had
// never seen the member to refuse every complete storing a header sent
// twice. The watch asks again at its first pace until every member has
// answered.
func TestFeatureWatchAsksAgainUntilEveryMemberAnswered(t *testing.T) {
	oldFirst, oldSettle, oldEvery := api.SetFeatureWatch(10*time.Millisecond, time.Minute, time.Hour)
	t.Cleanup(func() { api.SetFeatureWatch(oldFirst, oldSettle, oldEvery) })
	n := mustNode(t)
	var state atomic.Int32 // 0: not up yet, 1: up, 2: killed
	joinFeaturedMember(t, n, func() bool { return state.Load() != 1 })
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go n.api.WatchFeatures(ctx)
	time.Sleep(100 * time.Millisecond) // its first look finds the member silent
	state.Store(1)
	time.Sleep(200 * time.Millisecond)
	state.Store(2)

	s := sc("seen-later")
	tok := n.mustClaim(s, fp1)["token"].(string)
	r := n.complete(s, tok, map[string]any{"status": 201, "headers": map[string]any{"Set-Cookie": []any{"a=1", "b=2"}}})
	require.Equal(t, http.StatusOK, r.status, "a member that answered with header lists after the watch's first look: %s", r)
}

// joinFeaturedMember adds to n's configuration a member n-2 whose /healthz
// lists every gated feature, or, while silent() holds, closes each
// connection unanswered (a member down or killed).
func joinFeaturedMember(t *testing.T, n *testNode, silent func() bool) {
	t.Helper()
	member := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if silent() {
			if hj, ok := w.(http.Hijacker); ok {
				if c, _, err := hj.Hijack(); err == nil {
					c.Close() // no answer
					return
				}
			}
		}
		w.Header().Set("X-Idem-Features", "cluster-secret,batch-entry,header-lists")
		io.WriteString(w, "{}")
	}))
	t.Cleanup(member.Close)
	_, err := n.node.Join(raftfsm.NodeInfo{ID: "n-2", RaftAddr: "127.0.0.1:1", HTTPAddr: strings.TrimPrefix(member.URL, "http://")}, true, false)
	require.NoError(t, err)
}
