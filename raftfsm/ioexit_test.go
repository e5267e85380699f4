package raftfsm

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	walfs "github.com/hashicorp/raft-wal/fs"
	"github.com/stretchr/testify/require"

	"github.com/idem-store/idem/engine"
)

// eioStore fails the writes or fsyncs of the store's (Pebble's) WAL
// files with EIO once armed.
type eioStore struct {
	vfs.FS
	failWrite, failSync atomic.Bool
}

type eioStoreFile struct {
	vfs.File
	fs   *eioStore
	name string
}

func (f eioStoreFile) Write(p []byte) (int, error) {
	if f.fs.failWrite.Load() {
		return 0, &os.PathError{Op: "write", Path: f.name, Err: syscall.EIO}
	}
	return f.File.Write(p)
}

func (f eioStoreFile) Sync() error {
	if f.fs.failSync.Load() {
		return &os.PathError{Op: "sync", Path: f.name, Err: syscall.EIO}
	}
	return f.File.Sync()
}

func (f eioStoreFile) SyncData() error {
	if f.fs.failSync.Load() {
		return &os.PathError{Op: "fdatasync", Path: f.name, Err: syscall.EIO}
	}
	return f.File.SyncData()
}

func (f eioStoreFile) SyncTo(n int64) (bool, error) {
	if f.fs.failSync.Load() {
		return false, &os.PathError{Op: "sync_file_range", Path: f.name, Err: syscall.EIO}
	}
	return f.File.SyncTo(n)
}

func (fs *eioStore) wrap(name string, f vfs.File, err error) (vfs.File, error) {
	if err != nil || !strings.HasSuffix(name, ".log") {
		return f, err
	}
	return eioStoreFile{File: f, fs: fs, name: name}, nil
}

func (fs *eioStore) Create(name string, c vfs.DiskWriteCategory) (vfs.File, error) {
	f, err := fs.FS.Create(name, c)
	return fs.wrap(name, f, err)
}

func (fs *eioStore) ReuseForWrite(oldname, newname string, c vfs.DiskWriteCategory) (vfs.File, error) {
	f, err := fs.FS.ReuseForWrite(oldname, newname, c)
	return fs.wrap(newname, f, err)
}

func (fs *eioStore) OpenReadWrite(name string, c vfs.DiskWriteCategory, opts ...vfs.OpenOption) (vfs.File, error) {
	f, err := fs.FS.OpenReadWrite(name, c, opts...)
	return fs.wrap(name, f, err)
}

// A one-node store in a process of its own whose disk fails (EIO) a
// write or an fsync of its raft log or of its store's WAL exits with
// status 1 and the line that says what to do; started again on a sound
// disk, it holds every write it acknowledged and takes new ones.
func TestIOErrorExitsAndTheRestartHoldsWhatWasAcknowledged(t *testing.T) {
	if what := os.Getenv("IDEM_TEST_EIO"); what != "" {
		eioChild(t, what, os.Getenv("IDEM_TEST_EIO_DIR"), os.Getenv("IDEM_TEST_EIO_ADDR"))
		return
	}
	for _, what := range []string{"raft-log-fsync", "raft-log-write", "store-wal-fsync", "store-wal-write"} {
		t.Run(what, func(t *testing.T) {
			dir, addr := t.TempDir(), testRaftAddrs(t, 1)[0]
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestIOErrorExitsAndTheRestartHoldsWhatWasAcknowledged$", "-test.count=1")
			cmd.Env = append(os.Environ(), "IDEM_TEST_EIO="+what, "IDEM_TEST_EIO_DIR="+dir, "IDEM_TEST_EIO_ADDR="+addr)
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			err := cmd.Run()
			var ee *exec.ExitError
			require.True(t, errors.As(err, &ee), "the node must exit on the failed %s: %v\n%s\n%s", what, err, stdout.String(), stderr.String())
			require.Equal(t, 1, ee.ExitCode(), "stdout:\n%s\nstderr:\n%s", stdout.String(), stderr.String())
			require.Contains(t, stderr.String(), "level=ERROR")
			require.Contains(t, stderr.String(), "input/output error")
			require.Contains(t, stderr.String(), "Check the disk")
			var acked []string
			sc := bufio.NewScanner(&stdout)
			for sc.Scan() {
				if k, ok := strings.CutPrefix(sc.Text(), "acked "); ok {
					acked = append(acked, k)
				}
			}
			require.GreaterOrEqual(t, len(acked), 20)

			requireAckedAfterRestart(t, dir, addr, acked)
		})
	}
}

// eioChild runs the node whose disk fails: it prints each key it has
// acknowledged, fails the disk after 20, and goes on writing.
func eioChild(t *testing.T, what, dir, addr string) {
	wal, store := &faultyWAL{VFS: walfs.New()}, &eioStore{}
	walVFS = wal
	pebbleFS = func(fs vfs.FS) vfs.FS { store.FS = fs; return store }
	n, claim := startAckingChild(t, dir, addr)
	switch what {
	case "raft-log-fsync":
		wal.arm(dir, 0, 1, syscall.EIO)
	case "raft-log-write":
		wal.arm(dir, 1, 0, syscall.EIO)
	case "store-wal-fsync":
		store.failSync.Store(true)
		go n.Snapshot() // the store's WAL is fsynced before a snapshot
	case "store-wal-write":
		store.failWrite.Store(true)
	}
	for i := range 200 {
		claim(fmt.Sprint("b", i))
		time.Sleep(5 * time.Millisecond)
	}
	fmt.Println("still running")
	os.Exit(3)
}

// requireAckedAfterRestart starts node n1 again on dir at addr, as a child
// of an I/O-error test left it, and requires every key it acknowledged
// (acked) found and a fresh claim taken.
func requireAckedAfterRestart(t *testing.T, dir, addr string, acked []string) {
	t.Helper()
	c := newMemCluster(t)
	cfg := DefaultConfig()
	cfg.NodeID, cfg.DataDir, cfg.RaftAddr, cfg.HTTPAdvertise = "n1", dir, addr, "mem-n1"
	cfg.Logger = slog.New(slog.DiscardHandler)
	n := c.leader(c.start(cfg))
	for _, k := range acked {
		_, found, err := n.Lookup(t.Context(), engine.Scope{Principal: "p", Endpoint: "e", Key: k}, false, true)
		require.NoError(t, err)
		require.True(t, found, "acknowledged key %s lost after the restart", k)
	}
	claimFresh(t, n, "after")
}

// startAckingChild opens node n1 on dir at addr, the node of an I/O-error
// test's child, waits for it to lead and claims 20 keys through claim,
// which prints each one acknowledged ("acked KEY") for the parent.
func startAckingChild(t *testing.T, dir, addr string) (*Node, func(k string)) {
	t.Helper()
	cfg := DefaultConfig()
	cfg.NodeID, cfg.DataDir, cfg.Bootstrap, cfg.RaftAddr, cfg.HTTPAdvertise = "n1", dir, true, addr, "mem-n1"
	cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, nil))
	n, err := Open(cfg)
	require.NoError(t, err)
	require.Eventually(t, n.IsLeader, 10*time.Second, 10*time.Millisecond)
	claim := func(k string) {
		if tryClaim(n, k) == nil {
			fmt.Println("acked " + k)
		}
	}
	for i := range 20 {
		claim(fmt.Sprint("a", i))
	}
	return n, claim
}
