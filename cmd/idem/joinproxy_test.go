package main

import (
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A node's join and bootstrap calls never go through the HTTP proxy of
// its environment. They carry the node token, an admin token; without TLS
// they went through HTTP_PROXY (net/http's default transport), so a proxy
// set machine-wide for other programs' egress received the token in
// plaintext on every join attempt, once a second (a leak walk). Every other
// call between nodes (forwarding, health, readiness, snapshots) already
// ignored the environment's proxy, as the TLS join client did.
func TestJoinNeverGoesThroughTheEnvironmentsProxy(t *testing.T) {
	var mu sync.Mutex
	var seen []string
	proxy := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.Method+" "+r.URL.String()+" Authorization: "+r.Header.Get("Authorization"))
		mu.Unlock()
		w.WriteHeader(http.StatusBadGateway)
	}))
	ln, err := net.Listen("tcp", freePort(t))
	require.NoError(t, err)
	proxy.Listener.Close()
	proxy.Listener = ln
	proxy.Start()
	defer proxy.Close()
	t.Setenv("HTTP_PROXY", proxy.URL)
	t.Setenv("http_proxy", proxy.URL)
	t.Setenv("NO_PROXY", "")
	t.Setenv("no_proxy", "")

	dir := t.TempDir()
	auth := filepath.Join(dir, "auth.json")
	writeAuth(t, auth, entry("nodes", "node-token-1", "admin"))
	tok := filepath.Join(dir, "node.token")
	require.NoError(t, os.WriteFile(tok, []byte("node-token-1\n"), 0o600))
	// A name, not a loopback address: net/http never proxies those, and a
	// cluster across machines is joined by name or by a routable address.
	const member = "idem-member.invalid:7070"
	p := launch(t, filepath.Join(dir, "data"), freePort(t), freePort(t),
		"--join", member, "--auth-file", auth, "--node-token-file", tok)

	waitFor(t, 20*time.Second, "the node's attempt to reach --join itself", func() (bool, string) {
		mu.Lock()
		got := append([]string(nil), seen...)
		mu.Unlock()
		if len(got) > 0 {
			t.Fatalf("the joining node sent its calls through HTTP_PROXY, node token included:\n%s", strings.Join(got, "\n"))
		}
		logs := p.logs.String()
		return strings.Contains(logs, "this --join address did not answer") && strings.Contains(logs, "addr="+member), logs
	})
	mu.Lock()
	defer mu.Unlock()
	require.Empty(t, seen, "requests the environment's proxy received")
}
