package main

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idem-store/idem/raftfsm"
)

// A README walk stopped a node caught up and asked the status: LAG 0 beside
// APPLIED 8 at commit index 11, which a tired operator reads as "caught
// up". A node that did not answer the leader's last check shows LAG -
// (not known), and a note says why, also when a leader of an earlier
// release still reports the lag of its last answer.
func TestClusterStatusShowsAStoppedNodesLagAsNotKnown(t *testing.T) {
	u := func(v uint64) *uint64 { return &v }
	for name, lag := range map[string]*uint64{"null": nil, "earlier release": u(0)} {
		t.Run(name, func(t *testing.T) {
			st := raftfsm.Status{Self: raftfsm.NodeInfo{ID: "n1"}, Leader: &raftfsm.NodeInfo{ID: "n1"}, HealthFrom: "n1", CommitIndex: 11, Nodes: []raftfsm.Member{
				{NodeInfo: raftfsm.NodeInfo{ID: "n1"}, Suffrage: "voter", Healthy: true, AppliedIndex: u(11), Lag: u(0)},
				{NodeInfo: raftfsm.NodeInfo{ID: "n2"}, Suffrage: "voter", Healthy: true, AppliedIndex: u(11), Lag: u(0)},
				{NodeInfo: raftfsm.NodeInfo{ID: "n3"}, Suffrage: "voter", AppliedIndex: u(8), Lag: lag,
					UnhealthyReason: "did not answer the last check (last answer 6.2s ago): dial tcp: connection refused"},
			}}
			var out bytes.Buffer
			printStatus(&out, st)
			s := out.String()
			require.Regexp(t, `(?m)^n3\s+voter\s+NO\s+-\s+8\s`, s, "a stopped node's lag is not known")
			require.Regexp(t, `(?m)^n2\s+voter\s+yes\s+0\s+11\s`, s)
			require.Contains(t, s, "LAG - : not known", "the table says what - means")
		})
	}
	// Every node answering: no such note.
	st := raftfsm.Status{Self: raftfsm.NodeInfo{ID: "n1"}, Leader: &raftfsm.NodeInfo{ID: "n1"}, HealthFrom: "n1", CommitIndex: 11, Nodes: []raftfsm.Member{
		{NodeInfo: raftfsm.NodeInfo{ID: "n1"}, Suffrage: "voter", Healthy: true, AppliedIndex: u(11), Lag: u(0)},
	}}
	var out bytes.Buffer
	printStatus(&out, st)
	require.NotContains(t, out.String(), "LAG -")
}
