package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A node joined by hand (idem cluster join, before it started: the join's
// auth check had nothing to ask) and started without --auth-file into a
// cluster whose nodes check tokens: its own join is refused
// (auth_mismatch), which removes nothing, and caught up it was promoted and
// answered another tenant's record to a caller without a token
// (consistency=stale, from its own replica). The leader now keeps it back:
// a non-voter, not ready, refusing stale reads, with why in cluster status.
func TestJoinedByHandWithoutAuthFileIsKeptBack(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	const nodeTok, appTok = "node-token-0123456789", "app-token-b-0123456789"
	auth := filepath.Join(dir, "auth.json")
	writeAuth(t, auth, entry("node", nodeTok, "admin"), entry("tenant-b", appTok, "app", "tenant-b"))
	nodeToken := filepath.Join(dir, "node.token")
	require.NoError(t, os.WriteFile(nodeToken, []byte(nodeTok+"\n"), 0o600))
	do := func(method, addr, path, token, body string) (int, string) {
		req, _ := http.NewRequest(method, "http://"+addr+path, strings.NewReader(body))
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}

	h1, r1 := freePort(t), freePort(t)
	start(t, filepath.Join(dir, "n1"), h1, r1, "--node-id", "n1", "--auth-file", auth, "--node-token-file", nodeToken)
	code, body := do("POST", h1, "/v1/claim", appTok, `{"principal":"tenant-b","endpoint":"e","key":"k","fingerprint":"aa"}`)
	require.Equal(t, http.StatusCreated, code, body)

	h2, r2 := freePort(t), freePort(t)
	out, code := cli(t, "join", "--addr", h1, "--auth-token", nodeTok, "--id", "n2", "--raft-addr", r2, "--node-http-addr", h2)
	require.Equal(t, 0, code, "%s", out)
	n2 := launch(t, filepath.Join(dir, "n2"), h2, r2, "--node-id", "n2", "--join", h1, "--node-token-file", nodeToken)

	notPromoted := func() (string, string) {
		code, body := do("GET", h1, "/v1/cluster", nodeTok, "")
		var st struct {
			Nodes []struct {
				ID, Suffrage string
				NotPromoted  string `json:"not_promoted"`
			}
		}
		if code != 200 || json.Unmarshal([]byte(body), &st) != nil {
			return "", body
		}
		for _, m := range st.Nodes {
			if m.ID == "n2" {
				return m.NotPromoted, fmt.Sprintf("%+v", m)
			}
		}
		return "", body
	}
	waitFor(t, 30*time.Second, "n2 is kept back", func() (bool, string) {
		why, m := notPromoted()
		code, body := do("GET", h2, "/v1/records?principal=tenant-b&endpoint=e&key=k&consistency=stale", "", "")
		return strings.Contains(why, "without --auth-file") && code == http.StatusServiceUnavailable,
			fmt.Sprintf("%s; stale read at n2: %d %s; n2's log:\n%s", m, code, body, tail(n2.logs.String()))
	})
	time.Sleep(3 * time.Second) // promotion would come within seconds of catching up
	why, m := notPromoted()
	require.Contains(t, m, "Suffrage:nonvoter")
	require.Contains(t, why, "start it with the --auth-file the other nodes use")
	code, body = do("GET", h2, "/v1/records?principal=tenant-b&endpoint=e&key=k&consistency=stale", "", "")
	require.Equal(t, http.StatusServiceUnavailable, code, "another tenant's record, to a caller without a token: %s", body)
	require.NotContains(t, body, `"state"`)
	code, _ = do("GET", h2, "/readyz", "", "")
	require.Equal(t, http.StatusServiceUnavailable, code)
}
