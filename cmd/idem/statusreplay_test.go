package main

import (
	"bytes"
	"testing"

	"github.com/idem-store/idem/raftfsm"
	"github.com/stretchr/testify/require"
)

// idem cluster status asked at a node that joined and replays the
// cluster's log short of its admission (a walk: 120,000 entries replayed at
// a throttled pace) said, under its note that the node was catching up,
// "n2 is not a member of the configuration it knows (removed from the
// cluster?)": the configuration it has reached is older than its admission.
// A node that hears from no leader any more (Leader unset: removed before
// it caught up, or the leader is down) keeps the removed note.
func TestClusterStatusAtAReplayingJoinerIsNotCalledRemoved(t *testing.T) {
	st := raftfsm.Status{Self: raftfsm.NodeInfo{ID: "n2"}, Leader: &raftfsm.NodeInfo{ID: "n1"}, HealthFrom: "n1",
		HoldsVote: &raftfsm.VoteHoldStatus{LeaderTerm: 2, LeaderCommitIndex: 122325},
		Nodes:     []raftfsm.Member{{NodeInfo: raftfsm.NodeInfo{ID: "n1"}, Suffrage: "voter", Healthy: true}}}
	var out bytes.Buffer
	printStatus(&out, st)
	require.Contains(t, out.String(), "is catching up")
	require.NotContains(t, out.String(), "removed", "%s", out.String())
	require.Contains(t, out.String(), "has not reached the entry that took it in")

	st.Leader, st.HealthFrom = nil, ""
	out.Reset()
	printStatus(&out, st)
	require.Contains(t, out.String(), "removed from the cluster?")
}
