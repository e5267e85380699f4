package api_test

import (
	"fmt"
	"net"
	"net/http"
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
// entry that took it in its newest configuration leaves it out. A write
// sent to it then waited for a leader and was answered 503 "this node is
// not in the cluster's configuration (it was removed, or has not been
// admitted yet)", with a command for an operator to add it back: it had
// been admitted, and catches up on its own.
func TestJoiningNodeReplayingIsNotCalledRemoved(t *testing.T) {
	t.Parallel()
	leader := mustNode(t)
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
	n2 := mustNode(t, leaderless(200*time.Millisecond), func(c *nodeConfig) {
		c.raft.NodeID, c.raft.RaftAddr, c.raft.RaftListener = "n2", ln.Addr().String(), slowListener{ln}
	})
	require.NoError(t, n2.node.MarkJoining())
	res, err := leader.node.Join(n2.node.Self(), false, true)
	require.NoError(t, err)
	require.NoError(t, n2.node.Admitted(res.AdmittedIndex)) // as idem serve's join does
	require.Eventually(t, n2.node.HasState, 20*time.Second, 5*time.Millisecond, "n2 was sent nothing")
	require.False(t, n2.node.IsMember(), "n2 caught up at once: the window this test is about is gone")

	r := n2.claim(sc("during-replay"), fp1)
	require.False(t, n2.node.IsMember(), "n2 caught up before it answered: the window this test is about is gone")
	t.Logf("n2 answered while it replays: %s", r)
	requireProblem(t, r, http.StatusServiceUnavailable, "unavailable")
	require.NotContains(t, string(r.raw), "not in the cluster's configuration", "n2 replays the log up to its admission")
	require.NotContains(t, string(r.raw), "cluster join", "n2 replays the log up to its admission")

	require.Eventually(t, n2.node.IsMember, 30*time.Second, 20*time.Millisecond, "n2 never caught up")
}
