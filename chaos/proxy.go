package chaos

import (
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"
)

// Partitioner cuts and heals raft links between nodes; the partition
// nemesis does not care how. Net (iptables) and ProxyNet (a TCP proxy in
// front of every node's raft listener) implement it.
type Partitioner interface {
	// Cut loses every raft message from each node of from to each node of
	// to (one way).
	Cut(from, to []*Node) error
	// Split cuts both ways between the two sides.
	Split(a, b []*Node) error
	// Heal removes every rule.
	Heal() error
	// Teardown removes every trace of the mechanism.
	Teardown()
	// Name is the mechanism: iptables or proxy.
	Name() string
}

// Partition modes (--partition-mode).
const (
	PartitionAuto     = "auto"
	PartitionIPTables = "iptables"
	PartitionProxy    = "proxy"
)

// ProxyRaftOffset is how far above --raft-port a node's real raft listener
// is in proxy mode: node i listens on 127.0.0.i:RaftPort+ProxyRaftOffset
// and advertises 127.0.0.i:RaftPort, where its proxy listens.
const ProxyRaftOffset = 10

// Proxy forwards TCP connections accepted on one address to a target
// address, refusing those whose source IP is dropped. Because every node
// dials raft from its own loopback IP, the source IP names the sending node.
type Proxy struct {
	ln     net.Listener
	target string

	mu      sync.Mutex
	dropped map[string]bool // source IPs
	conns   map[*proxyConn]struct{}
	closed  bool
	wg      sync.WaitGroup
}

type proxyConn struct {
	src         string
	client, dst net.Conn
	once        sync.Once
}

func (c *proxyConn) close() {
	c.once.Do(func() {
		if tc, ok := c.client.(*net.TCPConn); ok {
			tc.SetLinger(0) // reset, as a lost link would eventually
		}
		c.client.Close()
		if c.dst != nil {
			c.dst.Close()
		}
	})
}

// StartProxy listens on listen and forwards to target.
func StartProxy(listen, target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return nil, fmt.Errorf("chaos: proxy: %w", err)
	}
	p := &Proxy{ln: ln, target: target, dropped: map[string]bool{}, conns: map[*proxyConn]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr is the address the proxy listens on.
func (p *Proxy) Addr() net.Addr { return p.ln.Addr() }

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			time.Sleep(10 * time.Millisecond) // e.g. out of file descriptors
			continue
		}
		src := ""
		if ta, ok := c.RemoteAddr().(*net.TCPAddr); ok {
			src = ta.IP.String()
		}
		pc := &proxyConn{src: src, client: c}
		p.mu.Lock()
		if p.closed || p.dropped[src] {
			p.mu.Unlock()
			pc.close()
			continue
		}
		p.conns[pc] = struct{}{}
		p.wg.Add(1)
		p.mu.Unlock()
		go p.serve(pc)
	}
}

func (p *Proxy) serve(pc *proxyConn) {
	defer p.wg.Done()
	defer func() {
		pc.close()
		p.mu.Lock()
		delete(p.conns, pc)
		p.mu.Unlock()
	}()
	dst, err := net.Dial("tcp", p.target)
	if err != nil {
		return // the node is down: as if the connection were refused
	}
	defer dst.Close()
	p.mu.Lock()
	// A rule added while dialing must still cut this connection.
	if p.closed || p.dropped[pc.src] {
		p.mu.Unlock()
		dst.Close()
		return
	}
	pc.dst = dst
	p.mu.Unlock()
	done := make(chan struct{}, 2)
	go func() { io.Copy(dst, pc.client); done <- struct{}{} }()
	go func() { io.Copy(pc.client, dst); done <- struct{}{} }()
	<-done // either side gone: close both, which ends the other copy
	pc.close()
	<-done
}

// Drop refuses new connections from the source IP and closes its
// established ones.
func (p *Proxy) Drop(srcIP string) {
	p.mu.Lock()
	p.dropped[srcIP] = true
	var cut []*proxyConn
	for c := range p.conns {
		if c.src == srcIP {
			cut = append(cut, c)
		}
	}
	p.mu.Unlock()
	for _, c := range cut {
		c.close()
	}
}

// Heal accepts connections from every source again.
func (p *Proxy) Heal() {
	p.mu.Lock()
	clear(p.dropped)
	p.mu.Unlock()
}

// Close stops listening, closes every connection and waits for the
// proxy's goroutines.
func (p *Proxy) Close() error {
	p.mu.Lock()
	p.closed = true
	var all []*proxyConn
	for c := range p.conns {
		all = append(all, c)
	}
	p.mu.Unlock()
	err := p.ln.Close()
	for _, c := range all {
		c.close()
	}
	p.wg.Wait()
	return err
}

// ProxyNet cuts raft links with one Proxy per node: node i's proxy listens
// on its advertised raft address (127.0.0.i:RaftPort) and forwards to its
// real listener (RaftPort+ProxyRaftOffset). Cutting j -> k makes k's proxy
// refuse j's connections and close the established ones; k's connections to
// j go through j's proxy and are untouched unless cut too. Used when
// iptables is not available (not root) or with --partition-mode proxy.
type ProxyNet struct {
	proxies map[string]*Proxy // by node IP
}

// SetupProxyNet starts a proxy in front of every node's raft listener. The
// nodes must run with --raft-advertise RaftAddr and --raft-addr RaftListen.
func SetupProxyNet(nodes []*Node) (*ProxyNet, error) {
	pn := &ProxyNet{proxies: map[string]*Proxy{}}
	for _, n := range nodes {
		if n.RaftListen == n.RaftAddr {
			pn.Teardown()
			return nil, fmt.Errorf("chaos: %s has no separate raft listener for the proxy", n.ID)
		}
		p, err := StartProxy(n.RaftAddr, n.RaftListen)
		if err != nil {
			pn.Teardown()
			return nil, err
		}
		pn.proxies[n.IP] = p
	}
	return pn, nil
}

// Cut makes each node of to refuse raft connections from each node of from.
func (pn *ProxyNet) Cut(from, to []*Node) error {
	for _, b := range to {
		p := pn.proxies[b.IP]
		if p == nil {
			return fmt.Errorf("chaos: no proxy for %s", b.ID)
		}
		for _, a := range from {
			p.Drop(a.IP)
		}
	}
	return nil
}

// Split cuts both ways between the two sides.
func (pn *ProxyNet) Split(a, b []*Node) error {
	return errors.Join(pn.Cut(a, b), pn.Cut(b, a))
}

// Heal removes every rule of every proxy.
func (pn *ProxyNet) Heal() error {
	for _, p := range pn.proxies {
		p.Heal()
	}
	return nil
}

// Name is "proxy".
func (pn *ProxyNet) Name() string { return PartitionProxy }

// Teardown closes every proxy.
func (pn *ProxyNet) Teardown() {
	for _, p := range pn.proxies {
		p.Close()
	}
}
