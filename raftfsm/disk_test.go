package raftfsm

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idem-store/idem/engine"
)

// smallTmpfs mounts a tmpfs of size for the test (root only; CI runs the
// tests as root).
func smallTmpfs(t *testing.T, size string) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("skipped: needs root to mount a small tmpfs (mount -t tmpfs); CI runs the tests as root")
	}
	mnt := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size="+size, "tmpfs", mnt).CombinedOutput(); err != nil {
		t.Skipf("skipped: cannot mount a tmpfs here (%v: %s)", err, strings.TrimSpace(string(out)))
	}
	t.Cleanup(func() { exec.Command("umount", "-l", mnt).Run() })
	return mnt
}

// The guard on a real, small tmpfs: the ballast comes and goes with the
// free space, client writes are refused below the minimum while ticks and
// drops are not, and an apply waits under the floor until space returns.
func TestDiskGuardBallastRefusalAndWait(t *testing.T) {
	mnt := smallTmpfs(t, "32m")
	fill := func(name string) {
		f, err := os.Create(filepath.Join(mnt, name))
		require.NoError(t, err)
		defer f.Close()
		for _, n := range []int{1 << 20, 4096} {
			buf := make([]byte, n)
			for {
				if _, err := f.Write(buf); err != nil {
					require.ErrorIs(t, err, syscall.ENOSPC)
					break
				}
			}
		}
	}
	// The guard's arithmetic with 1 MiB raft log segments (the log itself
	// is not opened here), so that the minimum alone decides on this 32 MiB
	// disk (appendFloor).
	defer func(s uint64) { segmentSize = s }(segmentSize)
	segmentSize = 1 << 20
	cfg := DefaultConfig()
	cfg.DataDir = filepath.Join(mnt, "data")
	cfg.MinFreeDisk = 8 << 20 // ballast 2 MiB, floor 1 MiB
	cfg.Logger = slog.New(slog.NewTextHandler(t.Output(), nil))
	require.NoError(t, os.MkdirAll(cfg.DataDir, 0o755))
	g, err := openDiskGuard(cfg)
	require.NoError(t, err)
	ballast := filepath.Join(cfg.DataDir, BallastFile)

	g.refresh()
	fi, err := os.Stat(ballast)
	require.NoError(t, err, "no ballast with room for it")
	require.EqualValues(t, 2<<20, fi.Size())
	require.False(t, g.full.Load())
	require.NoError(t, g.admit(OpClaim))

	fill("a")
	g.refresh()
	_, err = os.Stat(ballast)
	require.ErrorIs(t, err, os.ErrNotExist, "the ballast stays on a full disk")
	require.True(t, g.full.Load())
	for _, op := range []Op{OpClaim, OpComplete, OpRelease, OpExtend, OpDelete} {
		require.ErrorIs(t, g.admit(op), ErrStorageFull, "op %d", op)
	}
	for _, op := range []Op{OpTick, OpDropBucket, OpSetNode, OpRemoveNode} {
		require.NoError(t, g.admit(op), "op %d frees space or is tiny: it must pass", op)
	}
	require.GreaterOrEqual(t, g.free.Load(), g.floor, "the ballast gave back its space")

	// No ballast left and nothing free: an apply waits, and goes on once
	// space returns.
	fill("b")
	g.refresh()
	done := make(chan struct{})
	go func() { g.waitForSpace("test applies", make(chan struct{})); close(done) }()
	select {
	case <-done:
		t.Fatal("an apply went ahead on a disk with no space")
	case <-time.After(1500 * time.Millisecond):
	}
	require.NoError(t, os.Remove(filepath.Join(mnt, "b")))
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("the apply still waits after space came back")
	}

	// With the disk full and no ballast a node refuses to start, and says so.
	fill("b")
	_, err = openDiskGuard(cfg)
	require.Error(t, err)
	require.Contains(t, err.Error(), "free some space")

	require.NoError(t, errors.Join(os.Remove(filepath.Join(mnt, "a")), os.Remove(filepath.Join(mnt, "b"))))
	g.refresh()
	require.False(t, g.full.Load())
	_, err = os.Stat(ballast)
	require.NoError(t, err, "the ballast comes back with the space")
}

// Writes stop while the disk can still hold the raft log's next segment:
// raft-wal preallocates it whole when the current one fills, and a log
// whose next segment could not be made takes no entry again until a
// restart. So a --min-free-disk under a segment does not decide alone.
func TestWritesStopWithRoomForTheNextLogSegment(t *testing.T) {
	seg := segmentSize
	require.Equal(t, uint64(0), appendFloor(0), "the guard off stays off")
	require.Equal(t, seg+seg/2, appendFloor(32<<20), "--min-free-disk 32MiB: a 64 MiB segment and slack")
	require.Equal(t, uint64(256<<20), appendFloor(256<<20), "the default minimum holds a segment already")

	g := &diskGuard{minFree: 32 << 20, fullBelow: appendFloor(32 << 20), log: slog.New(slog.DiscardHandler)}
	g.free.Store(seg) // above the minimum, too little for a segment and slack
	require.True(t, g.settleStateLocked(), "writes go on with no room for the next segment")
	require.ErrorIs(t, g.admit(OpClaim), ErrStorageFull)
	require.NoError(t, g.admit(OpTick))
	g.free.Store(seg + seg/2)
	require.False(t, g.settleStateLocked())
	require.NoError(t, g.admit(OpClaim))
}

// On a disk that can never leave the storage-full state (under a segment,
// the room for the next one and the ballast) the node says so at start:
// "until space is freed" would send an operator freeing space in vain.
func TestDiskTooSmallToTakeWritesIsSaidAtStart(t *testing.T) {
	mnt := smallTmpfs(t, "128m")
	var logs bytes.Buffer
	cfg := DefaultConfig()
	cfg.DataDir = mnt
	cfg.MinFreeDisk = 16 << 20 // writes stop under 96 MiB; 64 + 96 + 4 MiB > 128 MiB
	cfg.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	_, err := openDiskGuard(cfg)
	require.NoError(t, err)
	require.Contains(t, logs.String(), "too small for this node to take writes")

	logs.Reset()
	cfg.MinFreeDisk = 0 // the guard off: nothing stops writes
	_, err = openDiskGuard(cfg)
	require.NoError(t, err)
	require.NotContains(t, logs.String(), "too small")
}

// A start refused because the disk is too full to open the stores says
// "nothing was changed", but left behind the data dir it had just made
// (idem serve --data-dir new --min-free-disk larger than the disk): a
// refused start on a new data dir now leaves no directory.
func TestRefusedStartLeavesNoNewDataDir(t *testing.T) {
	cfg := DefaultConfig()
	cfg.DataDir = filepath.Join(t.TempDir(), "new")
	cfg.RaftAddr = "127.0.0.15:28903" // never bound: the start is refused before the transport
	cfg.MinFreeDisk = 1 << 60         // an eighth of it is more than any disk has free
	_, err := Open(cfg)
	require.ErrorContains(t, err, "nothing was changed")
	_, statErr := os.Stat(cfg.DataDir)
	require.True(t, os.IsNotExist(statErr), "the refused start left %s: %v", cfg.DataDir, statErr)

	// An existing (empty) data dir is the operator's: it stays.
	require.NoError(t, os.Mkdir(cfg.DataDir, 0o700))
	_, err = Open(cfg)
	require.ErrorContains(t, err, "nothing was changed")
	require.DirExists(t, cfg.DataDir)
}

// On a disk too small for the node ever to take writes, its storage-full
// line and its 507 said writes come back "once space is freed": freeing
// space on it cannot help (a walk of docs/DISK.md: a 300 MB disk with the
// default --min-free-disk). Both now say the disk is too small.
func TestDiskTooSmallRefusesWritesForGood(t *testing.T) {
	mnt := smallTmpfs(t, "128m")
	var logs bytes.Buffer
	cfg := DefaultConfig()
	cfg.DataDir = mnt
	cfg.MinFreeDisk = 16 << 20
	cfg.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	g, err := openDiskGuard(cfg)
	require.NoError(t, err)
	sole := func() bool { return true }
	g.soleVoter.Store(&sole)
	g.free.Store(64 << 20) // the raft log's first segment made
	g.mu.Lock()
	full := g.settleStateLocked()
	g.mu.Unlock()
	require.True(t, full)
	require.Contains(t, logs.String(), "disk space low: writes are refused with 507 storage_full for good: the data dir's disk is too small, and freeing space on it cannot help")
	err = g.admit(OpClaim)
	require.ErrorIs(t, err, ErrDiskTooSmall)
	require.ErrorIs(t, err, ErrStorageFull, "still a storage-full refusal")
}

// With the guard off (--min-free-disk 0), a restart on a disk with less
// free than Pebble's writes wait for hung in the store's open, silent but
// for a line saying that applied data could still be read, its HTTP port
// not bound (a walk of docs/DISK.md). It refuses to start, saying what to
// free, as with the guard on.
func TestGuardOffStartOnAFullDiskIsRefused(t *testing.T) {
	mnt := smallTmpfs(t, "64m")
	cfg := DefaultConfig()
	cfg.DataDir = filepath.Join(mnt, "data")
	require.NoError(t, os.MkdirAll(cfg.DataDir, 0o700))
	cfg.MinFreeDisk = 0
	cfg.Logger = slog.New(slog.DiscardHandler)
	free, _, err := engine.DiskSize(mnt)
	require.NoError(t, err)
	out, err := exec.Command("fallocate", "-l", fmt.Sprint(free-8<<20), filepath.Join(mnt, "filler")).CombinedOutput()
	require.NoError(t, err, "%s", out)
	_, err = openDiskGuard(cfg)
	require.ErrorContains(t, err, "--min-free-disk is 0")
	require.ErrorContains(t, err, "free some space on that disk and start the node again")

	require.NoError(t, os.Remove(filepath.Join(mnt, "filler")))
	_, err = openDiskGuard(cfg)
	require.NoError(t, err)
}
