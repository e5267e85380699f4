package raftfsm

import (
	"errors"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A recovered node probes the members its recovery left out (twins.go).
// Against an address that accepts and never answers (a member's machine
// gone, its address taken by something else), the probe waits out the
// transport's whole timeout, and Close waited for it: up to 10 s of a
// stop. Close no longer waits for a probe in flight.
func TestCloseDoesNotWaitForAProbeOfALeftOutMember(t *testing.T) {
	c := newMemCluster(t)
	d1, d2 := t.TempDir(), t.TempDir()
	var l1, l2 logBuffer
	n1 := c.openAt("n1", d1, "127.0.0.1:0", true, &l1)
	c.leader(n1)
	a1 := n1.self.RaftAddr
	n2 := c.openAt("n2", d2, "127.0.0.1:0", false, &l2)
	c.join(n2, n1)
	a2 := n2.self.RaftAddr
	c.stop(n2)
	c.stop(n1)
	_, err := Recover(d1, "n1", []Peer{{ID: "n1", RaftAddr: a1}}, nil)
	require.NoError(t, err)

	ln, err := net.Listen("tcp", a2)
	require.NoError(t, err)
	t.Cleanup(func() { ln.Close() })
	accepted := make(chan net.Conn, 8)
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			accepted <- conn
		}
	}()
	n1 = c.openAt("n1", d1, a1, false, &l1)
	var conn net.Conn
	select {
	case conn = <-accepted:
	case <-time.After(20 * time.Second):
		t.Fatalf("the recovered node never probed the left-out member at %s; logs:\n%s", a2, l1.String())
	}
	defer conn.Close()
	// The probe's request arrives: the RPC is in flight, waiting for an
	// answer that never comes.
	require.NoError(t, conn.SetReadDeadline(time.Now().Add(5*time.Second)))
	n, err := conn.Read(make([]byte, 1))
	require.NoError(t, err)
	require.Equal(t, 1, n)

	c.stop(n1)
	// Close has returned: had it waited for the probe, the probe would
	// have timed out and its connection be closed (EOF here).
	require.NoError(t, conn.SetReadDeadline(time.Now().Add(200*time.Millisecond)))
	buf := make([]byte, 4096)
	for {
		_, err := conn.Read(buf)
		if err == nil {
			continue // the rest of the request
		}
		var ne net.Error
		require.True(t, errors.As(err, &ne) && ne.Timeout(), "the probe ended before Close returned (Close waited for it): %v", err)
		break
	}
}
