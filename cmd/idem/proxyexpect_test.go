package main

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A keyed method refused before its body is read (no Idempotency-Key, no
// credential) and sent with Expect: 100-continue was answered only at
// --body-read-timeout: the client waits for that answer (or a 100) before
// it sends its body, and net/http, given the proxy's wrapper of the body
// in place of its own, waited for the body to discard it before it wrote
// the answer. The answer comes at once now, and the connection is closed
// (its body was never sent).
func TestProxyRefusalOfAnExpectContinueRequestIsNotHeldForItsBody(t *testing.T) {
	px := startProxy(t, "--upstream", "http://"+deadAddr(t), "--store", deadAddr(t), "--body-read-timeout", "1m")
	for _, hdr := range []string{
		"Authorization: Bearer e\r\n",   // no key: 400
		"Idempotency-Key: expect-1\r\n", // no credential: 401
	} {
		conn, err := net.Dial("tcp", strings.TrimPrefix(px.url, "http://"))
		require.NoError(t, err)
		fmt.Fprintf(conn, "POST /pay HTTP/1.1\r\nHost: x\r\n%sExpect: 100-continue\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n", hdr)
		conn.SetReadDeadline(time.Now().Add(5 * time.Second))
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		require.NoError(t, err, "no answer within 5 s of the headers (%q)", hdr)
		resp.Body.Close()
		require.Contains(t, []int{http.StatusBadRequest, http.StatusUnauthorized}, resp.StatusCode, "%q", hdr)
		conn.Close()
	}
}
