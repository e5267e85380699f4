package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A non-voter the leader keeps one answered /readyz 200 and
// consistency=stale reads from its own state. Here n2, taken in by hand
// before it answered and started with --scope principal on a cluster whose
// nodes run with endpoint and no write pinned the scope yet: the leader
// keeps it a non-voter (not_promoted), yet it said it was ready and
// answered stale reads. It now learns from the leader that it is kept
// back: /readyz is 503 naming the leader's reason, and a stale read is
// 503; writes and linearizable reads sent to it still go to the leader.
// Once the first claim pins the scope the leader promotes it, and it is
// ready and serves stale reads again.
func TestKeptBackNonVoterIsNotReadyAndRefusesStaleReads(t *testing.T) {
	t.Parallel()
	h1, r1 := freePort(t), freePort(t)
	start(t, t.TempDir(), h1, r1, "--node-id", "n1")

	h2, r2 := freePort(t), freePort(t)
	out, code := cli(t, "join", "--addr", h1, "--id", "n2", "--raft-addr", r2, "--node-http-addr", h2)
	require.Equal(t, 0, code, "%s", out)
	launch(t, t.TempDir(), h2, r2, "--node-id", "n2", "--scope", "principal", "--join", h1)
	waitFor(t, 30*time.Second, "the leader keeps n2 a non-voter", func() (bool, string) {
		a := call("GET", h1, "/v1/cluster", "")
		var st struct {
			Nodes []struct {
				ID, Suffrage string
				NotPromoted  string `json:"not_promoted"`
				Lag          *uint64
			}
		}
		json.Unmarshal(a.body, &st)
		for _, m := range st.Nodes {
			if m.ID == "n2" {
				return m.NotPromoted != "" && m.Lag != nil && *m.Lag == 0, a.String()
			}
		}
		return false, a.String()
	})

	waitFor(t, 15*time.Second, "n2's /readyz is 503 naming why", func() (bool, string) {
		a := call("GET", h2, "/readyz", "")
		return a.code == 503 && strings.Contains(string(a.body), "keeps from becoming a voter"), a.String()
	})
	a := call("GET", h2, "/readyz", "")
	require.Equal(t, "unavailable", a.problemCode())
	for _, want := range []string{"n1 keeps", "--scope principal", "answers no consistency=stale read", "empty data dir with --join"} {
		require.Contains(t, string(a.body), want)
	}
	a = call("GET", h2, recordPath("held", "stale"), "")
	require.Equal(t, 503, a.code, "a stale read on the kept node: %s", a)
	require.Equal(t, "unavailable", a.problemCode())
	require.Contains(t, string(a.body), "keeps from becoming a voter")
	require.NotEmpty(t, a.hdr.Get("Retry-After"))
	// A batch's stale get is refused as a stale lookup is.
	a = call("POST", h2, "/v1/batch", `{"ops":[{"op":"get","principal":"`+cPrincipal+`","endpoint":"`+cEndpoint+`","key":"held","consistency":"stale"}]}`)
	require.Contains(t, string(a.body), "keeps from becoming a voter", "%s", a)
	// Linearizable reads are the leader's; the leader is ready.
	a = call("GET", h2, recordPath("held", ""), "")
	require.Equal(t, 404, a.code, "%s", a)
	a = call("GET", h1, "/readyz", "")
	require.Equal(t, 200, a.code, "%s", a)
	a = call("GET", h1, recordPath("held", "stale"), "")
	require.Equal(t, 404, a.code, "%s", a)

	// A claim sent to n2 goes to the leader and pins the scope: the leader
	// no longer keeps n2 back, promotes it, and n2 serves again.
	a = call("POST", h2, "/v1/claim", claimReq("held", "c-held"))
	require.Equal(t, 201, a.code, "%s", a)
	waitFor(t, 30*time.Second, "n2 ready again once promoted", func() (bool, string) {
		a := call("GET", h2, "/readyz", "")
		return a.code == 200, a.String()
	})
	m, _ := memberAt(t, h1, "n2")
	require.Equal(t, "voter", m.Suffrage)
	a = call("GET", h2, recordPath("held", "stale"), "")
	require.Equal(t, 200, a.code, "%s", a)
}
