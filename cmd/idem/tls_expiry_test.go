package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idem-store/idem/certgen"
	"github.com/idem-store/idem/raftfsm"
)

// A running node checks its certificates' expiry again and again, not
// only at start and on SIGHUP: a node that runs for a year would
// otherwise never warn. It warns about its own certificate (HTTPS and
// raft) and about a CA of --tls-ca-file, each within the warning window.
func TestTLSExpiryCheckedWhileRunning(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	const day = 24 * time.Hour
	long, err := certgen.NewCA("long CA", 365*day)
	require.NoError(t, err)
	short, err := certgen.NewCA("short CA", 10*day)
	require.NoError(t, err)
	cert, key, ca := filepath.Join(dir, "n1.pem"), filepath.Join(dir, "n1-key.pem"), filepath.Join(dir, "ca.pem")
	write := func(lifetime time.Duration, cas ...certgen.PEMPair) {
		pair, err := certgen.NewCert(long, certgen.CertRequest{CommonName: "n1", IPs: []net.IP{net.IPv4(127, 0, 0, 1)}, Lifetime: lifetime})
		require.NoError(t, err)
		require.NoError(t, pair.WriteFiles(cert, key, true))
		var bundle []byte
		for _, c := range cas {
			bundle = append(bundle, c.Cert...)
		}
		require.NoError(t, os.WriteFile(ca, bundle, 0o600))
	}
	const certSoon, caSoon = "this node's certificate expires soon", "a CA in --tls-ca-file expires soon"

	// A certificate good for 60 days, and beside its CA one that ends in 10.
	write(60*day, long, short)
	tl, err := raftfsm.LoadTLS(cert, key, ca, nil)
	require.NoError(t, err)
	logs := &logBuffer{}
	f := &serveTLSFlags{loaded: tl}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	f.watchExpiry(ctx, slog.New(slog.NewTextHandler(logs, nil)), 20*time.Millisecond)
	require.Eventually(t, func() bool { return strings.Count(logs.String(), caSoon) >= 2 }, 5*time.Second, 10*time.Millisecond,
		"the CA's expiry was not checked while running: %s", logs)
	require.NotContains(t, logs.String(), certSoon)

	// Renewed (wrongly) for 5 days, the short CA gone: the certificate warns.
	write(5*day, long)
	require.NoError(t, tl.Reload())
	require.Eventually(t, func() bool { return strings.Count(logs.String(), certSoon) >= 2 }, 5*time.Second, 10*time.Millisecond,
		"the certificate's expiry was not checked while running: %s", logs)
	require.Contains(t, logs.String(), "hours-left=119")
}

// After the CA rotation's last step (the new CA alone, SIGHUP), an HTTPS
// keep-alive connection a client opened with a certificate of the old CA
// is closed: http.Server keeps such a connection as long as the client
// uses it, so a leaked old-CA client key kept what it had. A client with
// a certificate of the new CA is served.
func TestCARotationClosesOldCAHTTPSConns(t *testing.T) {
	t.Parallel()
	oldCA, newCA := newPKI(t), newPKI(t)
	cert, key := oldCA.cert("n1", "--ip", testIP("127.0.0.9"))
	caFile := filepath.Join(t.TempDir(), "ca.pem")
	both := append(readFile(t, oldCA.ca()), readFile(t, newCA.ca())...)
	require.NoError(t, os.WriteFile(caFile, both, 0o600)) // step 1 done
	n := launch(t, t.TempDir(), freePort(t), freePort(t),
		"--tls-cert-file", cert, "--tls-key-file", key, "--tls-ca-file", caFile, "--tls-client-auth", "require")
	oldOpsCert, oldOpsKey := oldCA.cert("ops", "--client")
	waitReadyTLS(t, oldCA.httpsClient(oldOpsCert, oldOpsKey), n)

	pool := x509.NewCertPool()
	require.True(t, pool.AppendCertsFromPEM(both))
	pair, err := tls.LoadX509KeyPair(oldOpsCert, oldOpsKey)
	require.NoError(t, err)
	conn, err := tls.Dial("tcp", n.http, &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{pair}})
	require.NoError(t, err)
	defer conn.Close()
	br := bufio.NewReader(conn)
	get := func() (int, error) {
		if _, err := io.WriteString(conn, "GET /healthz HTTP/1.1\r\nHost: idem\r\n\r\n"); err != nil {
			return 0, err
		}
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			return 0, err
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode, nil
	}
	code, err := get()
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, code, "the old CA's client certificate must work before step 3")

	// Step 2 (the node's certificate from the new CA), then step 3.
	newCert, newKey := newCA.cert("n1", "--ip", testIP("127.0.0.9"))
	require.NoError(t, os.WriteFile(cert, readFile(t, newCert), 0o600))
	require.NoError(t, os.WriteFile(key, readFile(t, newKey), 0o600))
	require.NoError(t, os.WriteFile(caFile, readFile(t, newCA.ca()), 0o600))
	require.NoError(t, n.cmd.Process.Signal(syscall.SIGHUP))
	require.Eventually(t, func() bool { return strings.Contains(n.logs.String(), "TLS certificates reloaded") }, 5*time.Second, 20*time.Millisecond)

	conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	_, err = br.ReadByte()
	var ne net.Error
	require.False(t, errors.As(err, &ne) && ne.Timeout(), "the HTTPS connection of the old CA's client certificate stayed open after the CA rotation")
	require.Error(t, err)
	require.Contains(t, n.logs.String(), "closed HTTPS connections whose client certificate the reloaded --tls-ca-file no longer trusts")

	newOpsCert, newOpsKey := newCA.cert("ops", "--client")
	require.Equal(t, http.StatusOK, getJSON(t, newCA.httpsClient(newOpsCert, newOpsKey), "https://"+n.http+"/readyz", nil))
}

func readFile(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	return b
}

// Bug (an attack on TLS): a certificate that expired while the node ran
// was said nowhere (the next daily check was up to a day away), while
// every new connection to the node failed. The check runs again just
// after the certificate in use expires, and logs it as an error.
func TestTLSExpiryLoggedWhenItHappens(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ca, err := certgen.NewCA("CA", 24*time.Hour)
	require.NoError(t, err)
	cert, key, caFile := filepath.Join(dir, "n1.pem"), filepath.Join(dir, "n1-key.pem"), filepath.Join(dir, "ca.pem")
	pair, err := certgen.NewCert(ca, certgen.CertRequest{CommonName: "n1", IPs: []net.IP{net.IPv4(127, 0, 0, 1)}, Lifetime: 3 * time.Second})
	require.NoError(t, err)
	require.NoError(t, pair.WriteFiles(cert, key, true))
	require.NoError(t, os.WriteFile(caFile, ca.Cert, 0o600))
	tl, err := raftfsm.LoadTLS(cert, key, caFile, nil)
	require.NoError(t, err)
	logs := &logBuffer{}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	(&serveTLSFlags{loaded: tl}).watchExpiry(ctx, slog.New(slog.NewTextHandler(logs, nil)), time.Hour)
	require.Eventually(t, func() bool { return strings.Contains(logs.String(), "this node's certificate has expired") }, 30*time.Second, 50*time.Millisecond,
		"no word of the expiry an hour before the next check: %s", logs)
	require.Contains(t, logs.String(), "level=ERROR")
}
