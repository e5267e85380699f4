package main

import (
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestProxyTrailersReachTheFirstCallerAsTrailers: an upstream's chunked
// answer with a trailer (Trailer: X-Sum, then X-Sum after the last chunk)
// reached the first caller with X-Sum among its headers as well: the
// proxy holds a keyed answer until the upstream's is whole, and by then
// the reverse proxy had copied the trailer into the header map. A replay
// carries no trailer: the store keeps headers only.
func TestProxyTrailersReachTheFirstCallerAsTrailers(t *testing.T) {
	up := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Trailer", "X-Sum")
		io.WriteString(w, `{"ok":true}`)
		w.(http.Flusher).Flush() // chunked, whatever its length
		w.Header().Set("X-Sum", "abc")
	}))
	ln, err := net.Listen("tcp", freePort(t)) // the test's own address (IDEM_TEST_IP)
	require.NoError(t, err)
	up.Listener.Close()
	up.Listener = ln
	up.Start()
	defer up.Close()
	store := startStore(t)
	px := startProxy(t, "--upstream", up.URL, "--store", store.http)
	send := func() (*http.Response, string) {
		req, err := http.NewRequest(http.MethodPost, px.url+"/pay", strings.NewReader("{}"))
		require.NoError(t, err)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", "trailer-1")
		req.Header.Set("Authorization", "Bearer proxy-test")
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return resp, string(b)
	}
	resp, body := send()
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s", body)
	require.Equal(t, `{"ok":true}`, body)
	require.Empty(t, resp.Header.Values("X-Sum"), "the trailer among the headers")
	require.Equal(t, "abc", resp.Trailer.Get("X-Sum"))

	resp, body = send()
	require.Equal(t, "true", resp.Header.Get("Idempotency-Replayed"))
	require.Equal(t, `{"ok":true}`, body)
	require.Empty(t, resp.Header.Values("X-Sum"))
	require.Empty(t, resp.Trailer)
}
