package raftfsm

import (
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

// A join scans the raft log for its newest configuration entry. Raft
// compacts the log on its own after a snapshot, and one that did so while
// the scan walked down made the scan read an entry gone: the join was
// answered 500 "internal error" (a CI run, a leader compacting every 64
// entries while a node joined). The scan now takes what the compaction
// left for the snapshot's, and the join goes through.
func TestJoinWhileTheLogIsCompactedUnderTheScanGoesThrough(t *testing.T) {
	c := newMemCluster(t)
	var logs [1]logBuffer
	open := snapshotOpener(c, []string{t.TempDir()}, []string{"127.0.0.1:0"}, logs[:])
	n1 := c.leader(open(0, true))
	for i := range 40 {
		claimFresh(t, n1, fmt.Sprint("k", i))
	}
	first, err := n1.logStore.FirstIndex()
	require.NoError(t, err)

	var once sync.Once
	var snapErr error
	hook := func(n *Node) error {
		once.Do(func() { snapErr = n.Snapshot() })
		return nil
	}
	configScanHook.Store(&hook)
	t.Cleanup(func() { configScanHook.Store(nil) })

	res, err := n1.Join(NodeInfo{ID: "n2", RaftAddr: "127.0.0.1:1", HTTPAddr: "mem-n2"}, false, false)
	require.NoError(t, snapErr)
	after, ferr := n1.logStore.FirstIndex()
	require.NoError(t, ferr)
	require.Greater(t, after, first+30, "the snapshot compacted the log under the scan: the case of this test")
	require.NoError(t, err)
	require.Equal(t, "nonvoter", res.Suffrage)
}
