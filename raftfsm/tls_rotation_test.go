package raftfsm

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/stretchr/testify/require"

	"github.com/idem-store/idem/certgen"
)

// rotNode is a node's certificate files during a CA rotation.
type rotNode struct {
	name, dir string
	tl        *TLS
}

func (r *rotNode) writeCA(t *testing.T, cas ...certgen.PEMPair) {
	t.Helper()
	var bundle []byte
	for _, ca := range cas {
		bundle = append(bundle, ca.Cert...)
	}
	require.NoError(t, os.WriteFile(filepath.Join(r.dir, "ca.pem"), bundle, 0o600))
}

func (r *rotNode) writeCert(t *testing.T, signer certgen.PEMPair) {
	t.Helper()
	pair, err := certgen.NewCert(signer, certgen.CertRequest{CommonName: r.name, IPs: []net.IP{net.IPv4(127, 0, 0, 1)}})
	require.NoError(t, err)
	require.NoError(t, pair.WriteFiles(filepath.Join(r.dir, "node.pem"), filepath.Join(r.dir, "node-key.pem"), true))
}

// commits waits until the cluster decides a claim and every node applies it.
func commits(t *testing.T, c *memCluster, key string, nodes ...*Node) {
	t.Helper()
	require.Eventually(t, func() bool {
		return claim(c.leader(nodes...), key) == nil
	}, 20*time.Second, 50*time.Millisecond, "the cluster did not commit %s", key)
	want, idx, err := c.leader(nodes...).StateHash()
	require.NoError(t, err)
	for _, n := range nodes {
		require.Eventually(t, func() bool {
			h, i, err := n.StateHash()
			return err == nil && i >= idx && (i > idx || h == want)
		}, 20*time.Second, 20*time.Millisecond, "%s did not apply %s", n.self.ID, key)
	}
}

// The CA rotation of docs/SECURITY.md, on real nodes over mutual TLS: a
// peer holding a node certificate of the old CA (its key leaked) that
// opened a raft connection before the rotation loses it when the nodes
// reload the new CA alone, and cannot open another; the cluster commits
// at every step and after. Raft keeps connections open as long as they
// work, so without cutting them the leaked certificate kept its
// connection for good.
func TestCARotationCutsOldCAConnections(t *testing.T) {
	t.Parallel()
	oldCA, err := certgen.NewCA("old CA", 24*time.Hour)
	require.NoError(t, err)
	newCA, err := certgen.NewCA("new CA", 24*time.Hour)
	require.NoError(t, err)

	c := newMemCluster(t)
	var rot []*rotNode
	var nodes []*Node
	for i, name := range []string{"n1", "n2", "n3"} {
		r := &rotNode{name: name, dir: t.TempDir()}
		r.writeCert(t, oldCA)
		r.writeCA(t, oldCA)
		r.tl, err = LoadTLS(filepath.Join(r.dir, "node.pem"), filepath.Join(r.dir, "node-key.pem"), filepath.Join(r.dir, "ca.pem"), nil)
		require.NoError(t, err)
		n := c.openTLS(name, i == 0, r.tl)
		if i == 0 {
			c.leader(n)
		} else {
			c.join(n, nodes...)
		}
		rot, nodes = append(rot, r), append(nodes, n)
	}
	commits(t, c, "formed", nodes...)

	// The leaked key: a node certificate of the old CA, speaking raft.
	leaked, err := certgen.NewCert(oldCA, certgen.CertRequest{CommonName: "n9", IPs: []net.IP{net.IPv4(127, 0, 0, 1)}})
	require.NoError(t, err)
	leakedPair, err := tls.X509KeyPair(leaked.Cert, leaked.Key)
	require.NoError(t, err)
	// Whoever holds the leaked key knows both CAs' certificates (they are
	// public): after step 2 the nodes present the new CA's.
	roots := x509.NewCertPool()
	require.True(t, roots.AppendCertsFromPEM(oldCA.Cert))
	require.True(t, roots.AppendCertsFromPEM(newCA.Cert))
	var mu sync.Mutex
	var opened []net.Conn
	dial := func(addr string, timeout time.Duration) (net.Conn, error) {
		host, _, _ := net.SplitHostPort(addr)
		conn, err := tls.DialWithDialer(&net.Dialer{Timeout: timeout}, "tcp", addr, &tls.Config{
			MinVersion: tls.VersionTLS13, ServerName: host, RootCAs: roots, Certificates: []tls.Certificate{leakedPair},
		})
		if err == nil {
			mu.Lock()
			opened = append(opened, conn)
			mu.Unlock()
		}
		return conn, err
	}
	// A vote request of a past term: answered, changes nothing.
	vote := func(tr *raft.NetworkTransport, target *Node) error {
		var resp raft.RequestVoteResponse
		return tr.RequestVote(raft.ServerID(target.self.ID), raft.ServerAddress(target.self.RaftAddr), &raft.RequestVoteRequest{
			RPCHeader: raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte("n9"), Addr: []byte(tr.LocalAddr())},
			Term:      0,
		}, &resp)
	}
	rogue := rogueTransport(t, dial)
	for _, n := range nodes {
		require.NoError(t, vote(rogue, n), "before the rotation the old CA's certificate speaks raft to %s", n.self.ID)
	}

	// Step 1: every node trusts both CAs.
	for _, r := range rot {
		r.writeCA(t, oldCA, newCA)
		require.NoError(t, r.tl.Reload())
	}
	commits(t, c, "step1", nodes...)
	// Step 2: every node gets a certificate of the new CA.
	for _, r := range rot {
		r.writeCert(t, newCA)
		require.NoError(t, r.tl.Reload())
		commits(t, c, "step2-"+r.name, nodes...)
	}
	// The leaked certificate still reaches every node, as it should until
	// step 3. Its connections from before may be gone: a reload that
	// changes the files also ends the transport's inbound handlers between
	// two requests (CloseStreams), and a peer dials again, so the test's
	// held connections (it used to keep those of the first votes) were
	// closed now and then under load. These are opened after steps 1 and 2.
	mu.Lock()
	opened = nil
	mu.Unlock()
	again := rogueTransport(t, dial)
	for _, n := range nodes {
		require.NoError(t, vote(again, n), "before step 3 the old CA's certificate still speaks raft to %s", n.self.ID)
	}
	mu.Lock()
	held := append([]net.Conn(nil), opened...)
	mu.Unlock()
	require.Len(t, held, 3)
	// Step 3: the new CA alone.
	for _, r := range rot {
		r.writeCA(t, newCA)
		require.NoError(t, r.tl.Reload())
	}
	for i, conn := range held {
		conn.SetReadDeadline(time.Now().Add(5 * time.Second))
		_, err := conn.Read(make([]byte, 1))
		var ne net.Error
		require.False(t, errors.As(err, &ne) && ne.Timeout(), "%s kept the raft connection of the old CA's certificate open after the CA rotation", nodes[i].self.ID)
		require.Error(t, err)
	}
	fresh := rogueTransport(t, dial)
	for _, n := range nodes {
		require.Error(t, vote(fresh, n), "after the rotation the old CA's certificate still speaks raft to %s", n.self.ID)
	}
	commits(t, c, "rotated", nodes...)
}

// peerSerials are the serial numbers of the certificates with which the
// peer named cn dialled n's live raft connections. Connections n dialled
// to it are left out: one of them (n campaigned, or led, on a loaded
// machine) sits idle in raft's pool with the peer's certificate of then
// until n next sends on it, and only then finds it closed.
func peerSerials(n *Node, cn string) map[string]bool {
	out := map[string]bool{}
	n.stream.conns.mu.Lock()
	defer n.stream.conns.mu.Unlock()
	for c, dialled := range n.stream.conns.live {
		if dialled {
			continue
		}
		certs := c.ConnectionState().PeerCertificates
		if len(certs) > 0 && certs[0].Subject.CommonName == cn {
			out[certs[0].SerialNumber.String()] = true
		}
	}
	return out
}

// A renewed certificate reaches the raft connections already open, not
// only new ones: after the leader reloads it, every raft connection its
// followers hold with it, the replication pipelines it dialled included,
// carries the new certificate, and the cluster commits. Raft keeps
// connections as long as they work, so without redialling the old
// certificate stayed in use (and, once the CA rotated, the connections
// it held were cut at once).
func TestRenewedCertReachesRaftConns(t *testing.T) {
	t.Parallel()
	pki := newTestPKI(t, "cluster CA")
	c := newMemCluster(t)
	tl1 := pki.node("n1")
	n1 := c.openTLS("n1", true, tl1)
	c.leader(n1)
	n2 := c.openTLS("n2", false, pki.node("n2"))
	n3 := c.openTLS("n3", false, pki.node("n3"))
	c.join(n2, n1)
	c.join(n3, n1)
	nodes := []*Node{n1, n2, n3}
	commits(t, c, "before", nodes...)
	oldSerial := tl1.cur.Load().cert.Leaf
	if oldSerial == nil {
		var err error
		oldSerial, err = x509.ParseCertificate(tl1.cur.Load().cert.Certificate[0])
		require.NoError(t, err)
	}
	for _, f := range []*Node{n2, n3} {
		require.True(t, peerSerials(f, "n1")[oldSerial.SerialNumber.String()], "%s holds no connection with n1's certificate", f.self.ID)
	}

	pki.node("n1") // rewrites n1.pem and n1-key.pem: a renewal
	require.NoError(t, tl1.Reload())
	newLeaf, err := x509.ParseCertificate(tl1.cur.Load().cert.Certificate[0])
	require.NoError(t, err)
	require.NotEqual(t, oldSerial.SerialNumber, newLeaf.SerialNumber)
	commits(t, c, "after", nodes...)
	for _, f := range []*Node{n2, n3} {
		want := map[string]bool{newLeaf.SerialNumber.String(): true}
		got := peerSerials(f, "n1")
		for end := time.Now().Add(10 * time.Second); len(got) != 1 || !got[newLeaf.SerialNumber.String()]; got = peerSerials(f, "n1") {
			require.True(t, time.Now().Before(end), "%s still holds raft connections n1 dialled with its old certificate: %v, want %v", f.self.ID, got, want)
			time.Sleep(50 * time.Millisecond)
		}
	}
}
