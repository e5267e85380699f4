package main

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// On SIGTERM the proxy lets requests in flight finish for up to
// --shutdown-timeout, but a connection switched to another protocol (a
// WebSocket) is one net/http no longer tracks: with nothing else in
// flight the proxy exited at once and cut every WebSocket (1006 at the
// client, whatever was on its way lost), and with a stream open they
// lasted as long as the stream. An upgraded connection gets the same
// grace: it goes on working after the SIGTERM, and the proxy exits once
// it is closed.
func TestProxySIGTERMLetsAnUpgradedConnectionFinish(t *testing.T) {
	up := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer c.Close()
		brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n")
		brw.Flush()
		io.Copy(c, brw) // echo until the caller closes
	}))
	ln, err := net.Listen("tcp", freePort(t)) // the test's own address (IDEM_TEST_IP)
	require.NoError(t, err)
	up.Listener.Close()
	up.Listener = ln
	up.Start()
	defer up.Close()
	px := startProxy(t, "--upstream", up.URL, "--store", deadAddr(t), "--shutdown-timeout", "20s")

	conn, err := net.Dial("tcp", strings.TrimPrefix(px.url, "http://"))
	require.NoError(t, err)
	defer conn.Close()
	_, err = io.WriteString(conn, "GET /ws HTTP/1.1\r\nHost: proxy\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n")
	require.NoError(t, err)
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	require.NoError(t, err)
	require.Equal(t, http.StatusSwitchingProtocols, resp.StatusCode)

	require.NoError(t, px.cmd.Process.Signal(syscall.SIGTERM))
	time.Sleep(500 * time.Millisecond) // the proxy is shutting down meanwhile
	conn.SetDeadline(time.Now().Add(5 * time.Second))
	_, err = io.WriteString(conn, "ping\n")
	require.NoError(t, err)
	line, err := br.ReadString('\n')
	require.NoError(t, err, "the upgraded connection was cut by the SIGTERM, within --shutdown-timeout")
	require.Equal(t, "ping\n", line)
	select {
	case <-px.done:
		t.Fatal("the proxy exited while an upgraded connection was open, within --shutdown-timeout")
	default:
	}

	conn.Close()
	select {
	case <-px.done:
		require.NoError(t, px.err, px.logs.String())
	case <-time.After(10 * time.Second):
		t.Fatal("the proxy did not exit once the upgraded connection was closed")
	}
	require.Contains(t, px.logs.String(), "proxy stopped")
}
