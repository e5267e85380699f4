package main

import (
	"bufio"
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

// A keyed request whose answer is a stream (an SSE completion that
// charges as it starts) and whose caller goes away while it streams: the
// proxy cuts the stream, which is never replayed as if complete anyway.
// Bug: the cut made the reverse proxy abort the handler (ErrAbortHandler),
// which the middleware took for a failure and released the key, so the
// caller's retry ran the upstream a second time ("charged run 2"), though
// API.md says a call whose caller disconnects is stored and replayed
// rather than run twice. The attempt is completed as a stream now: the
// retry gets its status and headers, Idempotency-Body-Omitted: streamed.
// A stream the upstream breaks is still released.
func TestProxyStreamWhoseCallerLeftIsNotRunAgain(t *testing.T) {
	var runs atomic.Int64
	ended := make(chan struct{}, 4)
	up := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := runs.Add(1)
		defer func() { ended <- struct{}{} }()
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, "data: charged run %d\n\n", n)
		w.(http.Flusher).Flush()
		if r.URL.Path == "/broken" {
			panic(http.ErrAbortHandler) // the upstream breaks its stream
		}
		for i := 0; i < 100; i++ { // until the proxy cuts it
			time.Sleep(20 * time.Millisecond)
			if _, err := fmt.Fprintf(w, "data: %s\n\n", strings.Repeat("z", 256<<10)); err != nil {
				return
			}
			w.(http.Flusher).Flush()
		}
	}))
	ln, err := net.Listen("tcp", freePort(t))
	require.NoError(t, err)
	up.Listener = ln
	up.Start()
	defer up.Close()
	store := startStore(t)
	px := startProxy(t, "--upstream", up.URL, "--store", store.http)

	conn, err := net.Dial("tcp", strings.TrimPrefix(px.url, "http://"))
	require.NoError(t, err)
	_, err = io.WriteString(conn, "POST /complete HTTP/1.1\r\nHost: proxy\r\nAuthorization: Bearer proxy-test\r\n"+
		"Idempotency-Key: gone-1\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}")
	require.NoError(t, err)
	conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, resp.StatusCode)
	line, err := bufio.NewReader(resp.Body).ReadString('\n')
	require.NoError(t, err)
	require.Contains(t, line, "charged run 1")
	conn.Close() // the caller goes away mid-stream
	select {
	case <-ended:
	case <-time.After(10 * time.Second):
		t.Fatal("the upstream's stream was never cut")
	}

	var retry pxAnswer
	require.Eventually(t, func() bool {
		retry = pxSend(t, "POST", px.url+"/complete", "gone-1", `{}`)
		return retry.status != http.StatusConflict
	}, 10*time.Second, 100*time.Millisecond)
	require.Equal(t, int64(1), runs.Load(), "the retry ran the upstream again: %d %.200s", retry.status, retry.body)
	require.Equal(t, http.StatusCreated, retry.status, retry.body)
	require.Equal(t, "true", retry.header.Get("Idempotency-Replayed"))
	require.Equal(t, "streamed", retry.header.Get("Idempotency-Body-Omitted"))

	// A stream the upstream itself breaks is no answer: released, and the
	// retry runs again.
	broken := func() int {
		req, err := http.NewRequest("POST", px.url+"/broken", strings.NewReader(`{}`))
		require.NoError(t, err)
		req.Header.Set("Idempotency-Key", "broken-1")
		req.Header.Set("Authorization", "Bearer proxy-test")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0
		}
		defer resp.Body.Close()
		io.Copy(io.Discard, resp.Body) // cut short
		return resp.StatusCode
	}
	require.Equal(t, http.StatusCreated, broken())
	<-ended
	for deadline := time.Now().Add(10 * time.Second); broken() == http.StatusConflict && time.Now().Before(deadline); {
		time.Sleep(100 * time.Millisecond)
	}
	require.Equal(t, int64(3), runs.Load(), "a broken stream's retry runs again")
}
