package api

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idem-store/idem/internal/mono"
)

// Connection limits. A node has a bounded number of file descriptors, and
// raft, Pebble and the raft log need some of them: before these limits,
// 1,100 connections that sent a body one byte at a time exhausted 1,024
// descriptors and /healthz and claims timed out. The listener returned by
// Listen holds at most max connections for the API, plus HealthHeadroom
// more that serve only /healthz and /readyz (one request each, for a few
// seconds), so a probe still gets an answer when the API is full. Beyond
// both a connection waits a moment for a headroom slot, then is answered
// 503 and closed: refusing costs one descriptor for a moment, and a client
// learns at once to come back rather than waiting in the kernel's backlog.

// HealthHeadroom is how many connections beyond the cap are kept for
// /healthz and /readyz.
const HealthHeadroom = 64

// overflowLife is how long a connection in the headroom may live.
const overflowLife = 3 * time.Second

// headroomWait is how long a connection waits for a slot in a full
// headroom before it is refused. Connections there are answered as soon as
// their request line arrives, so slots come back quickly; under a flood of
// new connections the accept loop then moves at the pace they are answered
// (the others wait in the kernel's backlog) instead of refusing a probe
// that arrives behind them.
const headroomWait = 250 * time.Millisecond

// refusedAnswer is what a connection beyond every limit gets before it is
// closed: no request was read, so it is the same for everyone.
var refusedAnswer = func() []byte {
	body := `{"type":"https://idem.dev/problems/unavailable","title":"Service unavailable","status":503,"detail":"too many open connections","code":"unavailable"}` + "\n"
	return []byte(fmt.Sprintf("HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/problem+json\r\n"+
		"Retry-After: 1\r\nConnection: close\r\nContent-Length: %d\r\n\r\n%s", len(body), body))
}()

// ConnListener caps the connections of an HTTP listener. Make one with
// Listen; Serve the http.Server with ConnContext set to its ConnContext.
type ConnListener struct {
	net.Listener
	max      int64
	log      *slog.Logger
	api      atomic.Int64  // connections in the cap
	headroom chan struct{} // a slot per connection in the headroom
	open     atomic.Int64
	refused  atomic.Int64

	lastLog atomic.Int64 // unix nanos of the last "refusing" warning
}

// Listen wraps ln so it holds at most max API connections (see above).
func Listen(ln net.Listener, max int, log *slog.Logger) *ConnListener {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &ConnListener{Listener: ln, max: int64(max), log: log, headroom: make(chan struct{}, HealthHeadroom)}
}

// ListenNoHeadroom is Listen for a server with no /healthz or /readyz of
// its own (idem proxy): no headroom is kept, and a connection beyond max
// is answered 503 and closed at once.
func ListenNoHeadroom(ln net.Listener, max int, log *slog.Logger) *ConnListener {
	l := Listen(ln, max, log)
	l.headroom = nil
	return l
}

// Open is the number of connections open now.
func (l *ConnListener) Open() int64 { return l.open.Load() }

// Refused is the number of connections refused since the start.
func (l *ConnListener) Refused() int64 { return l.refused.Load() }

// Accept returns the next connection within the limits, answering and
// closing the ones beyond them.
func (l *ConnListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if l.api.Add(1) <= l.max {
			l.open.Add(1)
			return &limitedConn{Conn: c, l: l}, nil
		}
		l.api.Add(-1)
		if !l.takeHeadroom() {
			l.refuse(c)
			continue
		}
		l.open.Add(1)
		// Headroom: one short request, for a probe. The deadline bounds
		// the whole connection, whatever the server sets.
		lc := &limitedConn{Conn: c, l: l, until: time.Now().Add(overflowLife)}
		lc.Conn.SetDeadline(lc.until)
		return lc, nil
	}
}

// takeHeadroom takes a headroom slot, waiting up to headroomWait for one.
func (l *ConnListener) takeHeadroom() bool {
	if l.headroom == nil {
		return false
	}
	select {
	case l.headroom <- struct{}{}:
		return true
	default:
	}
	t := time.NewTimer(headroomWait)
	defer t.Stop()
	select {
	case l.headroom <- struct{}{}:
		return true
	case <-t.C:
		return false
	}
}

func (l *ConnListener) refuse(c net.Conn) {
	l.refused.Add(1)
	c.SetWriteDeadline(time.Now().Add(50 * time.Millisecond))
	c.Write(refusedAnswer)
	c.Close()
	if last := l.lastLog.Load(); mono.Since(last) > 10*time.Second && l.lastLog.CompareAndSwap(last, mono.Now()) {
		l.log.Warn("refusing HTTP connections: too many open", "max-conns", l.max, "refused-total", l.refused.Load())
	}
}

// ConnContext is the http.Server.ConnContext that lets the handler see
// what the listener knows of a request's connection.
func (l *ConnListener) ConnContext(ctx context.Context, c net.Conn) context.Context {
	return context.WithValue(ctx, connKey{}, c)
}

type connKey struct{}

// limitedConnOf finds the listener's connection under a request, through
// a TLS connection if there is one.
func limitedConnOf(ctx context.Context) *limitedConn {
	c, _ := ctx.Value(connKey{}).(net.Conn)
	for c != nil {
		if lc, ok := c.(*limitedConn); ok {
			return lc
		}
		u, ok := c.(interface{ NetConn() net.Conn })
		if !ok {
			return nil
		}
		c = u.NetConn()
	}
	return nil
}

// limitedConn is one accepted connection: it gives its slot back once
// closed, and sniffs the request headers (see sniffer).
type limitedConn struct {
	net.Conn
	l      *ConnListener
	until  time.Time // non-zero in the headroom: the connection ends then
	closed atomic.Bool
	mu     sync.Mutex
	sniff  sniffer
}

// overflow reports whether the connection is in the health headroom.
func (c *limitedConn) overflow() bool { return !c.until.IsZero() }

func (c *limitedConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 {
		c.mu.Lock()
		c.sniff.feed(p[:n])
		c.mu.Unlock()
	}
	return n, err
}

// clte reports whether the chunked request's headers also carried
// Content-Length, and whether that is known.
func (c *limitedConn) clte() (both, known bool) {
	if c == nil {
		return false, false // not from a ConnListener
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.sniff.clte, c.sniff.known
}

// SetDeadline and SetReadDeadline keep a headroom connection's end.
func (c *limitedConn) SetDeadline(t time.Time) error {
	return c.Conn.SetDeadline(c.clamp(t))
}

func (c *limitedConn) SetReadDeadline(t time.Time) error {
	return c.Conn.SetReadDeadline(c.clamp(t))
}

func (c *limitedConn) clamp(t time.Time) time.Time {
	if c.until.IsZero() || (!t.IsZero() && t.Before(c.until)) {
		return t
	}
	return c.until
}

func (c *limitedConn) Close() error {
	if c.closed.CompareAndSwap(false, true) {
		c.l.open.Add(-1)
		if c.overflow() {
			<-c.l.headroom
		} else {
			c.l.api.Add(-1)
		}
	}
	return c.Conn.Close()
}

// sniffer follows the HTTP/1.1 requests on a connection far enough to see
// which headers framed each body. Go's server, given both Content-Length
// and Transfer-Encoding: chunked, drops the Content-Length and reads the
// chunked body; the handler cannot tell. RFC 9112 §6.3 says such a request
// ought to be handled as an error and the connection MUST be closed (a
// proxy in front that framed the body by its Content-Length would see the
// rest as another request: request smuggling). The sniffer reads the header
// names as the bytes go by, skips bodies framed by Content-Length, and
// stops at the first chunked request, after which the handler closes the
// connection anyway. Anything it does not understand (TLS, HTTP/2) turns
// it off: the handler then only knows a request was chunked.
type sniffer struct {
	state    int
	line     [64]byte // the first bytes of the current line
	lineLen  int      // the whole length of the current line
	cl       int64    // Content-Length of this header block, -1 if none
	sawTE    bool
	bodyLeft int64
	clte     bool // the chunked request's headers also held Content-Length
	known    bool // clte is known for the latest chunked request
}

const (
	sniffStart   = iota // before the first byte
	sniffHeaders        // in a request line or header block
	sniffBody           // in a body of known length
	sniffOff            // not following any more
)

func (s *sniffer) feed(p []byte) {
	if s.state == sniffStart {
		// A request line starts with a method token; TLS and others do not.
		if p[0] < 'A' || p[0] > 'Z' {
			s.state = sniffOff
			return
		}
		s.state, s.cl = sniffHeaders, -1
	}
	for len(p) > 0 {
		switch s.state {
		case sniffOff:
			return
		case sniffBody:
			n := min(int64(len(p)), s.bodyLeft)
			s.bodyLeft -= n
			p = p[n:]
			if s.bodyLeft == 0 {
				s.state, s.cl = sniffHeaders, -1
			}
		case sniffHeaders:
			i := bytes.IndexByte(p, '\n')
			chunk := p
			if i >= 0 {
				chunk = p[:i]
			}
			if s.lineLen < len(s.line) {
				copy(s.line[s.lineLen:], chunk)
			}
			s.lineLen += len(chunk)
			if i < 0 {
				return
			}
			p = p[i+1:]
			s.endLine()
		}
	}
}

// endLine handles one complete line of a header block.
func (s *sniffer) endLine() {
	n := s.lineLen
	s.lineLen = 0
	line := s.line[:min(n, len(s.line))]
	if n <= len(s.line) {
		line = bytes.TrimSuffix(line, []byte("\r"))
		n = len(line)
	}
	if n != 0 {
		// A header (only its start is kept: the names and a length fit),
		// or the request line, which has no name before a colon.
		name, value, _ := bytes.Cut(line, []byte(":"))
		switch {
		case bytes.EqualFold(name, []byte("transfer-encoding")):
			s.sawTE = true
		case bytes.EqualFold(name, []byte("content-length")):
			v, ok := parseLength(bytes.TrimSpace(value))
			if !ok {
				s.state = sniffOff // the server refuses it; nothing to follow
				return
			}
			s.cl = v
		}
		return
	}
	// The end of a header block.
	switch {
	case s.sawTE:
		s.clte, s.known = s.cl >= 0, true
		s.state = sniffOff // a chunked request ends the connection
	case s.cl > 0:
		s.state, s.bodyLeft = sniffBody, s.cl
	default:
		s.cl = -1
	}
	s.sawTE = false
}

func parseLength(v []byte) (int64, bool) {
	if len(v) == 0 || len(v) > 18 {
		return 0, false
	}
	var n int64
	for _, c := range v {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int64(c-'0')
	}
	return n, true
}
