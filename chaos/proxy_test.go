package chaos

import (
	"bufio"
	"errors"
	"io"
	"net"
	"testing"
	"time"
)

func echoServer(t *testing.T) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); io.Copy(c, c) }()
		}
	}()
	return ln
}

func dialFrom(ip, addr string) (net.Conn, error) {
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}, Timeout: time.Second}
	return d.Dial("tcp", addr)
}

// echo sends a line and waits for it to come back.
func echo(c net.Conn, msg string) error {
	c.SetDeadline(time.Now().Add(2 * time.Second))
	defer c.SetDeadline(time.Time{})
	if _, err := io.WriteString(c, msg+"\n"); err != nil {
		return err
	}
	got, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err
	}
	if got != msg+"\n" {
		return errors.New("echo: got " + got)
	}
	return nil
}

// dialEcho dials from ip through the proxy and echoes once.
func dialEcho(ip, addr string) error {
	c, err := dialFrom(ip, addr)
	if err != nil {
		return err
	}
	defer c.Close()
	return echo(c, "again")
}

func TestProxyDropAndHeal(t *testing.T) {
	backend := echoServer(t)
	p, err := StartProxy("127.0.0.1:0", backend.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	addr := p.Addr().String()

	c2, err := dialFrom("127.0.0.2", addr)
	if err != nil {
		t.Skipf("cannot dial from 127.0.0.2 here: %v", err)
	}
	defer c2.Close()
	c3, err := dialFrom("127.0.0.3", addr)
	if err != nil {
		t.Skipf("cannot dial from 127.0.0.3 here: %v", err)
	}
	defer c3.Close()
	if err := echo(c2, "hello from 2"); err != nil {
		t.Fatalf("before the rule, 127.0.0.2: %v", err)
	}
	if err := echo(c3, "hello from 3"); err != nil {
		t.Fatalf("before the rule, 127.0.0.3: %v", err)
	}

	p.Drop("127.0.0.2")

	// The established connection from 127.0.0.2 is closed.
	c2.SetReadDeadline(time.Now().Add(2 * time.Second))
	if _, err := c2.Read(make([]byte, 1)); err == nil || isTimeout(err) {
		t.Fatalf("established connection from 127.0.0.2 still open after Drop (read: %v)", err)
	}
	// New ones are refused (accepted and closed at once).
	if err := dialEcho("127.0.0.2", addr); err == nil {
		t.Fatal("new connection from 127.0.0.2 works after Drop")
	} else if isTimeout(err) {
		t.Fatalf("new connection from 127.0.0.2 hangs instead of being refused: %v", err)
	}
	// 127.0.0.3 is unaffected, on its old and on new connections.
	if err := echo(c3, "still here"); err != nil {
		t.Fatalf("127.0.0.3 cut by a rule for 127.0.0.2: %v", err)
	}
	if err := dialEcho("127.0.0.3", addr); err != nil {
		t.Fatalf("new connection from 127.0.0.3: %v", err)
	}

	p.Heal()
	if err := dialEcho("127.0.0.2", addr); err != nil {
		t.Fatalf("127.0.0.2 after Heal: %v", err)
	}
	if err := echo(c3, "after heal"); err != nil {
		t.Fatalf("127.0.0.3 after Heal: %v", err)
	}
}

func TestProxyNetCutIsOneWay(t *testing.T) {
	// Two "nodes" on 127.0.0.2 and .3, each an echo server behind its
	// proxy; cutting 2 -> 3 stops 2's dials to 3, not 3's dials to 2.
	nodes := []*Node{{ID: "a", IP: "127.0.0.2"}, {ID: "b", IP: "127.0.0.3"}}
	pn := &ProxyNet{proxies: map[string]*Proxy{}}
	defer pn.Teardown()
	for _, n := range nodes {
		b := echoServer(t)
		p, err := StartProxy("127.0.0.1:0", b.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		pn.proxies[n.IP] = p
	}
	a, b := nodes[0], nodes[1]
	if err := pn.Cut([]*Node{a}, []*Node{b}); err != nil {
		t.Fatal(err)
	}
	if err := dialEcho(a.IP, pn.proxies[b.IP].Addr().String()); err == nil {
		t.Fatal("a -> b works after Cut(a, b)")
	}
	if err := dialEcho(b.IP, pn.proxies[a.IP].Addr().String()); err != nil {
		t.Skipf("cannot dial from %s here: %v", b.IP, err)
	}
	if err := pn.Heal(); err != nil {
		t.Fatal(err)
	}
	if err := dialEcho(a.IP, pn.proxies[b.IP].Addr().String()); err != nil {
		t.Fatalf("a -> b after Heal: %v", err)
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
