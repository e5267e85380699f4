package e2emiddleware_test

import (
	"bufio"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idem-store/idem/client"
	"github.com/idem-store/idem/internal/idemtest"
	"github.com/idem-store/idem/middleware"
)

// A keyed body that does not arrive within the http.Server's ReadTimeout
// (the README's server sets one, as it must) is answered 400. Its detail
// was net's error as it came, "read tcp 10.0.0.5:8080->203.0.113.7:51234:
// i/o timeout": the server's own address, behind a load balancer an
// internal one, told to any caller that sends its body slowly (idem proxy
// says its flag instead, as a node does). It says what happened, naming
// no address.
func TestSlowBodyDetailNamesNoAddress(t *testing.T) {
	t.Parallel()
	node := idemtest.Start(t, idemtest.Options{})
	store, err := client.New(node.URL)
	require.NoError(t, err)
	var runs atomic.Int32
	idem, err := middleware.New(middleware.Options{Store: store, Principal: middleware.AnonymousPrincipal,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	require.NoError(t, err)
	srv := httptest.NewUnstartedServer(idem(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs.Add(1)
	})))
	srv.Config.ReadTimeout = 500 * time.Millisecond
	srv.Config.WriteTimeout = 10 * time.Second
	ln, err := net.Listen("tcp", net.JoinHostPort(idemtest.IP(), "0"))
	require.NoError(t, err)
	srv.Listener.Close()
	srv.Listener = ln
	srv.Start()
	t.Cleanup(srv.Close)
	addr := strings.TrimPrefix(srv.URL, "http://")

	conn, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	defer conn.Close()
	_, err = io.WriteString(conn, "POST /pay HTTP/1.1\r\nHost: pay\r\nIdempotency-Key: slow-1\r\n"+
		"Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"a\"")
	require.NoError(t, err)
	conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	require.NoError(t, err, "no answer to a body that never arrives")
	defer resp.Body.Close()
	require.Equal(t, http.StatusBadRequest, resp.StatusCode)
	var p struct{ Code, Detail string }
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&p))
	require.Equal(t, "invalid_request", p.Code)
	host, _, _ := net.SplitHostPort(addr)
	require.NotContains(t, p.Detail, host, "the server's address in the detail")
	require.NotContains(t, p.Detail, conn.LocalAddr().String(), "the caller's address in the detail")
	require.Contains(t, p.Detail, "did not arrive in time (the server's read timeout)")
	require.Zero(t, runs.Load())
}
