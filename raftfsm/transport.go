package raftfsm

import (
	"container/list"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"

	"github.com/idem-store/idem/internal/mono"
)

// streamLayer is raft's TCP stream layer with two changes: outgoing dials
// are bound to this node's own IP, so on one machine with nodes on
// 127.0.0.1/2/3 each node's traffic carries its own source address and
// iptables rules can cut links between them (docs/DESIGN.md pitfalls);
// and with TLS every connection, both ways, is mutual TLS 1.3 against the
// cluster's CA, so a peer without a node certificate from that CA cannot
// send raft a single message.
type streamLayer struct {
	net.Listener
	advertise net.Addr
	dialer    net.Dialer
	tls       *TLS // nil: plain TCP
	log       *slog.Logger

	// slots bounds the inbound connections open at once: a peer opening
	// thousands and sending nothing took every file descriptor of the
	// process, and the HTTP listener's accepts failed with them (an
	// attack on loopback). Past the bound, the oldest pending connection
	// (below) is closed for a new one; when none is pending, connections
	// wait in the kernel's backlog until one closes. firstByte is how long an
	// accepted connection may stay silent before its first byte (with
	// TLS, its handshake).
	slots     chan struct{}
	firstByte time.Duration
	// pending are the accepted connections that have not yet shown they
	// are a peer (plaintext: no first byte; TLS: no finished handshake),
	// oldest first. When every slot is held, the oldest of them is closed
	// for the connection just accepted: an attacker who opens connections
	// faster than they time out held every slot, and a real peer's
	// connection waited in the backlog behind the attacker's until raft's
	// dial timed out (a restarted member never rejoined while it lasted).
	pendingMu     sync.Mutex
	pending       list.List // of *slotConn
	evicted       atomic.Int64
	evictedLogged mono.Spacer
	done          chan struct{}
	closeOnce     sync.Once
	// notRaftLogged spaces the log of connections that spoke HTTP: once a
	// minute is enough to name the mistake.
	notRaftLogged mono.Spacer
	// tlsPeerLogged spaces the log of TLS handshakes on a plaintext port.
	tlsPeerLogged mono.Spacer
	// refusedLogged and silentLogged space the logs of refused TLS
	// handshakes and of connections closed for sending nothing: anyone who
	// reaches the raft port makes one of each per connection, thousands a
	// second (2 lines each, 1 MB of log a second, before they were spaced).
	// Refusals are spaced per remote host: one a minute from a scanner
	// must not be the only line while a member is refused for its
	// certificate. refused and silent count those not logged.
	refusedLogged   keySpacer
	silentLogged    mono.Spacer
	refused, silent atomic.Int64

	// conns are the open TLS connections, both ways, with a finished
	// handshake, those dialled by this node to be dialled again when its
	// certificate changes (tlsConns): raft keeps connections open for as
	// long as they work.
	conns tlsConns
}

// handshakeTimeout bounds a TLS handshake on the raft port, so a peer that
// connects and says nothing holds a connection only that long; a plaintext
// connection gets as long for its first byte.
const handshakeTimeout = 10 * time.Second

// DefaultMaxInboundRaftConns bounds the raft connections peers hold open
// to this node (Config.MaxInboundRaftConns). Each peer keeps a handful (a
// pool of 3 per target, plus snapshot streams), so 256
// serves dozens of members.
const DefaultMaxInboundRaftConns = 256

// newStreamLayer listens on bind, or takes ln when the caller opened it.
func newStreamLayer(bind, advertise string, ln net.Listener, t *TLS, log *slog.Logger) (*streamLayer, error) {
	if ln == nil {
		var err error
		if ln, err = net.Listen("tcp", bind); err != nil {
			return nil, fmt.Errorf("raftfsm: listen on raft address %s: %w", bind, err)
		}
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	adv, err := advertiseAddr(advertise, ln, log)
	if err != nil {
		ln.Close()
		return nil, err
	}
	s := &streamLayer{Listener: ln, advertise: adv, tls: t, log: log,
		slots: make(chan struct{}, DefaultMaxInboundRaftConns), firstByte: handshakeTimeout, done: make(chan struct{})}
	if tcp, ok := ln.Addr().(*net.TCPAddr); ok && !tcp.IP.IsUnspecified() {
		s.dialer.LocalAddr = &net.TCPAddr{IP: tcp.IP}
	}
	return s, nil
}

func (s *streamLayer) Addr() net.Addr { return s.advertise }

// namedAddr is a raft address advertised as a host name: raft records
// and dials it as written, so every dial resolves the name again and a
// TLS peer checks the name against its certificate's DNS names.
type namedAddr string

func (a namedAddr) Network() string { return "tcp" }
func (a namedAddr) String() string  { return string(a) }

// advertiseAddr is the raft address other nodes are told to dial. An IP
// is advertised in its canonical form; a host name is kept as given: raft
// records the advertised address in the cluster's configuration, and a
// name resolved to its IP there was checked against DNS-only
// certificates, which cannot match it, and never followed the name to a
// new IP. A name that does not resolve yet is advertised all the same,
// with a warning: a Kubernetes headless service publishes a pod's name
// only once the pod is ready, which a node refusing to start without it
// never is.
func advertiseAddr(advertise string, ln net.Listener, log *slog.Logger) (net.Addr, error) {
	host, port, err := net.SplitHostPort(advertise)
	if err != nil {
		return nil, fmt.Errorf("%w: raft advertise address %q: %w", ErrConfig, advertise, err)
	}
	p, err := net.LookupPort("tcp", port)
	if err != nil {
		return nil, fmt.Errorf("%w: raft advertise address %q: %w", ErrConfig, advertise, err)
	}
	if p == 0 {
		// Port 0 asks the kernel for a free port (tests): advertise the one bound.
		p = ln.Addr().(*net.TCPAddr).Port
	}
	if host == "" || net.ParseIP(host) != nil {
		adv, err := net.ResolveTCPAddr("tcp", net.JoinHostPort(host, strconv.Itoa(p)))
		if err != nil {
			return nil, fmt.Errorf("%w: raft advertise address %q: %w", ErrConfig, advertise, err)
		}
		if adv.IP == nil || adv.IP.IsUnspecified() {
			return nil, fmt.Errorf("%w: raft advertise address %q must name a routable IP", ErrConfig, advertise)
		}
		return adv, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ips, err := net.DefaultResolver.LookupIP(ctx, "ip", host)
	if err != nil {
		log.Warn("the raft advertise address's name does not resolve here (yet): it is advertised as it is, and the other nodes reach this node only once it resolves for them", "raft-advertise", advertise, "error", err)
	}
	for _, ip := range ips {
		if ip.IsUnspecified() {
			return nil, fmt.Errorf("%w: raft advertise address %q must name a routable IP: %s resolves to %s", ErrConfig, advertise, host, ip)
		}
	}
	return namedAddr(net.JoinHostPort(host, strconv.Itoa(p))), nil
}

func (s *streamLayer) Accept() (net.Conn, error) {
	select {
	case <-s.done:
		return nil, net.ErrClosed
	default:
	}
	c, err := s.Listener.Accept()
	if err != nil {
		return nil, err
	}
	select {
	case s.slots <- struct{}{}:
	default:
		// Every slot is held. The oldest connection that has not shown it
		// is a peer gives its slot up to this one; when all are peers',
		// this one waits (one descriptor past the bound).
		s.evictOldest(c.RemoteAddr())
		select {
		case s.slots <- struct{}{}:
		case <-s.done:
			c.Close()
			return nil, net.ErrClosed
		}
	}
	sc := &slotConn{Conn: c, free: s.slots, layer: s}
	s.pendingMu.Lock()
	sc.elem = s.pending.PushBack(sc)
	s.pendingMu.Unlock()
	if s.tls == nil {
		// Until its first byte: a handshake's deadline, plaintext.
		c.SetReadDeadline(time.Now().Add(s.firstByte))
		sc.silent = true
		return sc, nil
	}
	srv := &serverConn{log: s.log, layer: s, slot: sc}
	srv.Conn = tls.Server(sc, s.tls.raftServerConfig(func(m *tlsMaterial) { srv.used = m }))
	return srv, nil
}

// Close stops Accept, also one waiting for a slot.
func (s *streamLayer) Close() error {
	s.closeOnce.Do(func() { close(s.done) })
	return s.Listener.Close()
}

// evictOldest closes the oldest pending connection, whose Close frees its
// slot, and logs it at most once a minute.
func (s *streamLayer) evictOldest(newcomer net.Addr) {
	s.pendingMu.Lock()
	e := s.pending.Front()
	var sc *slotConn
	if e != nil {
		sc = s.pending.Remove(e).(*slotConn)
		sc.elem = nil
		sc.evicted.Store(true)
	}
	s.pendingMu.Unlock()
	if sc == nil {
		return
	}
	sc.Close()
	n := s.evicted.Add(1)
	if !s.evictedLogged.Allow(time.Minute) {
		return
	}
	s.evicted.Add(-n)
	s.log.Warn("the raft port's connections were all held: closed the oldest that had not yet shown it is a peer (no first byte, or no finished TLS handshake), for a new one (a flood of connections, or many peers connecting at once); logged at most once a minute",
		"closed", sc.RemoteAddr().String(), "for", newcomer.String(), "evicted", n, "max-conns", cap(s.slots))
}

// proven takes c off the pending list: it spoke raft (plaintext) or
// finished its TLS handshake, and is not closed for a newcomer.
func (s *streamLayer) proven(c *slotConn) {
	s.pendingMu.Lock()
	if c.elem != nil {
		s.pending.Remove(c.elem)
		c.elem = nil
	}
	s.pendingMu.Unlock()
}

// slotConn gives its slot back once closed, and clears the first-byte
// deadline once a byte has come.
type slotConn struct {
	net.Conn
	free    chan struct{}
	once    sync.Once
	layer   *streamLayer
	silent  bool          // a first-byte deadline is set; Read is raft's one goroutine
	elem    *list.Element // on layer.pending; guarded by layer.pendingMu
	evicted atomic.Bool   // closed for a newer connection
}

func (c *slotConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if n == 0 && c.evicted.Load() {
		// Closed for a newer connection (logged, spaced, by evictOldest).
		return 0, io.EOF
	}
	if n == 0 && c.silent && isTimeout(err) {
		// Raft would log each at error level ("failed to decode incoming
		// command: i/o timeout"); EOF closes quietly.
		c.layer.silentClosed(c.RemoteAddr())
		return 0, io.EOF
	}
	if n > 0 && c.silent {
		c.silent = false
		c.Conn.SetReadDeadline(time.Time{})
		if b[0] >= 'A' && b[0] <= 'Z' {
			// A raft message starts with its type, a byte below 8; an
			// upper-case letter is an HTTP method: a client (curl, idem's
			// CLI with --addr) given the raft address instead of the HTTP
			// one. Raft would log "failed to decode incoming command:
			// unknown rpc type 71" at error level; EOF closes quietly.
			c.layer.notRaft(c.RemoteAddr())
			return 0, io.EOF
		}
		if b[0] == 0x16 {
			// A TLS handshake record: a peer of a TLS cluster, and this
			// node started without its --tls-* flags. Raft would log
			// "unknown rpc type 22" twice a second.
			c.layer.tlsPeer(c.RemoteAddr())
			return 0, io.EOF
		}
		c.layer.proven(c)
	}
	return n, err
}

// isTimeout reports a read that ran into its deadline.
func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// silentClosed logs, at most once a minute, that connections were closed
// for sending nothing within the first byte's deadline.
func (s *streamLayer) silentClosed(from net.Addr) {
	n := s.silent.Add(1)
	if !s.silentLogged.Allow(time.Minute) {
		return
	}
	s.silent.Add(-n)
	s.log.Warn("closed raft connections that sent nothing within the handshake timeout (a port scan, or a peer that hangs); logged at most once a minute",
		"from", from.String(), "closed", n, "timeout", s.firstByte.String())
}

// maxRefusedHostsLogged bounds the hosts (and reasons) whose refused
// handshakes are logged in one minute: a flood from many addresses is that
// many lines.
const maxRefusedHostsLogged = 8

// refusedPeer logs a refused TLS handshake at most once a minute for each
// remote host and reason (of at most maxRefusedHostsLogged a minute).
func (s *streamLayer) refusedPeer(msg string, from net.Addr, err error) {
	n := s.refused.Add(1)
	host := from.String()
	if h, _, serr := net.SplitHostPort(host); serr == nil {
		host = h
	}
	// Keyed by the reason too: a peer refused for another reason than
	// the last from its address (a missing certificate, then one from
	// the wrong CA) is a different mistake, and is told.
	if !s.refusedLogged.allow(host+" "+msg, time.Minute, maxRefusedHostsLogged) {
		return
	}
	s.refused.Add(-n)
	s.log.Warn(msg+"; logged at most once a minute for each address and reason", "remote-addr", from.String(), "error", err, "refused", n)
}

// tlsPeer logs, at most once a minute, that a peer spoke TLS to this
// node's plaintext raft port.
func (s *streamLayer) tlsPeer(from net.Addr) {
	if !s.tlsPeerLogged.Allow(time.Minute) {
		return
	}
	s.log.Error("a raft peer speaks TLS to this node, which runs without it: the cluster runs with TLS, so this node can neither hear nor reach its members; start it with --tls-cert-file, --tls-key-file and --tls-ca-file, as the other members (a certificate from the cluster's CA)", "from", from.String(), "raft-addr", s.Addr().String())
}

// notRaft logs, at most once a minute, that a client spoke HTTP to the
// raft port.
func (s *streamLayer) notRaft(from net.Addr) {
	if !s.notRaftLogged.Allow(time.Minute) {
		return
	}
	s.log.Warn("an HTTP request reached the raft port, which speaks only raft: HTTP clients and idem's CLI (--addr) take the node's HTTP address (--http-addr), not its --raft-addr; closed it", "from", from.String(), "raft-addr", s.Addr().String())
}

func (c *slotConn) Close() error {
	c.layer.proven(c) // off the pending list
	err := c.Conn.Close()
	c.once.Do(func() { <-c.free })
	return err
}

func (s *streamLayer) Dial(address raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	d := s.dialer
	d.Timeout = timeout
	c, err := d.Dial("tcp", string(address))
	var ae *net.AddrError
	if err != nil && d.LocalAddr != nil && errors.As(err, &ae) {
		// The peer has no address of this node's own IP family (an
		// IPv6 member of a cluster whose other nodes listen on IPv4, or
		// the reverse): bound to its own IP, the dial found no address
		// to try and never connected. It goes from any address of the
		// peer's family instead.
		d.LocalAddr = nil
		c, err = d.Dial("tcp", string(address))
	}
	if err != nil || s.tls == nil {
		return c, err
	}
	host, _, err := net.SplitHostPort(string(address))
	if err != nil {
		c.Close()
		return nil, err
	}
	m := s.tls.cur.Load()
	tc := tls.Client(c, m.raftClientConfig(host))
	tc.SetDeadline(time.Now().Add(min(timeout, handshakeTimeout)))
	if err := tc.Handshake(); err != nil {
		c.Close()
		return nil, fmt.Errorf("raftfsm: tls handshake with raft peer %s: %w", address, err)
	}
	tc.SetDeadline(time.Time{})
	if !s.conns.track(s.tls, tc, m, true) {
		tc.Close()
		return nil, fmt.Errorf("raftfsm: raft peer %s: its certificate is not trusted by the reloaded --tls-ca-file", address)
	}
	return &trackedConn{Conn: tc, set: &s.conns}, nil
}

// serverConn completes the server side of the handshake before the first
// byte is read or written, within handshakeTimeout, and logs a refused
// peer once with the reason.
type serverConn struct {
	*tls.Conn
	log   *slog.Logger
	layer *streamLayer
	used  *tlsMaterial // the files the handshake used
	slot  *slotConn    // the connection under TLS: pending until the handshake ends
	once  sync.Once
	err   error
}

func (c *serverConn) handshake() error {
	c.once.Do(func() {
		c.Conn.SetDeadline(time.Now().Add(handshakeTimeout))
		if c.err = c.Conn.Handshake(); c.err != nil && c.slot.evicted.Load() {
			c.Conn.Close() // closed for a newer connection, logged by evictOldest
			return
		}
		if c.err != nil {
			msg := "refused a raft connection: no valid node certificate from the cluster's CA"
			switch {
			case peerHungUp(c.err):
				// Nothing was said of a certificate: a chaos soak's node
				// logged a member killed as it dialled as lacking one.
				msg = "closed a raft connection whose peer hung up during the TLS handshake, before any certificate was checked: a member stopped or restarted as it connected (or something that is not a member)"
			case strings.Contains(c.err.Error(), "didn't provide a certificate"):
				// Go's client leaves out a certificate whose issuer this node
				// did not list: one from a CA not in --tls-ca-file looks
				// like none (a CA rotation done out of order).
				msg += " (the peer sent none: it has none, or one from a CA not in this node's --tls-ca-file, as in a CA rotation done out of order)"
			}
			c.layer.refusedPeer(msg, c.Conn.RemoteAddr(), c.err)
			c.Conn.Close()
			return
		}
		c.Conn.SetDeadline(time.Time{})
		c.layer.proven(c.slot)
		if !c.layer.conns.track(c.layer.tls, c.Conn, c.used, false) {
			c.err = errors.New("raftfsm: raft peer's certificate is not trusted by the reloaded --tls-ca-file")
			c.log.Warn("closed a raft connection: the peer's certificate is not trusted by the reloaded --tls-ca-file",
				"remote-addr", c.Conn.RemoteAddr().String())
			c.Conn.Close()
		}
	})
	return c.err
}

func (c *serverConn) Close() error {
	c.layer.conns.untrack(c.Conn)
	return c.Conn.Close()
}

func (c *serverConn) Read(b []byte) (int, error) {
	if err := c.handshake(); err != nil {
		// Logged (spaced) by handshake. Raft logs any other error of a
		// connection's first read at error level, once per connection:
		// EOF closes it quietly.
		return 0, io.EOF
	}
	return c.Conn.Read(b)
}

func (c *serverConn) Write(b []byte) (int, error) {
	if err := c.handshake(); err != nil {
		return 0, err
	}
	return c.Conn.Write(b)
}

// raftMaxPool is how many idle connections raft's transport keeps to each
// peer (foreignGuard's freshConn tries one more).
const raftMaxPool = 5

// newRaftTransport is the raft transport of a node over stream.
//
// Pipelined replication is off (MaxRPCsInFlight 1: every append waits for
// its answer). raft's pipeline can wedge for good: when a follower refuses
// an append (a newer term, a log that does not match, a write that failed)
// the pipeline's decoder returns, and if the send loop picks a new entry
// over that exit, its next send parks for ever on a channel no one reads.
// The follower then gets heartbeats and no entry again, so no election
// mends it; the leader commits nothing if it needs that follower for a
// quorum; raft's Shutdown waits for the parked goroutine for ever
// (hashicorp/raft issue 612; TestReplicationSurvivesAFollowerThatRefusesAppends).
// raft's own notes find the pipeline of little use next to batching,
// which idem does (MaxAppendEntries).
func newRaftTransport(stream raft.StreamLayer, log *slog.Logger) *raft.NetworkTransport {
	return raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{
		Stream: stream, MaxPool: raftMaxPool, Timeout: 10 * time.Second, Logger: newHCLog(log),
		MaxRPCsInFlight: 1,
	})
}
