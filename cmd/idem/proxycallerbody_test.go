package main

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A caller whose own body could not be read (chunked encoding net/http
// refuses, or a body cut short) made the proxy log WARN "upstream failed"
// and answer 502, the upstream blamed: no credential is needed for an
// unkeyed method, so any caller wrote one WARN line per connection (50
// lines from 50 connections in a protocol walk). The caller is told 400,
// and the line is at debug.
func TestProxyCallersBrokenBodyIsNotTheUpstreamsFailure(t *testing.T) {
	var runs atomic.Int64
	up := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs.Add(1)
		io.Copy(io.Discard, r.Body)
		w.WriteHeader(http.StatusNoContent)
	}))
	ln, err := net.Listen("tcp", freePort(t))
	require.NoError(t, err)
	up.Listener.Close()
	up.Listener = ln
	up.Start()
	defer up.Close()
	px := startProxy(t, "--upstream", up.URL, "--store", deadAddr(t))
	addr := strings.TrimPrefix(px.url, "http://")

	for i := range 20 {
		conn, err := net.Dial("tcp", addr)
		require.NoError(t, err)
		if i%2 == 0 {
			fmt.Fprint(conn, "PUT /up HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n")
			conn.SetReadDeadline(time.Now().Add(10 * time.Second))
			all, _ := io.ReadAll(conn)
			require.True(t, strings.HasPrefix(string(all), "HTTP/1.1 400 "), "%s", all)
			require.Contains(t, string(all), "request body could not be read")
		} else {
			fmt.Fprint(conn, "PUT /up HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n0123456789")
			time.Sleep(20 * time.Millisecond)
			conn.(*net.TCPConn).SetLinger(0) // a reset, mid-body
		}
		conn.Close()
	}
	// A whole body still goes through.
	req, err := http.NewRequest(http.MethodPut, px.url+"/up", strings.NewReader("whole"))
	require.NoError(t, err)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusNoContent, resp.StatusCode)
	time.Sleep(500 * time.Millisecond) // the proxy's last lines through the pipe
	require.NotContains(t, px.logs.String(), "upstream failed", "a caller's broken body was logged as the upstream's failure")
}

// A streamed body that stalls after the upstream has begun its answer (an
// upstream that answers as it reads, a live echo or transform) is cut and
// the answer abandoned, as it must be; but net/http's reverse proxy then
// logged WARN "httputil: ReverseProxy read error during body copy" for
// the upstream connection the cut closed, once per connection, so any
// caller, with no credential, wrote the proxy's log at WARN at will. The
// caller's fault is logged at debug, as a body that fails before the
// answer is.
func TestProxyBodyStalledAfterTheAnswerIsNotAWarning(t *testing.T) {
	up := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rc := http.NewResponseController(w)
		rc.EnableFullDuplex()
		w.Header().Set("Content-Type", "text/plain")
		w.WriteHeader(http.StatusOK)
		rc.Flush()
		buf := make([]byte, 512)
		for {
			n, err := r.Body.Read(buf)
			w.Write(buf[:n])
			rc.Flush()
			if err != nil {
				return
			}
		}
	}))
	ln, err := net.Listen("tcp", freePort(t))
	require.NoError(t, err)
	up.Listener.Close()
	up.Listener = ln
	up.Start()
	defer up.Close()
	px := startProxy(t, "--upstream", up.URL, "--store", deadAddr(t), "--stream-stall-timeout", "1s", "--log-level", "debug")
	addr := strings.TrimPrefix(px.url, "http://")

	done := make(chan string)
	for range 5 {
		go func() {
			conn, err := net.Dial("tcp", addr)
			if err != nil {
				done <- err.Error()
				return
			}
			defer conn.Close()
			fmt.Fprint(conn, "PUT /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\nhello")
			conn.SetReadDeadline(time.Now().Add(10 * time.Second))
			_, err = io.ReadAll(conn) // to the proxy's close
			if err != nil {
				done <- "the stalled body's connection was not closed: " + err.Error()
				return
			}
			done <- ""
		}()
	}
	for range 5 {
		require.Empty(t, <-done)
	}
	waitFor(t, 5*time.Second, "the cut bodies logged at debug", func() (bool, string) {
		return strings.Count(px.logs.String(), "the caller's request body could not be read") >= 5, px.logs.String()
	})
	for _, line := range strings.Split(px.logs.String(), "\n") {
		if strings.Contains(line, "level=WARN") && !strings.Contains(line, "a --store node") { // --store is dead
			t.Errorf("a caller's stalled body was logged at WARN: %s", line)
		}
	}
}
