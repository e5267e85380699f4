package client

// HTTPS through the Client's own transport (transport.go): the same code
// as plain HTTP after the handshake, so the plain tests run over both
// (forEachScheme); the tests here are TLS's own.

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// testScheme is plain HTTP or HTTPS for a test: its servers and
// transports speak it.
type testScheme struct {
	name string
	tls  bool
}

// forEachScheme runs f over plain HTTP, then over HTTPS.
func forEachScheme(t *testing.T, f func(t *testing.T, s testScheme)) {
	for _, s := range []testScheme{{"http", false}, {"https", true}} {
		t.Run(s.name, func(t *testing.T) { f(t, s) })
	}
}

// testTLS is httptest's certificate (for 127.0.0.1) as a server's
// config, and a client config that trusts it.
var testTLS = sync.OnceValues(func() (server, client *tls.Config) {
	s := httptest.NewUnstartedServer(http.NotFoundHandler())
	s.StartTLS()
	defer s.Close()
	pool := x509.NewCertPool()
	pool.AddCert(s.Certificate())
	return &tls.Config{Certificates: s.TLS.Certificates}, &tls.Config{RootCAs: pool}
})

func testServerTLS() *tls.Config { s, _ := testTLS(); return s.Clone() }
func testClientTLS() *tls.Config { _, c := testTLS(); return c.Clone() }

// clientTLS is the config a client of s's servers needs (nil for HTTP).
func (s testScheme) clientTLS() *tls.Config {
	if !s.tls {
		return nil
	}
	return testClientTLS()
}

// transport is a sync transport for s's servers.
func (s testScheme) transport() *syncTransport {
	return newSyncTransport(time.Second, s.clientTLS())
}

// client is a Client of url with the Client's default transport.
func (s testScheme) client(t *testing.T, url string, opts ...Option) *Client {
	t.Helper()
	if s.tls {
		opts = append(opts, WithTLS(testClientTLS()))
	}
	c, err := New(url, opts...)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := c.hc.Transport.(*syncTransport); !ok {
		t.Fatalf("default transport is %T", c.hc.Transport)
	}
	return c
}

// rawServer is rawServer over s: serve gets the TLS connection over TLS.
func (s testScheme) rawServer(t *testing.T, serve func(net.Conn)) string {
	t.Helper()
	if !s.tls {
		return rawServer(t, serve)
	}
	cfg := testServerTLS()
	url := rawServer(t, func(c net.Conn) { serve(tls.Server(c, cfg)) })
	return "https" + strings.TrimPrefix(url, "http")
}

// countingServer is newCountingServer over s. Over TLS the server offers
// h2 too, as a node does; the handler fails any request that is not
// HTTP/1.1.
func (s testScheme) countingServer(t *testing.T, h http.HandlerFunc) *countingServer {
	t.Helper()
	if !s.tls {
		return newCountingServer(t, h)
	}
	return tlsCountingServer(t, h, nil)
}

// tlsCountingServer counts a TLS server's connections and requests; it
// offers h2 too, as a node does, fails any request that is not HTTP/1.1,
// and lets tweak change its TLS config before it starts.
func tlsCountingServer(t *testing.T, h http.HandlerFunc, tweak func(*tls.Config)) *countingServer {
	t.Helper()
	cs := &countingServer{}
	cs.Server = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		cs.reqs.Add(1)
		if r.TLS == nil || r.ProtoMajor != 1 {
			http.Error(w, "want HTTP/1.1 over TLS, got "+r.Proto, http.StatusHTTPVersionNotSupported)
			return
		}
		h(w, r)
	}))
	cs.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		if st == http.StateNew {
			cs.conns.Add(1)
		}
	}
	cs.TLS = testServerTLS()
	cs.TLS.NextProtos = []string{"h2", "http/1.1"}
	if tweak != nil {
		tweak(cs.TLS)
	}
	cs.EnableHTTP2 = true
	cs.StartTLS()
	t.Cleanup(cs.Close)
	return cs
}

// closeWrite half-closes c, a *net.TCPConn or, over TLS, a *tls.Conn
// (close_notify).
func closeWrite(c net.Conn) { c.(interface{ CloseWrite() error }).CloseWrite() }

// Reuse is the point: 50 claims one after the other take one TLS
// handshake, with TLS 1.3 (whose session tickets come after the
// handshake and must not make the connection look unusable), TLS 1.2,
// and TLS 1.3 with client certificates (tickets after the client's
// Finished). The node offers h2 and gets HTTP/1.1.
func TestTLSTransportReusesConnections(t *testing.T) {
	for _, tc := range []struct {
		name   string
		server func(*tls.Config)
	}{
		{"tls13", func(*tls.Config) {}},
		{"tls12", func(c *tls.Config) { c.MaxVersion = tls.VersionTLS12 }},
		{"tls13-client-cert", func(c *tls.Config) {
			c.ClientAuth = tls.RequireAnyClientCert
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var handshakes atomic.Int64
			s := tlsCountingServer(t, echo, func(c *tls.Config) {
				c.VerifyConnection = func(tls.ConnectionState) error { handshakes.Add(1); return nil }
				tc.server(c)
			})

			cfg := testClientTLS()
			cfg.Certificates = s.TLS.Certificates // any certificate will do for RequireAnyClientCert
			c, err := New(s.URL, WithTLS(cfg))
			if err != nil {
				t.Fatal(err)
			}
			if _, ok := c.hc.Transport.(*syncTransport); !ok {
				t.Fatalf("default transport is %T", c.hc.Transport)
			}
			ctx := context.Background()
			for i := 0; i < 50; i++ {
				raw, err := c.Do(ctx, http.MethodPost, "/v1/claim", nil, map[string]int{"i": i})
				if err != nil || !bytes.Contains(raw, []byte(fmt.Sprintf(`{"i":%d}`, i))) {
					t.Fatalf("request %d: %s, %v", i, raw, err)
				}
				time.Sleep(time.Millisecond) // let anything the node sends late arrive
			}
			if n, h := s.conns.Load(), handshakes.Load(); n != 1 || h != 1 {
				t.Fatalf("50 requests one after the other: %d connections, %d handshakes; want 1 and 1", n, h)
			}

			// The answer carries the connection's TLS state, as net/http's.
			req, _ := http.NewRequest(http.MethodGet, s.URL+"/", nil)
			resp, err := c.hc.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.TLS == nil || resp.TLS.NegotiatedProtocol != "http/1.1" || !resp.TLS.HandshakeComplete {
				t.Fatalf("answer's TLS state %+v", resp.TLS)
			}
		})
	}
}

// An http:// and an https:// request to the same host:port never share a
// connection: a server that speaks both on one port (by the first byte)
// answers each on its own, and a request sent on the other kind would
// get no answer.
func TestTLSTransportPoolsBySchemeAndHost(t *testing.T) {
	cfg := testServerTLS()
	var conns atomic.Int64
	url := rawServer(t, func(c net.Conn) {
		conns.Add(1)
		defer c.Close()
		br := bufio.NewReader(c)
		first, err := br.Peek(1)
		if err != nil {
			return
		}
		var rw io.ReadWriter = struct {
			io.Reader
			io.Writer
		}{br, c}
		kind := "plain"
		if first[0] == 0x16 { // a TLS handshake record
			tc := tls.Server(&peekedConn{Conn: c, r: br}, cfg)
			rw, kind = tc, "tls"
			br = bufio.NewReader(tc)
		}
		for readHead(br) == nil {
			fmt.Fprintf(rw, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s", len(kind), kind)
		}
	})
	hostPort := strings.TrimPrefix(url, "http://")
	hc := &http.Client{Transport: newSyncTransport(time.Second, testClientTLS())}
	for i := 0; i < 10; i++ {
		for _, scheme := range []string{"http", "https"} {
			resp, err := hc.Get(scheme + "://" + hostPort + "/")
			if err != nil {
				t.Fatalf("%s request %d: %v", scheme, i, err)
			}
			b, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			want := map[string]string{"http": "plain", "https": "tls"}[scheme]
			if err != nil || string(b) != want {
				t.Fatalf("%s request %d: %q %v, want %q", scheme, i, b, err, want)
			}
		}
	}
	if n := conns.Load(); n != 2 {
		t.Fatalf("%d connections for 10 http and 10 https requests, want 2 (one each)", n)
	}
}

// peekedConn is a net.Conn whose first bytes were read into r.
type peekedConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *peekedConn) Read(p []byte) (int, error) { return c.r.Read(p) }

// holdConn passes writes through until hold, then keeps them until
// flush, which sends them in one write: two TLS records then come in one
// TCP segment, and the client reads both into tls.Conn's buffer at once.
type holdConn struct {
	net.Conn
	mu   sync.Mutex
	hold bool
	buf  []byte
}

func (c *holdConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.hold {
		c.buf = append(c.buf, p...)
		return len(p), nil
	}
	return c.Conn.Write(p)
}

func (c *holdConn) flush() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.hold = false
	c.Conn.SetWriteDeadline(time.Time{}) // tls.Conn's CloseWrite leaves one in the past
	_, err := c.Conn.Write(c.buf)
	c.buf = nil
	return err
}

// A node that answers and then ends the TLS connection at once: the
// close_notify may come in the answer's segment (read ahead into
// tls.Conn's buffer, the socket then empty, and the TCP connection still
// open), in a later one, or with the FIN. Each next claim must go on a
// new connection and get its own answer: written on the old one, it would
// reach a node that reads it and never answers (an unknown outcome for a
// claim the node did see). The same for a second, unsolicited answer
// read ahead with the first: it must not become the next request's.
func TestTLSTransportNodeEndsConnectionRightAfterAnswer(t *testing.T) {
	cfg := testServerTLS()
	for _, tc := range []struct {
		name string
		// after sends what follows the answer on hc, tc; then the
		// server reads on and counts requests it never answers.
		after func(hc *holdConn, tc *tls.Conn)
	}{
		{"close_notify in the answer's segment, TCP open", func(hc *holdConn, tc *tls.Conn) {
			tc.CloseWrite()
			hc.flush()
		}},
		{"close_notify later, TCP open", func(hc *holdConn, tc *tls.Conn) {
			hc.flush()
			time.Sleep(5 * time.Millisecond)
			tc.CloseWrite()
		}},
		{"close_notify and FIN at once", func(hc *holdConn, tc *tls.Conn) {
			hc.flush()
			tc.Close()
		}},
		{"unsolicited answer in the answer's segment", func(hc *holdConn, tc *tls.Conn) {
			io.WriteString(tc, "HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\nX")
			hc.flush()
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var conns, answered, unanswered atomic.Int64
			ended := make(chan struct{}, 1) // the node has sent what follows the answer
			url := rawServer(t, func(c net.Conn) {
				conns.Add(1)
				defer c.Close()
				hc := &holdConn{Conn: c}
				s := tls.Server(hc, cfg)
				br := bufio.NewReader(s)
				var body struct{ I int }
				if readRequest(br, &body) != nil {
					return
				}
				hc.mu.Lock()
				hc.hold = true
				hc.mu.Unlock()
				b := fmt.Sprintf(`{"i":%d}`, body.I)
				fmt.Fprintf(s, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(b), b)
				answered.Add(1)
				tc.after(hc, s)
				ended <- struct{}{}
				s.SetReadDeadline(time.Now().Add(2 * time.Second))
				for readRequest(br, &body) == nil {
					unanswered.Add(1)
				}
			})
			c := testScheme{"https", true}.client(t, "https"+strings.TrimPrefix(url, "http"))
			for i := 0; i < 20; i++ {
				ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
				raw, err := c.Do(ctx, http.MethodPost, "/v1/claim", nil, map[string]int{"i": i})
				cancel()
				if err != nil {
					t.Fatalf("claim %d: %v (the node's ended connection was reused; it saw %d requests it never answered)", i, err, unanswered.Load())
				}
				if want := fmt.Sprintf(`{"i":%d}`, i); string(raw) != want {
					t.Fatalf("claim %d got %s, want %s", i, raw, want)
				}
				// The next claim only once the node's end is on its way:
				// one racing it is an unknown outcome with any transport.
				select {
				case <-ended:
				case <-time.After(3 * time.Second):
					t.Fatal("the node never ended the connection")
				}
				time.Sleep(time.Millisecond)
			}
			if n, u := conns.Load(), unanswered.Load(); n != 20 || u != 0 {
				t.Fatalf("%d connections, %d requests written on an ended one; want 20 and 0", n, u)
			}
		})
	}
}

// readRequest reads one request with a JSON body into v.
func readRequest(br *bufio.Reader, v any) error {
	req, err := http.ReadRequest(br)
	if err != nil {
		return err
	}
	b, err := io.ReadAll(req.Body)
	if err != nil {
		return err
	}
	if len(b) > 0 {
		return json.Unmarshal(b, v)
	}
	return nil
}

// A certificate that does not verify fails the request with crypto/tls's
// error, readable as such (the text says certificate, errors.As finds
// *tls.CertificateVerificationError), and nothing is sent: the request
// was never delivered, so a Client of several nodes tries the next one,
// as it does when a connection cannot be made. net/http's Transport
// returned the same error but as possibly delivered.
func TestTLSTransportHandshakeFailureIsNeverDelivered(t *testing.T) {
	good := testScheme{"https", true}.countingServer(t, echo)
	// A node whose certificate the client does not trust.
	var badReqs atomic.Int64
	bad := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { badReqs.Add(1); echo(w, r) }))
	bad.TLS = &tls.Config{Certificates: []tls.Certificate{selfSigned(t)}}
	bad.StartTLS()
	defer bad.Close()

	// A wrong CA: httptest's certificate, checked against an empty pool.
	cfg := &tls.Config{RootCAs: x509.NewCertPool()}
	c, err := New(good.URL, WithTLS(cfg))
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Do(context.Background(), http.MethodPost, "/v1/claim", nil, map[string]int{})
	var cv *tls.CertificateVerificationError
	if err == nil || !strings.Contains(err.Error(), "certificate") || !errors.As(err, &cv) || !neverDelivered(err) {
		t.Fatalf("unknown CA: got %v (certificate error %v, never delivered %v)", err, errors.As(err, &cv), neverDelivered(err))
	}
	t.Logf("unknown CA: %v", err)
	if n := good.reqs.Load(); n != 0 {
		t.Fatalf("the node saw %d requests", n)
	}

	// A server that is not TLS: never delivered either.
	plain := newCountingServer(t, echo)
	_, err = (&http.Client{Transport: newSyncTransport(time.Second, testClientTLS())}).Post("https"+strings.TrimPrefix(plain.URL, "http")+"/v1/claim", "application/json", strings.NewReader("{}"))
	if err == nil || !neverDelivered(err) || plain.reqs.Load() != 0 {
		t.Fatalf("TLS to a plain HTTP server: %v (never delivered %v), %d requests seen", err, neverDelivered(err), plain.reqs.Load())
	}

	// A handshake without an answer ends with the caller's context...
	silent := rawServer(t, func(c net.Conn) {
		defer c.Close()
		io.Copy(io.Discard, c)
	})
	silentTLS := "https" + strings.TrimPrefix(silent, "http")
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, silentTLS+"/v1/claim", strings.NewReader("{}"))
	start := time.Now()
	_, err = newSyncTransport(time.Second, testClientTLS()).RoundTrip(req)
	if !errors.Is(err, context.DeadlineExceeded) || !neverDelivered(err) || time.Since(start) > 2*time.Second {
		t.Fatalf("silent node, context deadline: %v after %s", err, time.Since(start))
	}
	// ... or with the transport's handshake bound (net/http's
	// TLSHandshakeTimeout) when the context has none.
	tr := newSyncTransport(time.Second, testClientTLS())
	tr.handshake = 200 * time.Millisecond
	req, _ = http.NewRequest(http.MethodPost, silentTLS+"/v1/claim", strings.NewReader("{}"))
	_, err = tr.RoundTrip(req)
	var ne net.Error
	if err == nil || !errors.As(err, &ne) || !ne.Timeout() || !neverDelivered(err) || errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("silent node, handshake bound: %v", err)
	}

	// Two nodes, the first one's certificate not trusted: the claim goes
	// to the second, once; the first sees nothing.
	two, err := New(bad.URL+","+good.URL, WithTLS(testClientTLS()))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := two.Do(context.Background(), http.MethodPost, "/v1/claim", nil, map[string]int{}); err != nil {
		t.Fatalf("two nodes, the first untrusted: %v", err)
	}
	if b, g := badReqs.Load(), good.reqs.Load(); b != 0 || g != 1 {
		t.Fatalf("untrusted node saw %d requests, trusted %d; want 0 and 1", b, g)
	}
}

// selfSigned is a certificate for 127.0.0.1 that no test CA signed.
func selfSigned(t *testing.T) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// netHTTP is net/http's Transport as the Client configures it, for s's
// servers: what the sync transport is compared with.
func (s testScheme) netHTTP() *http.Transport {
	tr := newTransport(time.Second)
	tr.TLSClientConfig = s.clientTLS()
	return tr
}

// Through a proxy (HTTPS_PROXY and the like) an https:// request still
// goes through net/http's Transport, which speaks CONNECT to the proxy.
func TestTLSTransportProxiedRequestsGoThroughNetHTTP(t *testing.T) {
	var connects atomic.Int64
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodConnect {
			connects.Add(1)
		}
		http.Error(w, "no", http.StatusForbidden)
	}))
	defer proxy.Close()
	node := testScheme{"https", true}.countingServer(t, echo)
	tr := newSyncTransport(time.Second, testClientTLS())
	tr.fallback.Proxy = func(*http.Request) (*url.URL, error) { return url.Parse(proxy.URL) }
	resp, err := (&http.Client{Transport: tr}).Get(node.URL + "/")
	if err == nil {
		resp.Body.Close()
	}
	if connects.Load() != 1 || node.reqs.Load() != 0 {
		t.Fatalf("proxied https request: %d CONNECTs at the proxy, %d requests at the node (err %v)", connects.Load(), node.reqs.Load(), err)
	}
}

// A node (or something between) that sends a second, unsolicited answer
// behind the first, in a TLS record whose first bytes come in the
// answer's segment and the rest later (a record larger than a segment,
// a proxy that streams): the client reads those first bytes into
// tls.Conn's buffer along with the answer, where neither the socket's
// peek nor tlsQuiet (which only handles whole records) saw them. Bug: the
// connection was reused, and the next claim read the rest of that record
// as its answer: another request's, here {"i":-1}. Plain HTTP sees any
// byte of it (buffered, or in the socket) and never reuses it.
func TestTLSTransportPartialRecordReadAheadIsNotReused(t *testing.T) {
	cfg := testServerTLS()
	var conns, stale atomic.Int64
	url := rawServer(t, func(c net.Conn) {
		conns.Add(1)
		defer c.Close()
		hc := &holdConn{Conn: c}
		s := tls.Server(hc, cfg)
		br := bufio.NewReader(s)
		var body struct{ I int }
		if readRequest(br, &body) != nil {
			return
		}
		for {
			hc.mu.Lock()
			hc.hold = true
			hc.mu.Unlock()
			b := fmt.Sprintf(`{"i":%d}`, body.I)
			fmt.Fprintf(s, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(b), b)
			hc.mu.Lock()
			first := len(hc.buf) // the answer's record
			hc.mu.Unlock()
			io.WriteString(s, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 8\r\n\r\n{\"i\":-1}")
			hc.mu.Lock()
			rec := hc.buf
			hc.buf, hc.hold = nil, false
			hc.mu.Unlock()
			// The answer and 10 bytes of the unsolicited record, then the
			// rest once a next request came on this connection.
			if _, err := c.Write(rec[:first+10]); err != nil {
				return
			}
			if readRequest(br, &body) != nil {
				return
			}
			stale.Add(1)
			if _, err := c.Write(rec[first+10:]); err != nil {
				return
			}
		}
	})
	c := testScheme{"https", true}.client(t, "https"+strings.TrimPrefix(url, "http"))
	for i := 0; i < 10; i++ {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		raw, err := c.Do(ctx, http.MethodPost, "/v1/claim", nil, map[string]int{"i": i})
		cancel()
		if want := fmt.Sprintf(`{"i":%d}`, i); err != nil || string(raw) != want {
			t.Fatalf("claim %d got %s, %v; want %s (%d requests written on a connection holding part of an unsolicited answer)", i, raw, err, want, stale.Load())
		}
		time.Sleep(5 * time.Millisecond) // the unsolicited record's first bytes are in
	}
	if n, s := conns.Load(), stale.Load(); n != 10 || s != 0 {
		t.Fatalf("%d connections, %d requests written on one holding part of an unsolicited answer; want 10 and 0", n, s)
	}
}
