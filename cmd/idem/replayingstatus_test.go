package main

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idem-store/idem/raftfsm"
)

// A node restarted a moment ago, whose raft had not replayed its log yet,
// showed APPLIED 0 and a LAG of the whole log while its state held every
// entry (its /readyz answered 200). The columns now show its state's
// index when that is ahead of raft's; HEALTHY stays the leader's
// judgement, by raft's.
func TestClusterStatusShowsAReplayingNodesStateIndex(t *testing.T) {
	u := func(v uint64) *uint64 { return &v }
	st := raftfsm.Status{Self: raftfsm.NodeInfo{ID: "n1"}, Leader: &raftfsm.NodeInfo{ID: "n1"}, HealthFrom: "n1", CommitIndex: 4100, Nodes: []raftfsm.Member{
		{NodeInfo: raftfsm.NodeInfo{ID: "n1"}, Suffrage: "voter", Healthy: true, AppliedIndex: u(4100), Lag: u(0), StateAppliedIndex: u(4100)},
		{NodeInfo: raftfsm.NodeInfo{ID: "n2"}, Suffrage: "voter", AppliedIndex: u(0), Lag: u(4100), StateAppliedIndex: u(4098),
			UnhealthyReason: "replaying its log after a restart: raft had applied 0 …"},
		{NodeInfo: raftfsm.NodeInfo{ID: "n3"}, Suffrage: "voter", Healthy: true, AppliedIndex: u(4090), Lag: u(10)},
	}}
	var out bytes.Buffer
	printStatus(&out, st)
	s := out.String()
	require.Regexp(t, `(?m)^n2\s+voter\s+NO\s+2\s+4098\s`, s, "the state's index, and the lag it makes")
	require.Regexp(t, `(?m)^n3\s+voter\s+yes\s+10\s+4090\s`, s, "a node of a release that does not say shows raft's")
	require.Contains(t, s, "n2: replaying its log after a restart")
}
