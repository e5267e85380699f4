package raftfsm

import (
	"io"
	"log/slog"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/stretchr/testify/require"
)

// A peer that opens raft connections and sends nothing took every file
// descriptor of the node (the HTTP listener's accepts then failed too):
// the raft port holds a bounded number of connections open, a silent one
// only until its first byte is due, and a connection that spoke may idle
// (raft's pooled connections do).
func TestRaftPortBoundsSilentConnections(t *testing.T) {
	s, err := newStreamLayer("127.0.0.1:0", "127.0.0.1:0", nil, nil, nil)
	require.NoError(t, err)
	s.slots = make(chan struct{}, 2)
	s.firstByte = 300 * time.Millisecond

	// What raft does with an accepted connection: read until it fails, then close.
	var accepted, closed atomic.Int32
	acceptDone := make(chan struct{})
	go func() {
		defer close(acceptDone)
		for {
			c, err := s.Accept()
			if err != nil {
				return
			}
			accepted.Add(1)
			go func() {
				io.Copy(io.Discard, c)
				c.Close()
				closed.Add(1)
			}()
		}
	}()
	dial := func() net.Conn {
		c, err := net.Dial("tcp", s.Listener.Addr().String())
		require.NoError(t, err)
		t.Cleanup(func() { c.Close() })
		return c
	}

	// One that speaks at once and then idles, like a pooled raft connection.
	talker := dial()
	_, err = talker.Write([]byte{0})
	require.NoError(t, err)
	require.Eventually(t, func() bool { return accepted.Load() == 1 }, 2*time.Second, 10*time.Millisecond)
	silent := dial()
	require.Eventually(t, func() bool { return accepted.Load() == 2 }, 2*time.Second, 10*time.Millisecond)
	// Past the bound, a third takes the slot of the silent one, the oldest
	// that has not spoken (an attacker holding every slot starved the
	// peers); the talker keeps its slot.
	waiting := dial()
	require.Eventually(t, func() bool { return accepted.Load() == 3 }, 2*time.Second, 10*time.Millisecond)
	silent.SetReadDeadline(time.Now().Add(5 * time.Second))
	_, err = silent.Read(make([]byte, 1))
	require.ErrorIs(t, err, io.EOF, "the silent connection is closed for the newer one")
	require.Eventually(t, func() bool { return closed.Load() == 1 }, 5*time.Second, 10*time.Millisecond)
	require.LessOrEqual(t, len(s.slots), 2)

	// The newer one is silent too: closed once its first byte is overdue;
	// the talker stays open though idle.
	waiting.SetReadDeadline(time.Now().Add(5 * time.Second))
	_, err = waiting.Read(make([]byte, 1))
	require.ErrorIs(t, err, io.EOF, "the silent connection is closed by the node")
	time.Sleep(2 * s.firstByte)
	require.Equal(t, int32(2), closed.Load(), "closed: the two silent ones; the talker must stay")
	_, err = talker.Write([]byte{1})
	require.NoError(t, err, "the talker idled past the first-byte deadline and was closed")
	waiting.Close()

	// Close stops an Accept that waits for a slot: a second talker takes
	// the last one.
	talker2 := dial()
	_, err = talker2.Write([]byte{0})
	require.NoError(t, err)
	require.Eventually(t, func() bool { return accepted.Load() == 4 }, 5*time.Second, 10*time.Millisecond)
	dial()                             // both slots are talkers': this one waits for a slot
	time.Sleep(100 * time.Millisecond) // the accept loop now waits for a slot
	require.NoError(t, s.Close())
	select {
	case <-acceptDone:
	case <-time.After(5 * time.Second):
		t.Fatal("Accept still waits for a slot after Close")
	}
}

// A client given the raft address instead of the HTTP one (curl, idem's
// CLI with --addr at port 7071) made raft log "failed to decode incoming
// command: unknown rpc type 71" at error level for every request. The
// raft port now reads an HTTP method as the end of the connection, logs
// once a minute what happened, and passes raft's own bytes on untouched.
func TestRaftPortNamesAnHTTPRequest(t *testing.T) {
	var logs logBuffer
	s, err := newStreamLayer("127.0.0.1:0", "127.0.0.1:0", nil, nil, slog.New(slog.NewTextHandler(&logs, nil)))
	require.NoError(t, err)
	defer s.Close()
	read := func(first []byte) ([]byte, error) {
		c, err := net.Dial("tcp", s.Listener.Addr().String())
		require.NoError(t, err)
		defer c.Close()
		_, err = c.Write(first)
		require.NoError(t, err)
		ac, err := s.Accept()
		require.NoError(t, err)
		defer ac.Close()
		b := make([]byte, 64)
		n, err := ac.Read(b)
		return b[:n], err
	}
	for range 2 {
		got, err := read([]byte("GET /v1/cluster HTTP/1.1\r\nHost: x\r\n\r\n"))
		require.ErrorIs(t, err, io.EOF)
		require.Empty(t, got, "raft must not see the request's bytes")
	}
	require.Equal(t, 1, strings.Count(logs.String(), "an HTTP request reached the raft port"), "logged once a minute:\n%s", logs.String())
	require.Contains(t, logs.String(), "--http-addr")
	// A raft message (its first byte is its type, below 8) goes through.
	got, err := read([]byte{0, 1, 2})
	require.NoError(t, err)
	require.Equal(t, []byte{0, 1, 2}, got)
}

// A member of a TLS cluster restarted without its --tls-* flags got its
// peers' TLS handshakes on a plaintext raft port, and raft logged "failed
// to decode incoming command: unknown rpc type 22" at error level twice a
// second, which names neither TLS nor the flags. The raft port now reads a
// TLS handshake record as the end of the connection and says what is wrong,
// once a minute.
func TestPlainRaftPortNamesATLSPeer(t *testing.T) {
	var logs logBuffer
	s, err := newStreamLayer("127.0.0.1:0", "127.0.0.1:0", nil, nil, slog.New(slog.NewTextHandler(&logs, nil)))
	require.NoError(t, err)
	defer s.Close()
	for range 2 {
		c, err := net.Dial("tcp", s.Listener.Addr().String())
		require.NoError(t, err)
		_, err = c.Write([]byte{0x16, 0x03, 0x01, 0x00, 0x10}) // a TLS handshake record's header
		require.NoError(t, err)
		ac, err := s.Accept()
		require.NoError(t, err)
		n, err := ac.Read(make([]byte, 64))
		require.ErrorIs(t, err, io.EOF)
		require.Zero(t, n, "raft must not see the handshake's bytes")
		ac.Close()
		c.Close()
	}
	require.Equal(t, 1, strings.Count(logs.String(), "speaks TLS"), "logged once a minute:\n%s", logs.String())
	require.Contains(t, logs.String(), "--tls-ca-file")
}

// Anyone who reaches the raft port makes the node log: a TLS handshake
// refused, or a connection closed for sending nothing, was logged for each
// connection, and raft logged it again at error level ("failed to decode
// incoming command"). A loop of junk connections wrote 25,000 lines (5.6 MB)
// in 5 s. Each kind is now logged at most once a minute, with a count, and
// raft sees the end of the connection.
func TestRaftPortLogsJunkConnectionsSpaced(t *testing.T) {
	var logs logBuffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	pki := newTestPKI(t, "junk")
	for _, c := range []struct {
		name string
		tls  *TLS
		send []byte // nil: nothing, until the first byte's deadline
		want string
	}{
		{"tls", pki.node("n1"), []byte{0x16, 0x03, 0x01, 0x00, 0x05, 'h', 'e', 'l', 'l', 'o'}, "refused a raft connection"},
		{"silent", nil, nil, "closed raft connections that sent nothing"},
	} {
		t.Run(c.name, func(t *testing.T) {
			logs.Reset()
			s, err := newStreamLayer("127.0.0.1:0", "127.0.0.1:0", nil, c.tls, log)
			require.NoError(t, err)
			s.firstByte = 100 * time.Millisecond
			tr := raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{Stream: s, MaxPool: 1, Timeout: time.Second, Logger: newHCLog(log)})
			defer tr.Close()
			const junk = 20
			for range junk {
				conn, err := net.Dial("tcp", s.Listener.Addr().String())
				require.NoError(t, err)
				if c.send != nil {
					_, err = conn.Write(c.send)
					require.NoError(t, err)
				}
				// The node closes it: read to the end (an alert, a reset).
				io.Copy(io.Discard, conn)
				conn.Close()
			}
			require.Equal(t, 1, strings.Count(logs.String(), c.want), "logged once a minute:\n%s", logs.String())
			require.NotContains(t, logs.String(), "failed to decode incoming command")
		})
	}
}

func (l *logBuffer) Reset() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.b.Reset()
}

// An attacker who holds every slot of the raft port with silent
// connections, and keeps more waiting in the backlog, starved the real
// peers: a peer's new connection (a restarted member's leader dialling it
// again) waited behind the attacker's until raft's dial timed out, and a
// member restarted during a flood never rejoined while it lasted. When
// the bound is full, the oldest connection that has not spoken gives its
// slot to the newest, so a peer gets in however many silent ones are held.
func TestRaftPeerGetsPastSilentConnectionsHoldingEverySlot(t *testing.T) {
	s, err := newStreamLayer("127.0.0.1:0", "127.0.0.1:0", nil, nil, nil)
	require.NoError(t, err)
	s.slots = make(chan struct{}, 4)
	s.firstByte = time.Hour // the silent ones are not closed for their silence
	server := raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{Stream: s, MaxPool: 1, Timeout: time.Minute})
	defer server.Close()
	go func() {
		for rpc := range server.Consumer() {
			rpc.Respond(&raft.RequestVoteResponse{Term: 7, Granted: true}, nil)
		}
	}()

	// The attacker: every slot, and as many again in the backlog.
	for range 2 * cap(s.slots) {
		c, err := net.Dial("tcp", s.Listener.Addr().String())
		require.NoError(t, err)
		t.Cleanup(func() { c.Close() })
	}
	require.Eventually(t, func() bool { return len(s.slots) == cap(s.slots) }, 5*time.Second, 10*time.Millisecond)

	// A real peer's RPC on a new connection. The client's timeout only ends
	// the test without the fix: the attacker held the slots for an hour.
	client, err := raft.NewTCPTransport("127.0.0.1:0", nil, 1, 30*time.Second, io.Discard)
	require.NoError(t, err)
	defer client.Close()
	var resp raft.RequestVoteResponse
	err = client.RequestVote("n1", raft.ServerAddress(s.Listener.Addr().String()),
		&raft.RequestVoteRequest{RPCHeader: raft.RPCHeader{ID: []byte("n2"), Addr: []byte("x")}, Term: 7}, &resp)
	require.NoError(t, err, "the peer's RPC did not get past the silent connections holding every slot")
	require.True(t, resp.Granted)
	require.LessOrEqual(t, len(s.slots), cap(s.slots))

	// Its connection spoke: the flood that follows does not close it.
	for range 3 * cap(s.slots) {
		c, err := net.Dial("tcp", s.Listener.Addr().String())
		require.NoError(t, err)
		t.Cleanup(func() { c.Close() })
	}
	require.Eventually(t, func() bool {
		s.pendingMu.Lock()
		defer s.pendingMu.Unlock()
		return s.pending.Len() == cap(s.slots)-1
	}, 5*time.Second, 10*time.Millisecond, "the peer's pooled connection holds one slot, the newest silent ones the rest")
	require.NoError(t, client.RequestVote("n1", raft.ServerAddress(s.Listener.Addr().String()),
		&raft.RequestVoteRequest{RPCHeader: raft.RPCHeader{ID: []byte("n2"), Addr: []byte("x")}, Term: 7}, &resp))
}

// Refused handshakes are spaced per remote host: a flood of junk from one
// address logged one line a minute, and that line was the only one, so a
// member refused for its certificate meanwhile (a CA rotation done out of
// order) was never named. Each address gets its first line.
func TestRaftPortJunkDoesNotHideARefusedMember(t *testing.T) {
	var logs logBuffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	pki := newTestPKI(t, "junk-member")
	s, err := newStreamLayer("127.0.0.11:0", "127.0.0.11:0", nil, pki.node("n1"), log)
	require.NoError(t, err)
	tr := raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{Stream: s, MaxPool: 1, Timeout: time.Second, Logger: newHCLog(log)})
	defer tr.Close()
	junk := []byte{0x16, 0x03, 0x01, 0x00, 0x05, 'h', 'e', 'l', 'l', 'o'}
	send := func(from string) {
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}}
		conn, err := d.Dial("tcp", s.Listener.Addr().String())
		require.NoError(t, err)
		_, err = conn.Write(junk)
		require.NoError(t, err)
		io.Copy(io.Discard, conn)
		conn.Close()
	}
	for range 10 {
		send("127.0.0.11")
	}
	send("127.0.0.12")
	send("127.0.0.12")
	require.Equal(t, 2, strings.Count(logs.String(), "refused a raft connection"), "one line for each address:\n%s", logs.String())
	require.Contains(t, logs.String(), "remote-addr=127.0.0.12:", logs.String())
}

// Raft's dials are bound to the node's own IP; a node on an IPv4 address
// could not dial a member on IPv6 (or the reverse): the dial failed with
// "no suitable address found" before connecting, so a member on the other
// family never received an entry. It dials from any address of the peer's
// family instead.
func TestRaftDialsAPeerOfTheOtherIPFamily(t *testing.T) {
	peer, err := net.Listen("tcp", "[::1]:0")
	if err != nil {
		t.Skipf("no IPv6 loopback: %v", err)
	}
	defer peer.Close()
	s, err := newStreamLayer("127.0.0.1:0", "127.0.0.1:0", nil, nil, nil)
	require.NoError(t, err)
	defer s.Close()
	c, err := s.Dial(raft.ServerAddress(peer.Addr().String()), time.Second)
	require.NoError(t, err)
	c.Close()
}

// A --raft-advertise name that did not resolve when the node started was
// refused (exit 1, after the data dir was made): a Kubernetes headless
// service publishes a pod's name only once it is ready, which a node that
// never starts never is. It is advertised as given, with a warning.
func TestRaftAdvertisesANameNotResolvingYet(t *testing.T) {
	var logs logBuffer
	s, err := newStreamLayer("127.0.0.1:0", "idem-not-yet.invalid:0", nil, nil, slog.New(slog.NewTextHandler(&logs, nil)))
	require.NoError(t, err)
	defer s.Close()
	require.True(t, strings.HasPrefix(s.Addr().String(), "idem-not-yet.invalid:"), s.Addr().String())
	require.NotEqual(t, "idem-not-yet.invalid:0", s.Addr().String())
	require.Contains(t, logs.String(), "does not resolve")
}

// A peer that hangs up in the middle of the TLS handshake (a member killed
// or restarted while it dialled) is not said to lack a valid certificate:
// a chaos soak's node logged "refused a raft connection: no valid node
// certificate from the cluster's CA ... error=EOF", which sends the reader
// to the certificates.
func TestRaftPortSaysAHandshakeCutShortIsNotACertificateProblem(t *testing.T) {
	var logs logBuffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	pki := newTestPKI(t, "cut-short")
	addr := testRaftAddrs(t, 1)[0]
	s, err := newStreamLayer(addr, addr, nil, pki.node("n1"), log)
	require.NoError(t, err)
	tr := raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{Stream: s, MaxPool: 1, Timeout: time.Second, Logger: newHCLog(log)})
	defer tr.Close()
	conn, err := net.Dial("tcp", s.Listener.Addr().String())
	require.NoError(t, err)
	_, err = conn.Write([]byte{0x16, 0x03}) // a handshake record begun
	require.NoError(t, err)
	conn.Close()
	require.Eventually(t, func() bool { return strings.Contains(logs.String(), "raft connection") }, 5*time.Second, 10*time.Millisecond)
	require.NotContains(t, logs.String(), "no valid node certificate", logs.String())
	require.Contains(t, logs.String(), "hung up during the TLS handshake", logs.String())
}
