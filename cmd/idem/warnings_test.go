package main

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idem-store/idem/raftfsm"
)

// A leader whose clock ran 30h ahead had cluster status say "n1's wall
// clock is 30h0m0s behind the leader n3's" and the same of n2: it blamed
// the majority (a walk of mixed settings). Every other member off by about
// the same names the leader; members off by different amounts are named
// each, as before.
func TestClockWarningsNameTheLeaderWhenEveryOtherMemberAgrees(t *testing.T) {
	ms := func(d time.Duration) *int64 { v := d.Milliseconds(); return &v }
	status := func(offs ...time.Duration) raftfsm.Status {
		st := raftfsm.Status{Leader: &raftfsm.NodeInfo{ID: "n3"}}
		for i, o := range offs {
			st.Nodes = append(st.Nodes, raftfsm.Member{NodeInfo: raftfsm.NodeInfo{ID: []string{"n1", "n2", "n4"}[i]}, ClockOffsetMs: ms(o), ClockUncertaintyMs: ms(time.Millisecond)})
		}
		st.Nodes = append(st.Nodes, raftfsm.Member{NodeInfo: raftfsm.NodeInfo{ID: "n3"}, ClockOffsetMs: ms(0)})
		return st
	}
	w := clockWarnings(status(-30*time.Hour, -30*time.Hour-2*time.Second))
	require.Len(t, w, 1, "%q", w)
	require.Contains(t, w[0], "the leader n3's wall clock is 30h0m1s ahead of every other member's (n1, n2): check NTP on n3 first")

	w = clockWarnings(status(10*time.Minute, 20*time.Minute))
	require.Len(t, w, 2, "%q", w)
	require.Contains(t, w[0], "n1's wall clock is 10m0s ahead of the leader n3's")

	// One member off alone is that member's clock, whatever the other.
	w = clockWarnings(status(-time.Hour, 0))
	require.Len(t, w, 1, "%q", w)
	require.Contains(t, w[0], "n1's wall clock is 1h0m0s behind the leader n3's")
}

// A --trailing-logs of 32 kept a follower installing snapshots for minutes
// (each time the leader had moved past it again) with nothing saying why
// (a crash walk): a start below fewTrailingLogs warns.
func TestFewTrailingLogsWarn(t *testing.T) {
	require.Contains(t, trailingLogsNote(32), "--trailing-logs 32 is low: a follower more than 32 entries behind")
	require.Empty(t, trailingLogsNote(fewTrailingLogs))
	require.Empty(t, trailingLogsNote(raftfsm.DefaultConfig().TrailingLogs))
}
