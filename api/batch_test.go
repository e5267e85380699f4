package api_test

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idem-store/idem/api"
)

// batchResult is one op's answer in a batch.
type batchResult struct {
	Status     int             `json:"status"`
	Body       json.RawMessage `json:"body"`
	RetryAfter int             `json:"retry_after"`
}

func (n *testNode) batch(ops ...any) []batchResult {
	n.tb.Helper()
	r := n.post("/v1/batch", map[string]any{"ops": ops})
	require.Equal(n.tb, http.StatusOK, r.status, "%s", r)
	var out struct{ Results []batchResult }
	require.NoError(n.tb, json.Unmarshal(r.raw, &out))
	require.Len(n.tb, out.Results, len(ops))
	return out.Results
}

// op is a batch op: the route's body with "op".
func op(kind string, s scope, kv ...any) map[string]any {
	m := s.body(kv...)
	m["op"] = kind
	return m
}

var (
	batchTimeRE  = regexp.MustCompile(`\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z`)
	batchTokenRE = regexp.MustCompile(`"\d{20}\.[0-9a-f]{32}"`)
)

// normal is an answer with what differs between two nodes by nature (times,
// tokens) replaced.
func normal(status int, body []byte, retry int) string {
	b := batchTimeRE.ReplaceAllString(strings.TrimSpace(string(body)), "TIME")
	b = batchTokenRE.ReplaceAllString(b, `"TOKEN"`)
	return fmt.Sprintf("%d retry=%v %s", status, retry > 0, b)
}

// The oracle: the same ops, sent as batches to one fresh node and one by
// one to another, get the same status and body each, in order (times and
// tokens aside). Tokens an op needs are those of claims of earlier rounds,
// each node's own.
func TestBatchAnswersAsSingleRequests(t *testing.T) {
	const tokA, tokB, tokC, tokD, bad = "$a", "$b", "$c", "$d", "$bad"
	resp := map[string]any{"status": 201, "content_type": "application/json", "headers": map[string]any{"Location": "/p/1"}, "body": "eyJpZCI6MX0="}
	other := map[string]any{"status": 500, "body": ""}
	a, b, c, d, e := sc("a"), sc("b"), sc("c"), sc("d"), sc("e")
	rounds := [][]map[string]any{{
		op("claim", a, "fingerprint", fp1, "claim_id", "x"),
		op("claim", a, "fingerprint", fp1, "claim_id", "x"), // the same claim back
		op("claim", a, "fingerprint", fp1),                  // in_progress
		op("claim", a, "fingerprint", fp2),                  // fingerprint_mismatch
		op("get", a),
		op("claim", b, "fingerprint", fp1, "lease_ms", 5000),
		op("claim", c, "fingerprint", fp1),
		op("claim", d, "fingerprint", fp1, "correlation_id", "req-1"),
		op("get", e),
		op("claim", scope{"cus_43", "POST /payments", "a"}, "fingerprint", fp1, "lease_ms", 10), // 400
		op("release", e, "token", "1"),                   // 404
		op("frobnicate", a),                              // 400
		op("claim", a, "fingerprint", fp1, "unknown", 1), // 400
		op("get", a, "consistency", "stale"),
	}, {
		op("complete", a, "token", tokA, "response", resp),
		op("claim", a, "fingerprint", fp1),                  // replay of what this batch stored
		op("complete", a, "token", tokA, "response", resp),  // repeat: 200
		op("complete", a, "token", tokA, "response", other), // already_completed
		op("release", b, "token", tokB, "reason", "failed"), // released
		op("get", b), // failed
		op("claim", b, "fingerprint", fp1, "claim_id", "b2"), // attempt 2, in the same batch
		op("release", b, "token", tokB),                      // the old token is dead now
		op("complete", b, "token", bad, "response", resp),    // a forged token: 409
		op("extend", c, "token", tokC, "lease_ms", 60000),
		op("extend", c, "token", tokC),                     // 400: lease_ms required
		op("complete", d, "token", tokC, "response", resp), // another scope's token: 409
		op("complete", e, "token", bad, "response", resp),  // no record: 404
		op("get", d),
		op("release", d, "token", tokD),
		op("claim", d, "fingerprint", fp1), // attempt 2
		op("get", d),
	}, {
		op("claim", b, "fingerprint", fp1, "claim_id", "b2"), // the same claim back
		op("get", a), op("get", b), op("get", c), op("get", d),
	}}

	run := func(n *testNode, batched bool) []string {
		toks := map[string]string{bad: "00000000000000000001.00000000000000000000000000000000"}
		var got []string
		for _, round := range rounds {
			ops := make([]any, len(round))
			for i, o := range round {
				c := map[string]any{}
				for k, v := range o {
					if s, ok := v.(string); ok && strings.HasPrefix(s, "$") {
						v = toks[s]
					}
					c[k] = v
				}
				ops[i] = c
			}
			var answers []batchResult
			if batched {
				answers = n.batch(ops...)
			} else {
				for _, o := range ops {
					m := o.(map[string]any)
					body := map[string]any{}
					for k, v := range m {
						if k != "op" {
							body[k] = v
						}
					}
					var r reply
					if m["op"] == "get" {
						s := scope{m["principal"].(string), m["endpoint"].(string), m["key"].(string)}
						var extra []string
						if c, ok := m["consistency"]; ok {
							extra = append(extra, "consistency="+c.(string))
						}
						r = n.lookup(s, extra...)
					} else if m["op"] == "frobnicate" {
						r = reply{status: 400, raw: []byte("FROB")}
					} else {
						r = n.post("/v1/"+m["op"].(string), body)
					}
					ra := 0
					if h := r.header.Get("Retry-After"); h != "" {
						ra = 1
					}
					answers = append(answers, batchResult{Status: r.status, Body: r.raw, RetryAfter: ra})
				}
			}
			for i, a := range answers {
				if round[i]["op"] == "frobnicate" {
					require.Equal(t, 400, a.Status)
					a.Body = []byte("FROB")
				}
				got = append(got, normal(a.Status, a.Body, a.RetryAfter))
				if a.Status == http.StatusCreated {
					var cl struct{ Token string }
					require.NoError(t, json.Unmarshal(a.Body, &cl))
					toks["$"+round[i]["key"].(string)] = cl.Token
				}
			}
		}
		return got
	}
	singles := run(mustNode(t), false)
	batched := run(mustNode(t), true)
	for i := range singles {
		require.Equal(t, singles[i], batched[i], "op %d", i)
	}
	t.Log(strings.Join(singles, "\n"))
	// The table covers what it claims to.
	all := strings.Join(singles, "\n")
	for _, want := range []string{"201 ", "200 ", `"code":"in_progress"`, `"code":"fingerprint_mismatch"`, `"code":"token_mismatch"`,
		`"code":"already_completed"`, `"code":"not_found"`, `"code":"invalid_request"`, `"outcome":"replay"`,
		`"state":"failed"`, `"attempt":2`, `"outcome":"extended"`, `"outcome":"released"`} {
		require.Contains(t, all, want)
	}
}

func TestBatchWholeRequestRefusals(t *testing.T) {
	n := mustNode(t, withAPI(func(c *api.Config) { c.MaxBatchOps = 3 }), withLimits(func(l *api.Limits) { l.MaxRequestBytes = 4 << 10 }))
	before := n.dataHash()
	claim := op("claim", sc("k"), "fingerprint", fp1)
	requireProblem(t, n.post("/v1/batch", "not json"), 400, "invalid_request")
	requireProblem(t, n.post("/v1/batch", `{"ops":[]}`), 400, "invalid_request")
	requireProblem(t, n.post("/v1/batch", `{}`), 400, "invalid_request")
	requireProblem(t, n.post("/v1/batch", `{"ops":{}}`), 400, "invalid_request")
	requireProblem(t, n.post("/v1/batch", `{"ops":[],"more":1}`), 400, "invalid_request")
	requireProblem(t, n.post("/v1/batch", map[string]any{"ops": []any{claim, claim, claim, claim}}), 413, "request_too_large")
	requireProblem(t, n.post("/v1/batch", map[string]any{"ops": []any{op("claim", sc(strings.Repeat("k", 5000)), "fingerprint", fp1)}}), 413, "request_too_large")
	requireProblem(t, n.do("GET", "/v1/batch", nil), 405, "method_not_allowed")
	require.Equal(t, before, n.dataHash(), "a refused batch changes nothing")

	// A malformed op answers alone; the others are decided.
	rs := n.batch(`not an object`, claim, map[string]any{"principal": "p"})
	require.Equal(t, 400, rs[0].Status)
	require.Equal(t, 201, rs[1].Status)
	require.Equal(t, 400, rs[2].Status)
	require.Contains(t, string(rs[2].Body), `no \"op\" member`)
	rs = n.batch(map[string]any{"op": "claim", "principal": "cus_42", "endpoint": "e", "key": "k2", "fingerprint": fp1, "Key": "x"})
	require.Equal(t, 400, rs[0].Status, "%s", rs[0].Body)
	rs = n.batch(json.RawMessage(`{"principal":"cus_42","op":"claim","endpoint":"e","key":"k3","fingerprint":"aa","op":"get"}`))
	require.Equal(t, 400, rs[0].Status, "%s", rs[0].Body)
	require.Contains(t, string(rs[0].Body), "more than once")
}

// With no leader, no op can be decided: the whole request is 503 (and
// retrying each claim with its claim_id is then safe).
func TestBatchWithoutLeaderIs503(t *testing.T) {
	n := mustNode(t, leaderless(200_000_000))
	r := n.post("/v1/batch", map[string]any{"ops": []any{op("claim", sc("k"), "fingerprint", fp1), op("get", sc("k"))}})
	requireProblem(t, r, 503, "unavailable")
	require.NotEmpty(t, r.header.Get("Retry-After"))
}

// Each op is authorized as its own route: an app token acts only for its
// principals, op by op, and a refused op writes nothing.
func TestBatchAuthorizesEachOp(t *testing.T) {
	admin := mustNode(t, withAuthFile(t, authFile()))
	n := admin.as(appToken)
	admin = admin.as(adminToken)
	mine, theirs := scope{"cus_a1", "e", "k"}, scope{"cus_z", "e", "k"}
	cl := admin.mustClaim(theirs, fp1)
	rs := n.batch(
		op("claim", mine, "fingerprint", fp1),
		op("claim", theirs, "fingerprint", fp1),
		op("get", theirs),
		op("release", theirs, "token", cl["token"]),
		op("get", mine),
	)
	require.Equal(t, 201, rs[0].Status, "%s", rs[0].Body)
	for _, i := range []int{1, 2, 3} {
		require.Equal(t, 403, rs[i].Status, "op %d: %s", i, rs[i].Body)
		require.Contains(t, string(rs[i].Body), `"code":"forbidden"`)
	}
	require.Equal(t, 200, rs[4].Status)
	require.Equal(t, "in_progress", admin.record(theirs)["state"], "the refused release changed nothing")
	r := admin.as(unknownToken).post("/v1/batch", map[string]any{"ops": []any{op("get", mine)}})
	requireProblem(t, r, 401, "unauthorized")
}

// One winner per record among batches and single claims racing on the
// same keys.
func TestBatchOneWinnerPerScope(t *testing.T) {
	n := mustNode(t)
	const keys, callers = 16, 8
	var mu sync.Mutex
	wins := map[string]int{}
	var wg sync.WaitGroup
	for c := 0; c < callers; c++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var ops []any
			for k := 0; k < keys; k++ {
				s := sc(fmt.Sprint("race-", k))
				if c%3 == 0 {
					if r := n.claim(s, fp1); r.status == 201 {
						mu.Lock()
						wins[s.key]++
						mu.Unlock()
					}
					continue
				}
				ops = append(ops, op("claim", s, "fingerprint", fp1), op("get", s))
			}
			if len(ops) == 0 {
				return
			}
			for i, r := range n.batch(ops...) {
				if r.Status == 201 {
					mu.Lock()
					wins[ops[i].(map[string]any)["key"].(string)]++
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	require.Len(t, wins, keys)
	for k, w := range wins {
		require.Equal(t, 1, w, "key %s", k)
	}
}

// The envelope is read as strictly as a single route's body: "ops" given
// twice, or in another case, would otherwise be taken silently (the last
// "ops" wins, so the ops of the first were dropped unanswered). It is
// refused whole, with the problem type, status and wording a single route
// gives a member given twice or in another case, and nothing is applied.
func TestBatchEnvelopeRefusesDuplicateAndCaseFoldedOps(t *testing.T) {
	n := mustNode(t)
	claimA, claimB := op("claim", sc("dupA"), "fingerprint", fp1), op("claim", sc("dupB"), "fingerprint", fp1)
	ops := func(v any) string { b, err := json.Marshal([]any{v}); require.NoError(t, err); return string(b) }
	single := requireProblem(t, n.post("/v1/claim", `{"principal":"a","principal":"b","endpoint":"e","key":"k","fingerprint":"00"}`), 400, "invalid_request")
	before := n.dataHash()
	for _, c := range []struct{ body, detail string }{
		{`{"ops":` + ops(claimA) + `,"ops":` + ops(claimB) + `}`, `request body has the member "ops" more than once`},
		{`{"o\u0070s":` + ops(claimA) + `,"ops":` + ops(claimB) + `}`, `request body has the member "ops" more than once`},
		{`{"ops":` + ops(claimA) + `,"ops":[]}`, `request body has the member "ops" more than once`},
		{`{"OPS":` + ops(claimA) + `}`, `unknown field "OPS" (names are case-sensitive; did you mean "ops"?)`},
		{`{"Ops":` + ops(op("get", sc("dupA"))) + `}`, `unknown field "Ops" (names are case-sensitive; did you mean "ops"?)`},
		{`{"ops":` + ops(claimA) + `,"OPS":` + ops(claimB) + `}`, `unknown field "OPS" (names are case-sensitive; did you mean "ops"?)`},
	} {
		p := requireProblem(t, n.post("/v1/batch", c.body), 400, "invalid_request")
		require.Equal(t, single["type"], p["type"], "%s", c.body)
		require.Equal(t, c.detail, p["detail"], "%s", c.body)
	}
	require.Equal(t, before, n.dataHash(), "a refused envelope applied an op")
	requireProblem(t, n.lookup(sc("dupA")), 404, "not_found")
	requireProblem(t, n.lookup(sc("dupB")), 404, "not_found")

	// An op's own faults stay that op's: the envelope check does not look
	// inside the ops (a member twice, or invalid UTF-8, in one op).
	rs := n.batch(json.RawMessage(`{"op":"claim","principal":"cus_42","principal":"x","endpoint":"e","key":"k","fingerprint":"aa"}`),
		json.RawMessage("{\"op\":\"claim\",\"principal\":\"cus\xff\",\"endpoint\":\"e\",\"key\":\"k\",\"fingerprint\":\"aa\"}"), claimA)
	require.Equal(t, 400, rs[0].Status, "%s", rs[0].Body)
	require.Contains(t, string(rs[0].Body), "more than once")
	require.Equal(t, 400, rs[1].Status, "%s", rs[1].Body)
	require.Equal(t, 201, rs[2].Status, "%s", rs[2].Body)
}

// storeBig claims and completes s with a 60 KiB response, whose gets make
// batch answers of 80 KiB an op.
func storeBig(t *testing.T, n *testNode, s scope) scope {
	t.Helper()
	tok := n.mustClaim(s, fp1)["token"].(string)
	body := base64.StdEncoding.EncodeToString(bytes.Repeat([]byte("x"), 60<<10))
	r := n.complete(s, tok, map[string]any{"status": 200, "content_type": "text/plain", "body": body})
	require.Equal(t, http.StatusOK, r.status, "%s", r)
	return s
}

// A batch answer can be hundreds of times its request (256 gets of a record
// with a 64 KiB response): clients that sent such batches and did not read
// the answers held a gigabyte of a node's memory with ten connections
// (attack on loopback). While the node writes answers of
// MaxBatchAnswerBytes, a new batch is 503 before anything is decided; an
// answer not taken in time closes its connection and frees its bytes.
func TestBatchAnswersUnreadAreBounded(t *testing.T) {
	n := mustNode(t, withAPI(func(c *api.Config) {
		c.MaxBatchAnswerBytes = 16 << 20
		c.BatchAnswerWriteTimeout = 2 * time.Second
		c.MaxBatchOps = 1024
	}))
	big := storeBig(t, n, sc("big"))

	gets := make([]any, 1024)
	for i := range gets {
		gets[i] = op("get", big)
		if i >= 300 {
			// Refused (400): answers the bound does not shed, which fill
			// what the gets leave of it.
			gets[i] = op("get", big, "x", "1")
		}
	}
	req, err := json.Marshal(map[string]any{"ops": gets})
	require.NoError(t, err)
	conn, err := net.Dial("tcp", strings.TrimPrefix(n.url, "http://"))
	require.NoError(t, err)
	defer conn.Close()
	_, err = fmt.Fprintf(conn, "POST /v1/batch HTTP/1.1\r\nHost: idem\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(req), req)
	require.NoError(t, err)
	// 16 MiB of answer, never read: more than the socket buffers hold.

	probe := map[string]any{"ops": []any{op("get", sc("nothing"))}} // decides nothing either way
	// Up to 30 s: the 1,024 ops are decided and their answer made first,
	// which took 0.4–6.7 s with the CPUs busy (5 s failed 4 runs in 20).
	require.Eventually(t, func() bool {
		return n.post("/v1/batch", probe).status == http.StatusServiceUnavailable
	}, 30*time.Second, 20*time.Millisecond, "a batch while an unread answer holds the budget")
	before := n.dataHash()
	claim := op("claim", sc("while-held"), "fingerprint", fp1)
	r := n.post("/v1/batch", map[string]any{"ops": []any{claim}})
	requireProblem(t, r, http.StatusServiceUnavailable, "unavailable")
	require.Equal(t, "1", r.header.Get("Retry-After"))
	require.Equal(t, before, n.dataHash(), "a refused batch decides nothing")
	requireProblem(t, n.lookup(sc("while-held")), http.StatusNotFound, "not_found")

	// Not taken within the write timeout: the bytes are free and batches
	// are decided again, the client still reading nothing; its connection
	// is closed.
	require.Eventually(t, func() bool {
		return n.post("/v1/batch", map[string]any{"ops": []any{claim}}).status == http.StatusOK
	}, 10*time.Second, 50*time.Millisecond)
	require.Equal(t, 200, n.lookup(sc("while-held")).status)
	conn.SetReadDeadline(time.Now().Add(20 * time.Second))
	_, err = io.Copy(io.Discard, conn)
	require.NoError(t, err, "the node closes the connection whose answer was not taken")

	// A kept-alive connection that took its answer has no deadline left:
	// its next answer, after the timeout, is written.
	n.batch(op("get", sc("while-held")))
	time.Sleep(2500 * time.Millisecond)
	require.Equal(t, 200, n.batch(op("get", sc("while-held")))[0].Status)
}

// One tenant's unread answers held the whole node's batch answer memory,
// and every other tenant's batch was 503 for as long as it kept doing so
// (attack on loopback: four connections of 256 gets of a 64 KiB response,
// never read). With auth on, a token's requests hold at most half of it:
// the tenant's next batch is 503 naming its token, another tenant's goes.
func TestOneTokenHoldsAtMostHalfTheBatchAnswers(t *testing.T) {
	const otherToken = "other-app-token-0123456789"
	n := mustNode(t, withAuthFile(t, authFile(fmt.Sprintf(`{"name":"shop","sha256":%q,"role":"app","principals":["cus_b*"]}`, api.HashToken(otherToken)))),
		withAPI(func(c *api.Config) {
			c.MaxBatchAnswerBytes = 16 << 20
			c.BatchAnswerWriteTimeout = 30 * time.Second
			c.MaxBatchOps = 1024
		}))
	a, b := n.as(appToken), n.as(otherToken)
	big := storeBig(t, a, scope{"cus_a1", "POST /payments", "big"})

	// 78 MB of answer, past the node's 16 MiB: the gets past the bound are
	// answered 503, and those answers fill it up. 1,000 gets, not 1,024:
	// with a probe's op in flight as it arrived, a batch of 1,024 took the
	// token past half of --max-inflight and was refused whole, and every
	// probe after it went (seen on a loaded machine).
	unread := sendUnreadGets(t, n, appToken, big, 1000)

	probe := map[string]any{"ops": []any{op("get", scope{"cus_a1", "POST /payments", "nothing"})}}
	var refused reply
	require.Eventually(t, func() bool {
		// (Making 1,000 answers took over 5 s on a loaded CI machine:
		// within the 30 s the node gives the answer's write.)
		refused = a.post("/v1/batch", probe)
		return refused.status == http.StatusServiceUnavailable && strings.Contains(string(refused.raw), "holds its share of the memory")
	}, 25*time.Second, 20*time.Millisecond, "the tenant's own batch while its unread answer holds its half")
	require.Contains(t, string(refused.raw), `the token \"payments\" holds its share of the memory`)

	// The other tenant's batch is decided: a claim and a get of it.
	mine := scope{"cus_b1", "POST /payments", "k"}
	rs := b.batch(op("claim", mine, "fingerprint", fp1), op("get", mine))
	require.Equal(t, http.StatusCreated, rs[0].Status, "%s", rs[0].Body)
	require.Equal(t, http.StatusOK, rs[1].Status, "%s", rs[1].Body)

	// The tenant hangs up: what its answer held is given back, to the
	// node and to its token's share (kept per token now, a leak would
	// stay), and its next batch goes.
	require.Positive(t, n.api.TokenBatchAnswerBytes("payments"))
	unread.Close()
	require.Eventually(t, func() bool {
		return n.api.TokenBatchAnswerBytes("payments") == 0 && n.api.BatchAnswerBytesInUse() == 0
	}, 10*time.Second, 20*time.Millisecond, "the token's share after its client hung up")
	require.Equal(t, http.StatusOK, a.batch(op("get", scope{"cus_a1", "POST /payments", "big"}))[0].Status)
	// (Given back once the node's write returns, which may be just after
	// the client has read the last byte.)
	require.Eventually(t, func() bool { return n.api.TokenBatchAnswerBytes("payments") == 0 }, 5*time.Second, 5*time.Millisecond,
		"a batch read in full gives back all it held")
}

// Operator and admin tokens are not tenants, and are not held to a share
// of the batch-answer memory, as they are to none of --max-inflight and
// --max-inflight-bytes: an old-format file's tokens, admins all, may be
// every client's. Such a token's batches were refused, naming it, once
// its answers held half of the memory, the rest of it unused.
func TestAnAdminTokenHoldsNoShareOfTheBatchAnswers(t *testing.T) {
	const legacy = "legacy-token-0123456789"
	n := mustNode(t, withBearer(legacy), withAPI(func(c *api.Config) {
		c.MaxBatchAnswerBytes = 64 << 20
		c.BatchAnswerWriteTimeout = 30 * time.Second
		c.MaxBatchOps = 1024
	}))
	big := storeBig(t, n, scope{"cus_a1", "POST /payments", "big"})

	// About 48 MB of answer, never read: past half of 64 MiB, within it.
	sendUnreadGets(t, n, legacy, big, 600)
	require.Eventually(t, func() bool { return n.api.BatchAnswerBytesInUse() > 40<<20 }, 25*time.Second, 20*time.Millisecond,
		"the unread answer of an admin token's 600 gets: its gets past half of the memory were refused")

	// The token's next batch is decided.
	r := n.post("/v1/batch", map[string]any{"ops": []any{op("get", scope{"cus_a1", "POST /payments", "big"})}})
	require.Equal(t, http.StatusOK, r.status, "an admin token's batch while its unread answer holds most of the memory: %s", r)
}

// The bound on batch answers holds for answers being made, not only for
// those being written: many batches of gets sent at once all passed the
// check before any was written, and one client holding 150 connections
// made a node with the 64 MiB bound hold 2.2 GB (attack on loopback). An
// answer that would carry a stored response past the bound is 503, as
// refusing the batch is; it decides nothing, and the batch's other ops
// stand.
func TestBatchAnswersBeingMadeAreBounded(t *testing.T) {
	const budget = 1 << 20
	n := mustNode(t, withAPI(func(c *api.Config) { c.MaxBatchAnswerBytes = budget }))
	big := sc("big")
	tok := n.mustClaim(big, fp1)["token"].(string)
	body := base64.StdEncoding.EncodeToString(bytes.Repeat([]byte("x"), 60<<10))
	r := n.complete(big, tok, map[string]any{"status": 200, "content_type": "text/plain", "body": body})
	require.Equal(t, http.StatusOK, r.status, "%s", r)

	ops := make([]any, 0, 66)
	for range 32 {
		ops = append(ops, op("get", big), op("claim", big, "fingerprint", fp1))
	}
	ops = append(ops, op("claim", sc("fresh"), "fingerprint", fp1), op("get", sc("nothing")))
	rs := n.batch(ops...)
	var kept int
	var shed int
	for i, res := range rs[:64] {
		switch res.Status {
		case http.StatusOK:
			kept += len(res.Body)
		case http.StatusServiceUnavailable:
			shed++
			require.Equal(t, 1, res.RetryAfter, "op %d", i)
			require.Contains(t, string(res.Body), `"code":"unavailable"`, "op %d", i)
		default:
			t.Fatalf("op %d: %d %s", i, res.Status, res.Body)
		}
	}
	require.LessOrEqual(t, kept, budget, "answers of stored responses past the bound")
	require.Positive(t, shed)
	require.Equal(t, http.StatusCreated, rs[64].Status, "%s", rs[64].Body)
	require.Equal(t, http.StatusNotFound, rs[65].Status, "%s", rs[65].Body)
	// Asked again, a shed op answers as it would have.
	require.Equal(t, http.StatusOK, n.batch(op("get", big))[0].Status)
}
