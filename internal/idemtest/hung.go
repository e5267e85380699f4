package idemtest

import (
	"net"
	"sync"
	"testing"
)

// HungNode is the URL of a node whose process is stopped (SIGSTOP) or
// wedged: its kernel still accepts connections (the listen backlog), so a
// dial succeeds, but nothing is ever read or answered. Closed with t.
func HungNode(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", net.JoinHostPort(IP(), "0"))
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	return "http://" + ln.Addr().String()
}
