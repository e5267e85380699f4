package raftfsm

import (
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/stretchr/testify/require"
)

// Right after a restart a node answered the leader's check with raft's
// applied index, 0 until raft replays its log, while its state store
// already held everything it had applied (its /readyz answered 200):
// idem cluster status showed it NO, "had applied 0", APPLIED 0 and a lag
// of the whole log, as of a node that had lost its data. The store's
// index is now reported beside raft's and the reason says what happens;
// the judgement itself (quorum of a removal, transfers, promotion) still
// goes by raft's index.
func TestReplayingNodeIsShownWithItsStateIndex(t *testing.T) {
	now := time.Now()
	n := &Node{unhealty: map[raft.ServerID]time.Time{}}
	n.peers.commits = []commitSample{{at: now.Add(-behindWindow - time.Second), index: 4000}, {at: now.Add(-time.Second), index: 4100}}
	h := &peerHealth{checkedAt: now, answeredAt: now, contactAt: now, applied: 0, lag: 4100, stateApplied: ptr(uint64(4100))}

	ok, why := n.judge(h, "n2", now)
	require.False(t, ok, "a node raft has not replayed on counts as healthy: decisions must go by raft's index")
	require.Contains(t, why, "replaying its log after a restart: raft had applied 0 when the leader had committed 4000")
	require.Contains(t, why, "its state already holds index 4100")

	m := Member{NodeInfo: NodeInfo{ID: "n2"}}
	h.fill(&m, now)
	require.Equal(t, uint64(0), *m.AppliedIndex, "applied_index stays raft's")
	require.Equal(t, uint64(4100), *m.StateAppliedIndex)

	// A follower asked shows what the leader measured.
	st := Status{Self: NodeInfo{ID: "n1"}, Nodes: []Member{{NodeInfo: NodeInfo{ID: "n2"}}}}
	st.MergeHealth(Status{HealthFrom: "n3", Nodes: []Member{m}})
	require.Equal(t, uint64(4100), *st.Nodes[0].StateAppliedIndex)

	// A state behind too is falling behind, as before.
	h.stateApplied = ptr(uint64(10))
	ok, why = n.judge(h, "n2", now)
	require.False(t, ok)
	require.Contains(t, why, "falling behind: had applied 0 when the leader had committed 4000")
	// An earlier release says nothing of its state.
	h.stateApplied = nil
	_, why = n.judge(h, "n2", now)
	require.Contains(t, why, "falling behind: had applied 0")
}
