package api_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idem-store/idem/api"
)

// slowBody is a request whose headers and first bytes are sent, the rest
// of its body held back until finish.
type slowBody struct {
	t    *testing.T
	c    net.Conn
	br   *bufio.Reader
	rest string
}

// startBody sends method path with body declared whole (Content-Length)
// and its first sent bytes only.
func startBody(t *testing.T, addr, bearer, method, path, body string, sent int) *slowBody {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	auth := ""
	if bearer != "" {
		auth = "Authorization: Bearer " + bearer + "\r\n"
	}
	_, err = fmt.Fprintf(c, "%s %s HTTP/1.1\r\nHost: x\r\n%sContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", method, path, auth, len(body), body[:sent])
	require.NoError(t, err)
	return &slowBody{t: t, c: c, br: bufio.NewReader(c), rest: body[sent:]}
}

// finish sends the rest of the body and reads the answer.
func (b *slowBody) finish() (*http.Response, string) {
	b.t.Helper()
	_, err := io.WriteString(b.c, b.rest)
	require.NoError(b.t, err)
	return b.answer()
}

func (b *slowBody) answer() (*http.Response, string) {
	b.t.Helper()
	b.c.SetReadDeadline(time.Now().Add(20 * time.Second)) // a guard against a hang, not a bound under test
	resp, err := http.ReadResponse(b.br, nil)
	require.NoError(b.t, err)
	raw, err := io.ReadAll(resp.Body)
	require.NoError(b.t, err)
	return resp, string(raw)
}

// claimBody is a claim of s padded with spaces to n bytes.
func claimBody(t *testing.T, s scope, n int) string {
	t.Helper()
	j, err := json.Marshal(s.body("fingerprint", fp1))
	require.NoError(t, err)
	require.LessOrEqual(t, len(j), n)
	return string(j) + strings.Repeat(" ", n-len(j))
}

func bodyBytesReturnTo(t *testing.T, tn *testNode, want int64) {
	t.Helper()
	require.Eventually(t, func() bool { return tn.api.BodyBytesInUse() == want }, 20*time.Second, 5*time.Millisecond,
		"request body bytes in use: %d, want %d", tn.api.BodyBytesInUse(), want)
}

// --max-inflight-bytes: bodies held (here, slow to arrive) count their
// Content-Length against it; one more body past it is refused 503 with
// Retry-After before it is read, whatever its route (a batch too), and
// nothing is decided; once the held bodies are answered, the same
// requests go through. Before the bound, 1,000 bodies of 1 MiB held at
// once took a node to 2.1 GB.
func TestBodiesPastMaxInFlightBytesAreRefusedUnread(t *testing.T) {
	tn := mustNode(t, withLimits(func(l *api.Limits) { l.MaxRequestBytes = 2048; l.MaxInFlightBytes = 4096 }))
	addr := tn.srv.Listener.Addr().String()

	var held []*slowBody
	for i := range 2 {
		held = append(held, startBody(t, addr, "", "POST", "/v1/claim", claimBody(t, sc(fmt.Sprintf("held-%d", i)), 2000), 10))
	}
	bodyBytesReturnTo(t, tn, 4000)

	k := sc("refused")
	r := tn.claim(k, fp1)
	require.Equal(t, http.StatusServiceUnavailable, r.status, "%s", r)
	require.Equal(t, "1", r.header.Get("Retry-After"))
	require.Equal(t, "unavailable", r.obj(t)["code"])
	require.Contains(t, r.obj(t)["detail"], "--max-inflight-bytes")
	one := claimBody(t, k, 200)
	resp, body := startBody(t, addr, "", "POST", "/v1/claim", one, len(one)).answer()
	require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode, body)
	require.True(t, resp.Close, "a refused body is not read: its connection closes")
	b := tn.post("/v1/batch", map[string]any{"ops": []any{k.body("op", "claim", "fingerprint", fp1)}})
	require.Equal(t, http.StatusServiceUnavailable, b.status, "a batch is a body too: %s", b)
	require.Equal(t, "1", b.header.Get("Retry-After"))
	require.Equal(t, http.StatusNotFound, tn.lookup(k).status, "a refused claim decides nothing")
	require.EqualValues(t, 3, tn.api.RefusedBodyBytes())
	require.EqualValues(t, 4000, tn.api.BodyBytesInUse(), "refused bodies hold nothing")

	for _, h := range held {
		resp, body := h.finish()
		require.Equal(t, http.StatusCreated, resp.StatusCode, body)
	}
	bodyBytesReturnTo(t, tn, 0)
	tn.mustClaim(k, fp1)
	require.Equal(t, http.StatusOK, tn.lookup(sc("held-0")).status)
}

// A body larger than the whole of --max-inflight-bytes (within
// --max-request-bytes) is still taken when the node holds no other.
func TestBodyLargerThanMaxInFlightBytesGoesAlone(t *testing.T) {
	tn := mustNode(t, withLimits(func(l *api.Limits) { l.MaxRequestBytes = 4096; l.MaxInFlightBytes = 1000 }))
	r := tn.post("/v1/claim", claimBody(t, sc("big"), 3000))
	require.Equal(t, http.StatusCreated, r.status, "%s", r)
	bodyBytesReturnTo(t, tn, 0)
}

// Whatever becomes of a request (answered, refused for its size, its JSON
// or its token, sent chunked, cut off mid-body, refused for the bound,
// timed out), the bytes it counted come back: after them all the node
// holds none.
func TestBodyBytesInUseReturnToZero(t *testing.T) {
	lim := func(timeout time.Duration) nodeOpt {
		return withLimits(func(l *api.Limits) {
			l.MaxRequestBytes = 2048
			l.MaxInFlightBytes = 4096
			l.BodyReadTimeout = timeout
		})
	}
	tn := mustNode(t, withBearer("tok"), lim(10*time.Second))
	addr := tn.srv.Listener.Addr().String()
	for i := range 20 {
		k := sc(fmt.Sprintf("k%d", i))
		tn.mustClaim(k, fp1)
		require.Equal(t, http.StatusConflict, tn.claim(k, fp1).status, "in progress")
		require.Equal(t, http.StatusBadRequest, tn.post("/v1/claim", `{"principal":`).status)
		require.Equal(t, http.StatusRequestEntityTooLarge, tn.post("/v1/claim", strings.Repeat(" ", 3000)).status)
		require.Equal(t, http.StatusUnauthorized, tn.as("wrong").claim(k, fp1).status)
		tn.batch(op("get", k))

		// Chunked: counts --max-request-bytes while it runs.
		req, err := http.NewRequest("POST", tn.url+"/v1/claim", io.MultiReader(strings.NewReader(claimBody(t, sc(fmt.Sprintf("c%d", i)), 100))))
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer tok")
		resp, err := tn.client.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, http.StatusCreated, resp.StatusCode)

		// Two bodies held, one more refused, then one cut off mid-body
		// and one answered.
		cut := startBody(t, addr, "tok", "POST", "/v1/claim", claimBody(t, sc(fmt.Sprintf("cut%d", i)), 1500), 20)
		held := startBody(t, addr, "tok", "POST", "/v1/claim", claimBody(t, sc(fmt.Sprintf("held%d", i)), 1500), 20)
		bodyBytesReturnTo(t, tn, 3000)
		refused := startBody(t, addr, "tok", "POST", "/v1/batch", strings.Repeat(" ", 1200), 1200)
		resp, body := refused.answer()
		require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode, body)
		cut.c.Close()
		resp, body = held.finish()
		require.Equal(t, http.StatusCreated, resp.StatusCode, body)
		require.Equal(t, http.StatusNotFound, tn.lookup(sc(fmt.Sprintf("cut%d", i))).status)
	}
	bodyBytesReturnTo(t, tn, 0)
	require.EqualValues(t, 20, tn.api.RefusedBodyBytes())

	// Bodies that never arrive: 400 once --body-read-timeout is out.
	tn = mustNode(t, withBearer("tok"), lim(20*time.Millisecond))
	addr = tn.srv.Listener.Addr().String()
	for i := range 20 {
		slow := startBody(t, addr, "tok", "POST", "/v1/complete", claimBody(t, sc(fmt.Sprintf("s%d", i)), 1500), 20)
		resp, body := slow.answer()
		require.Equal(t, http.StatusBadRequest, resp.StatusCode, body)
		require.Contains(t, body, "--body-read-timeout")
		tn.mustClaim(sc(fmt.Sprintf("s%d", i)), fp1)
	}
	bodyBytesReturnTo(t, tn, 0)
	require.Zero(t, tn.api.RefusedBodyBytes())
}
