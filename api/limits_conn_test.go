package api

import (
	"bufio"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idem-store/idem/raftfsm"
)

// guarded serves a Server with no store (only the routes a test adds and
// /healthz) behind the connection listener.
func guarded(t *testing.T, maxConns int, l func(*Limits), routes map[string]http.HandlerFunc) (*Server, string) {
	t.Helper()
	lim := DefaultLimits()
	if l != nil {
		l(&lim)
	}
	s := New(nil, Config{Limits: lim})
	for path, h := range routes {
		s.mux.HandleFunc(path, h)
	}
	srv := httptest.NewUnstartedServer(s)
	cl := Listen(srv.Listener, maxConns, nil)
	srv.Listener = cl
	srv.Config.ConnContext = cl.ConnContext
	srv.Config.ConnState = cl.ConnState
	srv.Config.ReadHeaderTimeout = 5 * time.Second
	srv.Start()
	t.Cleanup(srv.Close)
	return s, srv.Listener.Addr().String()
}

// rawConn is one client connection speaking HTTP/1.1 by hand.
type rawConn struct {
	t  *testing.T
	c  net.Conn
	br *bufio.Reader
}

func dial(t *testing.T, addr string) *rawConn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	return &rawConn{t: t, c: c, br: bufio.NewReader(c)}
}

func (r *rawConn) send(s string) {
	r.t.Helper()
	_, err := io.WriteString(r.c, s)
	require.NoError(r.t, err)
}

// answer reads one response (within wait).
func (r *rawConn) answer(wait time.Duration) (*http.Response, string) {
	r.t.Helper()
	r.c.SetReadDeadline(time.Now().Add(wait))
	resp, err := http.ReadResponse(r.br, nil)
	require.NoError(r.t, err)
	b, err := io.ReadAll(resp.Body)
	require.NoError(r.t, err)
	return resp, string(b)
}

// closed reports whether the server closed the connection (within wait).
func (r *rawConn) closed(wait time.Duration) bool {
	r.c.SetReadDeadline(time.Now().Add(wait))
	_, err := r.br.ReadByte()
	return err == io.EOF || (err != nil && strings.Contains(err.Error(), "reset"))
}

// echo reads the whole body and answers its length, after wait.
func echo(wait time.Duration) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		b, err := io.ReadAll(r.Body)
		if err != nil {
			writeProblem(w, invalid("request body could not be read: %v", err))
			return
		}
		select {
		case <-time.After(wait):
		case <-r.Context().Done():
			writeProblem(w, newProblem(http.StatusInternalServerError, codeInternal, "request context canceled"))
			return
		}
		fmt.Fprintf(w, "%d", len(b))
	}
}

// A body that does not arrive within --body-read-timeout is refused and
// its connection closed; a body that does arrive clears the deadline, so
// a handler may take longer than it and the connection is kept.
func TestBodyReadTimeout(t *testing.T) {
	const d = 200 * time.Millisecond
	_, addr := guarded(t, 100, func(l *Limits) { l.BodyReadTimeout = d }, map[string]http.HandlerFunc{"/echo": echo(3 * d)})

	slow := dial(t, addr)
	start := time.Now()
	slow.send("POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 50\r\n\r\n{\"pr")
	resp, body := slow.answer(5 * time.Second)
	require.Equal(t, 400, resp.StatusCode, body)
	require.Contains(t, body, "--body-read-timeout")
	require.GreaterOrEqual(t, time.Since(start), d)
	require.True(t, slow.closed(2*time.Second), "the connection of a timed-out body is closed")

	ok := dial(t, addr)
	for range 2 {
		ok.send("POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello")
		resp, body = ok.answer(5 * time.Second)
		require.Equal(t, 200, resp.StatusCode, body)
		require.Equal(t, "5", body)
	}
}

// Beyond --max-inflight a request is 503 with Retry-After, before its body
// is read; /healthz still answers; the slots come back.
func TestInFlightCap(t *testing.T) {
	release := make(chan struct{})
	var once sync.Once
	unblock := func() { once.Do(func() { close(release) }) }
	t.Cleanup(unblock) // before the server's Close, which waits for the handlers
	started := make(chan struct{}, 4)
	s, addr := guarded(t, 100, func(l *Limits) { l.MaxInFlight = 2 }, map[string]http.HandlerFunc{
		"/block": func(w http.ResponseWriter, r *http.Request) {
			started <- struct{}{}
			<-release
		},
		"/echo": echo(0),
	})
	held := []*rawConn{dial(t, addr), dial(t, addr)}
	for _, c := range held {
		c.send("GET /block HTTP/1.1\r\nHost: x\r\n\r\n")
		<-started
	}
	c := dial(t, addr)
	c.send("POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello")
	resp, body := c.answer(5 * time.Second)
	require.Equal(t, 503, resp.StatusCode, body)
	require.Equal(t, "1", resp.Header.Get("Retry-After"))
	require.Contains(t, body, `"code":"unavailable"`)
	require.Contains(t, body, "--max-inflight")
	require.True(t, resp.Close, "a refused body is not drained: the connection closes")
	require.EqualValues(t, 1, s.RefusedInFlight())
	require.EqualValues(t, 2, s.InFlight())

	probe := dial(t, addr)
	probe.send("GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
	resp, body = probe.answer(5 * time.Second)
	require.Equal(t, 200, resp.StatusCode, body)

	unblock()
	for _, h := range held {
		resp, _ := h.answer(5 * time.Second)
		require.Equal(t, 200, resp.StatusCode)
	}
	require.Eventually(t, func() bool { return s.guards.inFlight.Load() == 0 }, 5*time.Second, 10*time.Millisecond)
	c = dial(t, addr)
	c.send("POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello")
	resp, body = c.answer(5 * time.Second)
	require.Equal(t, 200, resp.StatusCode, body)
}

// A request with both Content-Length and Transfer-Encoding is 400 and its
// connection closed (RFC 9112 §6.3); a chunked request is served and its
// connection closed; others keep theirs. The listener follows framing
// across keep-alive requests, bodies that look like headers included.
func TestContentLengthWithTransferEncoding(t *testing.T) {
	_, addr := guarded(t, 100, nil, map[string]http.HandlerFunc{"/echo": echo(0)})

	c := dial(t, addr)
	c.send("POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n")
	resp, body := c.answer(5 * time.Second)
	require.Equal(t, 400, resp.StatusCode, body)
	require.Contains(t, body, "both Content-Length and Transfer-Encoding")
	require.True(t, c.closed(2*time.Second), "the connection is closed")

	// The same after keep-alive requests whose bodies hold header-like
	// text, and with the headers in another case and order.
	c = dial(t, addr)
	fake := "x\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n"
	c.send(fmt.Sprintf("POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s", len(fake), fake))
	resp, body = c.answer(5 * time.Second)
	require.Equal(t, 200, resp.StatusCode, body)
	c.send("GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
	resp, _ = c.answer(5 * time.Second)
	require.Equal(t, 200, resp.StatusCode)
	c.send("POST /echo HTTP/1.1\r\ntransfer-encoding: chunked\r\nHost: x\r\ncontent-LENGTH: 2\r\n\r\n2\r\nhi\r\n0\r\n\r\n")
	resp, body = c.answer(5 * time.Second)
	require.Equal(t, 400, resp.StatusCode, body)
	require.True(t, c.closed(2*time.Second))

	// Chunked alone is served, then the connection closes.
	c = dial(t, addr)
	c.send("POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc")
	resp, body = c.answer(5 * time.Second)
	require.Equal(t, "3", body)
	c.send("POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nhi\r\n0\r\n\r\n")
	resp, body = c.answer(5 * time.Second)
	require.Equal(t, 200, resp.StatusCode, body)
	require.Equal(t, "2", body)
	require.True(t, c.closed(2*time.Second))

	// A plain request keeps its connection.
	c = dial(t, addr)
	c.send("GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
	resp, _ = c.answer(5 * time.Second)
	require.Equal(t, 200, resp.StatusCode)
	require.False(t, c.closed(200*time.Millisecond))
}

// The sniffer reads the same requests the same way however the bytes are
// split, and stays out of what is not HTTP/1.
func TestSnifferSplits(t *testing.T) {
	// A body that looks like headers, a header longer than the sniffer
	// keeps, then Content-Length with spaces after a chunked header.
	body := "Transfer-Encoding: chunked\r\n\r\n" + strings.Repeat("y", 40)
	stream := "POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: " + fmt.Sprint(len(body)) + "\r\n\r\n" + body +
		"GET /b HTTP/1.1\r\nX-Long: " + strings.Repeat("z", 300) + "\r\n\r\n" +
		"POST /c HTTP/1.1\r\nTransfer-Encoding: chunked\r\nContent-Length:  7 \r\n\r\n0\r\n\r\n"
	for _, step := range []int{1, 2, 3, 7, 64, len(stream)} {
		var s sniffer
		for i := 0; i < len(stream); i += step {
			s.feed([]byte(stream[i:min(i+step, len(stream))]))
		}
		require.True(t, s.known, "step %d", step)
		require.True(t, s.clte, "step %d", step)
	}
	var s sniffer
	s.feed([]byte("POST /c HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"))
	require.True(t, s.known)
	require.False(t, s.clte)

	s = sniffer{}
	s.feed([]byte{0x16, 0x03, 0x01, 0x02, 0x00}) // a TLS ClientHello
	s.feed([]byte("POST /c HTTP/1.1\r\nTransfer-Encoding: chunked\r\nContent-Length: 7\r\n\r\n"))
	require.False(t, s.known, "TLS bytes are not followed")
}

// Beyond --max-conns a connection serves /healthz and /readyz only, once;
// beyond the headroom too it is answered 503 and closed at once. Closing
// connections gives their slots back.
func TestConnCap(t *testing.T) {
	_, addr := guarded(t, 2, nil, map[string]http.HandlerFunc{"/echo": echo(0)})
	// Held by requests in flight (their bodies arriving): a connection
	// without one would give its slot to a newcomer (conns_evict_test.go).
	held := []*rawConn{dial(t, addr), dial(t, addr)}
	for _, c := range held {
		c.send("POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhel")
	}
	time.Sleep(100 * time.Millisecond) // let the server begin them

	probe := dial(t, addr)
	probe.send("GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
	resp, _ := probe.answer(5 * time.Second)
	require.Equal(t, 200, resp.StatusCode, "a probe is answered beyond the cap")
	require.True(t, resp.Close)
	require.True(t, probe.closed(2*time.Second))

	extra := dial(t, addr)
	extra.send("POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello")
	resp, body := extra.answer(5 * time.Second)
	require.Equal(t, 503, resp.StatusCode, body)
	require.Equal(t, "1", resp.Header.Get("Retry-After"))

	// Fill the headroom with idle connections: the next is refused at once.
	for range HealthHeadroom {
		dial(t, addr)
	}
	time.Sleep(100 * time.Millisecond) // let the server accept them
	refused := dial(t, addr)
	resp, body = refused.answer(5 * time.Second)
	require.Equal(t, 503, resp.StatusCode, body)
	require.Contains(t, body, "too many open connections")
	require.True(t, refused.closed(2*time.Second))

	// The headroom's idle connections end by themselves within
	// overflowLife; the held ones are closed by the client: then the API
	// serves again.
	for _, c := range held {
		c.c.Close()
	}
	require.Eventually(t, func() bool {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			return false
		}
		defer c.Close()
		io.WriteString(c, "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello")
		c.SetReadDeadline(time.Now().Add(2 * time.Second))
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		return err == nil && resp.StatusCode == 200
	}, 2*overflowLife, 100*time.Millisecond)
}

// The principal bound is carried in claim entries only once the cluster
// has its secret, i.e. once every member runs a version that decodes it:
// an older member would refuse the entry and fall out of step.
func TestPrincipalBoundWaitsForEveryMember(t *testing.T) {
	retry := secretGateRetry
	secretGateRetry = 50 * time.Millisecond
	t.Cleanup(func() { secretGateRetry = retry })
	var knows atomic.Bool
	old := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if knows.Load() {
			w.Header().Set(featuresHeader, featureSecret)
		}
		io.WriteString(w, `{"status":"ok"}`)
	}))
	defer old.Close()

	rc := raftfsm.DefaultConfig()
	rc.DataDir, rc.RaftAddr, rc.Bootstrap = t.TempDir(), "127.0.0.1:0", true
	rc.TickInterval, rc.SweepInterval = time.Hour, time.Hour
	node, err := raftfsm.Open(rc)
	require.NoError(t, err)
	defer node.Close()
	require.Eventually(t, func() bool { return node.IsLeader() && node.Ready() }, 10*time.Second, 10*time.Millisecond)
	lim := DefaultLimits()
	lim.MaxPrincipals = 1
	srv := httptest.NewServer(New(&withMember{Node: node, addr: strings.TrimPrefix(old.URL, "http://")}, Config{
		Retention: 24 * time.Hour, DefaultLease: 30 * time.Second, BucketWidth: rc.BucketWidth,
		Limits: lim, Logger: slog.New(slog.DiscardHandler),
	}))
	defer srv.Close()
	claim := func(principal string) int {
		resp, err := http.Post(srv.URL+"/v1/claim", "application/json", strings.NewReader(
			`{"principal":"`+principal+`","endpoint":"POST /x","key":"k","fingerprint":"aa"}`))
		require.NoError(t, err)
		resp.Body.Close()
		return resp.StatusCode
	}
	require.Equal(t, 201, claim("cus_1"))
	require.Equal(t, 201, claim("cus_2"), "not bounded while a member could not decode the bound")

	knows.Store(true)
	time.Sleep(2 * secretGateRetry)
	require.Equal(t, 429, claim("cus_3"), "bounded once every member knows the bound")
	require.EqualValues(t, 2, node.DB().Principals())
}
