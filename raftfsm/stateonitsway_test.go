package raftfsm

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A node joining a cluster whose log was compacted gets the leader's
// snapshot, and holds no configuration until it has installed it: idem
// serve's membership loop, seeing no state, sent its join again every
// second for as long as the install took, and logged "cluster membership
// recorded" each time (a join to a 72 MB state). While a leader is heard
// from, the state is on its way; a node no leader reaches (restarted at
// new addresses) is not told so, and asks.
func TestJoiningNodeInstallingASnapshotHasItsStateOnItsWay(t *testing.T) {
	c := newMemCluster(t)
	// Put back once every node is closed, as in the tests of catchup_test.go.
	prev := beforeRestore
	t.Cleanup(func() { beforeRestore = prev })
	logs := make([]logBuffer, 2)
	open := snapshotOpener(c, []string{t.TempDir(), t.TempDir()}, []string{"127.0.0.1:0", "127.0.0.1:0"}, logs)
	n1 := open(0, true)
	c.leader(n1)
	for i := range 20 {
		require.NoError(t, claim(n1, fmt.Sprint("a", i)))
	}
	require.NoError(t, n1.Snapshot()) // 4 entries kept: n2 needs the snapshot

	// The install lasts until the test lets it go on, as a large state's does.
	var once sync.Once
	reached, release := make(chan struct{}), make(chan struct{})
	beforeRestore = func() error {
		once.Do(func() { close(reached) })
		<-release
		return nil
	}
	n2 := open(1, false)
	var released sync.Once
	let := func() { released.Do(func() { close(release) }) }
	t.Cleanup(let) // before n2 closes: its close waits for the install
	require.False(t, n2.StateOnItsWay(), "no leader has reached n2 yet: it must ask to join")
	require.NoError(t, n2.MarkJoining())
	res, err := n1.Join(n2.Self(), false, true)
	require.NoError(t, err)
	require.NoError(t, n2.Admitted(res.AdmittedIndex))
	select {
	case <-reached:
	case <-time.After(20 * time.Second):
		t.Fatal("n2 was sent no snapshot")
	}
	// A heartbeat comes within a tenth of a heartbeat timeout.
	require.Eventually(t, n2.StateOnItsWay, 2*time.Second, 10*time.Millisecond, "n2 heard from no leader while it installs its snapshot")
	for end := time.Now().Add(3 * time.Second); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		require.False(t, n2.HasState(), "the window this test is about")
		require.True(t, n2.StateOnItsWay(), "n2 is installing the leader's snapshot (last contact %v ago)", time.Since(n2.raft.LastContact()))
	}
	let()
	require.Eventually(t, func() bool { return n2.HasState() && n2.IsMember() }, 20*time.Second, 20*time.Millisecond)
	require.False(t, n2.StateOnItsWay(), "n2 has its state")
}
