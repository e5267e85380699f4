package main

import (
	"bytes"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idem-store/idem/raftfsm"
)

// idem cluster status asked every member's GET /v1/config twice, once for
// the settings comparison and once for the check of members that answer
// without a token. It asks once with the token, and without it only a
// member that publishes no auth file digest (n3, of an earlier release).
// Three stand-ins answer as members do: this is the command's logic.
func TestClusterStatusAsksEachMemberForItsConfigOnce(t *testing.T) {
	var mu sync.Mutex
	asked := map[string]int{} // "n1", "n1 without token"
	var st raftfsm.Status
	member := func(id, digest string) string {
		ln, err := net.Listen("tcp", freePort(t)) // IDEM_TEST_IP
		require.NoError(t, err)
		srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			switch r.URL.Path {
			case "/v1/cluster":
				json.NewEncoder(w).Encode(st)
			case "/v1/config":
				key := id
				if r.Header.Get("Authorization") == "" {
					key += " without token"
				}
				mu.Lock()
				asked[key]++
				mu.Unlock()
				d := ""
				if digest != "" {
					d = `,"auth_file_digest":"` + digest + `"`
				}
				w.Write([]byte(`{"retention":"24h0m0s","lease_default_ms":30000,"limits":{"max_lease_ms":3600000}` + d + `}`))
			default:
				http.NotFound(w, r)
			}
		}))
		srv.Listener.Close()
		srv.Listener = ln
		srv.Start()
		t.Cleanup(srv.Close)
		return ln.Addr().String()
	}
	for _, n := range []struct{ id, digest string }{{"n1", "abc"}, {"n2", "def"}, {"n3", ""}} {
		var m raftfsm.Member
		m.ID, m.HTTPAddr, m.RaftAddr, m.Suffrage, m.Healthy, m.Version = n.id, member(n.id, n.digest), "127.0.0.1:1", "voter", true, "v1"
		st.Nodes = append(st.Nodes, m)
	}
	st.Self, st.Version, st.HealthFrom = st.Nodes[0].NodeInfo, "v1", "n1"
	st.Leader = &st.Nodes[0].NodeInfo

	var stdout, stderr bytes.Buffer
	code := runCluster(t.Context(), []string{"status", "--addr", st.Nodes[0].HTTPAddr, "--auth-token", "idem_admin", "--timeout", "5s"}, &stdout, &stderr)
	require.Equal(t, 0, code, "%s%s", stdout.String(), stderr.String())
	// Both checks still say what they did.
	require.Contains(t, stdout.String(), "auth file digest: n1 abc, n2 def", stdout.String())
	require.Contains(t, stdout.String(), "WARNING: n3 answered GET /v1/config without a token", stdout.String())
	require.Equal(t, map[string]int{"n1": 1, "n2": 1, "n3": 1, "n3 without token": 1}, asked)
}
