package raftfsm

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A join or a removal checks, before it changes anything, that the voters
// left would be a healthy quorum, on the health this leader measured in
// its term. One that waited for the membership lock (a promotion holds it
// while its change commits) while the leadership moved on ran its check
// on a follower, which measures nothing: every other voter was "not
// measured yet", and the change was refused 409 would_lose_quorum, "bring
// the unhealthy nodes back first", for a healthy cluster (an attack
// moving the leadership every half second while nodes joined and left).
// It is the not-leader answer now: the API forwards it to the new leader.
func TestMembershipChangeOnADeposedLeaderIsNotAQuorumRefusal(t *testing.T) {
	c := newMemCluster(t)
	n1, n2, n3 := c.three()
	nodes := map[string]*Node{"n1": n1, "n2": n2, "n3": n3}
	for _, change := range []string{"join", "remove"} {
		t.Run(change, func(t *testing.T) {
			l := c.leader(n1, n2, n3)
			var next *Node
			for _, n := range []*Node{n1, n2, n3} {
				if n != l {
					next = n
					break
				}
			}
			l.confChange.Lock() // as a promotion holds it
			done := make(chan error, 1)
			go func() {
				if change == "join" {
					_, err := l.Join(NodeInfo{ID: "n4", RaftAddr: "127.0.0.1:1", HTTPAddr: "mem-n4"}, false, false)
					done <- err
					return
				}
				var other string
				for id, n := range nodes {
					if n != l && n != next {
						other = id
					}
				}
				done <- l.Remove(other, false)
			}()
			time.Sleep(100 * time.Millisecond) // the change has found this node leading, and waits
			c.handOver(l, next)
			require.Eventually(t, func() bool { _, ok := l.Leader(); return ok && !l.IsLeader() }, 10*time.Second, 10*time.Millisecond)
			l.confChange.Unlock()
			err := <-done
			var qe *QuorumError
			require.False(t, errors.As(err, &qe), "a healthy cluster's change refused for its quorum on a node that no longer leads: %v", err)
			require.ErrorIs(t, err, ErrNotLeader, "the new leader decides it (the API forwards)")
		})
	}
}

// A removal is committed once raft's RemoveServer returns; the leader then
// removes the node's address record, a write of its own. When the
// leadership moved between the two, Remove returned the write's failure
// (not the leader), the API forwarded the removal to the new leader, and
// that one answered 404 "no such member" for the node just removed, exit
// status 1 (an attack moving the leadership every half second). The
// removal is answered done; the record left belongs to no member.
func TestRemovalCommittedBeforeTheLeadershipMovedIsDone(t *testing.T) {
	c := newMemCluster(t)
	n1, n2, n3 := c.three()
	l := c.leader(n1, n2, n3)
	_, err := l.Join(NodeInfo{ID: "n4", RaftAddr: "127.0.0.1:1", HTTPAddr: "mem-n4"}, false, false)
	require.NoError(t, err)
	var next *Node
	for _, n := range []*Node{n1, n2, n3} {
		if n != l {
			next = n
			break
		}
	}
	hook := func(*Node) { c.handOver(l, next) }
	removedHook.Store(&hook)
	t.Cleanup(func() { removedHook.Store(nil) })

	require.NoError(t, l.Remove("n4", false), "the removal is committed: it is done")
	removedHook.Store(nil)
	f := next.raft.GetConfiguration()
	require.NoError(t, f.Error())
	for _, s := range f.Configuration().Servers {
		require.NotEqual(t, "n4", string(s.ID))
	}
}
