package client

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// NewTransport returns the http.RoundTripper a Client uses unless given
// WithHTTPClient: HTTP and HTTPS requests are written and their answers
// read on the caller's goroutine, over kept-alive HTTP/1.1 connections
// (HTTPS with tlsConfig, nil for the system's CAs); requests through a
// proxy (HTTP_PROXY, HTTPS_PROXY and the like) go through net/http's
// Transport.
//
// Why: net/http hands every request to a connection's write goroutine and
// its answer back from a read goroutine. For a claim of a few hundred
// bytes those hand-offs cost a third of the client's CPU: 106–113 µs per
// claim with them, 67–74 µs without, one request per claim over loopback
// (docs/BENCHMARKS.md). Over TLS, where net/http also spoke HTTP/2 to the
// node, about a quarter: 100–167 µs per claim through net/http, 76–122 µs
// through this transport (idem bench, 64 clients, one node on loopback,
// on a busy two-core machine).
//
// What net/http's read goroutine gave for free is done before each reuse
// instead: a connection the node closed while it sat idle (a restart, the
// node's --idle-timeout) is found dead by a non-blocking peek and never
// written to, so it cannot turn a claim into an unknown outcome. Only a
// close that races the write itself can, as with net/http. Over TLS the
// node's close may also already sit, read ahead with the last answer,
// inside the TLS connection (a close_notify alert): that is looked at
// too (tlsQuiet).
//
// Where an idle connection cannot be peeked at without blocking (outside
// Linux and the BSDs), it is net/http's Transport.
func NewTransport(tlsConfig *tls.Config) http.RoundTripper {
	return defaultTransport(5*time.Second, tlsConfig)
}

func defaultTransport(dial time.Duration, tlsConfig *tls.Config) http.RoundTripper {
	st := newSyncTransport(dial, tlsConfig)
	if !canPeek {
		return st.fallback
	}
	return st
}

func newSyncTransport(dial time.Duration, tlsConfig *tls.Config) *syncTransport {
	tr := newTransport(dial)
	tr.TLSClientConfig = tlsConfig
	return &syncTransport{
		dial:      (&net.Dialer{Timeout: dial, KeepAlive: 30 * time.Second}).DialContext,
		tlsConfig: tlsConfig,
		handshake: tr.TLSHandshakeTimeout,
		fallback:  tr,
		maxIdle:   1024,
		idleFor:   50 * time.Second, // below the node's default --idle-timeout (60 s)
		idle:      map[connKey][]*syncConn{},
	}
}

type syncTransport struct {
	dial      func(ctx context.Context, network, addr string) (net.Conn, error)
	tlsConfig *tls.Config     // HTTPS; nil: the system's CAs
	handshake time.Duration   // bounds a TLS handshake, as net/http's TLSHandshakeTimeout
	fallback  *http.Transport // proxies
	maxIdle   int             // per scheme and host
	idleFor   time.Duration   // an idle connection older than this is closed, not reused

	mu   sync.Mutex
	idle map[connKey][]*syncConn // the most recently used last
}

// connKey is what an idle connection can be reused for: http and https
// to one host:port never share one.
type connKey struct{ scheme, host string }

type syncConn struct {
	c         net.Conn             // requests are written to it, answers read: raw, or tls over raw
	raw       net.Conn             // the TCP connection
	tls       *tls.Conn            // nil over plain HTTP
	rec       *recordConn          // what tls reads raw through; nil over plain HTTP
	state     *tls.ConnectionState // tls's, for the answers' TLS field
	in        *budgetReader        // what br reads from
	br        *bufio.Reader
	bw        *bufio.Writer
	key       connKey
	idleSince time.Time
}

// close closes the TCP connection. Over TLS no close_notify is sent: on a
// connection given up mid-request, tls.Conn's Close would wait up to 5 s
// to write it when the node reads nothing more; the node takes the end
// of the TCP connection as the end.
func (sc *syncConn) close() { sc.raw.Close() }

// CloseIdleConnections closes the kept-alive connections (http.Client's
// CloseIdleConnections calls it).
func (t *syncTransport) CloseIdleConnections() {
	t.mu.Lock()
	idle := t.idle
	t.idle = map[connKey][]*syncConn{}
	t.mu.Unlock()
	for _, cs := range idle {
		for _, sc := range cs {
			sc.close()
		}
	}
	t.fallback.CloseIdleConnections()
}

func (t *syncTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.URL == nil || (req.URL.Scheme != "http" && req.URL.Scheme != "https") || req.URL.Host == "" {
		return t.fallback.RoundTrip(req)
	}
	if t.fallback.Proxy != nil {
		if p, err := t.fallback.Proxy(req); err != nil || p != nil {
			return t.fallback.RoundTrip(req)
		}
	}
	body, err := requestBody(req)
	if err != nil {
		return nil, err
	}
	head, err := requestHead(req, len(body))
	if err != nil {
		return nil, err
	}
	ctx := req.Context()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	host := req.URL.Host
	if req.URL.Port() == "" {
		port := "80"
		if req.URL.Scheme == "https" {
			port = "443"
		}
		host = net.JoinHostPort(req.URL.Hostname(), port)
	}
	// A GET or HEAD on a kept-alive connection that the node closed
	// without a byte of answer is sent once more on a new connection, as
	// net/http does: it did not reach the node, or repeating it changes
	// nothing. Anything else is never sent twice.
	replayable := req.Method == http.MethodGet || req.Method == http.MethodHead
	resp, again, err := t.exchange(ctx, req, req.URL.Scheme, host, head, body, false)
	if again && replayable && ctx.Err() == nil {
		resp, _, err = t.exchange(ctx, req, req.URL.Scheme, host, head, body, true)
	}
	return resp, err
}

// exchange sends one request on a kept-alive connection (a new one when
// fresh) and reads its answer's head. again reports a failure on a reused
// connection before any byte of an answer came.
func (t *syncTransport) exchange(ctx context.Context, req *http.Request, scheme, host string, head, body []byte, fresh bool) (_ *http.Response, again bool, _ error) {
	sc, reused, err := t.get(ctx, scheme, host, fresh)
	if err != nil {
		return nil, false, err
	}
	// Cancellation and deadlines: ending ctx makes the connection's reads
	// and writes fail at once; the connection is then not reused.
	stop := context.AfterFunc(ctx, func() { sc.c.SetDeadline(time.Unix(1, 0)) })
	fail := func(err error, nothingRead bool) (*http.Response, bool, error) {
		stop()
		sc.close()
		if cerr := ctx.Err(); cerr != nil {
			return nil, false, cerr
		}
		return nil, reused && nothingRead, err
	}
	sc.bw.Write(head)
	if len(body) > 0 && expectsContinue(req) {
		if err := sc.bw.Flush(); err != nil {
			return fail(err, false)
		}
		resp, err := t.awaitContinue(ctx, sc, req, stop)
		if err != nil {
			return fail(err, false)
		}
		if resp != nil {
			return resp, false, nil
		}
	}
	sc.bw.Write(body)
	if err := sc.bw.Flush(); err != nil {
		// The node may have answered before reading the whole body (a 413
		// past its --max-request-bytes, then a close), as net/http's read
		// goroutine would have seen: its answer, if complete, wins.
		if resp := t.earlyAnswer(ctx, sc, req, stop); resp != nil {
			return resp, false, nil
		}
		return fail(err, false)
	}
	resp, nothingRead, err := readAnswer(sc, req)
	if err != nil {
		return fail(err, nothingRead)
	}
	keep := !resp.Close && !wantsClose(req) && resp.StatusCode != http.StatusSwitchingProtocols
	t.bodyFrom(resp, ctx, sc, stop, keep)
	return resp, false, nil
}

// readAnswer reads an answer's head, past any 1xx answers (103 Early
// Hints and the like). Together they may take at most maxHeadBytes, as
// net/http's: a node that sends headers without end must not take the
// caller's memory. The body is the caller's to bound. nothingRead reports
// a failure before any byte came.
func readAnswer(sc *syncConn, req *http.Request) (_ *http.Response, nothingRead bool, _ error) {
	sc.in.left = maxHeadBytes
	defer func() { sc.in.left = -1 }()
	for {
		resp, err := http.ReadResponse(sc.br, req)
		if err != nil {
			return nil, sc.in.left == maxHeadBytes, err
		}
		if resp.StatusCode >= 200 || resp.StatusCode == http.StatusSwitchingProtocols {
			resp.TLS = sc.state
			return resp, false, nil
		}
	}
}

// bodyFrom makes resp's body read from sc, which goes back to the pool
// (keep) once the body is read to its end.
func (t *syncTransport) bodyFrom(resp *http.Response, ctx context.Context, sc *syncConn, stop func() bool, keep bool) {
	b := &syncBody{rc: resp.Body, ctx: ctx, t: t, sc: sc, stop: stop, keep: keep}
	if resp.Body == http.NoBody {
		b.release(true)
	}
	resp.Body = b
}

// earlyAnswer reads an answer the node sent before the request's body was
// all written; nil if there is none within a second.
func (t *syncTransport) earlyAnswer(ctx context.Context, sc *syncConn, req *http.Request, stop func() bool) *http.Response {
	if ctx.Err() != nil {
		return nil
	}
	sc.c.SetReadDeadline(time.Now().Add(time.Second))
	resp, _, err := readAnswer(sc, req)
	if err != nil {
		return nil
	}
	clearReadDeadline(ctx, sc.c)
	resp.Close = true
	t.bodyFrom(resp, ctx, sc, stop, false)
	return resp
}

// clearReadDeadline clears the deadline set for a wait, but not one the
// end of ctx set meanwhile (exchange's context.AfterFunc): cleared, the
// answer's body would be read with no bound once ctx ended.
func clearReadDeadline(ctx context.Context, c net.Conn) {
	c.SetReadDeadline(time.Time{})
	if ctx.Err() != nil {
		c.SetReadDeadline(time.Unix(1, 0))
	}
}

// continueWait is how long a request that asked with Expect: 100-continue
// waits for the node's go-ahead before it sends its body anyway (a proxy
// on the way may not pass 100 Continue on): net/http's
// ExpectContinueTimeout, as this package sets it.
const continueWait = time.Second

// expectsContinue reports a request that asked with Expect: 100-continue.
func expectsContinue(req *http.Request) bool {
	return strings.EqualFold(req.Header.Get("Expect"), "100-continue")
}

// awaitContinue waits, after a head that asked with Expect: 100-continue,
// for the node's go-ahead (nil, nil: send the body) or its final answer
// without the body (a 413 past its --max-request-bytes, a 401), which is
// returned and the connection not reused: the node expects either the
// body or a close. No word within continueWait is a go-ahead too.
func (t *syncTransport) awaitContinue(ctx context.Context, sc *syncConn, req *http.Request, stop func() bool) (*http.Response, error) {
	sc.c.SetReadDeadline(time.Now().Add(continueWait))
	if ctx.Err() != nil {
		return nil, ctx.Err() // the deadline just set replaced the one ctx's end set
	}
	sc.in.left = maxHeadBytes
	defer func() { sc.in.left = -1 }()
	for {
		// Nothing of a next answer read yet: a timeout that leaves it so
		// is silence, after 1xx answers (a 103) as before any.
		quiet, left := sc.br.Buffered() == 0, sc.in.left
		resp, err := http.ReadResponse(sc.br, req)
		if err != nil {
			var ne net.Error
			if quiet && sc.in.left == left && sc.br.Buffered() == 0 && errors.As(err, &ne) && ne.Timeout() && ctx.Err() == nil {
				clearReadDeadline(ctx, sc.c)
				return nil, nil // no word: send the body
			}
			return nil, err
		}
		switch {
		case resp.StatusCode == http.StatusContinue:
			clearReadDeadline(ctx, sc.c)
			return nil, nil
		case resp.StatusCode >= 200:
			clearReadDeadline(ctx, sc.c)
			resp.TLS = sc.state
			resp.Close = true
			t.bodyFrom(resp, ctx, sc, stop, false)
			return resp, nil
		}
		// Another 1xx (103 Early Hints): keep waiting.
	}
}

// wantsClose is net/http's: Close set, or "Connection: close" among the
// request's headers.
func wantsClose(req *http.Request) bool {
	if req.Close {
		return true
	}
	for _, v := range req.Header.Values("Connection") {
		for _, tok := range strings.Split(v, ",") {
			if strings.EqualFold(strings.TrimSpace(tok), "close") {
				return true
			}
		}
	}
	return false
}

// maxHeadBytes bounds an answer's status line and headers (net/http's
// default MaxResponseHeaderBytes).
const maxHeadBytes = 10 << 20

var errHeadTooLarge = fmt.Errorf("client: the answer's headers are larger than %d bytes", maxHeadBytes)

// budgetReader reads at most left bytes (no limit while left < 0).
type budgetReader struct {
	r    io.Reader
	left int64
}

func (b *budgetReader) Read(p []byte) (int, error) {
	if b.left == 0 {
		return 0, errHeadTooLarge
	}
	if b.left > 0 && int64(len(p)) > b.left {
		p = p[:b.left]
	}
	n, err := b.r.Read(p)
	if b.left > 0 {
		b.left -= int64(n)
	}
	return n, err
}

// requestBody reads the request's body (the client's are in memory).
func requestBody(req *http.Request) ([]byte, error) {
	if req.Body == nil || req.Body == http.NoBody {
		return nil, nil
	}
	defer req.Body.Close()
	var b []byte
	var err error
	if n := req.ContentLength; n > 0 && n <= maxSizedBody {
		// The client's bodies are in memory and their length is known:
		// one buffer, not io.ReadAll's growing ones.
		b, err = readSized(req.Body, n)
	} else {
		b, err = io.ReadAll(req.Body)
	}
	if err != nil {
		return nil, fmt.Errorf("read request body: %w", err)
	}
	return b, nil
}

// requestHead is the HTTP/1.1 request line and headers, with the checks
// net/http makes: a header name or value that could split the request
// (a token holding a newline) is refused, not sent.
func requestHead(req *http.Request, bodyLen int) ([]byte, error) {
	host := req.Host
	if host == "" {
		host = req.URL.Host
	}
	if !validValue(host) {
		return nil, fmt.Errorf("client: invalid Host %q", host)
	}
	if !validName(req.Method) {
		return nil, fmt.Errorf("client: invalid method %q", req.Method)
	}
	uri := req.URL.RequestURI()
	for i := 0; i < len(uri); i++ {
		if c := uri[i]; c <= ' ' || c == 0x7f {
			return nil, fmt.Errorf("client: invalid request URI %q", uri)
		}
	}
	b := make([]byte, 0, 256)
	b = append(b, req.Method...)
	b = append(b, ' ')
	b = append(b, uri...)
	b = append(b, " HTTP/1.1\r\nHost: "...)
	b = append(b, host...)
	b = append(b, "\r\n"...)
	for name, values := range req.Header {
		switch http.CanonicalHeaderKey(name) {
		case "Host", "Content-Length", "Transfer-Encoding", "Connection":
			continue // written by the transport
		}
		if !validName(name) {
			return nil, fmt.Errorf("client: invalid header name %q", name)
		}
		for _, v := range values {
			if !validValue(v) {
				return nil, fmt.Errorf("client: invalid value for header %q", name)
			}
			b = append(b, name...)
			b = append(b, ": "...)
			b = append(b, v...)
			b = append(b, "\r\n"...)
		}
	}
	if wantsClose(req) {
		b = append(b, "Connection: close\r\n"...)
	}
	if bodyLen > 0 || req.Method == http.MethodPost || req.Method == http.MethodPut || req.Method == http.MethodPatch {
		b = append(b, "Content-Length: "...)
		b = strconv.AppendInt(b, int64(bodyLen), 10)
		b = append(b, "\r\n"...)
	}
	return append(b, "\r\n"...), nil
}

func validName(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c <= ' ' || c >= 0x7f || strings.IndexByte(`"(),/:;<=>?@[\]{}`, c) >= 0 {
			return false
		}
	}
	return true
}

func validValue(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; (c < ' ' && c != '\t') || c == 0x7f {
			return false
		}
	}
	return true
}

// get returns a live kept-alive connection to host over scheme (reused),
// or a new one; always a new one when fresh.
func (t *syncTransport) get(ctx context.Context, scheme, host string, fresh bool) (_ *syncConn, reused bool, _ error) {
	key := connKey{scheme, host}
	for !fresh {
		t.mu.Lock()
		cs := t.idle[key]
		var sc *syncConn
		if n := len(cs); n > 0 {
			sc, t.idle[key] = cs[n-1], cs[:n-1]
		}
		t.mu.Unlock()
		if sc == nil {
			break
		}
		if time.Since(sc.idleSince) <= t.idleFor && sc.usable() {
			return sc, true, nil
		}
		sc.close()
	}
	c, err := t.dial(ctx, "tcp", host)
	if err != nil {
		return nil, false, err // a *net.OpError "dial": never delivered (neverDelivered)
	}
	sc := &syncConn{c: c, raw: c, key: key}
	if scheme == "https" {
		if err := t.handshakeTLS(ctx, sc, host); err != nil {
			c.Close()
			return nil, false, err // a *handshakeError: never delivered too
		}
	}
	sc.in = &budgetReader{r: sc.c, left: -1}
	sc.br = bufio.NewReaderSize(sc.in, 4<<10)
	sc.bw = bufio.NewWriterSize(sc.c, 4<<10)
	return sc, false, nil
}

// handshakeTLS makes sc a TLS connection to host, as net/http's Transport
// would (the server name from the URL unless tlsConfig gives one), but
// offering HTTP/1.1 only: a node must not pick HTTP/2, which this
// transport does not speak. The handshake ends with ctx, and within
// t.handshake in any case.
func (t *syncTransport) handshakeTLS(ctx context.Context, sc *syncConn, host string) error {
	cfg := t.tlsConfig.Clone()
	if cfg == nil {
		cfg = &tls.Config{}
	}
	if cfg.ServerName == "" {
		cfg.ServerName, _, _ = net.SplitHostPort(host)
	}
	cfg.NextProtos = []string{"http/1.1"}
	sc.rec = &recordConn{Conn: sc.raw}
	tc := tls.Client(sc.rec, cfg)
	hctx, cancel := context.WithTimeout(ctx, t.handshake)
	defer cancel()
	if err := tc.HandshakeContext(hctx); err != nil {
		if ctx.Err() == nil && hctx.Err() != nil {
			err = fmt.Errorf("no answer within %s: %w", t.handshake, os.ErrDeadlineExceeded)
		}
		return &handshakeError{err: err}
	}
	st := tc.ConnectionState()
	if p := st.NegotiatedProtocol; p != "" && p != "http/1.1" {
		return &handshakeError{err: fmt.Errorf("the node chose protocol %q, not http/1.1", p)}
	}
	sc.c, sc.tls, sc.state = tc, tc, &st
	return nil
}

// handshakeError is a failed TLS handshake (a certificate that does not
// verify, a node that is not TLS): no byte of the request was sent, so
// the request was never delivered (neverDelivered), as for a failed dial.
// Its text keeps crypto/tls's ("tls: failed to verify certificate: x509:
// ..."), and errors.As finds crypto/tls's error types through it.
type handshakeError struct{ err error }

func (e *handshakeError) Error() string { return "TLS handshake: " + e.err.Error() }
func (e *handshakeError) Unwrap() error { return e.err }

// Timeout: a handshake that ran out of time.
func (e *handshakeError) Timeout() bool {
	var ne net.Error
	return errors.As(e.err, &ne) && ne.Timeout()
}

// usable reports whether an idle connection can take a request: nothing
// unread, and the node has not closed it.
func (sc *syncConn) usable() bool {
	if sc.br.Buffered() != 0 || !alive(sc.raw) {
		return false
	}
	return sc.tls == nil || (tlsQuiet(sc.tls) && sc.rec.atBoundary())
}

// recordConn is the TCP connection as tls.Conn reads it, keeping track of
// where TLS records begin in what it handed over. tls.Conn reads ahead
// as much as the socket holds: the first bytes of a record that came
// behind the last answer (a second, unsolicited answer whose record
// spans segments) then sit in its buffer, where neither alive's peek
// nor tlsQuiet, which only handles whole records, sees them; the rest
// would be read as the next request's answer. What was handed over ends
// at a record's end only when no such bytes are held.
type recordConn struct {
	net.Conn
	hdr  [5]byte // the header of the record being handed over
	nhdr int     // how much of hdr has been handed over
	left int     // bytes of the record's body still to come
}

func (r *recordConn) Read(p []byte) (int, error) {
	n, err := r.Conn.Read(p)
	for b := p[:n]; len(b) > 0; {
		if r.left > 0 {
			k := min(r.left, len(b))
			r.left, b = r.left-k, b[k:]
			continue
		}
		k := copy(r.hdr[r.nhdr:], b)
		r.nhdr, b = r.nhdr+k, b[k:]
		if r.nhdr == len(r.hdr) {
			r.nhdr, r.left = 0, int(r.hdr[3])<<8|int(r.hdr[4])
		}
	}
	return n, err
}

// atBoundary reports whether what was handed over ends at a record's end.
// Not safe to call while tls.Conn reads (an idle connection's is done).
func (r *recordConn) atBoundary() bool { return r.nhdr == 0 && r.left == 0 }

// tlsQuiet reports whether a TLS connection holds no record it has read
// from the socket but not yet handled. alive sees what is still in the
// kernel; a record tls.Conn read ahead along with the last answer (the
// node's close_notify sent right behind it, a second answer) is in
// tls.Conn's buffer instead, and the socket then looks quiet.
//
// A Read under an expired deadline handles exactly those records: the
// poller fails it before any read(2), so tls.Conn only goes through what
// it holds. A close_notify makes it io.EOF, application data makes it
// return bytes (unsolicited: the connection is not reused), and a
// post-handshake message (a TLS 1.3 NewSessionTicket, a KeyUpdate) is
// handled and then, with nothing more buffered, the read times out: the
// connection is fine. crypto/tls does not keep a timeout as the
// connection's error (readRecordOrCCS keeps only non-Temporary ones), so
// later reads work.
func tlsQuiet(tc *tls.Conn) bool {
	if tc.SetReadDeadline(time.Unix(1, 0)) != nil {
		return false
	}
	var b [1]byte
	n, err := tc.Read(b[:])
	if tc.SetReadDeadline(time.Time{}) != nil {
		return false
	}
	return n == 0 && errors.Is(err, os.ErrDeadlineExceeded)
}

// put keeps sc for the next request to its host.
func (t *syncTransport) put(sc *syncConn) {
	sc.idleSince = time.Now()
	t.mu.Lock()
	cs := t.idle[sc.key]
	// The oldest are first: those idle past idleFor go (a burst's
	// connections would otherwise be kept, dead, below the reused one).
	k := 0
	for ; k < len(cs) && sc.idleSince.Sub(cs[k].idleSince) > t.idleFor; k++ {
		cs[k].close()
	}
	cs = slices.Delete(cs, 0, k)
	full := len(cs) >= t.maxIdle
	if !full {
		cs = append(cs, sc)
	}
	t.idle[sc.key] = cs
	t.mu.Unlock()
	if full {
		sc.close()
	}
}

// syncBody is an answer's body read from the connection; read to its end,
// it gives the connection back for reuse; closed early or failed, the
// connection is closed.
type syncBody struct {
	rc   io.ReadCloser
	ctx  context.Context
	t    *syncTransport
	sc   *syncConn
	stop func() bool
	keep bool

	once sync.Once
}

func (b *syncBody) Read(p []byte) (int, error) {
	n, err := b.rc.Read(p)
	if err != nil {
		b.release(errors.Is(err, io.EOF))
		if !errors.Is(err, io.EOF) && b.ctx.Err() != nil {
			err = b.ctx.Err() // as net/http: the deadline, not "i/o timeout"
		}
	}
	return n, err
}

func (b *syncBody) Close() error {
	b.release(false)
	return nil
}

// release ends the connection's use by this answer: back to the pool when
// the body was read to its end and nothing cut it short.
func (b *syncBody) release(complete bool) {
	b.once.Do(func() {
		stopped := b.stop() // false: ctx ended, the deadline is set
		if complete && stopped && b.keep {
			b.sc.c.SetDeadline(time.Time{})
			b.t.put(b.sc)
			return
		}
		b.sc.close()
	})
}
