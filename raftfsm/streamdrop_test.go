package raftfsm

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idem-store/idem/engine"
)

// A follower that installed the leader's snapshot kept the received stream
// (the whole state, uncompressed) until two snapshots of its own followed:
// raft keeps the two newest. Only the newest is ever read (a lost fsm is
// rebuilt from it, raft opens it), so once the node's own marker follows
// the stream, the stream only takes disk: a walk found a 918 MB stream
// beside 217 MB of tables for hours on a quiet cluster. It is removed when
// the first marker is persisted; a stream that is still the newest stays
// (a node that loses its fsm rebuilds from it).
func TestOwnSnapshotDropsTheReceivedStream(t *testing.T) {
	c := newMemCluster(t)
	keep := spareKeep
	spareKeep = 0
	t.Cleanup(func() { spareKeep = keep })
	logs := make([]logBuffer, 2)
	open := snapshotOpener(c, []string{t.TempDir(), t.TempDir()}, []string{"127.0.0.1:0", "127.0.0.1:0"}, logs)
	n1 := open(0, true)
	c.leader(n1)
	claim := func(key string) { t.Helper(); claimFresh(t, n1, key) }
	for i := range 20 {
		claim(fmt.Sprint("a", i))
	}
	require.NoError(t, n1.Snapshot()) // 4 entries kept: a joining node needs the snapshot
	claim("b")

	n2 := open(1, false)
	c.join(n2, n1)
	streams := func() (markers, full int, newestFull bool) {
		list, err := n2.snaps.FileSnapshotStore.List()
		require.NoError(t, err)
		for i, m := range list {
			if m.Size == int64(len(liveMagic)+8) {
				markers++
			} else {
				full++
				newestFull = newestFull || i == 0
			}
		}
		return
	}
	require.Eventually(t, func() bool { _, full, _ := streams(); return full == 1 }, 20*time.Second, 20*time.Millisecond, "n2 installed the leader's stream")
	claim("c")
	require.Eventually(t, func() bool {
		_, ok, err := n2.Lookup(context.Background(), engine.Scope{Principal: "p", Endpoint: "e", Key: "c"}, false, false)
		return err == nil && ok
	}, 20*time.Second, 20*time.Millisecond)
	_, _, newestFull := streams()
	require.True(t, newestFull, "the stream is the newest: kept")

	require.NoError(t, n2.Snapshot())
	markers, full, _ := streams()
	require.Equal(t, 1, markers)
	require.Zero(t, full, "the received stream outlived the node's own marker")
	require.Contains(t, logs[1].String(), "removed a snapshot stream older than this node's own newest snapshot")
}

// claimFresh claims key of principal p, endpoint e through n, and
// requires it claimed. A claim answered "no leader" (proposed nowhere: a
// loaded machine's election after a join) is asked again for up to 10 s.
func claimFresh(t *testing.T, n *Node, key string) {
	t.Helper()
	var res engine.Result
	var err error
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		res, _, err = n.Claim(engine.ClaimArgs{Scope: engine.Scope{Principal: "p", Endpoint: "e", Key: key}, Fingerprint: "aa", LeaseMs: 60_000, RetentionMs: 3_600_000})
		if !errors.Is(err, ErrNoLeader) || time.Now().After(deadline) {
			break
		}
	}
	require.NoError(t, err)
	require.Equal(t, engine.OutcomeClaimed, res.Outcome, key)
}
