package raftfsm

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	walfs "github.com/hashicorp/raft-wal/fs"
	waltypes "github.com/hashicorp/raft-wal/types"
	"github.com/stretchr/testify/require"

	"github.com/idem-store/idem/engine"
)

// faultyWAL is raft-wal's own filesystem with a disk that fails: the
// segment files under one node's data dir fail their next writes or
// fsyncs with errno (EIO: a bad sector, a dying disk, a SAN path lost).
// A failed write writes half its bytes first: what a failed write
// leaves is unknown.
type faultyWAL struct {
	waltypes.VFS
	mu        sync.Mutex
	dir       string // the node whose disk fails ("": none)
	failWrite int    // writes left to fail
	failSync  int    // fsyncs left to fail
	// failCreate is how many segment files left to fail to make (the
	// preallocation's errno, as fallocate returns it).
	failCreate int
	errno      syscall.Errno
	failed     atomic.Int32 // failures injected
}

func useFaultyWAL(t *testing.T) *faultyWAL {
	f := &faultyWAL{VFS: walfs.New()}
	walVFS = f
	t.Cleanup(func() { walVFS = nil })
	return f
}

// arm makes the node whose data dir is dir fail its next writes and
// fsyncs of raft log segments with errno.
func (f *faultyWAL) arm(dir string, writes, syncs int, errno syscall.Errno) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.dir, f.failWrite, f.failSync, f.errno = dir, writes, syncs, errno
}

// take uses up one of the failures left (f.failWrite, f.failSync or
// f.failCreate) for a file in dir, if it is the failing node's.
func (f *faultyWAL) take(dir string, left *int) (syscall.Errno, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.dir == "" || !strings.HasPrefix(dir, f.dir+string(filepath.Separator)) {
		return 0, false
	}
	if *left == 0 {
		return 0, false
	}
	*left--
	f.failed.Add(1)
	return f.errno, true
}

// armCreate makes the node whose data dir is dir fail to make its next
// raft log segment file with errno.
func (f *faultyWAL) armCreate(dir string, errno syscall.Errno) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.dir, f.failCreate, f.errno = dir, 1, errno
}

func (f *faultyWAL) Create(dir, name string, size uint64) (waltypes.WritableFile, error) {
	if errno, ok := f.take(dir, &f.failCreate); ok {
		return nil, errno
	}
	w, err := f.VFS.Create(dir, name, size)
	if err != nil {
		return nil, err
	}
	return &faultyFile{WritableFile: w, f: f, dir: dir, path: filepath.Join(dir, name)}, nil
}

func (f *faultyWAL) OpenWriter(dir, name string) (waltypes.WritableFile, error) {
	w, err := f.VFS.OpenWriter(dir, name)
	if err != nil {
		return nil, err
	}
	return &faultyFile{WritableFile: w, f: f, dir: dir, path: filepath.Join(dir, name)}, nil
}

type faultyFile struct {
	waltypes.WritableFile
	f         *faultyWAL
	dir, path string
}

func (w *faultyFile) WriteAt(p []byte, off int64) (int, error) {
	if errno, ok := w.f.take(w.dir, &w.f.failWrite); ok {
		n, _ := w.WritableFile.WriteAt(p[:len(p)/2], off)
		return n, &os.PathError{Op: "write", Path: w.path, Err: errno}
	}
	return w.WritableFile.WriteAt(p, off)
}

func (w *faultyFile) Sync() error {
	if errno, ok := w.f.take(w.dir, &w.f.failSync); ok {
		return &os.PathError{Op: "sync", Path: w.path, Err: errno}
	}
	return w.WritableFile.Sync()
}

// stopHook replaces the process's stop on a failed raft log write for the
// test: it records each status asked.
func stopHook(t *testing.T) *atomic.Int32 {
	var calls atomic.Int32
	old := exit
	exit = func(code int) {
		if code != 0 {
			calls.Add(1)
		}
	}
	t.Cleanup(func() { exit = old })
	return &calls
}

func ioNode(t *testing.T, c *memCluster, id, addr string, bootstrap bool, logs *logBuffer) *Node {
	t.Helper()
	return c.start(loggedConfig(t, id, addr, bootstrap, logs))
}

// loggedConfig is the configuration of a node id at raft address addr,
// with a data dir of its own, logging at info into logs.
func loggedConfig(t *testing.T, id, addr string, bootstrap bool, logs *logBuffer) Config {
	cfg := DefaultConfig()
	cfg.NodeID, cfg.DataDir, cfg.Bootstrap, cfg.RaftAddr, cfg.HTTPAdvertise = id, t.TempDir(), bootstrap, addr, "mem-"+id
	cfg.Logger = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	return cfg
}

func tryClaim(n *Node, key string) error {
	res, _, err := n.Claim(engine.ClaimArgs{Scope: engine.Scope{Principal: "p", Endpoint: "e", Key: key}, Fingerprint: "aa", LeaseMs: 60_000, RetentionMs: 3_600_000})
	if err == nil && res.Outcome != engine.OutcomeClaimed {
		return fmt.Errorf("outcome %v", res.Outcome)
	}
	return err
}

// A one-node store whose raft log's fsync fails (EIO) refuses that write
// and stops the node: after a failed fsync the OS may have dropped the
// pages it could not write and report later fsyncs as done, so what the
// log holds on disk is unknown. It used to answer the write with the
// error and go on: raft stepped down, elected itself again, and raft-wal,
// having rolled its tail back, wrote and fsynced the next entries over
// the same place, acknowledging them.
func TestRaftLogFsyncFailureStopsTheNode(t *testing.T) {
	for _, tc := range []struct {
		name          string
		writes, syncs int
		errno         syscall.Errno
		said, advice  string
	}{
		{"fsync", 0, 1, syscall.EIO, "input/output error", "Check the disk"},
		{"write", 1, 0, syscall.EIO, "input/output error", "Check the disk"},
		// An fsync refused for lack of space is as uncertain: it used to
		// be taken for a full disk's refused write, and the node went on
		// to fsync later entries over what the OS may have dropped.
		{"fsync ENOSPC", 0, 1, syscall.ENOSPC, "no space left on device", "free space on the data dir's filesystem"},
		{"fsync EDQUOT", 0, 1, syscall.EDQUOT, "disk quota exceeded", "free space on the data dir's filesystem"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := useFaultyWAL(t)
			stops := stopHook(t)
			c := newMemCluster(t)
			var logs logBuffer
			n := c.leader(ioNode(t, c, "n1", testRaftAddrs(t, 1)[0], true, &logs))
			require.NoError(t, tryClaim(n, "before"))
			f.arm(n.cfg.DataDir, tc.writes, tc.syncs, tc.errno)
			err := tryClaim(n, "failed")
			require.Error(t, err, "a write the raft log could not store must not be acknowledged")
			require.EqualValues(t, 1, f.failed.Load())
			require.EqualValues(t, 1, stops.Load(), "the node must stop after its raft log failed a %s; it answered %v and logged:\n%s", tc.name, err, logs.String())
			out := logs.String()
			require.Contains(t, out, "level=ERROR")
			require.Contains(t, out, tc.said)
			require.Contains(t, out, filepath.Join(n.cfg.DataDir, logStoreDir))
			require.Contains(t, out, tc.advice)

			// Started again on a sound disk (as after the exit), it holds
			// what it acknowledged and takes writes.
			f.arm("", 0, 0, 0)
			cfg := n.cfg
			cfg.RaftAddr = n.self.RaftAddr
			c.stop(n)
			n = c.leader(c.start(cfg))
			_, found, err := n.Lookup(t.Context(), engine.Scope{Principal: "p", Endpoint: "e", Key: "before"}, false, true)
			require.NoError(t, err)
			require.True(t, found, "an acknowledged write was lost")
			claimFresh(t, n, "after")
		})
	}
}

// A full disk is not an I/O error, nor a full quota: the write was
// refused, not lost. ENOSPC is the disk-full machinery's (docs/DISK.md,
// 507); EDQUOT (a ZFS dataset's quota, which its copy-on-write hits
// inside raft-wal's preallocated segments, or a user's) stopped the node
// with the advice for a failing disk (SMART, restart the machine). The
// node goes on after either.
func TestRaftLogOutOfSpaceDoesNotStopTheNode(t *testing.T) {
	for _, tc := range []struct {
		name  string
		errno syscall.Errno
	}{{"ENOSPC", syscall.ENOSPC}, {"EDQUOT", syscall.EDQUOT}} {
		errno := tc.errno
		t.Run(tc.name, func(t *testing.T) {
			f := useFaultyWAL(t)
			stops := stopHook(t)
			c := newMemCluster(t)
			var logs logBuffer
			n := c.leader(ioNode(t, c, "n1", testRaftAddrs(t, 1)[0], true, &logs))
			require.NoError(t, tryClaim(n, "before"))
			f.arm(n.cfg.DataDir, 1, 0, errno)
			err := tryClaim(n, "failed")
			if errno == syscall.ENOSPC {
				require.ErrorIs(t, err, ErrStorageFull)
			} else {
				require.Error(t, err)
			}
			require.Zero(t, stops.Load(), "a write refused for space must not stop the node; it logged:\n%s", logs.String())
			require.Eventually(t, func() bool { return tryClaim(n, fmt.Sprint("after", time.Now().UnixNano())) == nil }, 20*time.Second, 50*time.Millisecond)
		})
	}
}

// ioCluster starts three nodes on ioNode's faulty raft log, n1 the first
// leader, each logging into its own buffer.
func ioCluster(t *testing.T) (*memCluster, [3]*Node) {
	c := newMemCluster(t)
	logs := new([3]logBuffer)
	addrs := testRaftAddrs(t, 3)
	var nodes [3]*Node
	nodes[0] = c.leader(ioNode(t, c, "n1", addrs[0], true, &logs[0]))
	for i := 1; i < 3; i++ {
		nodes[i] = ioNode(t, c, fmt.Sprintf("n%d", i+1), addrs[i], false, &logs[i])
		c.join(nodes[i], nodes[0])
	}
	return c, nodes
}

// In three nodes, a follower whose raft log fails an fsync stops; the
// leader and the other follower go on, and nothing acknowledged is lost.
func TestFollowerRaftLogFsyncFailureStopsTheFollower(t *testing.T) {
	f := useFaultyWAL(t)
	stops := stopHook(t)
	c, nodes := ioCluster(t)
	n1, n2, n3 := nodes[0], nodes[1], nodes[2]
	l := c.leader(n1, n2, n3)
	var follower *Node
	for _, n := range []*Node{n1, n2, n3} {
		if n != l {
			follower = n
			break
		}
	}
	require.NoError(t, tryClaim(l, "before"))
	f.arm(follower.cfg.DataDir, 0, 1, syscall.EIO)
	require.Eventually(t, func() bool {
		return tryClaim(l, fmt.Sprint("k", time.Now().UnixNano())) == nil && f.failed.Load() == 1
	}, 20*time.Second, 20*time.Millisecond)
	require.Eventually(t, func() bool { return stops.Load() == 1 }, 10*time.Second, 20*time.Millisecond,
		"the follower must stop after its raft log failed an fsync")
}

// In three nodes, a leader whose raft log fails an fsync stops (here: is
// stopped by the test once it asked to exit); the write is not
// acknowledged, the two others elect a leader and go on with every
// acknowledged write, and the old leader catches up once started again.
func TestLeaderRaftLogFsyncFailureStopsTheLeader(t *testing.T) {
	f := useFaultyWAL(t)
	stops := stopHook(t)
	c, nodes := ioCluster(t)
	n1, n2, n3 := nodes[0], nodes[1], nodes[2]
	l := c.leader(n1, n2, n3)
	var acked []string
	for i := range 10 {
		k := fmt.Sprint("before", i)
		claimFresh(t, l, k)
		acked = append(acked, k)
	}
	f.arm(l.cfg.DataDir, 0, 1, syscall.EIO)
	require.Error(t, tryClaim(l, "failed"), "a write the leader could not store must not be acknowledged")
	require.EqualValues(t, 1, stops.Load(), "the leader must stop after its raft log failed an fsync")
	cfg := l.cfg
	cfg.RaftAddr = l.self.RaftAddr
	c.stop(l) // what exit(1) does
	var others []*Node
	for _, n := range []*Node{n1, n2, n3} {
		if n != l {
			others = append(others, n)
		}
	}
	l2 := c.leader(others...)
	claimFresh(t, l2, "after")
	acked = append(acked, "after")
	f.arm("", 0, 0, 0)
	back := c.start(cfg)
	for _, n := range append(others, back) {
		require.Eventually(t, func() bool {
			for _, k := range acked {
				if _, found, err := n.Lookup(t.Context(), engine.Scope{Principal: "p", Endpoint: "e", Key: k}, false, false); err != nil || !found {
					return false
				}
			}
			return true
		}, 20*time.Second, 50*time.Millisecond, "%s lacks an acknowledged write", n.self.ID)
	}
}

// Only a write or fsync the disk failed stops the node: a full disk is
// the disk-full machinery's, and a log sealed, closed, or whose file was
// closed under the write (a shutdown racing an append) wrote nothing.
func TestOnlyAFailedWriteOfTheDiskStopsTheNode(t *testing.T) {
	for _, c := range []struct {
		err  error
		stop bool
	}{
		{&os.PathError{Op: "write", Path: "x.wal", Err: syscall.EIO}, true},
		{fmt.Errorf("store: %w", &os.PathError{Op: "sync", Path: "x.wal", Err: syscall.EIO}), true},
		{&os.PathError{Op: "fdatasync", Path: "x.wal", Err: syscall.EROFS}, true},
		{&os.PathError{Op: "write", Path: "x.wal", Err: syscall.ENOSPC}, false},
		{&os.PathError{Op: "write", Path: "x.wal", Err: syscall.EDQUOT}, false},
		{&os.PathError{Op: "write", Path: "x.wal", Err: os.ErrClosed}, false},
		{&os.PathError{Op: "read", Path: "x.wal", Err: syscall.EIO}, false},
		{waltypes.ErrSealed, false},
		{waltypes.ErrClosed, false},
	} {
		_, _, stop := engine.FailedWrite(c.err)
		require.Equal(t, c.stop, stop, "%v", c.err)
	}
}

// A raft log whose next segment file could not be made for an I/O error
// (EIO from the preallocation, in the rotation raft-wal runs after the
// append that filled a segment) stops the node, as a failed append does.
// It was sealed as if the disk were full, and reopened every 5 s with
// messages about space, which freeing space could never cure.
func TestRaftLogRotationIOErrorStopsTheNode(t *testing.T) {
	stops, logs := failRotation(t, syscall.EIO)
	require.EqualValues(t, 1, stops, "the node must stop when its raft log cannot make a segment file for an I/O error; it logged:\n%s", logs)
	require.Contains(t, logs, "input/output error")
	require.Contains(t, logs, "Check the disk")
}

// The same rotation refused for space (ENOSPC) does not stop the node: the
// log is sealed, and reopened once there is room (TestSealedLogReopensOnceThereIsRoom).
func TestRaftLogRotationOutOfSpaceDoesNotStopTheNode(t *testing.T) {
	stops, logs := failRotation(t, syscall.ENOSPC)
	require.Zero(t, stops, "a rotation refused for space must not stop the node; it logged:\n%s", logs)
}

// failRotation fills a raft log's first segment with 1 MiB entries, its
// next segment file failing to be made with errno, and returns how often
// the node was stopped (stopHook) and what the log said.
func failRotation(t *testing.T, errno syscall.Errno) (stops int32, logs string) {
	f := useFaultyWAL(t)
	stopped := stopHook(t)
	data := t.TempDir()
	dir := filepath.Join(data, logStoreDir)
	require.NoError(t, os.MkdirAll(dir, 0o700))
	var buf logBuffer
	ls, err := openWAL(dir, slog.New(slog.NewTextHandler(&buf, nil)))
	require.NoError(t, err)
	t.Cleanup(func() { ls.Close() })
	require.NoError(t, ls.StoreLogs(entries(1, 1, 1, 1<<20)))
	f.armCreate(data, errno)
	for i := uint64(2); !ls.sealed.Load(); i++ {
		require.Less(t, i, uint64(200), "the log never filled its segment")
		require.NoError(t, ls.StoreLogs(entries(1, i, i, 1<<20)))
		ls.awaitRotation()
	}
	require.EqualValues(t, 1, f.failed.Load())
	return stopped.Load(), buf.String()
}
