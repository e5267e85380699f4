package raftfsm

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/stretchr/testify/require"
)

// A member cut off from its leader but not from the others asks them for a
// pre-vote every second or two. Raft refused each at WARN, "rejecting
// pre-vote request since we have a leader", on the members that still
// followed the leader: a warning every 1-2 s on a healthy node, for
// another node's trouble (a walk: iptables cutting one member off from the
// leader alone). Each healthy member now says it once at info, and raft's
// repeats are at debug; the candidate's own log still says it has no
// leader.
func TestVoteRefusalsOfACutOffMemberAreNoWarning(t *testing.T) {
	t.Parallel()
	c := newMemCluster(t)
	addrs := testRaftAddrs(t, 3)
	logs := [3]*logBuffer{{}, {}, {}}
	n1 := ioNode(t, c, "n1", addrs[0], true, logs[0])
	c.leader(n1)
	n2 := ioNode(t, c, "n2", addrs[1], false, logs[1])
	c.join(n2, n1)
	n3 := ioNode(t, c, "n3", addrs[2], false, logs[2])
	c.join(n3, n1)
	require.Equal(t, "n1", c.leader(n1, n2, n3).self.ID)

	// n3 hears nothing of its leader; n1 and n2 still hear n3.
	var cutting atomic.Bool
	cut := func(rpc raft.RPC) error {
		if _, ok := rpc.Command.(*raft.AppendEntriesRequest); ok && cutting.Load() {
			return errors.New("test: the leader's appends are lost")
		}
		return nil
	}
	n3.guard.hook.Store(&cut)
	cutting.Store(true)
	const refused = `msg="raft: rejecting pre-vote request since we have a leader"`
	require.Eventually(t, func() bool { return strings.Contains(logs[1].String(), refused) }, 20*time.Second, 50*time.Millisecond,
		"n3 asks n2 for a pre-vote; n2's log:\n%s", logs[1].String())
	time.Sleep(6 * time.Second) // n3 asks again every election timeout (1-2 s)
	cutting.Store(false)

	require.Contains(t, logs[2].String(), "this node knows no leader now", "n3 says its own trouble")
	for i, l := range logs[:2] {
		s := l.String()
		require.Equal(t, 1, strings.Count(s, refused), "n%d said it once: %s", i+1, s)
		for _, line := range strings.Split(s, "\n") {
			if strings.Contains(line, "rejecting") {
				require.Contains(t, line, "level=INFO", "n%d: %s", i+1, line)
			}
		}
	}
}

// Raft's lines refusing a vote or a pre-vote, as hashicorp/raft v1.8
// passes them (raft.go, requestVote and requestPreVote): one the candidate
// cannot win anyway is said once at info per candidate and reason while it
// keeps asking; a node outside the configuration asking for votes is a
// warning, once per repeatEvery per candidate.
func TestRaftVoteRefusalLevels(t *testing.T) {
	var buf bytes.Buffer
	newH := func() *hclogAdapter {
		return newHCLog(slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelInfo}))).(*hclogAdapter)
	}
	from := raft.ServerAddress("127.0.0.3:7071")
	for _, tc := range []struct {
		msg  string
		args []any
	}{
		{"rejecting vote request since we have a leader", []any{"from", from, "leader", raft.ServerAddress("127.0.0.1:7071"), "leader-id", "n1"}},
		{"rejecting pre-vote request since we have a leader", []any{"from", from, "leader", raft.ServerAddress("127.0.0.1:7071"), "leader-id", "n1"}},
		{"rejecting vote request since our last term is greater", []any{"candidate", from, "last-term", uint64(4), "last-candidate-term", uint64(3)}},
		{"rejecting pre-vote request since our last index is greater", []any{"candidate", from, "last-index", uint64(40), "last-candidate-index", uint64(30)}},
		{"rejecting pre-vote request since node is not a voter", []any{"from", from}},
	} {
		buf.Reset()
		h := newH() // a vote's refusal and a pre-vote's of one candidate and reason are one episode
		for range 10 {
			h.Warn(tc.msg, tc.args...)
		}
		require.Equal(t, 1, strings.Count(buf.String(), "level=INFO "), "%s: %s", tc.msg, buf.String())
		require.NotContains(t, buf.String(), "level=WARN", tc.msg)
		buf.Reset()
		h.Warn(tc.msg, append([]any{"from", raft.ServerAddress("127.0.0.2:7071")}, tc.args[2:]...)...)
		require.Contains(t, buf.String(), "level=INFO ", "another candidate's is its own: %s", tc.msg)
	}

	buf.Reset()
	h := newH()
	for range 10 {
		h.Warn("rejecting vote request since node is not in configuration", "from", from)
	}
	require.Equal(t, 1, strings.Count(buf.String(), "level=WARN "), "a node outside the cluster asking for votes: %s", buf.String())

	// An episode ends after repeatEvery without a line.
	r := &repeatSpacer{last: map[string]repeat{}}
	t0 := time.Now()
	require.True(t, r.begins("k", t0))
	require.False(t, r.begins("k", t0.Add(repeatEvery/2)))
	require.False(t, r.begins("k", t0.Add(repeatEvery)), "asked all along: the same episode")
	require.True(t, r.begins("k", t0.Add(2*repeatEvery+time.Second)), "quiet for repeatEvery: a new episode")
}
