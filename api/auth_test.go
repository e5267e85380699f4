package api_test

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idem-store/idem/api"
)

// The tokens of the auth tests, and the file that lists their hashes.
const (
	appToken      = "app-token-0123456789"
	operatorToken = "operator-token-0123456789"
	adminToken    = "admin-token-0123456789"
	unknownToken  = "unknown-token-0123456789"
)

func authFile(extra ...string) string {
	entries := []string{
		fmt.Sprintf(`{"name":"payments","sha256":%q,"role":"app","principals":["cus_a*","exact_b"]}`, api.HashToken(appToken)),
		fmt.Sprintf(`{"name":"oncall","sha256":%q,"role":"operator"}`, api.HashToken(operatorToken)),
		fmt.Sprintf(`{"name":"deploy","sha256":%q,"role":"admin"}`, api.HashToken(adminToken)),
	}
	return `{"tokens":[` + strings.Join(append(entries, extra...), ",") + `]}`
}

func withAuthFile(tb testing.TB, file string) nodeOpt {
	creds, err := api.ParseAuthFile([]byte(file))
	require.NoError(tb, err)
	return withAPI(func(c *api.Config) { c.Auth = api.NewAuth(creds) })
}

func (n *testNode) as(token string) *testNode {
	c := *n
	c.bearer = token
	return &c
}

// A case of the matrix: who calls which route for which principal.
type authCase struct {
	caller, token string
	method, path  string
	body          any
	want          int // 401, 403, or 0: passes authorization (then 2xx)
}

// The whole route × role × principal matrix: each route answers 401
// without a valid token, 403 forbidden to a valid token outside its role
// or principals, and a 2xx otherwise; every refusal leaves the state hash
// (applied index included) as it was.
func TestRouteRolePrincipalMatrix(t *testing.T) {
	t.Parallel()
	n := mustNode(t, withAuthFile(t, authFile()))
	admin := n.as(adminToken)
	self := n.node.Self()

	callers := []struct {
		name, token string
		role        api.Role // 0: no valid token
	}{
		{"no token", "", 0}, {"unknown token", unknownToken, 0},
		{"app", appToken, api.RoleApp}, {"operator", operatorToken, api.RoleOperator}, {"admin", adminToken, api.RoleAdmin},
	}
	// Principals the app token may act for (cus_a1 and cus_a by the prefix
	// cus_a*, exact_b exactly) and may not (cus_b1; exact_bb, which only
	// starts like an exact name; cus_, shorter than the prefix; CUS_A1,
	// principals being case-sensitive).
	principals := []struct {
		name  string
		appOK bool
	}{{"cus_a1", true}, {"cus_a", true}, {"exact_b", true}, {"cus_b1", false}, {"exact_bb", false}, {"cus_", false}, {"CUS_A1", false}}

	seq := 0
	fresh := func(principal string) scope {
		seq++
		return scope{principal, "POST /payments", fmt.Sprintf("k%d", seq)}
	}
	// live claims a record as admin and returns its scope and token.
	live := func(principal string) (scope, string) {
		s := fresh(principal)
		return s, admin.mustClaim(s, fp1, "lease_ms", 600000)["token"].(string)
	}
	check := func(c authCase) {
		t.Helper()
		caller := n.as(c.token)
		before := n.stateHash()
		r := caller.do(c.method, c.path, c.body)
		what := fmt.Sprintf("%s: %s %s", c.caller, c.method, c.path)
		if c.method == "HEAD" && c.want != 0 { // no body to read the problem from
			require.Equal(t, c.want, r.status, what)
			require.Equal(t, before, n.stateHash(), "%s: a refusal changed the state", what)
			return
		}
		switch c.want {
		case 401:
			requireProblem(t, r, http.StatusUnauthorized, "unauthorized")
			require.Contains(t, r.header.Get("WWW-Authenticate"), "Bearer", what)
		case 403:
			requireProblem(t, r, http.StatusForbidden, "forbidden")
		default:
			require.True(t, r.status >= 200 && r.status < 300, "%s must pass: %s", what, r)
			return
		}
		require.Equal(t, before, n.stateHash(), "%s: a refusal changed the state", what)
	}
	want := func(role, least api.Role) int {
		switch {
		case role == 0:
			return 401
		case role < least:
			return 403
		}
		return 0
	}

	for _, c := range callers {
		// Routes for apps, with the principal in the body or the query.
		for _, p := range principals {
			w := want(c.role, api.RoleApp)
			if c.role == api.RoleApp && !p.appOK {
				w = 403
			}
			label := c.name + " for " + p.name
			s := fresh(p.name)
			check(authCase{label, c.token, "POST", "/v1/claim", s.body("fingerprint", fp1), w})
			s, tok := live(p.name)
			check(authCase{label, c.token, "POST", "/v1/extend", s.body("token", tok, "lease_ms", 60000), w})
			check(authCase{label, c.token, "POST", "/v1/complete", s.body("token", tok, "response", okResponse), w})
			s, tok = live(p.name)
			check(authCase{label, c.token, "POST", "/v1/release", s.body("token", tok), w})
			check(authCase{label, c.token, "GET", s.query(), nil, w})
			check(authCase{label, c.token, "HEAD", s.query(), nil, w})
			// Evictions are an operator's, whatever the principal.
			check(authCase{label, c.token, "DELETE", s.query(), nil, want(c.role, api.RoleOperator)})
		}
		for _, route := range []struct {
			method, path string
			body         any
			least        api.Role
		}{
			{"GET", "/v1/config", nil, api.RoleOperator},
			{"GET", "/v1/cluster", nil, api.RoleOperator},
			{"GET", "/metrics", nil, api.RoleOperator},
			// A join of a member already in: records its addresses again.
			{"POST", "/v1/cluster/join", map[string]any{"id": self.ID, "raft_addr": self.RaftAddr, "http_addr": self.HTTPAddr}, api.RoleAdmin},
			{"GET", "/v1/admin/state", nil, api.RoleAdmin},
			{"GET", "/v1/admin/snapshot", nil, api.RoleAdmin},
			{"PUT", "/v1/admin/retention", map[string]any{"retention": "24h"}, api.RoleAdmin},
		} {
			check(authCase{c.name, c.token, route.method, route.path, route.body, want(c.role, route.least)})
		}
		// Removal and transfer are refused on a one-node cluster, once
		// past authorization (404 and 409, not 401 or 403).
		for _, route := range []struct{ path, body string }{
			{"/v1/cluster/remove", `{"id":"nobody"}`}, {"/v1/cluster/transfer-leadership", ""},
		} {
			before := n.stateHash()
			r := n.as(c.token).post(route.path, route.body)
			switch w := want(c.role, api.RoleAdmin); w {
			case 0:
				require.Contains(t, []int{404, 409}, r.status, "%s: %s", c.name, r)
			default:
				require.Equal(t, w, r.status, "%s %s: %s", c.name, route.path, r)
			}
			require.Equal(t, before, n.stateHash())
		}
		// Never a token for these.
		for _, path := range []string{"/healthz", "/readyz"} {
			require.Equal(t, http.StatusOK, n.as(c.token).do("GET", path, nil).status)
		}
	}
}

// A 403 says nothing of whether the record exists: the answers for a live
// record and for none are the same bytes.
func TestForbiddenRevealsNothing(t *testing.T) {
	t.Parallel()
	n := mustNode(t, withAuthFile(t, authFile()))
	admin, app := n.as(adminToken), n.as(appToken)
	there := scope{"cus_other", "POST /payments", "there"}
	absent := scope{"cus_other", "POST /payments", "absent"}
	tok := admin.mustClaim(there, fp1)["token"].(string)
	for _, pair := range [][2]reply{
		{app.lookup(there), app.lookup(absent)},
		{app.complete(there, tok, okResponse), app.complete(absent, tok, okResponse)},
		{app.claim(there, fp1), app.claim(absent, fp1)},
		{app.post("/v1/release", there.body("token", tok)), app.post("/v1/release", absent.body("token", tok))},
	} {
		requireProblem(t, pair[0], http.StatusForbidden, "forbidden")
		require.Equal(t, string(pair[0].raw), string(pair[1].raw))
	}
}

// The Bearer scheme is case-insensitive; anything else is 401.
func TestBearerSchemeAnyCase(t *testing.T) {
	t.Parallel()
	n := mustNode(t, withAuthFile(t, authFile()))
	for _, h := range []string{"Bearer " + adminToken, "bearer " + adminToken, "BEARER " + adminToken, "bEaReR  " + adminToken} {
		require.Equal(t, http.StatusOK, rawGet(t, n, h).StatusCode, "Authorization: %q", h)
	}
	for _, h := range []string{adminToken, "Basic " + adminToken, "Bearer", "Bearer ", "Bearer " + adminToken + "x", "Bearer" + adminToken} {
		require.Equal(t, http.StatusUnauthorized, rawGet(t, n, h).StatusCode, "Authorization: %q", h)
	}
}

// Two Authorization headers are refused, whichever is valid: a proxy in
// front may have checked the other one.
func TestTwoAuthorizationHeadersAreRefused(t *testing.T) {
	t.Parallel()
	n := mustNode(t, withAuthFile(t, authFile()))
	for _, pair := range [][2]string{{"Bearer " + adminToken, "Bearer nope"}, {"Bearer nope", "Bearer " + adminToken}, {"Bearer " + adminToken, "Bearer " + adminToken}} {
		req, err := http.NewRequest("GET", n.url+"/v1/config", nil)
		require.NoError(t, err)
		req.Header.Add("Authorization", pair[0])
		req.Header.Add("Authorization", pair[1])
		resp, err := n.client.Do(req)
		require.NoError(t, err)
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		require.Equal(t, http.StatusBadRequest, resp.StatusCode, "headers %q: %s", pair, b)
		require.Contains(t, string(b), "2 Authorization headers")
	}
}

func rawGet(t *testing.T, n *testNode, authorization string) *http.Response {
	t.Helper()
	req, err := http.NewRequest("GET", n.url+"/v1/config", nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", authorization)
	resp, err := n.client.Do(req)
	require.NoError(t, err)
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp
}

// A refusal decided from the headers is sent before the body is read, and
// the connection is closed rather than kept to drain a body that may never
// come: a slow body without credentials holds nothing.
func TestRefusalDoesNotWaitForTheBody(t *testing.T) {
	t.Parallel()
	n := mustNode(t, withAuthFile(t, authFile()))
	for _, c := range []struct {
		token, path string
		status      int
	}{
		{"", "/v1/claim", 401},
		{unknownToken, "/v1/claim", 401},
		{appToken, "/v1/cluster/join", 403},
	} {
		conn, err := net.Dial("tcp", strings.TrimPrefix(n.url, "http://"))
		require.NoError(t, err)
		head := "POST " + c.path + " HTTP/1.1\r\nHost: idem\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n"
		if c.token != "" {
			head += "Authorization: Bearer " + c.token + "\r\n"
		}
		_, err = io.WriteString(conn, head+"\r\n{\"principal\":")
		require.NoError(t, err)
		// The rest of the body never comes.
		require.NoError(t, conn.SetReadDeadline(time.Now().Add(10*time.Second)))
		br := bufio.NewReader(conn)
		resp, err := http.ReadResponse(br, nil)
		require.NoError(t, err, "no answer before the body")
		require.Equal(t, c.status, resp.StatusCode)
		require.True(t, resp.Close, "answered with Connection: close")
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		// Then the server closes the connection: EOF, not a timeout.
		_, err = br.ReadByte()
		require.ErrorIs(t, err, io.EOF, "the server kept the connection of a refused request open")
		conn.Close()
	}
}

// Credentials swap whole: a token added works at once, a token removed no
// longer does.
func TestAuthSwap(t *testing.T) {
	t.Parallel()
	creds, err := api.ParseAuthFile([]byte(authFile()))
	require.NoError(t, err)
	auth := api.NewAuth(creds)
	n := mustNode(t, withAPI(func(c *api.Config) { c.Auth = auth }))
	require.Equal(t, http.StatusUnauthorized, n.as(unknownToken).do("GET", "/v1/config", nil).status)
	next, err := api.ParseAuthFile([]byte(fmt.Sprintf(`{"tokens":[{"name":"new","sha256":%q,"role":"operator"}]}`, api.HashToken(unknownToken))))
	require.NoError(t, err)
	auth.Set(next)
	require.Equal(t, http.StatusOK, n.as(unknownToken).do("GET", "/v1/config", nil).status)
	require.Equal(t, http.StatusUnauthorized, n.as(adminToken).do("GET", "/v1/config", nil).status)
}

// Admin wraps other handlers (/debug/pprof) as an admin route.
func TestAdminWrapsOtherHandlers(t *testing.T) {
	t.Parallel()
	n := mustNode(t, withAuthFile(t, authFile()))
	h := n.api.Admin(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "profile") }))
	for token, status := range map[string]int{"": 401, unknownToken: 401, appToken: 403, operatorToken: 403, adminToken: 200} {
		rec := httptest.NewRecorder()
		req := httptest.NewRequest("GET", "/debug/pprof/heap", nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		h.ServeHTTP(rec, req)
		require.Equal(t, status, rec.Code, "token %q", token)
	}
	// Without an auth file, the handler is open (the loopback guard applies).
	open := mustNode(t)
	rec := httptest.NewRecorder()
	open.api.Admin(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {})).ServeHTTP(rec, httptest.NewRequest("GET", "/debug/pprof/", nil))
	require.Equal(t, 200, rec.Code)
}

// Every mistake in an auth file is refused, naming the entry.
func TestAuthFileValidation(t *testing.T) {
	t.Parallel()
	h := api.HashToken("t")
	for _, c := range []struct{ file, want string }{
		{`{"tokens":[]}`, "holds no token"},
		{`{}`, "holds no token"},
		{`{"tokens":[{"name":"a","sha256":"` + h + `","role":"app","principals":["x"]}],"extra":1}`, "unknown field"},
		{`{"tokens":[{"name":"a","sha256":"` + h + `","role":"root"}]}`, `tokens[0] ("a"): role "root" is not app, operator or admin`},
		{`{"tokens":[{"name":"a","sha256":"` + h + `","role":"app"}]}`, `tokens[0] ("a"): an app token needs principals`},
		{`{"tokens":[{"name":"a","sha256":"s3cret","role":"admin"}]}`, `tokens[0] ("a"): sha256 must be 64 hex digits`},
		{`{"tokens":[{"name":"a","sha256":"` + h[:62] + `zz","role":"admin"}]}`, `sha256 must be 64 hex digits`},
		{`{"tokens":[{"name":"a","role":"admin"}]}`, `sha256 is required`},
		{`{"tokens":[{"sha256":"` + h + `","role":"admin"}]}`, `tokens[0]: name is required`},
		{`{"tokens":[{"name":"a","sha256":"` + h + `","role":"admin"},{"name":"a","sha256":"` + api.HashToken("u") + `","role":"admin"}]}`, `tokens[1] ("a"): name is also the name of tokens[0]`},
		{`{"tokens":[{"name":"a","sha256":"` + h + `","role":"admin"},{"name":"b","sha256":"` + h + `","role":"app","principals":["x"]}]}`, `tokens[1] ("b"): the same token as tokens[0]`},
		{`{"tokens":[{"name":"a","sha256":"` + h + `","role":"operator","principals":["x"]}]}`, `principals limit app tokens only`},
		{`{"tokens":[{"name":"a","sha256":"` + h + `","role":"app","principals":["cus_*_x"]}]}`, `'*' may only end a pattern`},
		{`{"tokens":[{"name":"a","sha256":"` + h + `","role":"app","principals":[""]}]}`, `a principal pattern is empty`},
		{`{"tokens":[{"name":"a","sha256":"` + h + `","role":"app","principals":["x"]}]} {}`, "data after"},
		{`{"tokens":[{"name":"a"`, "not valid JSON"},
		{"# only comments\n\n", "holds no token"},
		// encoding/json keeps the last of two members, matched without
		// regard to case: this loaded as an operator token without
		// principals while the file reads as an app token of "a".
		{`{"tokens":[{"name":"a","sha256":"` + h + `","role":"app","principals":["a"],"Role":"operator","principals":null}]}`, `"role" and "Role" are in one object (at tokens[0])`},
	} {
		_, err := api.ParseAuthFile([]byte(c.file))
		require.Error(t, err, c.file)
		require.Contains(t, err.Error(), c.want, c.file)
	}
	// Several mistakes are all named at once.
	_, err := api.ParseAuthFile([]byte(`{"tokens":[{"name":"a","sha256":"x","role":"app"},{"name":"b","sha256":"` + h + `","role":"boss"}]}`))
	require.ErrorContains(t, err, `tokens[0] ("a"): sha256`)
	require.ErrorContains(t, err, `tokens[0] ("a"): an app token needs principals`)
	require.ErrorContains(t, err, `tokens[1] ("b"): role "boss"`)

	// The old format: plain tokens, each an admin token.
	creds, err := api.ParseAuthFile([]byte("# tokens\nfirst\n\n  second  \n"))
	require.NoError(t, err)
	require.True(t, creds.Legacy())
	require.Equal(t, 2, creds.Len())
	require.Equal(t, "first", creds.FirstLegacyToken())
	c, ok := creds.Authenticate("second")
	require.True(t, ok)
	require.Equal(t, api.RoleAdmin, c.Role)
	_, ok = creds.Authenticate("# tokens")
	require.False(t, ok)

	creds, err = api.ParseAuthFile([]byte(authFile()))
	require.NoError(t, err)
	require.False(t, creds.Legacy())
	require.Equal(t, "", creds.FirstLegacyToken(), "a hashed file holds no plain token")
	c, ok = creds.Authenticate(appToken)
	require.True(t, ok)
	require.Equal(t, "payments", c.Name)
	require.True(t, c.Allows("cus_a42"))
	require.True(t, c.Allows("exact_b"))
	require.False(t, c.Allows("exact_b2"))
	require.False(t, c.Allows("cus_b"))
	_, ok = creds.Authenticate(api.HashToken(appToken))
	require.False(t, ok, "the hash itself is not a token")
}

// A file that is not a list of plain tokens is not read as one. The old
// format makes every line an admin token, so a JSON auth file saved with a
// byte-order mark (Windows editors) or a file of some other format became
// one admin token whose value is the file's text: every app token was
// refused, and anyone who could read the file (it holds "only hashes", and
// is made 0644 by the README's printf) could act as admin.
func TestAuthFileNotATokenListIsNotAdminTokens(t *testing.T) {
	t.Parallel()
	// A byte-order mark before JSON: read as the JSON it is.
	creds, err := api.ParseAuthFile(append([]byte("\xef\xbb\xbf"), authFile()...))
	require.NoError(t, err)
	require.False(t, creds.Legacy(), "a JSON file with a byte-order mark is JSON")
	_, ok := creds.Authenticate(appToken)
	require.True(t, ok)
	for _, file := range []string{
		"first\n\xef\xbb\xbfsecond\n", // a byte-order mark is no part of a token
		"tokens: 1\n",                 // YAML, or any line with a space inside
		`["t1","t2"]` + "\n",          // a JSON array
		`"t1"` + "\n",                 // a quoted token
		"t1\n{\"tokens\":[]}\n",       // JSON pasted below a token
		"t\x01x\n",                    // a control character
	} {
		_, err := api.ParseAuthFile([]byte(file))
		require.Error(t, err, "%q must be refused, not read as admin tokens", file)
		require.ErrorContains(t, err, "line ", file)
	}
}

// Each op of a batch refused for its principal logged a line: 256 a
// request, as fast as a token could send them, enough to fill a disk with
// the node's log (attack on loopback). At most one a second now, the next
// saying how many went unlogged.
func TestRefusalsAreLoggedAtMostOnceASecond(t *testing.T) {
	t.Parallel()
	var logs lockedLog
	n := mustNode(t, withAuthFile(t, authFile()), withAPI(func(c *api.Config) {
		c.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	}))
	app := n.as(appToken)
	ops := make([]any, 256)
	for i := range ops {
		ops[i] = op("get", scope{"cus_b1", "POST /payments", fmt.Sprint("k", i)})
	}
	for _, r := range app.batch(ops...) {
		require.Equal(t, http.StatusForbidden, r.Status, "%s", r.Body)
	}
	require.Equal(t, 1, strings.Count(logs.String(), "request refused"), "%s", logs.String())
	time.Sleep(1100 * time.Millisecond)
	requireProblem(t, app.lookup(scope{"cus_b1", "POST /payments", "k"}), http.StatusForbidden, "forbidden")
	require.Equal(t, 2, strings.Count(logs.String(), "request refused"), "%s", logs.String())
	require.Contains(t, logs.String(), "refused_unlogged=255")
}

// The second between refusal lines was the node's: one tenant flooding
// refusals kept every other token's out of the log, so another tenant's
// stolen token probing principals went unseen. Each token has its own.
func TestOneTokensRefusalsLeaveOtherTokensLogged(t *testing.T) {
	t.Parallel()
	const otherToken = "other-app-token-0123456789"
	var logs lockedLog
	n := mustNode(t, withAuthFile(t, authFile(fmt.Sprintf(`{"name":"refunds","sha256":%q,"role":"app","principals":["ref_*"]}`, api.HashToken(otherToken)))),
		withAPI(func(c *api.Config) { c.Logger = slog.New(slog.NewTextHandler(&logs, nil)) }))
	ops := make([]any, 64)
	for i := range ops {
		ops[i] = op("get", scope{"cus_b1", "POST /payments", fmt.Sprint("k", i)})
	}
	for _, r := range n.as(appToken).batch(ops...) {
		require.Equal(t, http.StatusForbidden, r.Status, "%s", r.Body)
	}
	requireProblem(t, n.as(otherToken).lookup(scope{"cus_a1", "POST /payments", "k"}), http.StatusForbidden, "forbidden")
	out := logs.String()
	require.Equal(t, 2, strings.Count(out, "request refused"), "%s", out)
	require.Equal(t, 1, strings.Count(out, "token=payments"), "%s", out)
	require.Equal(t, 1, strings.Count(out, "token=refunds"), "%s", out)
	require.Contains(t, out, "principal=cus_a1")
}

type lockedLog struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// A node started without --auth-file serves every route to anyone, and it
// answers a consistency=stale lookup from its own replica: joined to a
// cluster whose nodes check tokens (with a --node-token-file, which is all
// a join needs), it handed every tenant's records to callers without a
// token (reproduced with four real nodes: an unauthenticated GET
// /v1/records?...&consistency=stale on the fourth answered another
// tenant's record). A node that checks tokens refuses such a join; a
// joining node that does check tokens is not refused for it.
func TestJoinOfANodeWithoutAuthFileIsRefused(t *testing.T) {
	t.Parallel()
	n := mustNode(t, withAuthFile(t, authFile()))
	open := mustNode(t) // no --auth-file
	before := n.stateHash()
	r := n.as(adminToken).post("/v1/cluster/join", map[string]any{
		"id": "open", "raft_addr": "127.0.0.1:1", "http_addr": strings.TrimPrefix(open.url, "http://")})
	require.Equal(t, http.StatusConflict, r.status, "%s", r)
	require.Equal(t, "auth_mismatch", r.obj(t)["code"], "%s", r)
	require.Contains(t, r.obj(t)["detail"], "--auth-file")
	require.Equal(t, before, n.stateHash(), "a refused join writes nothing")

	// A joining node that checks tokens (401 without one) is not refused
	// for it: here the node itself, a member already, whose join records
	// its addresses again.
	self := n.node.Self()
	r = n.as(adminToken).post("/v1/cluster/join", map[string]any{"id": self.ID, "raft_addr": self.RaftAddr, "http_addr": self.HTTPAddr})
	require.Equal(t, http.StatusOK, r.status, "%s", r)
}

// A node joined by hand is asked for its status, and a node that checks
// tokens was asked again for its configuration: one that does not answer
// (its machine not up yet) cost 2 s per question on each node, and a join
// forwarded by a follower outran the follower's 3 s wait for the leader
// (503, the outcome unknown). What the status said is used: a node that
// did not answer it, or said it checks tokens, is asked nothing more; one
// whose status says it checks none is refused without a second question.
func TestJoinAsksAJoiningNodeOnce(t *testing.T) {
	t.Parallel()
	n := mustNode(t, withAuthFile(t, authFile()))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { ln.Close() })
	var mu sync.Mutex
	var asked []string
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				line, _ := bufio.NewReader(c).ReadString('\n')
				mu.Lock()
				asked = append(asked, strings.TrimSpace(line))
				mu.Unlock()
				time.Sleep(5 * time.Second) // answers nothing
			}()
		}
	}()
	silent := ln.Addr().String()
	r := n.as(adminToken).post("/v1/cluster/join", map[string]any{"id": "silent", "raft_addr": "127.0.0.1:1", "http_addr": silent})
	require.Equal(t, http.StatusOK, r.status, "%s", r)
	mu.Lock()
	questions := slices.Clone(asked)
	mu.Unlock()
	require.NotEmpty(t, questions)
	require.Contains(t, questions[0], "/v1/cluster")
	for _, q := range questions {
		require.NotContains(t, q, "/v1/config", "asked again after its status went unanswered: %q", questions)
	}

	// Its status says it checks no token: refused as before.
	open := mustNode(t) // no --auth-file
	before := n.stateHash()
	r = n.as(adminToken).post("/v1/cluster/join", map[string]any{
		"id": open.node.Self().ID, "raft_addr": "127.0.0.1:1", "http_addr": strings.TrimPrefix(open.url, "http://")})
	require.Equal(t, http.StatusConflict, r.status, "%s", r)
	require.Equal(t, "auth_mismatch", r.obj(t)["code"], "%s", r)
	require.Equal(t, before, n.stateHash(), "a refused join writes nothing")
}

// /readyz needs no token with an auth file (load balancers call it), but
// why a node is not ready names its data dir and free bytes, node ids and
// addresses: an unauthenticated caller read them all. Only an operator or
// admin token is told why; anyone else gets the same 503 saying how to
// learn it.
func TestReadyzTellsWhyOnlyToOperators(t *testing.T) {
	t.Parallel()
	n := mustNode(t, leaderless(100*time.Millisecond), withAuthFile(t, authFile()))
	const why = "no leader"
	for _, token := range []string{"", unknownToken, appToken} {
		r := n.as(token).do("GET", "/readyz", nil)
		requireProblem(t, r, http.StatusServiceUnavailable, "unavailable")
		require.NotContains(t, string(r.raw), why, "token %q", token)
		require.Contains(t, string(r.raw), "operator or admin token", "token %q", token)
	}
	for _, token := range []string{operatorToken, adminToken} {
		r := n.as(token).do("GET", "/readyz", nil)
		requireProblem(t, r, http.StatusServiceUnavailable, "unavailable")
		require.Contains(t, string(r.raw), why, "token %q", token)
	}
	// A wrong token is counted as a refusal, as the guard counts it (one
	// above); no token is how load balancers ask, and counts nothing.
	op := n.as(operatorToken)
	require.Equal(t, "1", metricValue(t, op, `idem_http_auth_refused_total{reason="unknown_token"}`))
	require.Equal(t, "0", metricValue(t, op, `idem_http_auth_refused_total{reason="no_token"}`))
	// Without an auth file (loopback or --insecure) everyone is told.
	open := mustNode(t, leaderless(100*time.Millisecond))
	r := open.do("GET", "/readyz", nil)
	requireProblem(t, r, http.StatusServiceUnavailable, "unavailable")
	require.Contains(t, string(r.raw), why)
}

// An old-format file whose last token has no line end after it may have
// been read part-way through a save: that token is open unless the
// credentials it replaces take it (cmd/idem's reload refuses the file).
func TestOpenLastTokenOfAnOldFormatFile(t *testing.T) {
	prev, err := api.ParseAuthFile([]byte("alpha-token-0123456789\nbeta-token-0123456789\n"))
	require.NoError(t, err)
	for _, tc := range []struct {
		file string
		line int // 0: not open
	}{
		{"alpha-token-0123456789\nbeta-token-0123456789\n", 0},
		{"alpha-token-0123456789\nbeta-token-0123456789", 0}, // in force: whole
		{"alpha-token-0123456789\nbeta-token-0123456789\r\n", 0},
		{"alpha-token-0123456789\nbeta-token-0123456789\r", 0},
		{"alpha-token-0123456789\nbeta-tok", 2},
		{"alpha-token-0123456789\n# comment\n\nb", 4},
		{"a", 1},
		{"alpha-token-0123456789\ngamma-token-0123456789", 2}, // new, no line end
		{"alpha-token-0123456789\ngamma-token-0123456789  \n", 0},
		{"alpha-token-0123456789\n# a comment without a line end", 0},
	} {
		c, err := api.ParseAuthFile([]byte(tc.file))
		require.NoError(t, err, "%q", tc.file)
		line, open := c.OpenLastToken(prev)
		require.Equal(t, tc.line != 0, open, "%q", tc.file)
		require.Equal(t, tc.line, line, "%q", tc.file)
	}
	// Replacing a JSON file: its tokens are known by hash only.
	j, err := api.ParseAuthFile([]byte(fmt.Sprintf(`{"tokens":[{"name":"ops","sha256":%q,"role":"admin"}]}`, api.HashToken("beta-token-0123456789"))))
	require.NoError(t, err)
	c, err := api.ParseAuthFile([]byte("beta-token-0123456789"))
	require.NoError(t, err)
	_, open := c.OpenLastToken(j)
	require.False(t, open)
	c, err = api.ParseAuthFile([]byte("beta-token"))
	require.NoError(t, err)
	_, open = c.OpenLastToken(j)
	require.True(t, open)
}

// An auth file rebuilt with a jq filter that matched nothing holds "null":
// read as the old format it revoked every token and made "Bearer null" an
// admin token (a walk of docs/SECURITY.md's reload with a broken file).
func TestAuthFileOfAJSONLiteralIsRefused(t *testing.T) {
	for _, f := range []string{"null\n", "null", "true\n", " false \n", "# x\nnull\n"} {
		c, err := api.ParseAuthFile([]byte(f))
		if err == nil {
			_, ok := c.Authenticate(strings.TrimSpace(strings.TrimPrefix(f, "# x\n")))
			t.Fatalf("auth file %q loaded (its text an admin token: %v), want it refused", f, ok)
		}
		if !strings.Contains(err.Error(), "jq") {
			t.Errorf("auth file %q: error %q does not say what the line is", f, err)
		}
	}
	// A token that only contains the word is still a token.
	if _, err := api.ParseAuthFile([]byte("nullnullnullnull-1234\n")); err != nil {
		t.Fatal(err)
	}
}

// The words were refused only in lower case: NULL, True, FALSE, Null (YAML
// spells them so, Python prints True, False and None) loaded, each as an
// admin token "Bearer NULL" could use, and a reload with one revoked every
// token in force (an operator walk of docs/SECURITY.md's old format). The
// same mistake in the other tools an operator reaches for printed a word
// the list did not hold: node -p "require('./auth.json').token" prints
// undefined, Go's fmt <nil>, Ruby's p and Lua nil, and each line loaded as
// an admin token ("Bearer undefined").
func TestAuthFileOfAValueWordInAnyCaseIsRefused(t *testing.T) {
	for _, w := range []string{"NULL", "Null", "nULL", "True", "TRUE", "FALSE", "False", "None", "NONE", "none",
		"undefined", "Undefined", "nil", "NIL", "<nil>"} {
		f := "# tokens\nbeta-token-0123456789\n" + w + "\n"
		c, err := api.ParseAuthFile([]byte(f))
		if err == nil {
			_, ok := c.Authenticate(w)
			t.Fatalf("auth file %q loaded (Bearer %s an admin token: %v), want it refused", f, w, ok)
		}
		if !strings.Contains(err.Error(), "line 3 is the word "+w) {
			t.Errorf("auth file %q: error %q does not name line 3 and what it holds", f, err)
		}
	}
	for _, tok := range []string{"Nullable-0123456789", "TrueNorth-0123456789", "none-of-yours-123456",
		"undefined-0123456789", "nil-0123456789abcdef", "<nil>-0123456789"} {
		if _, err := api.ParseAuthFile([]byte(tok + "\n")); err != nil {
			t.Errorf("token %q: %v", tok, err)
		}
	}
}
