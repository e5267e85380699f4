package main

import (
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// notIdemServer is an HTTP server at a free test address that is not an
// idem node: answer writes its answer to every request; it records the
// requests it gets.
type notIdemServer struct {
	addr string
	mu   sync.Mutex
	seen []string
}

func startNotIdem(t *testing.T, answer http.HandlerFunc) *notIdemServer {
	t.Helper()
	s := &notIdemServer{}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		s.seen = append(s.seen, r.Method+" "+r.URL.Path)
		s.mu.Unlock()
		answer(w, r)
	}))
	ln, err := net.Listen("tcp", freePort(t))
	require.NoError(t, err)
	srv.Listener.Close()
	srv.Listener = ln
	srv.Start()
	t.Cleanup(srv.Close)
	s.addr = ln.Addr().String()
	return s
}

func (s *notIdemServer) requests() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.seen...)
}

// A --join naming an HTTP server that is not an idem node (a typo: a web
// server, a health endpoint, another service on the port) answering 200
// {} or a page: the node took it for an admission and logged "cluster
// membership recorded" every second for ever, asked the server's GET
// /v1/cluster every second, and never asked the other --join addresses,
// so a real member listed after it never took the node in. It is a failed
// join, said once a minute, naming --join and the address.
func TestJoinAnsweredByAServerThatIsNotIdemIsAFailedJoin(t *testing.T) {
	t.Parallel()
	for name, answer := range map[string]http.HandlerFunc{
		"200 {}": func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			w.Write([]byte("{}"))
		},
		"200 html": func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/html")
			w.Write([]byte("<html><body>Welcome to nginx!</body></html>"))
		},
		"302 to a page": func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/" {
				w.Write([]byte("<html>home</html>"))
				return
			}
			http.Redirect(w, r, "/", http.StatusFound)
		},
		"401 basic": func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("WWW-Authenticate", `Basic realm="admin"`)
			http.Error(w, "401 Unauthorized", http.StatusUnauthorized)
		},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			bad := startNotIdem(t, answer)
			p := launch(t, filepath.Join(t.TempDir(), "data"), freePort(t), freePort(t), "--node-id", "n2", "--join", bad.addr)
			want := "--join " + bad.addr + " answered "
			waitFor(t, 20*time.Second, "the node saying --join is not an idem node", func() (bool, string) {
				logs := p.logs.String()
				return strings.Contains(logs, want) && strings.Contains(logs, "not an idem join answer"), logs
			})
			time.Sleep(3 * time.Second) // three more rounds
			logs := p.logs.String()
			require.NotContains(t, logs, "cluster membership recorded")
			require.Equal(t, 1, strings.Count(logs, want), "said once a minute, not every second:\n%s", logs)
			for _, r := range bad.requests() {
				require.Equal(t, "POST /v1/cluster/join", r, "only joins are asked of it, no status, no redirect followed")
			}
		})
	}
}

// The same server listed before a real member in --join: the node joins
// the member (it stopped at the first 200 and never asked it).
func TestJoinTriesTheOtherJoinAddressesAfterOneThatIsNotIdem(t *testing.T) {
	t.Parallel()
	bad := startNotIdem(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte("{}"))
	})
	dir := t.TempDir()
	n1 := start(t, filepath.Join(dir, "n1"), freePort(t), freePort(t), "--node-id", "n1")
	start(t, filepath.Join(dir, "n2"), freePort(t), freePort(t), "--node-id", "n2", "--join", bad.addr+","+n1.http)
}

// What an idem node answers a join, of this release and of earlier ones,
// is taken; what it never answers is not.
func TestJoinAnswerIsJudgedByItsContent(t *testing.T) {
	t.Parallel()
	const jsonCT, problemCT = "application/json", "application/problem+json"
	for _, c := range []struct {
		status     int
		ct, body   string
		isAnswer   bool
		outcome    string
		admittedAt uint64
	}{
		// This release (admitted_index since 486c43e), the one before, and
		// the first (outcome alone, before 9d6353a).
		{200, jsonCT, `{"outcome":"joined","suffrage":"nonvoter","detail":"n2 joined as non-voter","admitted_index":12}` + "\n", true, "joined", 12},
		{200, jsonCT, `{"outcome":"joined","suffrage":"voter","detail":"n2 is a voter already; its addresses are recorded"}`, true, "joined", 0},
		{200, jsonCT, `{"outcome":"joined"}`, true, "joined", 0},
		{200, "application/json; charset=utf-8", `{"outcome":"joined"}`, true, "joined", 0},
		// Refusals an idem node gives, and 5xx from whatever is in front.
		{409, problemCT, `{"code":"scope_mismatch","detail":"..."}`, true, "", 0},
		{401, problemCT, `{"code":"unauthorized","detail":"a valid Authorization: Bearer token is required"}`, true, "", 0},
		{503, "text/plain", "too many connections", true, "", 0},
		{502, "text/html", "<html>Bad Gateway</html>", true, "", 0},
		// Never an idem node's.
		{200, jsonCT, `{}`, false, "", 0},
		{200, jsonCT, `{"status":"ok"}`, false, "", 0},
		{200, jsonCT, `[]`, false, "", 0},
		{200, "text/html", `<html><body>Welcome to nginx!</body></html>`, false, "", 0},
		{200, "text/plain", `{"outcome":"joined"}`, false, "joined", 0},
		{200, "", ``, false, "", 0},
		{201, jsonCT, `{"outcome":"joined"}`, false, "joined", 0},
		{204, "", ``, false, "", 0},
		{302, "text/html", `<a href="/login">Found</a>.`, false, "", 0},
		{401, "text/plain", "401 Unauthorized", false, "", 0},
		{404, "text/plain", "404 page not found", false, "", 0},
	} {
		hdr := http.Header{}
		if c.ct != "" {
			hdr.Set("Content-Type", c.ct)
		}
		ans, ok := readJoinAnswer(c.status, hdr, []byte(c.body))
		require.Equal(t, c.isAnswer, ok, "%d %s %s", c.status, c.ct, c.body)
		if ok && c.status == 200 {
			require.Equal(t, c.outcome, ans.Outcome)
			require.Equal(t, c.admittedAt, ans.AdmittedIndex)
		}
	}
}

// A --bootstrap-expect node whose --join names such a server said only
// "waiting for peers to bootstrap" for ever (a 200 {} or a page), or, for
// a web server's 401, that the peer refused its --node-token-file token.
func TestJoinAddressThatIsNotIdemIsNamedWhileBootstrapping(t *testing.T) {
	t.Parallel()
	for name, answer := range map[string]http.HandlerFunc{
		"200 {}": func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			w.Write([]byte("{}"))
		},
		"401 basic": func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("WWW-Authenticate", `Basic realm="admin"`)
			http.Error(w, "401 Unauthorized", http.StatusUnauthorized)
		},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			bad := startNotIdem(t, answer)
			self := freePort(t)
			p := launch(t, filepath.Join(t.TempDir(), "data"), self, freePort(t), "--node-id", "n1", "--bootstrap-expect", "2", "--join", self+","+bad.addr)
			want := "--join " + bad.addr + " answered "
			waitFor(t, 20*time.Second, "the node saying --join is not an idem node", func() (bool, string) {
				logs := p.logs.String()
				return strings.Contains(logs, want) && strings.Contains(logs, "not an idem GET /v1/cluster answer"), logs
			})
			time.Sleep(2 * time.Second)
			logs := p.logs.String()
			require.Equal(t, 1, strings.Count(logs, want), "said once a minute, not every second:\n%s", logs)
			require.NotContains(t, logs, "node-token-file")
		})
	}
}
