package raftfsm

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Who led when is in each node's log at info: raft says so only at debug
// (its routine lines), and a node's log after an outage held no word of
// which node led, or when a node lost its leader.
func TestLeaderChangesAreLoggedAtInfo(t *testing.T) {
	t.Parallel()
	c := newMemCluster(t)
	addrs := testRaftAddrs(t, 2)
	logs := [2]*logBuffer{{}, {}}
	open := func(i int) *Node {
		return c.start(loggedConfig(t, []string{"n1", "n2"}[i], addrs[i], i == 0, logs[i]))
	}
	n1 := open(0)
	c.leader(n1)
	n2 := open(1)
	c.join(n2, n1)
	require.Eventually(t, func() bool { return strings.Contains(logs[1].String(), "following a leader") }, 10*time.Second, 10*time.Millisecond,
		"n2's log:\n%s", logs[1].String())
	require.Contains(t, logs[0].String(), `msg="this node leads the cluster" term=`)
	require.Regexp(t, `msg="following a leader" leader=n1 leader-raft-addr=`+addrs[0]+` term=\d+`, logs[1].String())

	// n1 hands over: each log says who leads now.
	c.handOver(n1, n2)
	require.Eventually(t, func() bool {
		return strings.Contains(logs[1].String(), `msg="this node leads the cluster"`) &&
			strings.Contains(logs[0].String(), `msg="following a leader" leader=n2`)
	}, 20*time.Second, 10*time.Millisecond, "n1's log:\n%s\nn2's log:\n%s", logs[0].String(), logs[1].String())

	// n2 stops: n1, left alone of two voters, knows no leader and says so
	// once, through all the elections it cannot win.
	const none = `msg="this node knows no leader now: an election is under way, or the leader cannot be reached" last-leader=n2`
	before := strings.Count(logs[0].String(), none)
	c.stop(n2)
	require.Eventually(t, func() bool { return strings.Count(logs[0].String(), none) > before }, 20*time.Second, 10*time.Millisecond,
		"n1's log:\n%s", logs[0].String())
	time.Sleep(3 * time.Second)
	require.Equal(t, before+1, strings.Count(logs[0].String(), none), "n1's log:\n%s", logs[0].String())
	// n2, stopped as it led, said nothing of losing its leader: it lost
	// it by stopping.
	require.NotContains(t, logs[1].String(), `no leader now: an election is under way, or the leader cannot be reached" last-leader=n2`, "n2's log:\n%s", logs[1].String())
}
