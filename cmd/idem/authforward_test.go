package main

import (
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idem-store/idem/api"
)

// A token only a follower's --auth-file lists (its unit file edited, the
// leader's not): the follower takes it and forwards the claim, the leader
// answers 401 "not one of the node's tokens", and the client gets that
// from a node whose file lists the token, with no node named anywhere.
// The follower now logs that the leader refused what it passed on, and
// why that happens.
func TestFollowerSaysTheLeaderRefusedATokenItTakes(t *testing.T) {
	const ip = "127.0.0.9"
	dir := t.TempDir()
	entry := func(name, token, role string) string {
		return `{"name":"` + name + `","sha256":"` + api.HashToken(token) + `","role":"` + role + `"}`
	}
	node := entry("node", "node-token-0123456789", "admin")
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, []byte(body), 0o600))
		return p
	}
	leaderAuth := write("leader.json", `{"tokens":[`+node+`]}`)
	followerAuth := write("follower.json", `{"tokens":[`+node+`,`+entry("ops", "ops-token-0123456789", "operator")+`]}`)
	nodeToken := write("node.token", "node-token-0123456789\n")

	h1, r1, h2, r2 := freePortOn(t, ip), freePortOn(t, ip), freePortOn(t, ip), freePortOn(t, ip)
	start(t, filepath.Join(dir, "n1"), h1, r1, "--node-id", "n1", "--auth-file", leaderAuth, "--node-token-file", nodeToken)
	follower := start(t, filepath.Join(dir, "n2"), h2, r2, "--node-id", "n2", "--join", h1, "--auth-file", followerAuth, "--node-token-file", nodeToken)

	claim := func() int {
		req, _ := http.NewRequest("POST", "http://"+h2+"/v1/claim", strings.NewReader(`{"principal":"p","endpoint":"e","key":"k","fingerprint":"aa"}`))
		req.Header.Set("Authorization", "Bearer ops-token-0123456789")
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	const said = "the leader answered 401 to a request this node passed on, a token this node takes: their --auth-file differ"
	waitFor(t, 20*time.Second, "the follower's warning", func() (bool, string) {
		code := claim()
		return code == 401 && strings.Contains(follower.logs.String(), said), ""
	})
	claim()
	require.Equal(t, 1, strings.Count(follower.logs.String(), said), "at most once a minute")
	require.Contains(t, follower.logs.String(), "leader="+h1)
}
