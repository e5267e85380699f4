package api_test

import (
	"bufio"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/idem-store/idem/api"
	"github.com/stretchr/testify/require"
)

// TestDeclaredBodyOverLimitIs413: docs/API.md's limits table says a request
// body over --max-request-bytes is 413 request_too_large, and that requests
// whose body is refused under those limits are answered without waiting for
// the body. A request whose Content-Length already exceeds the limit is
// instead read until --body-read-timeout and answered 400 invalid_request
// ("the body did not arrive within ..."): the client learns the wrong
// status, and the request holds its --max-inflight slot for the whole timeout.
func TestDeclaredBodyOverLimitIs413(t *testing.T) {
	n := mustNode(t, withLimits(func(l *api.Limits) {
		l.MaxRequestBytes = 1024
		l.BodyReadTimeout = 2 * time.Second
	}))
	addr := strings.TrimPrefix(n.url, "http://")
	c, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	defer c.Close()
	_, err = c.Write([]byte("POST /v1/claim HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1048576\r\n\r\n{\"principal\":"))
	require.NoError(t, err)
	start := time.Now()
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	require.NoError(t, err)
	resp.Body.Close()
	took := time.Since(start)
	require.Equal(t, http.StatusRequestEntityTooLarge, resp.StatusCode, "declared Content-Length over --max-request-bytes (answered after %s)", took)
	require.Less(t, took, time.Second, "a body known to be too large is refused without waiting for it")
}
