package raftfsm

import (
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idem-store/idem/engine"
)

// A leader admitted client writes on the free space it read once a
// second: under load, a second of proposals applied took its disk far
// under the storage-full threshold, to 0 bytes free on real processes (32
// clients completing 2 MiB responses in batches), its applies then
// waiting for space and every read answered 503. It now reads the free
// space at each proposal of client writes and admits it only while the
// disk keeps room, above the threshold, to apply it with the proposals in
// flight (about twice their bytes); the others are answered 507.
func TestNearlyFullLeaderProposesNoMoreThanItCanApply(t *testing.T) {
	mnt := smallTmpfs(t, "400m")
	c := newMemCluster(t)
	cfg := DefaultConfig()
	cfg.NodeID, cfg.DataDir, cfg.Bootstrap = "n1", filepath.Join(mnt, "data"), true
	cfg.RaftAddr, cfg.HTTPAdvertise = testRaftAddrs(t, 1)[0], "mem-n1"
	cfg.MinFreeDisk = 96 << 20
	// Room is what this test is about, not time: 48 MiB of completes on a
	// loaded CI machine (ci-86, load 30) did not commit within the default 5 s.
	cfg.ApplyTimeout = 30 * time.Second
	n := c.leader(c.start(cfg))

	const writes, size = 24, 2 << 20
	tokens := make([]uint64, writes)
	for i := range tokens {
		res, _, err := n.Claim(engine.ClaimArgs{Scope: scopeN(i), Fingerprint: "aa", LeaseMs: 60_000, RetentionMs: 3_600_000})
		require.NoError(t, err)
		tokens[i] = res.Record.Token
	}
	// The disk 40 MiB above the threshold: room to apply about 20 MiB.
	// The completes below write 48 MiB of entries, within a second.
	require.NoError(t, n.disk.read())
	fullBelow := n.disk.fullBelow
	free := n.disk.free.Load()
	require.Greater(t, free, fullBelow+40<<20)
	f, err := os.Create(filepath.Join(mnt, "filler"))
	require.NoError(t, err)
	require.NoError(t, f.Truncate(int64(free-fullBelow-40<<20)))
	buf := make([]byte, 1<<20)
	for written := int64(0); written < int64(free-fullBelow-40<<20); written += int64(len(buf)) {
		_, err := f.Write(buf)
		require.NoError(t, err)
	}
	require.NoError(t, f.Close())
	n.disk.refresh()
	require.False(t, n.disk.full.Load())

	var low atomic.Uint64
	low.Store(^uint64(0))
	done := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for {
			if free, err := engine.DiskFree(mnt); err == nil && free < low.Load() {
				low.Store(free)
			}
			select {
			case <-done:
				return
			case <-time.After(2 * time.Millisecond):
			}
		}
	}()
	var wg sync.WaitGroup
	var stored, refused atomic.Int64
	for i := range writes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			body := make([]byte, size)
			rand.Read(body)
			_, err := n.Complete(engine.TokenArgs{Scope: scopeN(i), Token: tokens[i]}, &engine.Response{Status: 200, Body: body})
			switch {
			case err == nil:
				stored.Add(1)
			case errors.Is(err, ErrStorageFull):
				refused.Add(1)
			default:
				t.Errorf("complete %d: %v", i, err)
			}
		}()
	}
	wg.Wait()
	time.Sleep(500 * time.Millisecond) // the memtables' flushes
	close(done)
	<-sampled
	t.Logf("stored %d, refused %d; lowest free %d MiB, threshold %d MiB", stored.Load(), refused.Load(), low.Load()>>20, fullBelow>>20)
	require.NotZero(t, stored.Load(), "it refused writes it had room for")
	// Pebble's memtable (4 MiB) may be flushed after its writes return.
	require.GreaterOrEqual(t, low.Load()+4<<20, fullBelow, fmt.Sprintf("the leader's own applies took its disk %d MiB under the storage-full threshold", int64(fullBelow-low.Load())>>20))
}
