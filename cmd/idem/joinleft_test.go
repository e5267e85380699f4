package main

import (
	"encoding/json"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idem-store/idem/raftfsm"
	"github.com/stretchr/testify/require"
)

// replayingJoiner is n1, holding a log of 2,400 claims, and n2, joined to
// it through a raft address that passes the leader's entries at about
// 40 KB/s, once n2 replays that log short of its admission.
func replayingJoiner(t *testing.T, dir string) (n1, n2 *proc) {
	t.Helper()
	n1 = start(t, dir+"/n1", freePort(t), freePort(t))
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 300 {
				a := call("POST", n1.http, "/v1/claim", claimReq(fmt.Sprintf("before-%d-%d", w, i), "c"))
				if a.code != 201 {
					t.Errorf("claim before the join: %s", a)
					return
				}
			}
		}()
	}
	wg.Wait()
	http2, raft2 := freePort(t), freePort(t)
	slow := slowRaftProxy(t, raft2, 40_000)
	n2 = launch(t, dir+"/n2", http2, raft2, "--node-id", "n2", "--join", n1.http, "--raft-advertise", slow)
	waitFor(t, 20*time.Second, "n2 replaying the log short of its admission", func() (bool, string) {
		a := call("GET", http2, "/v1/cluster", "")
		var st raftfsm.Status
		if a.code != 200 || json.Unmarshal(a.body, &st) != nil {
			return false, a.String()
		}
		listed := slices.ContainsFunc(st.Nodes, func(m raftfsm.Member) bool { return m.ID == "n2" })
		return len(st.Nodes) > 0 && !listed, a.String()
	})
	return n1, n2
}

// A node removed (idem cluster remove) while it replayed the cluster's log
// toward its admission logged that it was removed before it caught up,
// with the command that adds it back, and answered writes through it 503
// "no leader is available; retry shortly": a caller retried for ever. It
// answers what it logs, still 503 unavailable with Retry-After (as a
// removed member does: docs/API.md), naming the command.
func TestJoinerRemovedWhileReplayingSaysSo(t *testing.T) {
	t.Parallel()
	n1, n2 := replayingJoiner(t, t.TempDir())
	a := call("POST", n1.http, "/v1/cluster/remove", `{"id":"n2"}`)
	require.Equal(t, 200, a.code, "%s", a)
	// The loop asks the cluster once n2 has heard from no leader for 5 s.
	waitFor(t, 30*time.Second, "n2 logging that it was removed", func() (bool, string) {
		return strings.Contains(n2.logs.String(), "removed from the cluster before it caught up"), ""
	})
	for _, req := range []struct{ method, path, body string }{
		{"POST", "/v1/claim", claimReq("after-removal", "c")},
		{"GET", "/v1/records?" + url.Values{"principal": {cPrincipal}, "endpoint": {cEndpoint}, "key": {"before-0-0"}}.Encode(), ""},
	} {
		a = call(req.method, n2.http, req.path, req.body)
		t.Logf("%s %s through n2: %s", req.method, req.path, a)
		require.True(t, a.unavailable503(), "%s", a)
		require.Contains(t, a.String(), "removed from the cluster before it caught up")
		require.Contains(t, a.String(), "cluster join --id n2")
		require.NotContains(t, a.String(), "no leader is available")
	}
}
