package raftfsm

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/stretchr/testify/require"

	"github.com/idem-store/idem/engine"
)

// testRaftAddrs picks n raft addresses the way testRaftListener does
// (IDEM_TEST_IP and IDEM_TEST_PORTS on a shared machine), all different.
func testRaftAddrs(t *testing.T, n int) []string {
	t.Helper()
	lns := make([]net.Listener, n)
	addrs := make([]string, n)
	for i := range lns {
		lns[i] = testRaftListener(t)
		addrs[i] = lns[i].Addr().String()
	}
	for _, ln := range lns {
		ln.Close()
	}
	return addrs
}

// The log store answers the entry at its newest snapshot's index S, when
// the log goes on from S+1, with a made-up no-op of the snapshot's term
// (guardedLogStore.snapshotHead), for a follower's check of the leader's
// previous entry. A node whose log so starts can lead: the made-up entry
// must never be sent as an entry of the log. Raft reads the entries it
// sends only after it has read the one before them (setPreviousLog), and
// that one is below S, so not found, and the follower is sent the
// snapshot; the one exception, a follower asked from index 1, reads entry
// 1, the made-up one only for a snapshot at index 1. Here a node that
// installed the leader's snapshot leads, with a follower behind the
// snapshot and an empty joiner (asked from index 1): both get the
// snapshot, and every log holds the same entries at the same indexes.
func TestLeaderWhoseLogStartsAtItsSnapshotSendsNoMadeUpEntry(t *testing.T) {
	c := newMemCluster(t)
	keep := spareKeep
	spareKeep = 0
	t.Cleanup(func() { spareKeep = keep })
	const nodes = 6
	logs := make([]logBuffer, nodes)
	dirs := make([]string, nodes)
	for i := range dirs {
		dirs[i] = t.TempDir()
	}
	open := snapshotOpener(c, dirs, testRaftAddrs(t, nodes), logs)
	ns := make([]*Node, nodes)
	ns[0] = open(0, true)
	c.leader(ns[0])
	for i := 1; i < 5; i++ {
		ns[i] = open(i, false)
		c.join(ns[i], ns[0])
	}
	leader := ns[0]
	claim := func(key string) { t.Helper(); claimFresh(t, leader, key) }
	claim("before")
	// n3 will install the snapshot, n4 stays behind it.
	c.stop(ns[2])
	c.stop(ns[3])
	for i := range 20 {
		claim(fmt.Sprint("a", i))
	}
	require.NoError(t, ns[0].Snapshot())
	for i := range 5 {
		claim(fmt.Sprint("b", i))
	}
	ns[2] = open(2, false)
	var snapIndex uint64
	require.Eventually(t, func() bool {
		si, _, ok := ns[2].snaps.newest()
		snapIndex = si
		return ok && ns[2].CaughtUp(ns[0].raft.CommitIndex())
	}, 20*time.Second, 20*time.Millisecond, "n3 installed no snapshot")
	for i := range 3 {
		claim(fmt.Sprint("c", i))
	}
	require.Eventually(t, func() bool { return ns[2].CaughtUp(ns[0].raft.CommitIndex()) }, 20*time.Second, 20*time.Millisecond)

	// n3 leads, its log starting right after its newest snapshot.
	require.NoError(t, ns[0].TransferLeadershipTo("n3"))
	leader = c.leader(ns[2])
	first, err := ns[2].logStore.FirstIndex()
	require.NoError(t, err)
	require.Equal(t, snapIndex+1, first, "the case under test: the leader's log goes on from its newest snapshot")
	var l raft.Log
	g := guardedLogStore{LogStore: ns[2].logStore, recent: newLogCache()}
	require.NoError(t, g.GetLog(snapIndex, &l))
	require.Equal(t, raft.LogNoop, l.Type, "the leader's store makes up the snapshot's entry")
	claim("led")

	// n4, behind the snapshot, comes back; n6 joins empty (asked from 1).
	ns[3] = open(3, false)
	ns[5] = open(5, false)
	c.join(ns[5], ns[2])
	claim("after")
	commit := ns[2].raft.CommitIndex()
	for _, n := range ns {
		require.Eventually(t, func() bool { return n.CaughtUp(commit) }, 20*time.Second, 20*time.Millisecond, "%s did not catch up", n.self.ID)
		_, ok, err := n.Lookup(context.Background(), engine.Scope{Principal: "p", Endpoint: "e", Key: "after"}, false, false)
		require.NoError(t, err)
		require.True(t, ok, n.self.ID)
	}
	// The same state everywhere at the same index.
	h, at, err := ns[2].StateHash()
	require.NoError(t, err)
	for _, n := range ns {
		require.Eventually(t, func() bool {
			hn, an, err := n.StateHash()
			return err == nil && an == at && hn == h
		}, 10*time.Second, 20*time.Millisecond, "%s's state differs", n.self.ID)
	}
	// Every log holds the entries it holds as the others do, and none holds
	// the snapshot's index unless it had the real entry there.
	type ent struct {
		term uint64
		typ  raft.LogType
		data string
	}
	seen := map[uint64]ent{}
	for _, n := range ns {
		f, err := n.logStore.FirstIndex()
		require.NoError(t, err)
		last, err := n.logStore.LastIndex()
		require.NoError(t, err)
		for i := f; i <= last && i > 0; i++ {
			var e raft.Log
			require.NoError(t, n.logStore.GetLog(i, &e))
			got := ent{e.Term, e.Type, string(e.Data)}
			if prev, ok := seen[i]; ok {
				require.Equal(t, prev, got, "%s's entry %d differs from another log's", n.self.ID, i)
			}
			seen[i] = got
		}
	}
	for _, i := range []int{3, 5} {
		f, err := ns[i].logStore.FirstIndex()
		require.NoError(t, err)
		require.Greater(t, f, snapIndex, "%s was sent entries at or below the leader's snapshot", ns[i].self.ID)
	}
	for _, i := range []int{3, 5} {
		require.Contains(t, logs[i].String(), "restored snapshot", "%s was sent the snapshot", ns[i].self.ID)
	}
}

// The one entry raft's leader reads to send without first reading the one
// before it is entry 1 (setPreviousLog: a follower asked from index 1 has
// no previous entry). A leader whose newest snapshot is at index 1 and
// whose log goes on from 2 made up entry 1 (a no-op of the snapshot's
// term) and sent it to a joining node as the log's entry, in place of the
// cluster's first configuration: two logs then held different entries at
// the same index and term. A snapshot at 1 is what a node bootstrapped
// with --trailing-logs 1 takes before its first command (the entry at 2,
// the leader's no-op, never reaches the FSM), here asked for by hand.
func TestLeaderSendsNoMadeUpFirstEntry(t *testing.T) {
	c := newMemCluster(t)
	addrs := testRaftAddrs(t, 2)
	logs := make([]logBuffer, 2)
	open := func(i int, bootstrap bool) *Node {
		cfg := DefaultConfig()
		id := fmt.Sprint("n", i+1)
		cfg.NodeID, cfg.DataDir, cfg.Bootstrap, cfg.RaftAddr, cfg.HTTPAdvertise = id, t.TempDir(), bootstrap, addrs[i], "mem-"+id
		cfg.SnapshotThreshold, cfg.TrailingLogs, cfg.SnapshotInterval = 1<<30, 1, time.Hour
		cfg.TickInterval = time.Hour // no command before the snapshot
		cfg.Logger = slog.New(slog.NewTextHandler(&logs[i], nil))
		return c.start(cfg)
	}
	n1 := open(0, true)
	c.leader(n1)
	require.Eventually(t, func() bool { return n1.raft.AppliedIndex() >= 2 }, 10*time.Second, 10*time.Millisecond)
	require.NoError(t, n1.Snapshot())
	si, _, ok := n1.snaps.newest()
	require.True(t, ok)
	first, err := n1.logStore.FirstIndex()
	require.NoError(t, err)
	if si != 1 || first != 2 {
		t.Skipf("the case needs a snapshot at 1 and the log from 2: got a snapshot at %d, the log from %d", si, first)
	}

	n2 := open(1, false)
	c.join(n2, n1)
	last, err := n2.logStore.LastIndex()
	require.NoError(t, err)
	f2, err := n2.logStore.FirstIndex()
	require.NoError(t, err)
	if f2 == 1 {
		// Sent as the log's entries, not as the snapshot: entry 1 must be
		// the cluster's first configuration, as n1 wrote it.
		var l raft.Log
		require.NoError(t, n2.logStore.GetLog(1, &l))
		require.Equal(t, raft.LogConfiguration, l.Type, "n2's entry 1 is not the cluster's first configuration (term %d)", l.Term)
		require.Equal(t, uint64(1), l.Term)
		conf := raft.DecodeConfiguration(l.Data)
		require.Len(t, conf.Servers, 1)
		require.Equal(t, raft.ServerID("n1"), conf.Servers[0].ID)
		require.Equal(t, raft.ServerAddress(addrs[0]), conf.Servers[0].Address)
	}
	require.Greater(t, last, si)
}

// The entry at index 1, when the newest snapshot is at 1 and the log goes
// on from 2, is the cluster's first configuration as the snapshot holds
// it, never a made-up no-op: a leader sends entry 1 without reading an
// entry before it.
func TestLogAnswersEntryOneAsTheFirstConfiguration(t *testing.T) {
	s := cachedStore(t)
	require.NoError(t, s.StoreLogs(entries(1, 2, 5, 32)))
	conf := raft.Configuration{Servers: []raft.Server{{Suffrage: raft.Voter, ID: "n1", Address: "127.0.0.1:7000"}}}
	meta := &raft.SnapshotMeta{Index: 1, Term: 1, Configuration: conf, ConfigurationIndex: 1}
	s.LogStore.snapHead = func() (*raft.SnapshotMeta, bool) { return meta, true }
	var l raft.Log
	require.NoError(t, s.GetLog(1, &l))
	require.Equal(t, raft.LogConfiguration, l.Type)
	require.Equal(t, uint64(1), l.Term)
	require.Equal(t, conf, raft.DecodeConfiguration(l.Data))

	// A snapshot at 1 whose configuration is not entry 1's: not known.
	meta.ConfigurationIndex = 0
	require.ErrorIs(t, s.GetLog(1, &l), raft.ErrLogNotFound)
}
