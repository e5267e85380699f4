package main

import (
	"crypto/rand"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
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

// compactedLeader is n1, holding about 600 KB of state that compression
// cannot shrink, its log compacted: a node joining it is sent a snapshot,
// 15 s long at 40 KB/s.
func compactedLeader(t *testing.T, dir string) *proc {
	t.Helper()
	n1 := start(t, dir+"/n1", freePort(t), freePort(t), "--snapshot-threshold", "64", "--trailing-logs", "16", "--snapshot-interval", "200ms", "--min-free-disk", "0")
	for i := range 12 {
		key := fmt.Sprint("big-", i)
		a := call("POST", n1.http, "/v1/claim", claimReq(key, "c"))
		require.Equal(t, 201, a.code, "%s", a)
		var claimed struct{ Token string }
		require.NoError(t, json.Unmarshal(a.body, &claimed))
		body := make([]byte, 48<<10)
		rand.Read(body)
		b, _ := json.Marshal(map[string]any{"principal": cPrincipal, "endpoint": cEndpoint, "key": key, "token": claimed.Token,
			"response": map[string]any{"status": 201, "content_type": "application/octet-stream", "body": body}})
		a = call("POST", n1.http, "/v1/complete", string(b))
		require.Equal(t, 200, a.code, "%s", a)
	}
	for i := range 80 {
		a := call("POST", n1.http, "/v1/claim", claimReq(fmt.Sprint("small-", i), "c"))
		require.Equal(t, 201, a.code, "%s", a)
	}
	waitFor(t, 10*time.Second, "a snapshot on n1", func() (bool, string) {
		es, _ := os.ReadDir(dir + "/n1/snapshots")
		for _, e := range es {
			if _, err := os.Stat(dir + "/n1/snapshots/" + e.Name() + "/state.bin"); err == nil {
				return true, ""
			}
		}
		return false, fmt.Sprint(len(es), " entries")
	})
	return n1
}

// installing reports whether the node at addr holds no state yet and has
// heard from a leader: the leader is sending it the cluster's state.
func installing(addr string) (bool, string) {
	a := call("GET", addr, "/v1/cluster", "")
	var st raftfsm.Status
	if a.code != 200 || json.Unmarshal(a.body, &st) != nil {
		return false, a.String()
	}
	return len(st.Nodes) == 0 && st.Leader != nil, a.String()
}

// A node that joined a cluster whose log was compacted installs the
// leader's snapshot, and until the install ends its state records no
// member: it knew the leader's raft address, not its HTTP one, and a write
// or read through it waited 3 s and was answered 503 "no leader", for as
// long as the install lasted (seconds for a large state). It learns the
// members' addresses from the cluster when it joins, and forwards, as it
// does while it replays the log.
func TestJoinerInstallingASnapshotForwards(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	n1 := compactedLeader(t, dir)
	http2, raft2 := freePort(t), freePort(t)
	slow := slowRaftProxy(t, raft2, 40_000)
	n2 := launch(t, dir+"/n2", http2, raft2, "--node-id", "n2", "--join", n1.http, "--raft-advertise", slow)
	waitFor(t, 20*time.Second, "n2 installing the leader's snapshot", func() (bool, string) { return installing(http2) })

	for _, req := range []struct{ method, path, body string }{
		{"POST", "/v1/claim", claimReq("during-install", "c")},
		{"GET", "/v1/records?" + url.Values{"principal": {cPrincipal}, "endpoint": {cEndpoint}, "key": {"small-0"}}.Encode(), ""},
	} {
		began := time.Now()
		a := call(req.method, http2, req.path, req.body)
		took := time.Since(began)
		t.Logf("%s %s through n2 while it installs: %s in %s", req.method, req.path, a, took)
		if ok, _ := installing(http2); !ok {
			t.Skip("n2 installed the snapshot before it answered: the window this test is about is gone")
		}
		// Without an address to forward to, it waited LeaderWait and
		// answered 503 "no leader".
		require.Contains(t, []int{200, 201}, a.code, "%s", a)
	}
	require.NotContains(t, n2.logs.String(), "restored snapshot", "the window this test is about")
}

// A node installing the leader's snapshot that could not learn the
// members' addresses (added by hand, its --join member down) knows no HTTP
// address to forward to: it answers at once, 503 unavailable with
// Retry-After, that it is receiving the cluster's state, where it waited
// 3 s and answered "no leader is available".
func TestJoinerInstallingWithoutAddressesAnswersAtOnce(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	n1 := compactedLeader(t, dir)
	http2, raft2 := freePort(t), freePort(t)
	slow := slowRaftProxy(t, raft2, 40_000)
	a := call("POST", n1.http, "/v1/cluster/join", fmt.Sprintf(`{"id":"n2","raft_addr":%q,"http_addr":%q}`, slow, http2))
	require.Equal(t, 200, a.code, "%s", a)
	down := freePort(t) // nothing answers there
	launch(t, dir+"/n2", http2, raft2, "--node-id", "n2", "--join", down, "--raft-advertise", slow)
	waitFor(t, 20*time.Second, "n2 installing the leader's snapshot", func() (bool, string) { return installing(http2) })

	for _, req := range []struct{ method, path, body string }{
		{"POST", "/v1/claim", claimReq("during-install", "c")},
		{"GET", "/v1/records?" + url.Values{"principal": {cPrincipal}, "endpoint": {cEndpoint}, "key": {"small-0"}}.Encode(), ""},
	} {
		began := time.Now()
		a := call(req.method, http2, req.path, req.body)
		took := time.Since(began)
		t.Logf("%s %s through n2 while it installs: %s in %s", req.method, req.path, a, took)
		if ok, _ := installing(http2); !ok {
			t.Skip("n2 installed the snapshot before it answered: the window this test is about is gone")
		}
		require.True(t, a.unavailable503(), "%s", a)
		// Not the "no leader" answer after LeaderWait.
		require.Contains(t, a.String(), "receiving the cluster's state")
	}
}
