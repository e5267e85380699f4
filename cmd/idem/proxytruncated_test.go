package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// cutUpstream answers each request with the raw bytes answers[path]
// gives, then ends the connection: with a reset when the path ends in
// "-reset", else with a FIN; a path ending in "-stall" first waits 3 s.
func cutUpstream(t *testing.T, answers map[string]string) (string, *atomic.Int64) {
	t.Helper()
	ln, err := net.Listen("tcp", freePort(t)) // the test's own address (IDEM_TEST_IP)
	require.NoError(t, err)
	t.Cleanup(func() { ln.Close() })
	var runs atomic.Int64
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func(c net.Conn) {
				defer c.Close()
				req, err := http.ReadRequest(bufio.NewReader(c))
				if err != nil {
					return
				}
				io.Copy(io.Discard, req.Body)
				runs.Add(1)
				io.WriteString(c, answers[req.URL.Path])
				time.Sleep(50 * time.Millisecond) // the bytes go before the reset
				if strings.HasSuffix(req.URL.Path, "-stall") {
					time.Sleep(3 * time.Second) // past a proxy's --upstream-timeout of 1s
				}
				if strings.HasSuffix(req.URL.Path, "-reset") {
					c.(*net.TCPConn).SetLinger(0)
				}
			}(c)
		}
	}()
	return "http://" + ln.Addr().String(), &runs
}

// TestProxyAnswerCutShortIsA502AndRunsAgain: an upstream that sends a
// keyed request's status and then cuts its body short (short of its
// Content-Length, a chunked body without its last chunk, a connection
// reset mid-body, an HTTP/1.0 body cut by a reset) has no answer to store:
// it is released, and the retry runs again, told Idempotency-Attempt.
// Bug: the reverse proxy aborted the handler, so the caller's connection
// was closed without a word (Go's client: "EOF"), and on a kept-alive
// connection Go's transport took that for an idle close and sent the
// request again by itself: the upstream ran twice for one call. It is a
// 502 upstream_unavailable now, saying the upstream may have done the
// work. A body framed by the connection's close alone and cut by a FIN
// cannot be told from a whole one (a known limit, said in docs/API.md).
func TestProxyAnswerCutShortIsA502AndRunsAgain(t *testing.T) {
	body := `{"paid":"` + strings.Repeat("x", 60) + `"}`
	head := "HTTP/1.1 201 Created\r\nContent-Type: application/json\r\n"
	answers := map[string]string{
		"/whole":         head + fmt.Sprintf("Connection: close\r\nContent-Length: %d\r\n\r\n", len(body)) + body,
		"/short":         head + "Content-Length: 500\r\n\r\n" + body,
		"/short-reset":   head + "Content-Length: 500\r\n\r\n" + body,
		"/chunked":       head + "Transfer-Encoding: chunked\r\n\r\n" + fmt.Sprintf("%x\r\n%s\r\n", len(body), body),
		"/chunked-reset": head + "Transfer-Encoding: chunked\r\n\r\n" + fmt.Sprintf("%x\r\n%s\r\n", len(body), body),
		"/http10-reset":  "HTTP/1.0 201 Created\r\nContent-Type: application/json\r\n\r\n" + body,
		"/close":         head + "Connection: close\r\n\r\n" + body,
	}
	upURL, runs := cutUpstream(t, answers)
	store := startStore(t)
	px := startProxy(t, "--upstream", upURL, "--store", store.http)

	// One client, its connection kept alive between the calls, as a
	// service's client is.
	client := &http.Client{Transport: &http.Transport{}}
	send := func(path, key string) (int, string, error) {
		req, err := http.NewRequest(http.MethodPost, px.url+path, strings.NewReader("{}"))
		require.NoError(t, err)
		req.Header.Set("Idempotency-Key", key)
		req.Header.Set("Authorization", "Bearer proxy-test")
		req.Header.Set("Content-Type", "application/json")
		resp, err := client.Do(req)
		if err != nil {
			return 0, "", err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b), err
	}
	status, got, err := send("/whole", "whole-1")
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, status)
	require.Equal(t, body, got)

	for _, path := range []string{"/short", "/short-reset", "/chunked", "/chunked-reset", "/http10-reset"} {
		before := runs.Load()
		status, got, err := send(path, "cut"+path)
		require.NoError(t, err, "%s: the caller's connection closed without an answer", path)
		require.Equal(t, http.StatusBadGateway, status, "%s: %s", path, got)
		var doc struct{ Code, Detail string }
		require.NoError(t, json.Unmarshal([]byte(got), &doc))
		require.Equal(t, "upstream_unavailable", doc.Code)
		require.Contains(t, doc.Detail, "cut it short", path)
		require.Contains(t, doc.Detail, "may have done the work")
		require.Equal(t, int64(1), runs.Load()-before, "%s: the upstream ran more than once for one call", path)

		// No answer was stored: the retry runs again (a later attempt).
		status, _, err = send(path, "cut"+path)
		require.NoError(t, err)
		require.Equal(t, http.StatusBadGateway, status)
		require.Equal(t, int64(2), runs.Load()-before, "%s: the retry was not run again", path)
	}

	// Framed by the close alone: a FIN is its end, whole or not.
	before := runs.Load()
	status, got, err = send("/close", "close-1")
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, status)
	require.Equal(t, body, got)
	status, got, err = send("/close", "close-1")
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, status)
	require.Equal(t, body, got)
	require.Equal(t, int64(1), runs.Load()-before)
	require.NotContains(t, px.logs.String(), "ReverseProxy read error")
}

// TestProxyAnswerOverTheStoredLimitCutShortRunsAgain: an answer larger
// than --max-stored-body goes to its caller as it arrives; cut short
// after that, the caller has its status and part of its body and then a
// broken transfer, and nothing is stored: the retry runs again.
func TestProxyAnswerOverTheStoredLimitCutShortRunsAgain(t *testing.T) {
	body := strings.Repeat("y", 4096)
	upURL, runs := cutUpstream(t, map[string]string{
		"/big": "HTTP/1.1 201 Created\r\nContent-Type: text/plain\r\nContent-Length: 10000\r\n\r\n" + body,
	})
	store := startStore(t)
	px := startProxy(t, "--upstream", upURL, "--store", store.http, "--max-stored-body", "1024")
	send := func() (int, int, error) {
		req, err := http.NewRequest(http.MethodPost, px.url+"/big", strings.NewReader("{}"))
		require.NoError(t, err)
		req.Header.Set("Idempotency-Key", "big-1")
		req.Header.Set("Authorization", "Bearer proxy-test")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0, 0, err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		return resp.StatusCode, len(b), err
	}
	status, n, err := send()
	require.Equal(t, http.StatusCreated, status)
	require.ErrorIs(t, err, io.ErrUnexpectedEOF)
	require.LessOrEqual(t, n, len(body))
	require.Eventually(t, func() bool {
		status, _, _ = send()
		return status != http.StatusConflict
	}, 10*time.Second, 100*time.Millisecond)
	require.Equal(t, http.StatusCreated, status)
	require.Equal(t, int64(2), runs.Load(), "a cut answer was replayed")
}
