package raftfsm

import (
	"fmt"
	"net"
	"time"

	"github.com/hashicorp/raft"
)

// streamLayer is raft's TCP stream layer with one change: outgoing dials are
// bound to this node's own IP, so on one machine with nodes on 127.0.0.1/2/3
// each node's traffic carries its own source address and iptables rules can
// cut links between them (docs/DESIGN.md pitfalls).
type streamLayer struct {
	net.Listener
	advertise net.Addr
	dialer    net.Dialer
}

func newStreamLayer(bind, advertise string) (*streamLayer, error) {
	ln, err := net.Listen("tcp", bind)
	if err != nil {
		return nil, fmt.Errorf("raftfsm: listen on raft address %s: %w", bind, err)
	}
	adv, err := net.ResolveTCPAddr("tcp", advertise)
	if err != nil {
		ln.Close()
		return nil, fmt.Errorf("%w: raft advertise address %q: %w", ErrConfig, advertise, err)
	}
	if adv.Port == 0 {
		// Port 0 asks the kernel for a free port (tests): advertise the one bound.
		adv.Port = ln.Addr().(*net.TCPAddr).Port
	}
	if adv.IP == nil || adv.IP.IsUnspecified() {
		ln.Close()
		return nil, fmt.Errorf("%w: raft advertise address %q must name a routable IP", ErrConfig, advertise)
	}
	s := &streamLayer{Listener: ln, advertise: adv}
	if tcp, ok := ln.Addr().(*net.TCPAddr); ok && !tcp.IP.IsUnspecified() {
		s.dialer.LocalAddr = &net.TCPAddr{IP: tcp.IP}
	}
	return s, nil
}

func (s *streamLayer) Addr() net.Addr { return s.advertise }

func (s *streamLayer) Dial(address raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	d := s.dialer
	d.Timeout = timeout
	return d.Dial("tcp", string(address))
}
