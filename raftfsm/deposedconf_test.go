package raftfsm

import (
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// threeAt starts a three-node cluster as three does, on raft addresses of
// IDEM_TEST_IP and IDEM_TEST_PORTS (a shared machine).
func (c *memCluster) threeAt() (n1, n2, n3 *Node) {
	c.t.Helper()
	addrs := testRaftAddrs(c.t, 3)
	n1 = c.open("n1", addrs[0], true)
	c.leader(n1)
	n2 = c.open("n2", addrs[1], false)
	c.join(n2, n1)
	n3 = c.open("n3", addrs[2], false)
	c.join(n3, n1)
	return n1, n2, n3
}

// errLogCut is how configIndex fails on a node whose log the new leader
// cut under its scan.
var errLogCut = errors.New("raftfsm: read raft log entry 42 for the configuration: log not found")

// A join or a removal found its node leading, then read the configuration
// on a node that no longer led: it waited for the membership lock (a
// promotion holds it while its change commits) while the leadership moved,
// or the leadership moved while it read. The new leader cuts the deposed
// node's log (or installs a snapshot in it), and configIndex, reading the
// log, failed: a plain error, answered 500 internal error. It is the
// not-leader answer now, which the API forwards to the new leader.
func TestMembershipChangeReadOnADeposedLeaderIsNotLeader(t *testing.T) {
	c := newMemCluster(t)
	n1, n2, n3 := c.threeAt()
	all := []*Node{n1, n2, n3}
	absent := testRaftAddrs(t, 1)[0]
	for _, when := range []string{"at-the-lock", "while-reading"} {
		for _, change := range []string{"join", "remove"} {
			t.Run(when+"/"+change, func(t *testing.T) {
				l := c.leader(all...)
				var next, other *Node
				for _, n := range all {
					switch {
					case n == l:
					case next == nil:
						next = n
					default:
						other = n
					}
				}
				do := func() error {
					if change == "join" {
						_, err := l.Join(NodeInfo{ID: "n4", RaftAddr: absent, HTTPAddr: "mem-n4"}, false, false)
						return err
					}
					return l.Remove(other.self.ID, false)
				}
				var failed atomic.Int32
				deposed := func() { // the leadership has moved to next, and l knows it
					require.Eventually(t, func() bool { id, ok := l.Leader(); return ok && id.ID == next.self.ID && !l.IsLeader() },
						10*time.Second, 10*time.Millisecond)
				}
				var hook func(*Node) error
				var err error
				if when == "at-the-lock" {
					hook = func(n *Node) error {
						if n == l && !n.IsLeader() {
							failed.Add(1)
							return errLogCut
						}
						return nil
					}
					configScanHook.Store(&hook)
					t.Cleanup(func() { configScanHook.Store(nil) })
					l.confChange.Lock() // as a promotion holds it
					done := make(chan error, 1)
					go func() { done <- do() }()
					time.Sleep(100 * time.Millisecond) // the change has found l leading, and waits
					c.handOver(l, next)
					deposed()
					l.confChange.Unlock()
					err = <-done
				} else {
					var once atomic.Bool
					hook = func(n *Node) error {
						if n != l || !once.CompareAndSwap(false, true) {
							return nil
						}
						c.handOver(l, next)
						deposed()
						failed.Add(1)
						return errLogCut
					}
					configScanHook.Store(&hook)
					t.Cleanup(func() { configScanHook.Store(nil) })
					err = do()
					require.EqualValues(t, 1, failed.Load(), "the change read the configuration once the leadership moved")
				}
				configScanHook.Store(nil)
				require.ErrorIs(t, err, ErrNotLeader, "the new leader decides it (the API forwards); got %v", err)
			})
		}
	}
}
