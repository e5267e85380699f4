package main

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A chunked answer of a type the proxy does not know for a stream (a log
// tail in text/plain, a watch in application/json, as kubectl logs -f and
// Kubernetes or Docker watches send) was held in the caller's write buffer
// until 4 KiB gathered or the upstream ended it: the proxy skips the
// reverse proxy's flushes of such answers so that a keyed one is stored
// whole, and skipped them for unkeyed requests too, which nothing stores.
// A GET's lines reach its caller as the upstream flushes them.
func TestProxyUnkeyedChunkedAnswerIsFlushedAsItComes(t *testing.T) {
	next := make(chan struct{})
	up := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", r.URL.Query().Get("ct"))
		for i := range 2 {
			fmt.Fprintf(w, "line %d\n", i)
			w.(http.Flusher).Flush()
			select {
			case <-next:
			case <-time.After(10 * time.Second):
			case <-r.Context().Done():
				return
			}
		}
	}))
	ln, err := net.Listen("tcp", freePort(t)) // the test's own address (IDEM_TEST_IP)
	require.NoError(t, err)
	up.Listener.Close()
	up.Listener = ln
	up.Start()
	defer up.Close()
	px := startProxy(t, "--upstream", up.URL, "--store", deadAddr(t))
	for _, ct := range []string{"text/plain", "application/json"} {
		lines := make(chan string, 2)
		go func() {
			defer close(lines)
			resp, err := http.Get(px.url + "/logs?ct=" + ct)
			if err != nil {
				return
			}
			defer resp.Body.Close()
			sc := bufio.NewScanner(resp.Body)
			for sc.Scan() {
				lines <- sc.Text()
			}
		}()
		for i := range 2 {
			select {
			case l := <-lines:
				require.Equal(t, fmt.Sprintf("line %d", i), l, ct)
			case <-time.After(3 * time.Second):
				t.Fatalf("%s: line %d, which the upstream flushed, did not reach the caller while the upstream waited", ct, i)
			}
			next <- struct{}{}
		}
		_, open := <-lines
		require.False(t, open, "%s: the answer did not end", ct)
	}
}
