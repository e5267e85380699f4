package api

import (
	"bytes"
	"container/list"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
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
//
// Slow connections. A cap alone let anyone take it: 200 sockets sending a
// header one byte every few seconds ("slowloris") held a proxy's 64 slots
// and 38 of 40 callers got 503; held each for the 10 s ReadHeaderTimeout,
// a few hundred new connections a second held the default 4,096. So, as
// the raft port does (raftfsm's evictOldest), a newcomer to a full cap
// takes the slot of the oldest connection that holds no request: one that
// has not sent a whole request header since it was opened (StateNew) or
// since its last answer (StateIdle: keep-alive). That one is closed, as
// IdleTimeout or ReadHeaderTimeout would have closed it later, and its
// client (a real one) dials again. Idle connections are closed too: a
// connection that sent one quick request, then its next header a byte at a
// time, is Idle all the while, and one idle for the 60 s IdleTimeout costs
// an attacker nothing at all; but only once idle for evictMinAge: one
// answered just now may be carrying its client's next request, and a
// client cannot tell that close from a request lost (a follower's forward
// to the leader, from its keep-alive pool, ended "outcome unknown" for its
// client under a flood). A connection with a request in flight (its
// body arriving, its handler running, hijacked for a WebSocket) is never
// closed; when every connection has one, a newcomer goes to the headroom
// or is refused as before.
//
// A header that has just ended must not be lost to a newcomer: the server
// says a request began (StateActive) only after parsing it. In plaintext
// the sniffer below sees each header end before the server gets its bytes,
// and a connection whose last header the server has not yet begun is not
// closed; once one is chosen, its Read hands the server nothing more. So a
// whole header is never dropped. Under TLS the listener sees only records:
// a connection that has sent bytes is closed only after evictMinAge in its
// state, and only while its server waits in Read for more (the server reads
// only for more of a header, tls.Conn only for more of a record), never
// while the server may be parsing what Read last handed it.
// Nor is a connection whose bytes the kernel holds unread (peeked without
// blocking), or a new one from which nothing has been read for less than
// evictMinAge: a request may have arrived that the server has not got to,
// or has just taken from the kernel (a flood of new connections, each
// sending a whole header at once).

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

// evictMinAge is how long a connection whose bytes the sniffer cannot
// follow (TLS), one idle after an answer, or a new one from which nothing
// has been read, must have been without a request before it may be closed
// for a newcomer (see "Slow connections" above).
const evictMinAge = time.Second

// evictScan bounds how many of the oldest connections without a request a
// newcomer looks at for one to close.
const evictScan = 64

// refusedAnswer is what a connection beyond every limit gets before it is
// closed: no request was read, so it is the same for everyone.
var refusedAnswer = func() []byte {
	body := `{"type":"https://idem.dev/problems/unavailable","title":"Service unavailable","status":503,"detail":"too many open connections","code":"unavailable"}` + "\n"
	return []byte(fmt.Sprintf("HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/problem+json\r\n"+
		"Retry-After: 1\r\nConnection: close\r\nContent-Length: %d\r\n\r\n%s", len(body), body))
}()

// ConnListener caps the connections of an HTTP listener. Make one with
// Listen; Serve the http.Server with ConnContext and ConnState set to its
// ConnContext and ConnState (without ConnState no connection is closed for
// a newcomer: a full cap refuses, as before).
type ConnListener struct {
	net.Listener
	max      int64
	log      *slog.Logger
	api      atomic.Int64  // connections in the cap
	headroom chan struct{} // a slot per connection in the headroom
	open     atomic.Int64
	refused  atomic.Int64

	lastLog mono.Spacer // the "refusing" warning's

	mu      sync.Mutex
	waiting list.List // *limitedConn without a request (New, Idle), oldest first
	evicted atomic.Int64
	// evictedUnlogged counts the evictions not yet in a warning.
	evictedUnlogged atomic.Int64
	lastEvictLog    mono.Spacer
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

// Evicted is the number of connections closed for a newcomer since the
// start.
func (l *ConnListener) Evicted() int64 { return l.evicted.Load() }

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
		if v := l.evictOldest(); v != nil {
			v.Close() // its slot comes back now; only Accept takes slots
			l.logEviction()
			if l.api.Add(1) <= l.max {
				l.open.Add(1)
				return &limitedConn{Conn: c, l: l}, nil
			}
			l.api.Add(-1)
		}
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
	if l.lastLog.Allow(10 * time.Second) {
		l.log.Warn("refusing HTTP connections: too many open", "max-conns", l.max, "refused-total", l.refused.Load())
	}
}

// evictOldest chooses the oldest connection in the cap without a request
// that may be closed, takes it off the list and marks it evicted (its Read
// hands nothing more to the server). The caller closes it.
func (l *ConnListener) evictOldest() *limitedConn {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := mono.Now()
	n := 0
	for e := l.waiting.Front(); e != nil && n < evictScan; e = e.Next() {
		n++
		c := e.Value.(*limitedConn)
		if c.takeForEviction(now) {
			l.waiting.Remove(e)
			c.elem = nil
			return c
		}
	}
	return nil
}

// takeForEviction marks c evicted if it holds no request the server has
// read the header of (see "Slow connections"). Called with l.mu held.
func (c *limitedConn) takeForEviction(now int64) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if time.Duration(now-c.since) < evictMinAge && (c.sniff.state == sniffOff || c.idle || c.heard == 0) {
		// Old enough only:
		//   - TLS, or bytes the sniffer does not follow: a header may
		//     have just ended in a record.
		//   - Idle keep-alive: its client may be sending its next request
		//     now, on a connection it has just used, and cannot tell a
		//     close for a newcomer from a request lost (a follower's
		//     forward to the leader, from its keep-alive pool, answered
		//     503 to its client though the leader never read it).
		//   - Nothing read yet on a new connection: its server may have
		//     just taken its request from the kernel and not yet handed
		//     it to Read's sniffer (1,100 new connections each sending a
		//     whole header at once: one or two closed so, 10 ms old). A
		//     slow header's first bytes are heard at once; a client that
		//     sends nothing for a second has no request on its way.
		return false
	}
	if c.sniff.state != sniffOff && c.sniff.headers > c.begun {
		// A whole header the server has not begun yet: a request.
		return false
	}
	if c.sniff.state == sniffOff && c.heard > 0 && !c.reading.Load() {
		// TLS, or bytes the sniffer does not follow: what Read handed on
		// last may end a header the server is parsing now, before its
		// StateActive. Only a server waiting in Read for more has none
		// (a keep-alive connection idle for seconds, its next request
		// read, was closed and its handler ran unanswered). What that
		// Read returns now is not handed on (evicted).
		return false
	}
	if unreadBytes(c.Conn) {
		// Bytes the server has not read yet: a request that has come on
		// a connection the server has not got to (1,100 new connections
		// each sending a whole header at once had 73 of them closed
		// unanswered; a loaded server took over a second to reach one).
		// A slow header's bytes are read as they come.
		return false
	}
	c.evicted = true
	return true
}

func (l *ConnListener) logEviction() {
	l.evicted.Add(1)
	n := l.evictedUnlogged.Add(1)
	if l.lastEvictLog.Allow(10 * time.Second) {
		l.evictedUnlogged.Add(-n)
		l.log.Warn("HTTP connections all taken: closed the oldest that held no request (no whole header since it was opened, or since its last answer for 1 s: slow, or idle keep-alive) for new ones; a flood of slow or idle connections, or --max-conns too low; logged at most every 10 s",
			"max-conns", l.max, "closed", n, "closed-total", l.evicted.Load(), "refused-total", l.refused.Load())
	}
}

// ConnState is the http.Server.ConnState that tells the listener which
// connections hold no request (StateNew, StateIdle), the ones a newcomer
// to a full cap may close. It takes the connections the listener returned,
// and a TLS connection over one.
func (l *ConnListener) ConnState(nc net.Conn, st http.ConnState) {
	c := unwrapLimited(nc)
	if c == nil || c.l != l || c.overflow() {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if c.elem != nil {
		l.waiting.Remove(c.elem)
		c.elem = nil
	}
	switch st {
	case http.StateNew, http.StateIdle:
		if !c.closed.Load() {
			c.since, c.idle = mono.Now(), st == http.StateIdle
			c.elem = l.waiting.PushBack(c)
		}
	case http.StateActive:
		// A request began: the server read its header (or failed to).
		// Never past the headers the sniffer saw: a pipelined header
		// behind it is still counted as one the server has not begun.
		c.mu.Lock()
		c.begun = min(c.begun+1, c.sniff.headers)
		c.mu.Unlock()
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
	return unwrapLimited(c)
}

// unwrapLimited finds the listener's connection under c.
func unwrapLimited(c net.Conn) *limitedConn {
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
	// evicted: closed for a newcomer; Read hands the server nothing more.
	evicted bool
	// begun is how many of the headers the sniffer saw the server has
	// begun a request for (StateActive).
	begun int64
	// heard is how many bytes Read has handed the server.
	heard int64
	// reading: the server is in Read, waiting for bytes (set before
	// Read, cleared with mu held after it).
	reading atomic.Bool

	// Guarded by l.mu: on l.waiting while without a request, since then.
	elem  *list.Element
	since int64
	idle  bool // since its last answer (StateIdle), not since opened
}

// overflow reports whether the connection is in the health headroom.
func (c *limitedConn) overflow() bool { return !c.until.IsZero() }

func (c *limitedConn) Read(p []byte) (int, error) {
	c.reading.Store(true)
	n, err := c.Conn.Read(p)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.reading.Store(false)
	if c.evicted {
		// Closed for a newcomer while it held no request: what came with
		// it is not handed on (it might end a header), and the end is
		// quiet.
		return 0, io.EOF
	}
	if n > 0 {
		c.heard += int64(n)
		c.sniff.feed(p[:n])
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
		if !c.overflow() {
			c.l.mu.Lock()
			if c.elem != nil {
				c.l.waiting.Remove(c.elem)
				c.elem = nil
			}
			c.l.mu.Unlock()
		}
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
	// long reads the value of a Content-Length line longer than line,
	// as its bytes go by (longCL: the current line is one).
	long   lengthReader
	longCL bool
	// tail is the last bytes of the current line: a request line's
	// version. net/http ignores Transfer-Encoding in an HTTP/1.0 request
	// and frames its body by Content-Length; taken as chunked, such a
	// request (Connection: keep-alive) turned the sniffer off for the
	// requests after it.
	tail    [10]byte
	tailLen int
	inBlock bool // the request line of the current header block was read
	http10  bool // and it is HTTP/1.0
	// pend is the value of the Content-Length line before (pending): a
	// line that starts with white space continues it (obs-fold), which
	// net/http joins to it ("Content-Length:" then " 5" is 5).
	pend    lengthReader
	pending bool
	// headers counts the header blocks seen to their end (the request
	// line and headers up to the empty line).
	headers int64
}

// lengthReader reads a Content-Length value as net/http does (white space
// around it trimmed, then decimal digits up to 2^63-1, leading zeros
// included) from bytes given in any number of pieces. Reading it from the
// line's first bytes only, or refusing more than 18 digits, lost the
// sniffer a request net/http took (Content-Length: 0000000000000000000005,
// or 5 after 60 spaces): it stopped following the connection, so a later
// request with both Content-Length and chunked went unrefused.
type lengthReader struct {
	n     uint64
	state uint8 // 0 before the digits, 1 in them, 2 after them, 3 not a length
}

func (l *lengthReader) feed(b []byte) {
	for _, c := range b {
		switch {
		case c == ' ' || c == '\t' || c == '\r':
			if l.state == 1 {
				l.state = 2
			}
		case c >= '0' && c <= '9' && l.state <= 1:
			d := uint64(c - '0')
			if l.n > (1<<63-1-d)/10 {
				l.state = 3
				continue
			}
			l.n, l.state = l.n*10+d, 1
		default:
			l.state = 3
		}
	}
}

func (l *lengthReader) value() (int64, bool) {
	return int64(l.n), l.state == 1 || l.state == 2
}

const (
	sniffStart   = iota // before the first byte
	sniffHeaders        // in a request line or header block
	sniffBody           // in a body of known length
	sniffOff            // not following any more
)

func (s *sniffer) feed(p []byte) {
	if s.state == sniffStart {
		// A request line starts with a method token; TLS and others do
		// not. Any token: net/http serves "post" (a 405), and a first
		// request the sniffer left alone turned it off for the rest.
		if !isTokenByte(p[0]) {
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
			start := s.lineLen
			if start < len(s.line) {
				copy(s.line[start:], chunk)
			}
			s.lineLen += len(chunk)
			s.keepTail(chunk)
			if s.lineLen > len(s.line) {
				if start <= len(s.line) {
					s.beginLong()
				}
				if s.longCL {
					s.long.feed(chunk[max(len(s.line)-start, 0):])
				}
			}
			if i < 0 {
				return
			}
			p = p[i+1:]
			s.endLine()
		}
	}
}

// isTokenByte reports whether c is an RFC 9110 tchar.
func isTokenByte(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
}

// keepTail keeps the last bytes of the current line in tail.
func (s *sniffer) keepTail(chunk []byte) {
	if len(chunk) >= len(s.tail) {
		s.tailLen = copy(s.tail[:], chunk[len(chunk)-len(s.tail):])
		return
	}
	keep := min(s.tailLen, len(s.tail)-len(chunk))
	copy(s.tail[:], s.tail[s.tailLen-keep:s.tailLen])
	s.tailLen = keep + copy(s.tail[keep:], chunk)
}

// beginLong starts a line longer than line: a Content-Length one is read
// on by long.
func (s *sniffer) beginLong() {
	if s.inBlock && isFold(s.line[0]) {
		s.longCL = s.pending
		if s.longCL {
			s.long = s.pend
			s.long.feed([]byte{' '})
			s.long.feed(s.line[:])
		}
		return
	}
	name, value, ok := bytes.Cut(s.line[:], []byte(":"))
	s.longCL = s.inBlock && ok && bytes.EqualFold(name, []byte("content-length"))
	if s.longCL {
		s.long = lengthReader{}
		s.long.feed(value)
	}
}

func isFold(c byte) bool { return c == ' ' || c == '\t' }

// endCL ends a pending Content-Length line: it is the header block's
// length, or, not one, stops the sniffer (net/http refuses the request).
func (s *sniffer) endCL() bool {
	if !s.pending {
		return true
	}
	s.pending = false
	v, ok := s.pend.value()
	if !ok {
		s.state = sniffOff // the server refuses it; nothing to follow
		return false
	}
	s.cl = v
	return true
}

// endLine handles one complete line of a header block.
func (s *sniffer) endLine() {
	n := s.lineLen
	last := bytes.TrimSuffix(s.tail[:s.tailLen], []byte("\r"))
	s.lineLen, s.tailLen = 0, 0
	defer func() { s.longCL = false }()
	line := s.line[:min(n, len(s.line))]
	if n <= len(s.line) {
		line = bytes.TrimSuffix(line, []byte("\r"))
		n = len(line)
	}
	if !s.inBlock {
		// The request line (the CR and LF bytes before it, which net/http
		// skips after a POST, are passed over).
		s.inBlock = n != 0 && (n > len(s.line) || len(bytes.Trim(line, "\r")) != 0)
		s.http10 = bytes.HasSuffix(last, []byte(" HTTP/1.0"))
		return
	}
	if n != 0 && isFold(line[0]) {
		// A continuation of the header before.
		if s.pending {
			if n > len(s.line) {
				s.pend = s.long
			} else {
				s.pend.feed([]byte{' '})
				s.pend.feed(line)
			}
		}
		return
	}
	if !s.endCL() {
		return
	}
	if n != 0 {
		// A header (only its start is kept: the names and a length fit).
		name, value, _ := bytes.Cut(line, []byte(":"))
		switch {
		case bytes.EqualFold(name, []byte("transfer-encoding")):
			s.sawTE = true
		case bytes.EqualFold(name, []byte("content-length")):
			s.pend, s.pending = s.long, true
			if n <= len(s.line) {
				s.pend = lengthReader{}
				s.pend.feed(value)
			}
		}
		return
	}
	// The end of a header block.
	s.headers++
	switch {
	case s.sawTE && !s.http10:
		s.clte, s.known = s.cl >= 0, true
		s.state = sniffOff // a chunked request ends the connection
	case s.cl > 0:
		s.state, s.bodyLeft = sniffBody, s.cl
	default:
		s.cl = -1
	}
	s.sawTE, s.inBlock, s.http10 = false, false, false
}
