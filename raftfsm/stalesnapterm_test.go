package raftfsm

import (
	"errors"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/stretchr/testify/require"
)

// A leader's replication to a follower it could not reach waits out its
// backoff (up to 10 s in hashicorp/raft's replicateTo) without watching
// for the end of its leadership, then sends the follower a snapshot in the
// term it led. The node may be a follower of a later term by then: the
// snapshot, expanded from its state at the send (snapshotStore.Open),
// holds entries of that later term. A follower not yet reached by the new
// leader (partitioned from both until then) is still in the old term and
// installed it; its term at the install was below those entries' terms,
// and the new leader's entries at indexes that state had applied (in the
// later term) then marked the healthy follower diverged (checkApplied), for
// good. Such a snapshot is no longer sent.
func TestSnapshotOfALaterTermIsNotSentInAnEarlierOne(t *testing.T) {
	c := newMemCluster(t)
	prev := spareKeep // the stream sent holds n1's state as of the send
	spareKeep = 0
	t.Cleanup(func() { spareKeep = prev })
	addrs := testRaftAddrs(t, 3)
	var logs [4]logBuffer
	open := historyOpener(c)
	d3 := t.TempDir()
	n1 := open("n1", t.TempDir(), addrs[0], true, &logs[0])
	c.leader(n1)
	n2 := open("n2", t.TempDir(), addrs[1], false, &logs[1])
	c.join(n2, n1)
	n3 := open("n3", d3, addrs[2], false, &logs[2])
	c.join(n3, n1)
	claimFresh(t, n1, "a-0")
	c.stop(n3)
	for i := range 10 {
		claimFresh(t, n1, fmt.Sprint("a-", i+1))
	}
	require.NoError(t, n1.Snapshot()) // n3 is behind n1's log now
	term := n1.raft.CurrentTerm()

	// n2 leads a later term; n1 follows it and applies its entries.
	c.handOver(n1, n2)
	require.Greater(t, n2.raft.CurrentTerm(), term)
	for i := range 5 {
		claimFresh(t, n2, fmt.Sprint("b-", i))
	}
	waitAppliedIndex(t, n1, n2.db.Meta().Applied)

	// n3 is back, not yet reached by n2.
	hook := func(self raft.ServerID, rpc raft.RPC) error {
		if h, ok := rpc.Command.(raft.WithRPCHeader); ok && self == "n3" && string(h.GetRPCHeader().ID) == "n2" {
			return errors.New("unreachable (test)")
		}
		return nil
	}
	rpcHook.Store(&hook)
	t.Cleanup(func() { rpcHook.Store(nil) })
	n3 = open("n3", d3, addrs[2], false, &logs[3])

	// n1's replication of the term it led, out of its backoff, sends n3
	// its newest snapshot as hashicorp/raft's sendLatestSnapshot does.
	snaps, err := n1.snaps.List()
	require.NoError(t, err)
	require.NotEmpty(t, snaps)
	meta, rc, err := n1.snaps.Open(snaps[0].ID)
	require.NoError(t, err)
	req := &raft.InstallSnapshotRequest{
		RPCHeader:          raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte("n1"), Addr: []byte(addrs[0])},
		SnapshotVersion:    meta.Version,
		Term:               term,
		LastLogIndex:       meta.Index,
		LastLogTerm:        meta.Term,
		Peers:              meta.Peers,
		Size:               meta.Size,
		Configuration:      raft.EncodeConfiguration(meta.Configuration),
		ConfigurationIndex: meta.ConfigurationIndex,
	}
	var resp raft.InstallSnapshotResponse
	sendErr := n1.guard.InstallSnapshot("n3", raft.ServerAddress(addrs[2]), req, &resp, rc)
	rc.Close()
	t.Logf("stale send: %v, success %v", sendErr, resp.Success)

	// n2 reaches n3: n3 catches up and serves.
	rpcHook.Store(nil)
	claimFresh(t, n2, "c-0")
	want := n2.db.Meta().Applied
	require.Eventually(t, func() bool { return n3.db.Meta().Applied >= want || n3.Superseded() != "" }, 20*time.Second, 10*time.Millisecond)
	require.Empty(t, n3.Superseded(), "a healthy follower was stopped as diverged; its log:\n%s", tail(logs[3].String(), 30))
	require.Never(t, func() bool { return n3.Superseded() != "" }, time.Second, 20*time.Millisecond)
}

// The refused send is raft's "failed to install snapshot" and "failed to
// send snapshot to", at info: nothing is wrong, the current leader sends
// its own.
func TestRefusedSnapshotSendOfALeftTermIsInfo(t *testing.T) {
	err := fmt.Errorf("%w: not sent to n3 in term 2, this node is in term 3 now", errStaleSnapshotSend)
	for _, msg := range []string{"failed to install snapshot", "failed to send snapshot to"} {
		require.Equal(t, slog.LevelInfo, errorLevel(msg, []any{"peer", "n3", "error", err}), msg)
	}
}
