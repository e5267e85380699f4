// Package idemtest starts a real one-node idem store in-process, for the
// tests of packages that speak to it over HTTP (middleware, conformance):
// real raft over TCP on loopback, real Pebble in a temporary directory, the
// real HTTP API on a loopback port. Nothing is mocked.
package idemtest

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http/httptest"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/idem-store/idem/api"
	"github.com/idem-store/idem/engine"
	"github.com/idem-store/idem/raftfsm"
)

// Options of a node; zero values are the server's defaults.
type Options struct {
	// Retention of new records (default 24h); a few seconds lets a test see
	// a key expire.
	Retention time.Duration
	// MaxResponseBytes is --max-response-bytes (default 65,536).
	MaxResponseBytes int
	// MaxRequestBytes is --max-request-bytes (default 1 MiB).
	MaxRequestBytes int64
	// MaxBatchOps is --max-batch-ops (default 256).
	MaxBatchOps int
	// MaxIDBytes is --max-id-bytes (default 255).
	MaxIDBytes int
	// AuthTokens, when set, are the only bearer tokens the node accepts
	// (each an admin token, as in the old one-token-per-line auth file).
	AuthTokens []string
	// PrincipalScope is --scope principal: the endpoint is not part of a
	// record's scope.
	PrincipalScope bool
	// MinLease and MaxLease are --min-lease and --max-lease (defaults
	// 100ms and 1h).
	MinLease, MaxLease time.Duration
}

// IP is the loopback address a test's servers listen on: IDEM_TEST_IP (a
// shared machine's own), else 127.0.0.1.
func IP() string {
	if v := os.Getenv("IDEM_TEST_IP"); v != "" {
		return v
	}
	return "127.0.0.1"
}

// Node is a running one-node store.
type Node struct {
	// URL is the base URL of its HTTP API, e.g. http://127.0.0.1:41234 (on
	// IDEM_TEST_IP when set).
	URL  string
	srv  *httptest.Server
	node *raftfsm.Node
	once sync.Once
}

// Start opens a node, waits until it leads and can serve, and closes it
// when the test ends.
func Start(tb testing.TB, o Options) *Node {
	tb.Helper()
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	reg := prometheus.NewRegistry()
	rc := raftfsm.DefaultConfig()
	rc.DataDir = tb.TempDir()
	rc.RaftAddr = net.JoinHostPort(IP(), "0")
	rc.Bootstrap = true
	rc.BucketWidth = time.Hour
	rc.Registry = reg
	rc.Logger = logger
	cfg := api.Config{
		Retention:    24 * time.Hour,
		DefaultLease: 30 * time.Second,
		Limits:       api.DefaultLimits(),
		Logger:       logger,
		Gatherer:     reg,
		BucketWidth:  rc.BucketWidth,
	}
	if o.Retention > 0 {
		cfg.Retention = o.Retention
	}
	cfg.AuthTokens = o.AuthTokens
	cfg.PrincipalScope = o.PrincipalScope
	if o.MaxBatchOps > 0 {
		cfg.MaxBatchOps = o.MaxBatchOps
	}
	if o.MaxResponseBytes > 0 {
		cfg.Limits.MaxResponseBytes = o.MaxResponseBytes
	}
	if o.MinLease > 0 {
		cfg.Limits.MinLease = o.MinLease
	}
	if o.MaxLease > 0 {
		cfg.Limits.MaxLease = o.MaxLease
	}
	if o.MaxIDBytes > 0 {
		cfg.Limits.MaxIDBytes = o.MaxIDBytes
	}
	if o.MaxRequestBytes > 0 {
		cfg.Limits.MaxRequestBytes = o.MaxRequestBytes
	}
	srv := httptest.NewUnstartedServer(nil)
	if ip := IP(); ip != "127.0.0.1" {
		ln, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
		if err != nil {
			tb.Fatalf("idemtest: listen: %v", err)
		}
		srv.Listener.Close()
		srv.Listener = ln
	}
	rc.HTTPAdvertise = srv.Listener.Addr().String()
	node, err := raftfsm.Open(rc)
	if err != nil {
		tb.Fatalf("idemtest: open node: %v", err)
	}
	srv.Config.Handler = api.New(node, cfg)
	srv.Start()
	n := &Node{URL: srv.URL, srv: srv, node: node}
	tb.Cleanup(n.Stop)
	deadline := time.Now().Add(10 * time.Second)
	for !node.IsLeader() || !node.Ready() {
		if time.Now().After(deadline) {
			tb.Fatalf("idemtest: the node did not become a ready leader within 10s")
		}
		time.Sleep(10 * time.Millisecond)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, _, err := node.Lookup(ctx, engine.Scope{Principal: "p", Endpoint: "e", Key: "k"}, false, true); err != nil {
		tb.Fatalf("idemtest: first read: %v", err)
	}
	return n
}

// Stop closes the HTTP server and the node (the store is then
// unreachable); the test's cleanup calls it too.
func (n *Node) Stop() {
	n.once.Do(func() {
		n.srv.CloseClientConnections()
		n.srv.Close()
		_ = n.node.Close()
	})
}
