package raftfsm

import (
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idem-store/idem/engine"
	"github.com/idem-store/idem/internal/mono"
)

// A proposal's check of room read the free space (a statfs) every time:
// one per claim sent alone, 4% of a node's CPU under load. Far from the
// threshold it now reads at most every roomyFor; near it, every check
// still reads, so a disk filled between two proposals refuses the second
// at once, and so does a follower's append.
func TestRoomCheckReadsTheDiskNearTheThresholdOnly(t *testing.T) {
	mnt := smallTmpfs(t, "600m")
	free, err := engine.DiskFree(mnt)
	require.NoError(t, err)
	fill := func(name string, bytes int64) {
		t.Helper()
		f, err := os.Create(filepath.Join(mnt, name))
		require.NoError(t, err)
		defer f.Close()
		buf := make([]byte, 1<<20)
		for w := int64(0); w < bytes; w += int64(len(buf)) {
			_, err := f.Write(buf)
			require.NoError(t, err)
		}
	}

	// Far from the threshold: a read, then none within roomyFor, then one.
	g := &diskGuard{dir: mnt, minFree: 1 << 20, fullBelow: 8 << 20, log: slog.New(slog.DiscardHandler)}
	release, err := g.reserve(1000)
	require.NoError(t, err)
	release()
	at := g.readAt.Load()
	require.NotZero(t, at, "the first check reads")
	fill("roomy", 16<<20)
	release, err = g.reserve(1000)
	require.NoError(t, err)
	release()
	if mono.Since(at) < roomyFor { // (a loaded machine may take longer to write 16 MiB)
		require.Equal(t, at, g.readAt.Load(), "a check within roomyFor of a read far above the threshold read again")
		require.Equal(t, free, g.free.Load())
	}
	time.Sleep(roomyFor)
	release, err = g.reserve(1000)
	require.NoError(t, err)
	release()
	require.Greater(t, g.readAt.Load(), at, "a check after roomyFor reads")
	require.Less(t, g.free.Load(), free-15<<20, "and sees what was written")
	require.NoError(t, os.Remove(filepath.Join(mnt, "roomy")))

	// Near it (within roomyMargin): each check reads, and the second
	// proposal, after 64 MiB written, is refused at once.
	free, err = engine.DiskFree(mnt)
	require.NoError(t, err)
	g = &diskGuard{dir: mnt, minFree: 1 << 20, fullBelow: free - 100<<20, log: slog.New(slog.DiscardHandler)}
	release, err = g.reserve(20 << 20)
	require.NoError(t, err, "40 MiB to apply with 100 MiB above the threshold")
	release()
	fill("near", 64<<20)
	_, err = g.reserve(20 << 20)
	require.ErrorIs(t, err, ErrStorageFull, "a proposal right after the disk filled near the threshold")

	// A follower's append likewise.
	require.NoError(t, os.Remove(filepath.Join(mnt, "near")))
	free, err = engine.DiskFree(mnt)
	require.NoError(t, err)
	g = &diskGuard{dir: mnt, minFree: 1 << 20, fullBelow: free - 100<<20, log: slog.New(slog.DiscardHandler)}
	require.NoError(t, g.admitAppend(entries(1, 1, 1, 20<<20)))
	fill("near", 64<<20)
	require.ErrorIs(t, g.admitAppend(entries(1, 2, 2, 20<<20)), errLogNoRoomToApply, "an append right after the disk filled near the threshold")
}
