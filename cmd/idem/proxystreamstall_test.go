package main

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// putWithGap sends body to url as a PUT of known length, in KiB pieces,
// going quiet for gap halfway; it hands back the status and answer.
func putWithGap(t *testing.T, url string, body []byte, gap time.Duration) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPut, url, &slowReader{body: body, piece: 1024, pause: gap})
	require.NoError(t, err)
	req.ContentLength = int64(len(body))
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	got, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(got)
}

// One flag, --body-read-timeout, bounded both a keyed body's arrival and
// an unkeyed body's stalls: a long upload with quiet gaps over 10 s (log
// shipping), which passed before the bound, was cut with 408, and the only
// way out, raising --body-read-timeout, loosened the keyed bound as well.
// --stream-stall-timeout bounds the streamed body alone: a gap longer than
// --body-read-timeout passes within it, and a keyed body is still held to
// --body-read-timeout.
func TestProxyStreamStallTimeoutIsApartFromTheKeyedBound(t *testing.T) {
	up := newSlowUpstream(t)
	px := startProxy(t, "--upstream", up.url, "--store", deadAddr(t), "--body-read-timeout", "1s", "--stream-stall-timeout", "5s")

	body := bytes.Repeat([]byte("0123456789abcdef"), 256) // 4 KiB
	status, got := putWithGap(t, px.url+"/upload", body, 2500*time.Millisecond)
	require.Equal(t, http.StatusOK, status, "a quiet gap within --stream-stall-timeout was cut: %s", got)
	require.Equal(t, fmt.Sprintf("got %d bytes", len(body)), got)
	require.Equal(t, body, up.uploaded.Load())

	// A keyed body that pauses as long is refused at --body-read-timeout.
	conn, err := net.Dial("tcp", strings.TrimPrefix(px.url, "http://"))
	require.NoError(t, err)
	defer conn.Close()
	_, err = io.WriteString(conn, "POST /pay HTTP/1.1\r\nHost: proxy\r\nAuthorization: Bearer proxy-test\r\n"+
		"Idempotency-Key: gap-body\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"a\"")
	require.NoError(t, err)
	start := time.Now()
	conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	require.NoError(t, err, "no answer to a keyed body that never arrives")
	problem, _ := io.ReadAll(resp.Body)
	require.Equal(t, http.StatusBadRequest, resp.StatusCode, "%s", problem)
	require.Contains(t, string(problem), "did not arrive within 1s (--body-read-timeout)")
	require.Less(t, time.Since(start), 4*time.Second, "the keyed body was given --stream-stall-timeout")
}

// --stream-stall-timeout 0 puts no bound on a streamed body, as before the
// bound: a gap longer than --body-read-timeout passes. A body answered
// unread is still not waited for.
func TestProxyStreamStallTimeoutZeroIsNoBound(t *testing.T) {
	up := newSlowUpstream(t)
	px := startProxy(t, "--upstream", up.url, "--store", deadAddr(t), "--body-read-timeout", "1s", "--stream-stall-timeout", "0")

	body := bytes.Repeat([]byte("0123456789abcdef"), 128) // 2 KiB
	status, got := putWithGap(t, px.url+"/upload", body, 2500*time.Millisecond)
	require.Equal(t, http.StatusOK, status, "a streamed body was bounded with --stream-stall-timeout 0: %s", got)
	require.Equal(t, fmt.Sprintf("got %d bytes", len(body)), got)

	conn, err := net.Dial("tcp", strings.TrimPrefix(px.url, "http://"))
	require.NoError(t, err)
	defer conn.Close()
	io.WriteString(conn, "PUT /refuse HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\nab")
	conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	require.NoError(t, err, "no answer while the body is held back")
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode)
	_, err = br.ReadByte()
	require.ErrorIs(t, err, io.EOF, "the connection stayed open for the rest of the body")
}
