package raftfsm

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idem-store/idem/engine"
)

// A follower whose install takes longer than the leader's writes take to
// fill the trailing logs is sent the state once. The leader snapshotted
// and compacted its log during the install, the follower, installed at the
// snapshot's index, needed the entries above it, and was sent the whole
// state again (a walk: a 72 MB state twice with --trailing-logs 500), and
// again, never catching up while the writes went on.
func TestSlowInstallUnderWritesIsSentOnce(t *testing.T) {
	// Put back once every node is closed (cleanups run last first).
	installs := slowInstalls(t)

	c := newMemCluster(t)
	var logs [2]logBuffer
	n1 := c.openAt("n1", t.TempDir(), "127.0.0.1:0", true, &logs[0]) // a snapshot after every entry, 16 kept
	c.leader(n1)
	for i := range 50 {
		claimFresh(t, n1, fmt.Sprint("before-", i))
	}
	require.NoError(t, n1.Snapshot())
	claimFresh(t, n1, "compacted")
	require.Eventually(t, func() bool { first, err := n1.logStore.FirstIndex(); return err == nil && first > 1 }, 10*time.Second, 20*time.Millisecond)

	stopWriters, written := writeLoad(t, n1)

	n2 := c.openAt("n2", t.TempDir(), "127.0.0.1:0", false, &logs[1])
	res, err := n1.Join(n2.Self(), false, false)
	require.NoError(t, err)
	require.NoError(t, n2.Admitted(res.AdmittedIndex))
	require.Eventually(t, func() bool { return installs.Load() > 0 && n2.fsm.db.Meta().Applied > 0 }, 30*time.Second, 20*time.Millisecond, "n2 installed nothing")
	// The writes go on past the install, then stop; n2 catches up.
	time.Sleep(time.Second)
	stopWriters()
	want := n1.raft.AppliedIndex()
	require.Eventually(t, func() bool { return n2.fsm.db.Meta().Applied >= want }, 30*time.Second, 20*time.Millisecond,
		"n2 never caught up (%d installs, applied %d of %d)", installs.Load(), n2.fsm.db.Meta().Applied, want)
	t.Logf("%d claims written, leader applied %d, %d installs", written.Load(), want, installs.Load())
	require.Equal(t, int32(1), installs.Load(), "the joiner was sent the state more than once")
	require.Contains(t, logs[0].String(), "raft log compaction stops below a snapshot being sent")

	// Once the send is sendHoldAfter behind, compaction goes on as before.
	i := 0
	require.Eventually(t, func() bool {
		i++
		claimFresh(t, n1, fmt.Sprint("after-", i))
		first, err := n1.logStore.FirstIndex()
		last, err2 := n1.logStore.LastIndex()
		return err == nil && err2 == nil && last-first < 64
	}, 15*time.Second, 100*time.Millisecond, "the leader's log was not compacted after the send")
}

// Only a compaction stops below a snapshot being sent: removing the whole
// log (after an install) or a conflicting tail goes as asked, and so does a
// compaction on a disk short of space.
func TestCompactionStopsBelowASnapshotBeingSentOnly(t *testing.T) {
	s := cachedStore(t)
	require.NoError(t, s.StoreLogs(entries(1, 1, 100, 16)))
	keep := uint64(40)
	s.LogStore.keepFrom = func() (uint64, bool) { return keep, true }
	first := func() uint64 { t.Helper(); i, err := s.FirstIndex(); require.NoError(t, err); return i }
	last := func() uint64 { t.Helper(); i, err := s.LastIndex(); require.NoError(t, err); return i }

	require.NoError(t, s.DeleteRange(1, 20))
	require.Equal(t, uint64(21), first(), "a compaction below the snapshot being sent goes as asked")
	require.NoError(t, s.DeleteRange(21, 90))
	require.Equal(t, uint64(40), first(), "the entry at the snapshot's index and those above it stay")
	require.NoError(t, s.DeleteRange(40, 60))
	require.Equal(t, uint64(40), first())

	require.NoError(t, s.DeleteRange(95, 100))
	require.Equal(t, uint64(94), last(), "a conflicting tail is removed whole")
	require.NoError(t, s.StoreLogs(entries(2, 95, 120, 16)))

	s.g = &diskGuard{minFree: 1 << 62} // under any disk's free space
	require.NoError(t, s.DeleteRange(40, 60))
	require.Equal(t, uint64(61), first(), "on a disk short of space the compaction frees it")

	s.g = &diskGuard{}
	keep = 100
	require.NoError(t, s.DeleteRange(61, 120))
	require.Zero(t, last(), "the whole log is removed as asked (after an install)")
	require.Zero(t, first())
}

// slowInstalls makes every install of a leader's snapshot take 2 s (a large
// state on a slow disk) and counts them, and holds a leader's log 3 s after
// a send, for the rest of the test. Call it before any node starts: it is
// put back once every node is closed (cleanups run last first).
func slowInstalls(t *testing.T) *atomic.Int32 {
	prev, prevAfter := beforeRestore, sendHoldAfter
	t.Cleanup(func() { beforeRestore, sendHoldAfter = prev, prevAfter })
	sendHoldAfter = 3 * time.Second
	var installs atomic.Int32
	beforeRestore = func() error {
		installs.Add(1)
		time.Sleep(2 * time.Second)
		return nil
	}
	return &installs
}

// writeLoad claims fresh keys on n from 4 writers, one claim a millisecond
// each, until stop is called (at the latest when the test ends); acked
// counts the claims acknowledged.
func writeLoad(t *testing.T, n *Node) (stop func(), acked *atomic.Int64) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	acked = new(atomic.Int64)
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-done:
					return
				default:
				}
				if _, _, err := n.Claim(engine.ClaimArgs{Scope: engine.Scope{Principal: "p", Endpoint: "e", Key: fmt.Sprintf("w-%d-%d", w, i)},
					Fingerprint: "aa", LeaseMs: 600_000, RetentionMs: 3_600_000}); err == nil {
					acked.Add(1)
				}
				time.Sleep(time.Millisecond)
			}
		}()
	}
	stop = sync.OnceFunc(func() { close(done); wg.Wait() })
	t.Cleanup(stop)
	return stop, acked
}
