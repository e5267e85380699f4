package raftfsm

import (
	"context"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/stretchr/testify/require"

	"github.com/idem-store/idem/engine"
)

// A voter's data dir emptied and the node started again at its own
// addresses, without idem cluster remove first, is that voter as soon as
// the leader reaches it (raft goes by address). Empty, it gave its vote to
// any candidate: here n2, which missed an entry that n1 and the old n3
// committed, was elected with the empty n3's vote and the entry was lost
// (a claim acknowledged, then absent). The empty node now holds its vote
// for a candidate like n2 (voteHold).
func TestEmptiedVoterDoesNotVoteAMissingEntryIn(t *testing.T) {
	t.Parallel()
	c := newMemCluster(t)
	n1 := c.open("n1", "", true)
	c.leader(n1)
	n2 := c.open("n2", "", false)
	c.join(n2, n1)
	n3 := c.open("n3", "", false)
	c.join(n3, n1)
	require.NoError(t, claim(n1, "before"))
	dir1, dir2, raft1, raft2, raft3 := n1.cfg.DataDir, n2.cfg.DataDir, n1.self.RaftAddr, n2.self.RaftAddr, n3.self.RaftAddr
	c.stop(n2)
	require.NoError(t, claim(c.leader(n1, n3), "acked")) // committed by n1 and n3
	l := c.leader(n1, n3)
	if l == n3 {
		require.NoError(t, n3.TransferLeadershipTo("n1"))
	}
	c.stop(n3)
	c.stop(n1)

	n2 = c.openIn2("n2", dir2, raft2, nil)
	var logs3 logBuffer
	c.openIn2("n3", t.TempDir(), raft3, &logs3) // n3's disk lost
	deadline := time.Now().Add(6 * time.Second)
	for time.Now().Before(deadline) {
		require.False(t, n2.IsLeader(), "n2, which lacks an acknowledged entry, was elected with the empty n3's vote")
		time.Sleep(50 * time.Millisecond)
	}
	require.Contains(t, logs3.String(), "not voting: this node started with an empty data dir")
	require.Contains(t, logs3.String(), "no leader has reached it since it started")
	n1 = c.openIn2("n1", dir1, raft1, nil)
	l = c.leader(n1, n2)
	_, found, err := l.Lookup(context.Background(), engine.Scope{Principal: "p", Endpoint: "e", Key: "acked"}, false, true)
	require.NoError(t, err)
	require.True(t, found, "the acknowledged claim was lost")
}

// openIn2 starts node id on dir at raftAddr ("" for any port), without
// bootstrapping, logging into logs when given.
func (c *memCluster) openIn2(id, dir, raftAddr string, logs *logBuffer) *Node {
	c.t.Helper()
	cfg := DefaultConfig()
	cfg.NodeID, cfg.DataDir, cfg.RaftAddr, cfg.HTTPAdvertise, cfg.Bootstrap = id, dir, raftAddr, "mem-"+id, false
	if raftAddr == "" {
		cfg.RaftAddr = "127.0.0.1:0"
	}
	if logs != nil {
		cfg.Logger = slog.New(slog.NewTextHandler(logs, nil))
	}
	return c.start(cfg)
}

// openEmpty starts nodes ids on empty data dirs of their own, none
// bootstrapping (as --bootstrap-expect nodes before one forms the
// cluster), and returns them with their data dirs, raft addresses and
// infos, in the order of ids.
func (c *memCluster) openEmpty(ids ...string) (nodes []*Node, dirs, addrs []string, infos []NodeInfo) {
	c.t.Helper()
	for _, id := range ids {
		dir := c.t.TempDir()
		n := c.openIn2(id, dir, "", nil)
		nodes, dirs, addrs, infos = append(nodes, n), append(dirs, dir), append(addrs, n.self.RaftAddr), append(infos, n.Self())
	}
	return nodes, dirs, addrs, infos
}

// A cluster formed with --bootstrap-expect in which one node bootstrapped
// first and the others, seeing its cluster, asked to join it rather than
// bootstrap themselves (idem serve's tryBootstrap): they are empty, with
// their joining files, when the first node campaigns, and no leader has
// reached them. Holding their votes until they had caught up past an
// admission they never learned (acc8560, reverted) deadlocked such a
// cluster: nobody could be elected. A candidate whose log holds only the
// bootstrap configuration now gets their votes; once they have caught up
// with the leader they vote again for good, without a join answer, and
// after a restart too (the mark is on disk).
func TestBootstrapExpectFirstElectionWithPeersThatAskedToJoin(t *testing.T) {
	t.Parallel()
	c := newMemCluster(t)
	nodes, dirs, addrs, infos := c.openEmpty("n1", "n2", "n3")
	for _, n := range nodes {
		require.True(t, n.voteHeld(), "%s started empty without bootstrapping, and holds its vote", n.self.ID)
	}
	require.NoError(t, nodes[0].Bootstrap(infos)) // n1 only; n2 and n3 asked to join
	l := c.leader(nodes...)
	require.Equal(t, "n1", l.self.ID, "only n1 has a configuration to campaign with")
	require.NoError(t, claim(l, "first"))
	require.Eventually(t, func() bool { return !nodes[1].voteHeld() && !nodes[2].voteHeld() }, 20*time.Second, 20*time.Millisecond,
		"n2 and n3 never got their votes back")
	for _, n := range nodes[1:] {
		require.FileExists(t, filepath.Join(n.cfg.DataDir, joiningFile), "%s learned no admission: its joining file stays", n.self.ID)
	}

	// Without n1, the two others elect one of them.
	c.stop(nodes[0])
	l = c.leader(nodes[1], nodes[2])
	require.NoError(t, claim(l, "second"))

	// Both stopped and started again while n1 stays down: they still have
	// their joining files, and vote from the mark they recorded (holding
	// until a leader reached them, each would refuse the other for good).
	c.stop(nodes[1])
	c.stop(nodes[2])
	for i := 1; i < 3; i++ {
		nodes[i] = c.openIn2(nodes[i].self.ID, dirs[i], addrs[i], nil)
	}
	l = c.leader(nodes[1], nodes[2])
	require.NoError(t, claim(l, "third"))
	for _, key := range []string{"first", "second", "third"} {
		_, found, err := l.Lookup(context.Background(), engine.Scope{Principal: "p", Endpoint: "e", Key: key}, false, true)
		require.NoError(t, err)
		require.True(t, found, key)
	}
}

// The rule a node that started empty votes by, on a real node: with no
// leader heard, only a new cluster's first candidate (its log ends at
// index 1 or below); then the first commit index named by a leader of the
// highest term heard, compared as raft compares logs (term first). The
// mark outlives a restart, and goes with the joining file.
func TestVoteHoldRule(t *testing.T) {
	t.Parallel()
	c := newMemCluster(t)
	dir := t.TempDir()
	n := c.openIn2("n3", dir, "", nil)
	require.True(t, n.voteHeld())
	from := raft.RPCHeader{ID: []byte("n2")}
	votes := func(term, index uint64) bool { return n.mayVote(from, term, index) == nil }

	require.True(t, votes(0, 0), "an empty candidate (nothing to miss)")
	require.True(t, votes(1, 1), "a candidate holding only the bootstrap configuration")
	require.False(t, votes(1, 2))
	require.False(t, votes(9, 100), "no leader heard: this node cannot tell what the candidate misses")

	n.leaderCommit(5, 0, false) // a heartbeat names no commit index
	require.False(t, votes(9, 100))
	n.leaderCommit(5, 40, true)
	require.True(t, votes(5, 40))
	require.True(t, votes(5, 41))
	require.True(t, votes(6, 2), "a later term's log holds everything committed before it")
	require.False(t, votes(5, 39))
	require.False(t, votes(4, 1000), "many entries of an older term")
	require.False(t, votes(1, 1), "past its first election")
	n.leaderCommit(5, 60, true) // the same leader later: the mark stays
	require.True(t, votes(5, 40))
	n.leaderCommit(4, 90, true) // an older term's leader
	require.True(t, votes(5, 40))
	n.leaderCommit(7, 50, true) // a new leader
	require.False(t, votes(6, 80))
	require.True(t, votes(7, 50))

	c.stop(n)
	n = c.openIn2("n3", dir, "", nil)
	require.True(t, n.voteHeld(), "still empty, still joining")
	require.False(t, votes(6, 80))
	require.True(t, votes(7, 50), "the mark was recorded")
	require.NoError(t, removeJoining(dir))
	require.NoFileExists(t, filepath.Join(dir, markFile))
}
