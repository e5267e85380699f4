package raftfsm

import (
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idem-store/idem/certgen"
)

// Calls between nodes (request forwarding, health probes, join checks) go
// through http.Transports that keep their connections pooled: after a CA
// rotation's last step (the old CA dropped, say for a leaked key), a
// connection to a server holding an old CA's certificate went on carrying
// forwarded writes and probes as long as it worked, while the raft port
// and the API's own listener cut theirs. A reload that changes the CAs
// closes the connections DialTLSContext made whose server the new CAs do
// not verify, pooled or carrying a request, and keeps the others.
func TestCARotationCutsDialledHTTPConnections(t *testing.T) {
	t.Parallel()
	oldCA, err := certgen.NewCA("old CA", 24*time.Hour)
	require.NoError(t, err)
	newCA, err := certgen.NewCA("new CA", 24*time.Hour)
	require.NoError(t, err)

	// server answers over TLS with a certificate of ca, counting the
	// connections it accepts; /slow waits until release is closed.
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	entered, cut := make(chan struct{}, 1), make(chan struct{}, 1)
	server := func(ca certgen.PEMPair) (*httptest.Server, *atomic.Int32) {
		pair, err := certgen.NewCert(ca, certgen.CertRequest{CommonName: "peer", IPs: []net.IP{net.IPv4(127, 0, 0, 1)}})
		require.NoError(t, err)
		cert, err := tls.X509KeyPair(pair.Cert, pair.Key)
		require.NoError(t, err)
		var conns atomic.Int32
		s := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/slow" {
				w.WriteHeader(http.StatusOK)
				w.(http.Flusher).Flush()
				entered <- struct{}{}
				select {
				case <-release:
				case <-r.Context().Done(): // its connection closed
					cut <- struct{}{}
				}
				return
			}
			io.WriteString(w, "ok")
		}))
		s.TLS = &tls.Config{Certificates: []tls.Certificate{cert}}
		s.Config.ConnState = func(_ net.Conn, st http.ConnState) {
			if st == http.StateNew {
				conns.Add(1)
			}
		}
		s.StartTLS()
		t.Cleanup(s.Close)
		return s, &conns
	}
	stale, staleConns := server(oldCA) // a peer still on the old CA, or the leaked key
	rotated, rotConns := server(newCA) // a peer already on the new one

	// This node mid-rotation: its certificate from the new CA, both CAs trusted.
	r := &rotNode{name: "n1", dir: t.TempDir()}
	r.writeCert(t, newCA)
	r.writeCA(t, oldCA, newCA)
	r.tl, err = LoadTLS(filepath.Join(r.dir, "node.pem"), filepath.Join(r.dir, "node-key.pem"), filepath.Join(r.dir, "ca.pem"), nil)
	require.NoError(t, err)
	tr := &http.Transport{DialTLSContext: r.tl.DialTLSContext(&net.Dialer{Timeout: 2 * time.Second}), MaxIdleConnsPerHost: 4}
	t.Cleanup(tr.CloseIdleConnections)
	hc := &http.Client{Transport: tr, Timeout: 10 * time.Second}
	get := func(s *httptest.Server, path string) error {
		resp, err := hc.Get(s.URL + path)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		_, err = io.Copy(io.Discard, resp.Body)
		return err
	}

	// One connection to the stale peer carries a request across the
	// reload, another sits in the pool.
	slow := make(chan error, 1)
	go func() { slow <- get(stale, "/slow") }()
	select {
	case <-entered:
	case err := <-slow:
		t.Fatalf("the request to the stale peer ended before the reload: %v", err)
	}
	require.NoError(t, get(stale, "/fast"))
	require.NoError(t, get(rotated, "/fast"))
	require.Equal(t, int32(2), staleConns.Load())
	require.Equal(t, int32(1), rotConns.Load())

	// Step 3 of the rotation: the old CA is dropped.
	r.writeCA(t, newCA)
	require.NoError(t, r.tl.Reload())

	select {
	case <-cut:
		<-slow
	case <-time.After(5 * time.Second):
		t.Fatal("the connection carrying a request to a server the new CAs do not verify was kept")
	}
	err = get(stale, "/fast")
	require.Error(t, err, "a pooled connection to a server the new CAs do not verify was used after the reload")
	require.ErrorContains(t, err, "certificate")
	require.NoError(t, get(rotated, "/fast"))
	require.Equal(t, int32(1), rotConns.Load(), "a connection the new CAs verify is kept")
}
