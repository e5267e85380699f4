package main

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idem-store/idem/api"
)

// pipeListener hands out the server ends of in-memory connections.
type pipeListener struct {
	conns chan net.Conn
	done  chan struct{}
	once  sync.Once
}

func (l *pipeListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *pipeListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return nil
}

func (l *pipeListener) Addr() net.Addr { return &net.UnixAddr{Name: "pipe", Net: "pipe"} }

// net/http answers OPTIONS * itself unless DisableGeneralOptionsHandler is
// set, past the API's shield: a chunked OPTIONS * kept its connection while
// the connection sniffer had stopped at it, and a request after it there
// with both Content-Length and Transfer-Encoding was served (/healthz: 200),
// not refused (400) and closed.
func TestChunkedOptionsStarEndsItsConnection(t *testing.T) {
	pl := &pipeListener{conns: make(chan net.Conn), done: make(chan struct{})}
	cl := api.Listen(pl, 10, nil)
	hs := httpServer(api.New(nil, api.Config{Limits: api.DefaultLimits()}), cl,
		connConfig{maxConns: 10, readHeaderTimeout: 5 * time.Second, idleTimeout: time.Minute})
	go hs.Serve(cl)
	t.Cleanup(func() { hs.Close() })

	client, server := net.Pipe()
	defer client.Close()
	pl.conns <- server
	go io.WriteString(client, "OPTIONS * HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"+
		"GET /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n")
	client.SetReadDeadline(time.Now().Add(10 * time.Second))
	br := bufio.NewReader(client)
	resp, err := http.ReadResponse(br, nil)
	require.NoError(t, err)
	io.Copy(io.Discard, resp.Body)
	if !resp.Close {
		resp, err = http.ReadResponse(br, nil)
		require.NoError(t, err)
		require.Equal(t, http.StatusBadRequest, resp.StatusCode,
			"a request with Content-Length and Transfer-Encoding after a chunked OPTIONS * on one connection")
	}
	require.True(t, resp.Close, "the connection of a chunked request ends with it")
}
