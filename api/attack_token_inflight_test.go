package api_test

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idem-store/idem/api"
)

// One tenant could take every --max-inflight slot with slow request bodies,
// and every other tenant was 503 for as long as it kept them (attack on
// loopback: 3,000 connections of one app token, each sending its claim's
// body a byte a second, held a node's 2,048 slots; another caller got 155
// 503s in 179 tries over 40 s). Each slot is held for up to
// --body-read-timeout, then sent again. With auth on, one token's requests
// hold at most half of --max-inflight: its next request is 503 naming the
// token, before its body is read, and another tenant's still goes.
func TestOneTokenHoldsAtMostHalfTheInFlightRequests(t *testing.T) {
	const otherToken = "other-app-token-0123456789"
	n := mustNode(t, withAuthFile(t, authFile(fmt.Sprintf(`{"name":"shop","sha256":%q,"role":"app","principals":["cus_b*"]}`, api.HashToken(otherToken)))),
		withLimits(func(l *api.Limits) {
			l.MaxInFlight = 4
			l.BodyReadTimeout = 30 * time.Second
		}))
	addr := strings.TrimPrefix(n.url, "http://")
	body := `{"principal":"cus_a1","endpoint":"POST /payments","key":"slow-%d","fingerprint":"` + fp1 + `"}`

	// Tenant "payments" sends four claims whose bodies do not come.
	slow := make([]net.Conn, 4)
	for i := range slow {
		c, err := net.Dial("tcp", addr)
		require.NoError(t, err)
		defer c.Close()
		b := fmt.Sprintf(body, i)
		_, err = fmt.Fprintf(c, "POST /v1/claim HTTP/1.1\r\nHost: idem\r\nAuthorization: Bearer %s\r\nContent-Length: %d\r\n\r\n%s", appToken, len(b), b[:5])
		require.NoError(t, err)
		slow[i] = c
	}
	require.Eventually(t, func() bool { return n.api.InFlight() >= 2 }, 5*time.Second, 10*time.Millisecond)
	time.Sleep(300 * time.Millisecond) // the other two reach the node too

	// Another tenant's claim is decided.
	b := n.as(otherToken)
	r := b.claim(scope{"cus_b1", "POST /payments", "k"}, fp1)
	require.Equal(t, http.StatusCreated, r.status, "another tenant's claim while one token's slow bodies are in flight: %s", r)

	// The slow tenant's requests past its half were refused unread,
	// naming the token; the two in flight are decided once their bodies
	// arrive.
	var refused, claimed int
	for i, c := range slow {
		c.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
		buf := make([]byte, 4096)
		k, _ := c.Read(buf)
		if k > 0 {
			got := string(buf[:k])
			require.Contains(t, got, "503 Service Unavailable", "request %d", i)
			require.Contains(t, got, `the token \"payments\"`, "request %d", i)
			require.Contains(t, got, "--max-inflight", "request %d", i)
			// The node that counted it, which a request forwarded by a
			// follower did not reach: "this node" was the leader.
			require.Regexp(t, `in flight on node \S+,`, got, "request %d", i)
			refused++
			continue
		}
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		_, err := c.Write([]byte(fmt.Sprintf(body, i)[5:]))
		require.NoError(t, err)
		k, _ = c.Read(buf)
		require.Contains(t, string(buf[:k]), "201 Created", "request %d", i)
		claimed++
	}
	require.Equal(t, 2, refused, "requests of the token past half of --max-inflight")
	require.Equal(t, 2, claimed)

	// A batch is one request: its ops are not counted again. With one slot
	// of the token held, its batch of claims takes the other and decides
	// each op.
	held, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	defer held.Close()
	_, err = fmt.Fprintf(held, "POST /v1/claim HTTP/1.1\r\nHost: idem\r\nAuthorization: Bearer %s\r\nContent-Length: 100\r\n\r\n{", appToken)
	require.NoError(t, err)
	require.Eventually(t, func() bool { return n.api.InFlight() == 1 }, 5*time.Second, 10*time.Millisecond)
	a := n.as(appToken)
	rs := a.batch(op("claim", scope{"cus_a1", "POST /payments", "batched-1"}, "fingerprint", fp1),
		op("claim", scope{"cus_a1", "POST /payments", "batched-2"}, "fingerprint", fp1))
	for i, res := range rs {
		var m map[string]any
		require.NoError(t, json.Unmarshal(res.Body, &m))
		require.Equal(t, http.StatusCreated, res.Status, "op %d: %v", i, m)
	}
}

// The same for --max-inflight-bytes: one token's requests announcing bodies
// of --max-request-bytes and sending them a byte at a time held the whole
// bound (attack on loopback: 400 connections of one app token, each
// announcing 1 MiB, against a node with --max-inflight-bytes 256MiB, the
// default on a machine of 2 GiB; another tenant's claims were 503 98 times
// in 109). With auth on, one token's bodies hold at most half of it (one
// body alone is always taken, however large, as the node takes one alone):
// its next body is 503 naming the token, before it is read, and another
// tenant's still goes.
func TestOneTokenHoldsAtMostHalfTheBodyBytes(t *testing.T) {
	const otherToken = "other-app-token-0123456789"
	n := mustNode(t, withAuthFile(t, authFile(fmt.Sprintf(`{"name":"shop","sha256":%q,"role":"app","principals":["cus_b*"]}`, api.HashToken(otherToken)))),
		withLimits(func(l *api.Limits) {
			l.MaxRequestBytes = 1 << 20
			l.MaxInFlightBytes = 4 << 20
			l.BodyReadTimeout = 30 * time.Second
		}))
	addr := strings.TrimPrefix(n.url, "http://")

	// Tenant "payments" announces four bodies of 1 MiB and sends a byte.
	slow := make([]net.Conn, 4)
	for i := range slow {
		c, err := net.Dial("tcp", addr)
		require.NoError(t, err)
		defer c.Close()
		_, err = fmt.Fprintf(c, "POST /v1/claim HTTP/1.1\r\nHost: idem\r\nAuthorization: Bearer %s\r\nContent-Length: %d\r\n\r\n{", appToken, 1<<20)
		require.NoError(t, err)
		slow[i] = c
	}
	require.Eventually(t, func() bool { return n.api.BodyBytesInUse() >= 2<<20 }, 5*time.Second, 10*time.Millisecond)
	time.Sleep(300 * time.Millisecond) // the other two reach the node too

	b := n.as(otherToken)
	r := b.claim(scope{"cus_b1", "POST /payments", "k"}, fp1)
	require.Equal(t, http.StatusCreated, r.status, "another tenant's claim while one token's slow bodies are held: %s", r)

	var refused int
	for i, c := range slow {
		c.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
		buf := make([]byte, 4096)
		k, _ := c.Read(buf)
		if k == 0 {
			continue // still being read
		}
		got := string(buf[:k])
		require.Contains(t, got, "503 Service Unavailable", "request %d", i)
		require.Contains(t, got, `the token \"payments\"`, "request %d", i)
		require.Contains(t, got, "--max-inflight-bytes", "request %d", i)
		refused++
	}
	require.Equal(t, 2, refused, "bodies of the token past half of --max-inflight-bytes")
}

// With a fixed half each, two tenants together still took a whole bound:
// each token's slow requests held half of --max-inflight (or of
// --max-inflight-bytes) and a third tenant's claims were 503. A token now
// holds at most half of what the other tokens leave: the first takes half,
// the second half of the rest, and a third still has room.
func TestTwoTokensLeaveAThirdItsShare(t *testing.T) {
	const shopToken, thirdToken = "shop-app-token-0123456789", "third-app-token-0123456789"
	file := authFile(
		fmt.Sprintf(`{"name":"shop","sha256":%q,"role":"app","principals":["cus_b*"]}`, api.HashToken(shopToken)),
		fmt.Sprintf(`{"name":"third","sha256":%q,"role":"app","principals":["cus_c*"]}`, api.HashToken(thirdToken)))
	for _, tc := range []struct {
		name   string
		limits func(*api.Limits)
		length int // each slow request's announced Content-Length
		held   func(*testNode) int64
		flag   string
	}{
		{"requests", func(l *api.Limits) { l.MaxInFlight = 6 }, 0, func(n *testNode) int64 { return n.api.InFlight() }, "--max-inflight"},
		{"body bytes", func(l *api.Limits) { l.MaxRequestBytes, l.MaxInFlightBytes = 1<<20, 6<<20 }, 1 << 20,
			func(n *testNode) int64 { return n.api.BodyBytesInUse() >> 20 }, "--max-inflight-bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := mustNode(t, withAuthFile(t, file), withLimits(func(l *api.Limits) {
				l.BodyReadTimeout = 30 * time.Second
				tc.limits(l)
			}))
			addr := strings.TrimPrefix(n.url, "http://")
			// Four slow requests of token: those past its share are
			// answered at once, naming it; the others wait for their bodies.
			slow := func(token, principal string) (refused int) {
				conns := make([]net.Conn, 4)
				for i := range conns {
					c, err := net.Dial("tcp", addr)
					require.NoError(t, err)
					t.Cleanup(func() { c.Close() })
					body := fmt.Sprintf(`{"principal":%q,"endpoint":"POST /payments","key":"slow-%d","fingerprint":"%s"}`, principal, i, fp1)
					length := tc.length
					if length == 0 {
						length = len(body)
					}
					_, err = fmt.Fprintf(c, "POST /v1/claim HTTP/1.1\r\nHost: idem\r\nAuthorization: Bearer %s\r\nContent-Length: %d\r\n\r\n%s", token, length, body[:5])
					require.NoError(t, err)
					conns[i] = c
				}
				for _, c := range conns {
					c.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
					buf := make([]byte, 4096)
					if k, _ := c.Read(buf); k > 0 {
						require.Contains(t, string(buf[:k]), "503 Service Unavailable")
						require.Contains(t, string(buf[:k]), tc.flag)
						refused++
					}
				}
				return refused
			}
			require.Equal(t, 1, slow(appToken, "cus_a1"), "the first token holds half: 3 of 4 taken")
			require.Eventually(t, func() bool { return tc.held(n) == 3 }, 5*time.Second, 10*time.Millisecond)
			require.Equal(t, 3, slow(shopToken, "cus_b1"), "the second token holds half of the 3 the first leaves: 1 of 4 taken")
			require.Eventually(t, func() bool { return tc.held(n) == 4 }, 5*time.Second, 10*time.Millisecond)

			r := n.as(thirdToken).claim(scope{"cus_c1", "POST /payments", "k"}, fp1)
			require.Equal(t, http.StatusCreated, r.status, "a third tenant's claim while two tokens' slow requests are held: %s", r)
		})
	}
}
