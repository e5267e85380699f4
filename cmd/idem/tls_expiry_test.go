package main

import (
	"context"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
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
