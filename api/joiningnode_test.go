package api_test

import (
	"fmt"
	"net"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// slowListener's connections read at most 512 bytes every 10 ms (about
// 50 KB/s): a node behind it replays a leader's log slowly, as one does
// a large log.
type slowListener struct{ net.Listener }

func (l slowListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return slowConn{c}, nil
}

type slowConn struct{ net.Conn }

func (c slowConn) Read(p []byte) (int, error) {
	time.Sleep(10 * time.Millisecond)
	return c.Conn.Read(p[:min(len(p), 512)])
}

// A node that joined replays the cluster's log, and until it reaches the
// entry that took it in its newest configuration leaves it out. It called
// itself leaderless then: a write sent to it waited for a leader and was
// answered 503 "this node is not in the cluster's configuration (it was
// removed, or has not been admitted yet)", with a command for an operator
// to add it back, and its GET /v1/cluster named no leader and called the
// leader unhealthy, "this node knows no leader to ask". It follows the
// leader that sends it the log, and with no leader it is not called
// removed either.
func TestJoiningNodeReplayingIsNotCalledRemoved(t *testing.T) {
	t.Parallel()
	// The leader records its addresses in the log at its first tick, as
	// idem serve's does, before the entries n2 replays.
	leader := mustNode(t, func(c *nodeConfig) { c.raft.TickInterval = 50 * time.Millisecond })
	require.Eventually(t, leader.node.Registered, 10*time.Second, 10*time.Millisecond)
	var wg sync.WaitGroup
	for w := range 8 { // more than the leader's first batch of 512 entries to send
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 150 {
				r := leader.claim(sc(fmt.Sprintf("before-%d-%d", w, i)), fp1)
				require.Equal(t, http.StatusCreated, r.status, "%s", r)
			}
		}()
	}
	wg.Wait()

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	dir := t.TempDir()
	n2 := mustNode(t, leaderless(200*time.Millisecond), func(c *nodeConfig) {
		c.raft.NodeID, c.raft.DataDir, c.raft.RaftAddr, c.raft.RaftListener = "n2", dir, ln.Addr().String(), slowListener{ln}
	})
	require.NoError(t, n2.node.MarkJoining())
	res, err := leader.node.Join(n2.node.Self(), false, true)
	require.NoError(t, err)
	require.NoError(t, n2.node.Admitted(res.AdmittedIndex)) // as idem serve's join does
	require.Eventually(t, n2.node.HasState, 20*time.Second, 5*time.Millisecond, "n2 was sent nothing")
	require.False(t, n2.node.IsMember(), "n2 caught up at once: the window this test is about is gone")

	// The leader sends n2 the log: n2 follows it (once it has applied the
	// entry that records the leader's addresses).
	leaderHTTP := leader.node.Self().HTTPAddr
	require.Eventually(t, func() bool { return slices.Contains(n2.node.PeerHTTPAddrs(), leaderHTTP) }, 10*time.Second, 10*time.Millisecond)
	require.False(t, n2.node.IsMember(), "n2 caught up: the window this test is about is gone")
	l, ok := n2.node.Leader()
	require.True(t, ok, "n2 knows no leader while the leader sends it the log")
	require.Equal(t, leaderHTTP, l.HTTPAddr)
	st := n2.do("GET", "/v1/cluster", nil)
	require.Equal(t, http.StatusOK, st.status, "%s", st)
	leaderID := leader.node.Self().ID
	require.Contains(t, string(st.raw), `"leader":{"id":"`+leaderID+`"`, "n2 replays the log its leader sends")
	require.NotContains(t, string(st.raw), "knows no leader", "n2 replays the log its leader sends")
	r := n2.claim(sc("during-replay"), fp1)
	require.Equal(t, http.StatusCreated, r.status, "the claim goes to the leader: %s", r)
	require.False(t, n2.node.IsMember(), "n2 caught up before it answered: the window this test is about is gone")

	// Restarted where no leader reaches it (the leader sends to its old
	// raft address; or the leader is down): leaderless, not removed.
	require.NoError(t, n2.node.Close())
	n2 = mustNode(t, leaderless(200*time.Millisecond), func(c *nodeConfig) { c.raft.NodeID, c.raft.DataDir = "n2", dir })
	require.True(t, n2.node.HasState())
	r = n2.claim(sc("cut-off"), fp1)
	t.Logf("n2 answered while it replays, cut off: %s", r)
	requireProblem(t, r, http.StatusServiceUnavailable, "unavailable")
	require.NotContains(t, string(r.raw), "not in the cluster's configuration", "n2 replays the log up to its admission")
	require.NotContains(t, string(r.raw), "cluster join", "n2 replays the log up to its admission")
	require.False(t, n2.node.IsMember(), "the window this test is about")
}
