package api_test

import (
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idem-store/idem/api"
)

// A client that sends requests and never reads their answers must not hold
// the node's --max-inflight slots, nor its connections, for ever. Bug: only
// batch answers had a write deadline (BatchAnswerWriteTimeout). A few
// connections that looked up a record with a large response (or pipelined
// lookups of a 64 KiB one) and read nothing held a slot each, in a Write that never returned, and every
// other client got 503 "the node is handling N requests" until they went
// away: with the defaults, 2,048 such connections (of --max-conns 4,096)
// shut every tenant out. Smaller answers held their connection in the same
// way, past the handler.
func TestUnreadAnswersDoNotHoldTheNode(t *testing.T) {
	const slots = 2
	n := mustNode(t, withAPI(func(c *api.Config) {
		c.Limits.MaxInFlight = slots
		c.AnswerWriteTimeout = 4 * time.Second
		// One answer larger than the socket buffers hold (tcp_wmem's
		// largest is 4 MiB), so that each reader holds one.
		c.Limits.MaxResponseBytes = 6 << 20
		c.Limits.MaxRequestBytes = 16 << 20
	}))
	big := sc("big")
	tok := n.mustClaim(big, fp1)["token"].(string)
	body := base64.StdEncoding.EncodeToString(bytes.Repeat([]byte("x"), 6<<20))
	r := n.complete(big, tok, map[string]any{"status": 200, "body": body})
	require.Equal(t, http.StatusOK, r.status, "%s", r)

	q := url.Values{"principal": {big.principal}, "endpoint": {big.endpoint}, "key": {big.key}, "consistency": {"stale"}}
	get := fmt.Sprintf("GET /v1/records?%s HTTP/1.1\r\nHost: idem\r\n\r\n", q.Encode())
	var conns []net.Conn
	for range slots {
		d := net.Dialer{Control: func(_, _ string, c syscall.RawConn) error {
			return c.Control(func(fd uintptr) { syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096) })
		}}
		conn, err := d.Dial("tcp", strings.TrimPrefix(n.url, "http://"))
		require.NoError(t, err)
		defer conn.Close()
		_, err = conn.Write([]byte(get)) // and never read
		require.NoError(t, err)
		conns = append(conns, conn)
	}
	// Both readers' handlers hold a slot before any other request is sent:
	// a probe sent sooner could hold one as the second reader's request
	// came, which was refused, and every probe after it went (seen on a
	// loaded machine).
	require.Eventually(t, func() bool { return n.api.InFlight() == slots }, 5*time.Second, 10*time.Millisecond,
		"the readers that read nothing hold every slot")
	// A stale lookup of nothing: 404 at once, without raft, unless refused.
	require.Equal(t, http.StatusServiceUnavailable, n.lookup(sc("nothing"), "consistency=stale").status,
		"a request while the readers hold every slot")
	held := time.Now() // both handlers run: their answers' write deadlines end by about held+4s

	// Not taken within the write timeout: the slots are free again, the
	// readers still reading nothing, and their connections are closed.
	require.Eventually(t, func() bool {
		return n.claim(sc("after"), fp1).status == http.StatusCreated
	}, 15*time.Second, 50*time.Millisecond, "a claim once the unread answers timed out")
	// One slot free is enough for the claim: the other reader's deadline
	// may not have passed yet (its handler wrote later, on a loaded
	// machine), and a drain started before it takes the whole answer, and
	// the kept-alive connection stays open (the test failed 1 run in 22).
	time.Sleep(time.Until(held.Add(4*time.Second + 3*time.Second)))
	for _, conn := range conns {
		conn.SetReadDeadline(time.Now().Add(20 * time.Second))
		// EOF, or a reset: the node closes with requests left unread.
		_, err := io.Copy(io.Discard, conn)
		require.False(t, errors.Is(err, os.ErrDeadlineExceeded), "the node closes a connection whose answer was not taken")
	}

	// A kept-alive connection that took its answer has no deadline left.
	require.Equal(t, http.StatusOK, n.lookup(big).status)
	time.Sleep(4500 * time.Millisecond)
	require.Equal(t, http.StatusOK, n.lookup(big).status)
}
