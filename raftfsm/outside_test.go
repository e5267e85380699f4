package raftfsm

import (
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/stretchr/testify/require"
)

// A node joining a cluster whose log holds many entries before the join
// replays them, and until the entry that took it in its newest
// configuration leaves it out. idem serve's membership loop took that for
// a removal and warned, at WARN, "this node is not in the cluster's
// configuration (removed?)", with a command to add it back: a join to a
// one-node store of 180,000 entries said so two seconds in, and the node
// was promoted two seconds later. Here the leader is cut off while the
// joining node's log ends before its admission, which holds that window
// open: the node is not Outside then, and is once it is really removed.
func TestNodeReplayingBeforeItsAdmissionIsNotOutside(t *testing.T) {
	t.Parallel()
	n1, n2, admitted := replayingShortOfAdmission(t)
	require.Less(t, n2.raft.LastIndex(), admitted)

	// Longer than the two rounds of a second the loop waits before it
	// warns.
	for end := time.Now().Add(2500 * time.Millisecond); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		require.True(t, n2.HasState(), "the window this test is about")
		require.False(t, n2.IsMember(), "the window this test is about")
		require.False(t, n2.Outside(), "n2 replays entries older than its admission at index %d, its log at %d", admitted, n2.raft.LastIndex())
	}

	n2.guard.hook.Store(nil)
	require.Eventually(t, func() bool { return n2.IsMember() && !n2.joining.Load() }, 20*time.Second, 20*time.Millisecond, "n2 never caught up")
	require.False(t, n2.Outside())

	// Really removed: outside.
	require.Eventually(t, func() bool { return n1.Remove("n2", false) == nil }, 15*time.Second, 200*time.Millisecond)
	require.Eventually(t, n2.Outside, 10*time.Second, 20*time.Millisecond, "n2 was removed")
}

// replayingShortOfAdmission is n1, leading a log of 600 entries, and n2,
// joined to it (admitted at index admitted) with its log held short of
// its admission: the leader's appends past n2's own configuration entry
// are refused on n2's side (n2.guard.hook; storing nil lets them through).
func replayingShortOfAdmission(t *testing.T) (n1, n2 *Node, admitted uint64) {
	t.Helper()
	c := newMemCluster(t)
	n1 = c.open("n1", "", true)
	c.leader(n1)
	for i := range 600 { // past the leader's first batch of 512 entries
		require.NoError(t, claim(n1, fmt.Sprintf("k%d", i)))
	}
	n2 = c.open("n2", "", false)
	require.False(t, n2.Outside(), "a node without state")
	var dropped atomic.Int64
	cut := func(rpc raft.RPC) error {
		if _, ok := rpc.Command.(*raft.AppendEntriesRequest); !ok || n2.raft.LastIndex() == 0 {
			return nil
		}
		for _, s := range n2.raft.GetConfiguration().Configuration().Servers {
			if s.ID == "n2" {
				return nil
			}
		}
		dropped.Add(1)
		return errors.New("test: the leader is cut off")
	}
	n2.guard.hook.Store(&cut)
	require.NoError(t, n2.MarkJoining())
	res, err := n1.Join(n2.Self(), false, true)
	require.NoError(t, err)
	require.NoError(t, n2.Admitted(res.AdmittedIndex)) // as idem serve's join does
	require.Eventually(t, func() bool { return dropped.Load() > 0 }, 20*time.Second, 10*time.Millisecond, "n2's log never ended before its admission")
	return n1, n2, res.AdmittedIndex
}
