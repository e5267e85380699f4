package raftfsm

import (
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/stretchr/testify/require"
)

// A node stopped caught up kept the lag of its last answer, 0, in
// GET /v1/cluster while the leader committed on: idem cluster status showed
// LAG 0 beside APPLIED 8 at commit index 11, read as "caught up". A node
// that did not answer the last check has a lag nobody knows: null, with
// its last answer's applied index.
func TestStoppedNodesLagIsNotKnown(t *testing.T) {
	now := time.Now()
	n := &Node{unhealty: map[raft.ServerID]time.Time{}}
	h := &peerHealth{firstAt: now.Add(-time.Minute), checkedAt: now, answeredAt: now.Add(-6 * time.Second),
		contactAt: now.Add(-6 * time.Second), applied: 8, lag: 0, err: "connection refused"}

	_, why := n.judge(h, "n3", now)
	require.Contains(t, why, DidNotAnswer)

	m := Member{NodeInfo: NodeInfo{ID: "n3"}}
	h.fill(&m, now)
	require.Nil(t, m.Lag, "the lag of a node that did not answer the last check is not known")
	require.NotNil(t, m.AppliedIndex)
	require.Equal(t, uint64(8), *m.AppliedIndex, "applied_index is its last answer's")

	// Answering again, it has a lag again.
	h.err, h.answeredAt, h.lag = "", now, 3
	m = Member{NodeInfo: NodeInfo{ID: "n3"}}
	h.fill(&m, now)
	require.NotNil(t, m.Lag)
	require.Equal(t, uint64(3), *m.Lag)
}
