package raftfsm

import (
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/stretchr/testify/require"
)

// A leader that removes a member makes one last attempt to send it the
// configuration that removes it, then stops sending to it. When that
// attempt fails (a busy machine: seen once in cmd/idem's
// TestClusterRemoveNode), the removed node's log lists it for ever: it
// campaigned every election timeout, was never Outside, and answered
// writes "no leader is available". Told by a leader of its term (idem
// serve's membership loop asks one) that it is not listed, it is Outside
// until a leader reaches it again; a leader of an older term is not
// believed.
func TestMemberWhoseRemovalNeverArrivedIsOutsideOnceALeaderSaysSo(t *testing.T) {
	t.Parallel()
	c := newMemCluster(t)
	n1, _, n3 := c.three()
	var cutting atomic.Bool
	cut := func(rpc raft.RPC) error {
		if _, ok := rpc.Command.(*raft.AppendEntriesRequest); ok && cutting.Load() {
			return errors.New("test: the leader's appends are lost")
		}
		return nil
	}
	n3.guard.hook.Store(&cut)
	cutting.Store(true)
	require.NoError(t, n1.Remove("n3", false))
	require.Eventually(t, n3.MemberUnheard, 20*time.Second, 50*time.Millisecond)
	require.True(t, n3.IsMember(), "the removal never reached n3: the window this test is about")
	require.False(t, n3.Outside(), "n3 cannot tell a removal from a leader that is down")

	require.False(t, n3.MarkRemovedUnheard("mem-n1", n3.term()-1), "a leader of an older term does not speak for the cluster")
	require.False(t, n3.Outside())
	require.True(t, n3.MarkRemovedUnheard("mem-n1", n1.term()), "n1 leads at a term at least n3's")
	require.True(t, n3.Outside())
	member, ok := n3.RemovedUnheard()
	require.True(t, ok)
	require.Equal(t, "mem-n1", member)
	_, leads := n3.Leader()
	require.False(t, leads)

	cutting.Store(false) // added back: the leader's appends reach it again
	_, err := n1.Join(n3.Self(), false, false)
	require.NoError(t, err)
	require.Eventually(t, func() bool { return !n3.Outside() && n3.IsMember() }, 20*time.Second, 50*time.Millisecond,
		"n3 was added back and hears from its leader")
	_, ok = n3.RemovedUnheard()
	require.False(t, ok)
}
