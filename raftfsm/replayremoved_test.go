package raftfsm

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idem-store/idem/engine"
)

// A node that joined and replays the cluster's log follows the leader
// sending it (Leader). Removed before its log reaches its admission, it
// never learns of the removal (a leader stops sending to a node it
// removes) and is neither a member nor Outside; raft keeps its last leader
// until its heartbeat timeout, a day for a node that holds its campaign
// until it has caught up. Such a node went on naming that leader, and
// forwarding writes and reads to it, for that day (a walk with two
// processes: claims sent through it 40 s after its removal were forwarded and
// answered 201). It knows no leader once it hears from none, and says it
// replays unheard, which idem serve's membership loop asks the cluster
// about.
func TestNodeRemovedBeforeItsAdmissionFollowsNoLeader(t *testing.T) {
	t.Parallel()
	n1, n2, admitted := replayingShortOfAdmission(t)
	_, ok := n2.Leader()
	require.True(t, ok, "n2 follows the leader that sends it the log")
	require.False(t, n2.ReplayingUnheard(), "n2 hears from its leader")

	require.Eventually(t, func() bool { return n1.Remove("n2", false) == nil }, 15*time.Second, 200*time.Millisecond)
	require.Less(t, n2.raft.LastIndex(), admitted, "the window this test is about")
	require.Eventually(t, func() bool { _, ok := n2.Leader(); return !ok }, 15*time.Second, 50*time.Millisecond,
		"n2 was removed before its admission and hears from no leader, yet follows one")
	require.False(t, n2.IsMember())
	require.False(t, n2.Outside(), "n2 cannot tell a removal from a leader that is down")
	require.True(t, n2.ReplayingUnheard())
}

// Told by the cluster that it was removed (idem serve's membership loop
// asks the leader), such a node says so (RemovedWhileReplaying, which the
// API answers with) until a leader is heard from again: added back, the
// leader sends to it, and it is not called removed, whether or not the
// loop has asked again.
func TestNodeRemovedBeforeItsAdmissionIsCalledRemovedUntilAddedBack(t *testing.T) {
	t.Parallel()
	n1, n2, _ := replayingShortOfAdmission(t)
	n2.MarkRemovedWhileReplaying("mem-n1")
	_, removed := n2.RemovedWhileReplaying()
	require.False(t, removed, "n2 hears from its leader")

	require.Eventually(t, func() bool { return n1.Remove("n2", false) == nil }, 15*time.Second, 200*time.Millisecond)
	require.Eventually(t, n2.ReplayingUnheard, 15*time.Second, 50*time.Millisecond)
	n2.MarkRemovedWhileReplaying("mem-n1")
	member, removed := n2.RemovedWhileReplaying()
	require.True(t, removed)
	require.Equal(t, "mem-n1", member)
	// Its replica holds part of the cluster's log, for good: a stale read
	// there could answer a key the cluster holds as absent.
	_, _, err := n2.Lookup(context.Background(), engine.Scope{Principal: "p", Endpoint: "e", Key: "k1"}, false, false)
	var removedErr *RemovedError
	require.True(t, errors.As(err, &removedErr), "a stale read on a node removed before it caught up: %v", err)

	n2.guard.hook.Store(nil) // the leader's appends reach it again
	_, err = n1.Join(n2.Self(), false, false)
	require.NoError(t, err)
	require.Eventually(t, func() bool { _, removed := n2.RemovedWhileReplaying(); return !removed }, 15*time.Second, 50*time.Millisecond,
		"n2 was added back and hears from its leader")
}
