package main

import (
	"bytes"
	"context"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Nodes forming a cluster with --bootstrap-expect where one was started
// without the --tls-* flags the others have (a unit file edited on one
// node) formed nothing, rightly, but said only "waiting for peers to
// bootstrap" every second, on both sides: the answer naming the cause was
// thrown away. Each side now names the other's address and the flags.
func TestBootstrapBesideANodeWithoutTLSSaysSo(t *testing.T) {
	const ip = "127.0.0.9"
	dir := t.TempDir()
	var stdout, stderr bytes.Buffer
	require.Equal(t, 0, run(context.Background(), []string{"tls", "ca", "--dir", dir}, &stdout, &stderr), stderr.String())
	require.Equal(t, 0, run(context.Background(), []string{"tls", "cert", "--dir", dir, "--name", "n2", "--ip", ip}, &stdout, &stderr), stderr.String())
	plainHTTP, plainRaft := freePortOn(t, ip), freePortOn(t, ip)
	tlsHTTP, tlsRaft := freePortOn(t, ip), freePortOn(t, ip)
	join := plainHTTP + "," + tlsHTTP
	plain := launch(t, filepath.Join(dir, "n1"), plainHTTP, plainRaft, "--node-id", "n1", "--bootstrap-expect", "2", "--join", join)
	withTLS := launch(t, filepath.Join(dir, "n2"), tlsHTTP, tlsRaft, "--node-id", "n2", "--bootstrap-expect", "2", "--join", join,
		"--tls-cert-file", filepath.Join(dir, "n2.pem"), "--tls-key-file", filepath.Join(dir, "n2-key.pem"), "--tls-ca-file", filepath.Join(dir, "idem-ca.pem"))
	waitFor(t, 20*time.Second, "the plain node naming the HTTPS one", func() (bool, string) {
		return strings.Contains(plain.logs.String(), tlsHTTP+" speaks HTTPS: the cluster runs with TLS, and this node without it; start it with --tls-cert-file"), ""
	})
	waitFor(t, 20*time.Second, "the TLS node naming the plain one", func() (bool, string) {
		return strings.Contains(withTLS.logs.String(), plainHTTP+" speaks plain HTTP: this node runs with TLS and that one without it; if it is a node of this cluster, start it with --tls-cert-file"), ""
	})
	time.Sleep(2 * time.Second) // a few more rounds: said once, not every second
	require.Equal(t, 1, strings.Count(plain.logs.String(), "speaks HTTPS"), plain.logs.String())
	require.NotContains(t, plain.logs.String()+withTLS.logs.String(), "bootstrapped the cluster")
}

// launchBootstrapping starts three nodes on 127.0.0.9 with --bootstrap-expect
// 3 and --join naming all three, node i with the flags of flags(i), and
// returns them with their HTTP addresses.
func launchBootstrapping(t *testing.T, flags func(i int) []string) ([]*proc, []string) {
	const ip = "127.0.0.9"
	dir := t.TempDir()
	var https []string
	for range 3 {
		https = append(https, freePortOn(t, ip))
	}
	join := strings.Join(https, ",")
	var procs []*proc
	for i := range 3 {
		procs = append(procs, launch(t, filepath.Join(dir, strconv.Itoa(i)), https[i], freePortOn(t, ip),
			append(flags(i), "--bootstrap-expect", "3", "--join", join)...))
	}
	return procs, https
}

// Three nodes of a new cluster, two given one --node-id (a command copied
// with the address changed and the id not): the two counted as one peer,
// and every node waited for ever saying only "waiting for peers to
// bootstrap". Each now names the id and both addresses.
func TestBootstrapWithTwoNodesOfOneIDSaysSo(t *testing.T) {
	procs, https := launchBootstrapping(t, func(i int) []string { return []string{"--node-id", []string{"n1", "n2", "n2"}[i]} })
	for i, p := range procs {
		waitFor(t, 20*time.Second, "node "+strconv.Itoa(i)+" naming the id given twice", func() (bool, string) {
			return strings.Contains(p.logs.String(), "not bootstrapping: two nodes run with --node-id n2, at "), ""
		})
		require.Contains(t, p.logs.String(), https[1])
		require.Contains(t, p.logs.String(), https[2])
	}
	time.Sleep(2 * time.Second)
	for _, p := range procs {
		require.Equal(t, 1, strings.Count(p.logs.String(), "two nodes run with --node-id"), p.logs.String())
		require.NotContains(t, p.logs.String(), "bootstrapped the cluster")
	}
}

// Three nodes of a new cluster, one given --retention 1h and two 24h: the
// first claim pins the retention of the node leading it, so when the odd
// one won the first election every record was kept 1h, and the two
// others then advised starting them with 1h too. They now form nothing,
// each naming the odd value, as for --scope and --bootstrap-expect.
func TestBootstrapWithAnotherRetentionFormsNoCluster(t *testing.T) {
	procs, _ := launchBootstrapping(t, func(i int) []string {
		return []string{"--node-id", "n" + strconv.Itoa(i+1), "--retention", []string{"24h", "24h", "1h"}[i]}
	})
	for i, p := range procs {
		waitFor(t, 20*time.Second, "node "+strconv.Itoa(i)+" naming the other --retention", func() (bool, string) {
			return strings.Contains(p.logs.String(), "--retention 1h0m0s") && strings.Contains(p.logs.String(), "the cluster's first claim pins the retention of the node that leads it"), ""
		})
	}
	time.Sleep(2 * time.Second)
	for _, p := range procs {
		require.NotContains(t, p.logs.String(), "bootstrapped the cluster")
	}
}
