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

// One app token's half of --max-inflight counted a batch as one request,
// so its batches carried 256 times the work of its share: within its half
// of --max-inflight 2048, one token's 300 batches of 256 claims put 76,800
// claims in the leader's queue, and another tenant's claim took 1.6 s at
// the median (1.3 ms alone; 34 ms beside 1,000 single claims of the same
// token) and 2.5 claims a second instead of 2,200 (attack on loopback). A
// token's batches now hold at most half of --max-inflight ops on a node (a
// batch alone is always taken): its next batch is 503 naming the token,
// nothing decided, and other tokens' batches, and its own single
// requests, still go.
func TestOneTokensBatchesHoldAtMostHalfTheInFlightOps(t *testing.T) {
	const otherToken = "other-app-token-0123456789"
	n := mustNode(t, withAuthFile(t, authFile(fmt.Sprintf(`{"name":"shop","sha256":%q,"role":"app","principals":["cus_b*"]}`, api.HashToken(otherToken)))),
		withLimits(func(l *api.Limits) { l.MaxInFlight = 8 }),
		withAPI(func(c *api.Config) {
			c.MaxBatchAnswerBytes = 256 << 20
			c.BatchAnswerWriteTimeout = 30 * time.Second
			c.MaxBatchOps = 1024
		}))
	a, b := n.as(appToken), n.as(otherToken)
	big := storeBig(t, a, scope{"cus_a1", "POST /payments", "big"})

	// A batch of 512 gets (40 MB of answer) whose answer is not read: it
	// holds its 512 ops while the node writes it.
	conn := sendUnreadGets(t, n, appToken, big, 512)
	require.Eventually(t, func() bool { return n.api.InFlight() == 1 }, 5*time.Second, 10*time.Millisecond)
	time.Sleep(200 * time.Millisecond) // its ops are decided, its answer being written

	// The token's next batch is refused, nothing decided.
	mine := scope{"cus_a1", "POST /payments", "batched"}
	r := a.post("/v1/batch", map[string]any{"ops": []any{op("claim", mine, "fingerprint", fp1)}})
	require.Equal(t, http.StatusServiceUnavailable, r.status, "the token's batch while its batches hold half of --max-inflight ops: %s", r)
	require.Contains(t, string(r.raw), `the token \"payments\" has 512 batch operations in flight`)
	require.Equal(t, "1", r.header.Get("Retry-After"))
	require.Equal(t, http.StatusNotFound, a.do("GET", mine.query(), nil).status, "nothing decided")

	// Its single requests, and the other tenant's batch, still go.
	require.Equal(t, http.StatusCreated, a.claim(scope{"cus_a1", "POST /payments", "single"}, fp1).status)
	theirs := scope{"cus_b1", "POST /payments", "k"}
	rs := b.batch(op("claim", theirs, "fingerprint", fp1), op("get", theirs))
	require.Equal(t, http.StatusCreated, rs[0].Status, "%s", rs[0].Body)
	require.Equal(t, http.StatusOK, rs[1].Status, "%s", rs[1].Body)

	// Once the answer is taken, the token's batches go again.
	conn.Close()
	require.Eventually(t, func() bool {
		return a.post("/v1/batch", map[string]any{"ops": []any{op("claim", mine, "fingerprint", fp1)}}).status == http.StatusOK
	}, 10*time.Second, 50*time.Millisecond)
}

// sendUnreadGets sends, as token, a batch of count gets of sc on a
// connection of its own whose answer is never read, and returns the
// connection (closed at the test's end).
func sendUnreadGets(t *testing.T, n *testNode, token string, sc scope, count int) net.Conn {
	t.Helper()
	gets := make([]any, count)
	for i := range gets {
		gets[i] = op("get", sc)
	}
	req, err := json.Marshal(map[string]any{"ops": gets})
	require.NoError(t, err)
	conn, err := net.Dial("tcp", strings.TrimPrefix(n.url, "http://"))
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close() })
	_, err = fmt.Fprintf(conn, "POST /v1/batch HTTP/1.1\r\nHost: idem\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", token, len(req), req)
	require.NoError(t, err)
	return conn
}
