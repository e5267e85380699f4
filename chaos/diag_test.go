package chaos

import (
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// fakeNode is a running "process" whose HTTP API is srv.
func fakeNode(id string, srv *httptest.Server) *Node {
	return &Node{ID: id, HTTPAddr: strings.TrimPrefix(srv.URL, "http://"), done: make(chan struct{})}
}

// A node that stays unready while running is captured twice, at half the
// bound and at the bound, with every running node's goroutines, status,
// metrics and readiness; a ready probe ends the stretch.
func TestDiagnoserCapturesEveryNodeWhileOneIsStuck(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/debug/pprof/goroutine":
			require.Equal(t, "2", r.URL.Query().Get("debug"))
			w.Write([]byte("goroutine 1 [chan send]:\nraft.(*Raft).processLogs\n"))
		case "/readyz":
			w.WriteHeader(503)
			w.Write([]byte(`{"detail":"has not applied the leader's commit index 17459 yet"}`))
		default:
			w.Write([]byte("ok " + r.URL.Path))
		}
	}))
	defer srv.Close()
	stuck, other, dead := fakeNode("n3", srv), fakeNode("n1", srv), &Node{ID: "n2"}
	cl := &Cluster{Nodes: []*Node{other, dead, stuck}, hc: srv.Client(), scheme: "http://"}
	h := NewHistory()
	d := newDiagnoser(cl, h, t.TempDir(), 100*time.Millisecond)

	for range 40 {
		d.observe(stuck, false)
		d.observe(other, true)
		time.Sleep(10 * time.Millisecond)
	}
	diags := d.Diags()
	require.Len(t, diags, 2, "at half the bound and at the bound, no more")
	for _, dg := range diags {
		require.Equal(t, "n3", dg.Node)
		require.GreaterOrEqual(t, dg.Unready, 100*time.Millisecond)
		for _, f := range []string{"n3-goroutines.txt", "n1-goroutines.txt", "n3-cluster.json", "n3-metrics.txt", "n3-readyz.json", "README.txt"} {
			_, err := os.Stat(filepath.Join(dg.Dir, f))
			require.NoError(t, err, f)
		}
		_, err := os.Stat(filepath.Join(dg.Dir, "n2-goroutines.txt"))
		require.True(t, os.IsNotExist(err), "a node that is not running is not asked")
		b, _ := os.ReadFile(filepath.Join(dg.Dir, "n3-goroutines.txt"))
		require.Contains(t, string(b), "processLogs")
	}
	require.Equal(t, []string{diags[0].Dir, diags[1].Dir}, diagsFor(diags, "n3", diags[1].At, time.Second))
	require.Empty(t, diagsFor(diags, "n1", diags[1].At, time.Second))

	// Ready again: the stretch ends, a new one starts from zero.
	d.observe(stuck, true)
	d.observe(stuck, false)
	require.Len(t, d.Diags(), 2)

	// A paused or killed node is a nemesis at work, not a stuck node.
	stuck.paused = true
	for range 30 {
		d.observe(stuck, false)
		time.Sleep(10 * time.Millisecond)
	}
	require.Len(t, d.Diags(), 2)
}
