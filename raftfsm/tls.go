package raftfsm

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// TLS is a node's certificate, its key and the cluster's CA, read from
// files and read again by Reload (SIGHUP). Every listener and dialer built
// from it asks for the current files at each handshake, so a renewed
// certificate takes effect without a restart, and connections already
// open keep the certificate they started with.
//
// One CA is the trust boundary of a cluster (docs/DESIGN.md invariant 8):
// only a peer holding a certificate it signed speaks raft, so it must sign
// nothing but this cluster's nodes and operators.
type TLS struct {
	certFile, keyFile, caFile string
	// hosts are this node's advertised hosts, which other nodes dial and
	// check its certificate against.
	hosts  []string
	log    *slog.Logger
	cur    atomic.Pointer[tlsMaterial]
	reload sync.Mutex

	// watchers are told of every reload that changed the files (the raft
	// transport: it closes connections the new CA no longer trusts).
	watchMu  sync.Mutex
	watchers map[int]func(old, cur *tlsMaterial)
	nextID   int

	// dialled are the open connections DialTLSContext made: HTTP between
	// nodes (request forwarding, health probes, join checks). An
	// http.Transport keeps them pooled for as long as they work, so a
	// reload that changes the CAs closes those whose peer's certificate
	// the new ones do not verify: the next request dials, and verifies
	// against the new CAs.
	dialled tlsConns
}

type tlsMaterial struct {
	cert       tls.Certificate
	pool       *x509.CertPool
	notAfter   time.Time
	caNotAfter time.Time // the earliest expiry of the CAs in the CA file
}

// ErrTLS marks a certificate, key or CA file that cannot be used.
var ErrTLS = errors.New("raftfsm: tls")

// LoadTLS reads a node's certificate and key (PEM) and the CA (PEM, one
// or more certificates) that signed every node's certificate. The node's
// certificate must be valid now, signed by that CA, good for a node's
// uses (server and client), and valid for each of hosts (the node's
// advertised addresses' hosts, which the other nodes check it against),
// when it reloads too.
func LoadTLS(certFile, keyFile, caFile string, log *slog.Logger, hosts ...string) (*TLS, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	t := &TLS{certFile: certFile, keyFile: keyFile, caFile: caFile, log: log, hosts: hosts}
	m, err := t.read()
	if err != nil {
		return nil, err
	}
	t.cur.Store(m)
	return t, nil
}

// Reload reads the files again. When they are not usable (a half-written
// renewal, a key that does not match) it keeps the certificates in use and
// returns why.
func (t *TLS) Reload() error {
	t.reload.Lock()
	defer t.reload.Unlock()
	m, err := t.read()
	if err != nil {
		return err
	}
	old := t.cur.Swap(m)
	if trustChanged(old, m) {
		if n, _ := t.dialled.cut(m.pool, false); n > 0 {
			t.log.Warn("closed connections to other nodes' HTTP API whose certificate the reloaded --tls-ca-file no longer trusts", "connections", n)
		}
	}
	t.watchMu.Lock()
	defer t.watchMu.Unlock()
	for _, fn := range t.watchers {
		fn(old, m)
	}
	return nil
}

// onReload calls fn after each successful Reload with the material it
// replaced and the new one; the returned func stops that.
func (t *TLS) onReload(fn func(old, cur *tlsMaterial)) (stop func()) {
	t.watchMu.Lock()
	defer t.watchMu.Unlock()
	if t.watchers == nil {
		t.watchers = map[int]func(old, cur *tlsMaterial){}
	}
	id := t.nextID
	t.nextID++
	t.watchers[id] = fn
	return func() {
		t.watchMu.Lock()
		defer t.watchMu.Unlock()
		delete(t.watchers, id)
	}
}

// OnCAChange calls fn after each Reload that changed the CAs trusted
// (the HTTP API closes connections whose client certificate the new CAs
// do not verify); the returned func stops that.
func (t *TLS) OnCAChange(fn func()) (stop func()) {
	return t.onReload(func(old, cur *tlsMaterial) {
		if trustChanged(old, cur) {
			fn()
		}
	})
}

// Trusts reports whether a peer's certificate chain (leaf first, as in
// tls.ConnectionState.PeerCertificates) verifies against the CAs in use.
func (t *TLS) Trusts(certs []*x509.Certificate) bool { return peerTrusted(certs, t.cur.Load().pool) }

// trustChanged reports whether b trusts other CAs than a.
func trustChanged(a, b *tlsMaterial) bool { return !a.pool.Equal(b.pool) }

// certChanged reports whether b presents another certificate than a.
func certChanged(a, b *tlsMaterial) bool {
	return !slices.EqualFunc(a.cert.Certificate, b.cert.Certificate, func(x, y []byte) bool { return string(x) == string(y) })
}

// peerTrusted reports whether the certificate chain a peer presented
// still verifies against pool (and is still valid now).
func peerTrusted(certs []*x509.Certificate, pool *x509.CertPool) bool {
	if len(certs) == 0 {
		return false
	}
	inter := x509.NewCertPool()
	for _, c := range certs[1:] {
		inter.AddCert(c)
	}
	_, err := certs[0].Verify(x509.VerifyOptions{Roots: pool, Intermediates: inter, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}})
	return err == nil
}

// NotAfter is when the certificate in use expires.
func (t *TLS) NotAfter() time.Time { return t.cur.Load().notAfter }

// CANotAfter is when the first of the CAs in the CA file in use expires.
func (t *TLS) CANotAfter() time.Time { return t.cur.Load().caNotAfter }

// Files names the certificate, key and CA files, for messages.
func (t *TLS) Files() (cert, key, ca string) { return t.certFile, t.keyFile, t.caFile }

func (t *TLS) read() (*tlsMaterial, error) {
	cert, err := tls.LoadX509KeyPair(t.certFile, t.keyFile)
	if err != nil {
		return nil, fmt.Errorf("%w: certificate %s with key %s: %w", ErrTLS, t.certFile, t.keyFile, err)
	}
	leaf := cert.Leaf
	if leaf == nil {
		if leaf, err = x509.ParseCertificate(cert.Certificate[0]); err != nil {
			return nil, fmt.Errorf("%w: certificate %s: %w", ErrTLS, t.certFile, err)
		}
	}
	pool, caNotAfter, leaves, err := readCAs(t.caFile)
	if err != nil {
		return nil, err
	}
	if len(leaves) > 0 {
		// A node's own certificate given as the CA (a CLI walk): Go takes
		// any certificate in the pool as an anchor, so it loads, and then
		// only peers presenting that very certificate are trusted.
		t.log.Warn("--tls-ca-file holds a certificate that is not a CA: only peers presenting that very certificate are trusted, so a node with another certificate cannot speak raft or join; give the CA that signed every node's certificate (idem tls ca)",
			"tls-ca-file", t.caFile, "not-ca", strings.Join(leaves, "; "))
	}
	inter := x509.NewCertPool()
	for _, der := range cert.Certificate[1:] {
		if c, err := x509.ParseCertificate(der); err == nil {
			inter.AddCert(c)
		}
	}
	if _, err := leaf.Verify(x509.VerifyOptions{
		Roots: pool, Intermediates: inter, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny},
	}); err != nil {
		// Expired, not yet valid, or from another CA: other nodes would
		// refuse it, so refuse it here with the reason.
		return nil, fmt.Errorf("%w: certificate %s does not verify against --tls-ca-file %s: %w", ErrTLS, t.certFile, t.caFile, err)
	}
	// Another node's certificate, or an operator's (client use only),
	// loaded and reloaded without a word: the other nodes refused it, and
	// this node logged their refusals as if theirs were wrong (an attack
	// on TLS: the wrong file copied in a renewal).
	if err := nodeUse(leaf); err != nil {
		return nil, fmt.Errorf("%w: certificate %s %w: make one with idem tls cert for this node's addresses", ErrTLS, t.certFile, err)
	}
	for _, h := range t.hosts {
		if err := leaf.VerifyHostname(h); err != nil {
			// The flag to give, not only "this node's addresses": a
			// certificate made without --ip is for 127.0.0.1 alone, and an
			// operator renewing one at 3 am was left to work out which.
			san := "--dns " + h
			if net.ParseIP(h) != nil {
				san = "--ip " + h
			}
			return nil, fmt.Errorf("%w: certificate %s is not valid for %s, this node's address, which the other nodes check it against (%w): is it another node's? Make one with idem tls cert for this node's addresses (%s, and each other address it is reached at, as --ip or --dns)", ErrTLS, t.certFile, h, err, san)
		}
	}
	return &tlsMaterial{cert: cert, pool: pool, notAfter: leaf.NotAfter, caNotAfter: caNotAfter}, nil
}

// readCAFile reads a PEM file of one or more CA certificates.
func readCAFile(path string) (*x509.CertPool, error) {
	pool, _, _, err := readCAs(path)
	return pool, err
}

// readCAs reads a PEM file of one or more CA certificates, when the first
// of them to expire does, and the subjects of those that are not CA
// certificates (a node's own certificate given as the CA).
func readCAs(path string) (*x509.CertPool, time.Time, []string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, time.Time{}, nil, fmt.Errorf("%w: CA file: %w", ErrTLS, err)
	}
	pool := x509.NewCertPool()
	var first time.Time
	var notCA []string
	n := 0
	for rest := b; ; {
		var blk *pem.Block
		blk, rest = pem.Decode(rest)
		if blk == nil {
			break
		}
		if blk.Type != "CERTIFICATE" {
			continue
		}
		c, err := x509.ParseCertificate(blk.Bytes)
		if err != nil {
			return nil, time.Time{}, nil, fmt.Errorf("%w: CA file %s: %w", ErrTLS, path, err)
		}
		if !c.BasicConstraintsValid || !c.IsCA {
			notCA = append(notCA, c.Subject.String())
		}
		pool.AddCert(c)
		if n == 0 || c.NotAfter.Before(first) {
			first = c.NotAfter
		}
		n++
	}
	if n == 0 {
		return nil, time.Time{}, nil, fmt.Errorf("%w: CA file %s holds no PEM certificate", ErrTLS, path)
	}
	return pool, first, notCA, nil
}

// ServerConfig is for a listener of the HTTP API: TLS 1.2 or later (API
// clients may be older than the nodes), HTTP/1.1, and client certificates
// as clientAuth says, verified against the CA.
func (t *TLS) ServerConfig(clientAuth tls.ClientAuthType) *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		NextProtos: []string{"http/1.1"},
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			m := t.cur.Load()
			return &tls.Config{
				MinVersion:   tls.VersionTLS12,
				NextProtos:   []string{"http/1.1"},
				Certificates: []tls.Certificate{m.cert},
				ClientCAs:    m.pool,
				ClientAuth:   clientAuth,
			}, nil
		},
	}
}

// ClientConfig is for one connection from this node to another (HTTP
// between nodes, raft) at host: it presents this node's certificate and
// accepts only a server whose certificate the CA signed for host (an IP
// SAN when host is an IP).
func (t *TLS) ClientConfig(host string) *tls.Config {
	return t.cur.Load().clientConfig(host)
}

func (m *tlsMaterial) clientConfig(host string) *tls.Config {
	return &tls.Config{
		MinVersion:   tls.VersionTLS12,
		ServerName:   host,
		RootCAs:      m.pool,
		Certificates: []tls.Certificate{m.cert},
	}
}

// raftServerConfig is mutual TLS 1.3 for the raft port: the peer must
// present a certificate the CA signed for a node (server and client use),
// not merely an operator's client certificate. used, when not nil, is
// told which files the handshake used.
func (t *TLS) raftServerConfig(used func(*tlsMaterial)) *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS13,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			m := t.cur.Load()
			if used != nil {
				used(m)
			}
			return &tls.Config{
				MinVersion:       tls.VersionTLS13,
				Certificates:     []tls.Certificate{m.cert},
				ClientCAs:        m.pool,
				ClientAuth:       tls.RequireAndVerifyClientCert,
				VerifyConnection: requireNodeCert,
			}, nil
		},
	}
}

func (t *TLS) raftClientConfig(host string) *tls.Config {
	return t.cur.Load().raftClientConfig(host)
}

func (m *tlsMaterial) raftClientConfig(host string) *tls.Config {
	c := m.clientConfig(host)
	c.MinVersion = tls.VersionTLS13
	return c
}

// nodeUse says why a node's own certificate is not good for both of a
// node's uses, serving and dialling, or nil. (A certificate without
// extended key usage is good for any use, as x509 has it.)
func nodeUse(leaf *x509.Certificate) error {
	if len(leaf.ExtKeyUsage) == 0 || slices.Contains(leaf.ExtKeyUsage, x509.ExtKeyUsageAny) {
		return nil
	}
	if !slices.Contains(leaf.ExtKeyUsage, x509.ExtKeyUsageServerAuth) {
		return errors.New("is not a node certificate: it has no server use (an operator's client certificate?)")
	}
	if !slices.Contains(leaf.ExtKeyUsage, x509.ExtKeyUsageClientAuth) {
		return errors.New("is not a node certificate: it has no client use, which raft's mutual TLS between nodes needs")
	}
	return nil
}

// requireNodeCert refuses a verified peer whose certificate is not a
// node's: `idem tls cert` gives nodes server and client use, operators'
// certificates client use only. (A certificate without extended key
// usage is good for any use, as x509 has it.)
func requireNodeCert(cs tls.ConnectionState) error {
	if len(cs.PeerCertificates) == 0 {
		return errors.New("raftfsm: raft peer presented no certificate")
	}
	leaf := cs.PeerCertificates[0]
	if len(leaf.ExtKeyUsage) > 0 && !slices.Contains(leaf.ExtKeyUsage, x509.ExtKeyUsageServerAuth) && !slices.Contains(leaf.ExtKeyUsage, x509.ExtKeyUsageAny) {
		return fmt.Errorf("raftfsm: raft peer's certificate %q is not a node certificate (no server use)", leaf.Subject.CommonName)
	}
	return nil
}

// HasVerifiedClientCert reports whether a TLS connection's client
// presented a certificate the CA signed.
func HasVerifiedClientCert(cs *tls.ConnectionState) bool {
	return cs != nil && len(cs.VerifiedChains) > 0
}

// DialTLSContext returns a dial function for an http.Transport between
// nodes: TCP through d, then a TLS handshake with the current files. A
// failed handshake is reported as a failed dial, since no request reached
// the other node (callers retry those on another leader). A reload that
// changes the CAs closes the connections it made whose server the new CAs
// do not verify, idle or not (cutDialled).
func (t *TLS) DialTLSContext(d *net.Dialer) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		raw, err := d.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		host, _, err := net.SplitHostPort(addr)
		if err != nil {
			raw.Close()
			return nil, err
		}
		m := t.cur.Load()
		c := tls.Client(raw, m.clientConfig(host))
		if err := c.HandshakeContext(ctx); err != nil {
			raw.Close()
			return nil, &net.OpError{Op: "dial", Net: network, Addr: raw.RemoteAddr(), Err: fmt.Errorf("tls handshake: %w", err)}
		}
		if !t.dialled.track(t, c, m, false) {
			c.Close()
			return nil, &net.OpError{Op: "dial", Net: network, Addr: raw.RemoteAddr(), Err: errors.New("tls handshake: the server's certificate is not trusted by the reloaded CA file")}
		}
		return &trackedConn{Conn: c, set: &t.dialled}, nil
	}
}

// tlsConns are open TLS connections that a reload may cut: raft's, both
// ways, and the HTTP connections this node dials to other nodes. Each is
// kept for as long as it works, so without the cut it would outlive the
// CA that let it in, or the certificate it was dialled with.
type tlsConns struct {
	mu   sync.Mutex
	live map[*tls.Conn]bool // true: dialled again when this node's certificate changes
}

// track adds c, whose handshake used the files of m, unless t's files were
// reloaded meanwhile and the peer's certificate is not trusted any more,
// or c is one to dial again (redial) and was dialled with a certificate
// since replaced; then the caller closes it. A reload stores the new files
// before it cuts (under mu), so a handshake that finished with the old
// ones is either seen by the cut or sees the new files here.
func (s *tlsConns) track(t *TLS, c *tls.Conn, m *tlsMaterial, redial bool) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if cur := t.cur.Load(); m != nil && cur != m {
		if trustChanged(m, cur) && !peerTrusted(c.ConnectionState().PeerCertificates, cur.pool) {
			return false
		}
		if redial && certChanged(m, cur) {
			return false
		}
	}
	if s.live == nil {
		s.live = map[*tls.Conn]bool{}
	}
	s.live[c] = redial
	return true
}

func (s *tlsConns) untrack(c *tls.Conn) {
	s.mu.Lock()
	delete(s.live, c)
	s.mu.Unlock()
}

// cut closes the connections whose peer's certificate chain does not
// verify against pool and, with redial, every one tracked to be dialled
// again; it returns how many of each. It closes the TCP connection under
// each: a TLS close would first send the peer an alert, which can wait
// seconds on a peer that does not read.
func (s *tlsConns) cut(pool *x509.CertPool, redial bool) (untrusted, redialled int) {
	var cut []*tls.Conn
	s.mu.Lock()
	for c, again := range s.live {
		switch {
		case !peerTrusted(c.ConnectionState().PeerCertificates, pool):
			untrusted++
		case redial && again:
			redialled++
		default:
			continue
		}
		delete(s.live, c)
		cut = append(cut, c)
	}
	s.mu.Unlock()
	for _, c := range cut {
		c.NetConn().Close()
	}
	return untrusted, redialled
}

// trackedConn is a connection in a tlsConns until it closes.
type trackedConn struct {
	*tls.Conn
	set *tlsConns
}

func (c *trackedConn) Close() error {
	c.set.untrack(c.Conn)
	return c.Conn.Close()
}
