package engine

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/stretchr/testify/require"
)

// eioFS fails the writes or fsyncs of the store's WAL files with EIO once
// armed: a disk that fails under an open store.
type eioFS struct {
	vfs.FS
	failWrite, failSync atomic.Bool
	failCreate          atomic.Bool // the creation of a new file (a WAL's next)
	failDirSync         atomic.Bool // the fsync of a directory
	suffix              string      // the files that fail: ".log" (the WAL) when empty
	// raw: a failed SyncData or SyncTo returns the bare errno, as Pebble's
	// own linuxFile does (unix.Fdatasync, unix.SyncFileRange): no
	// *os.PathError, no file name.
	raw bool
	// errno is what fails them: EIO when 0.
	errno syscall.Errno
}

func (fs *eioFS) err() syscall.Errno {
	if fs.errno != 0 {
		return fs.errno
	}
	return syscall.EIO
}

type eioFile struct {
	vfs.File
	fs   *eioFS
	name string
}

func (f eioFile) Write(p []byte) (int, error) {
	if f.fs.failWrite.Load() {
		return 0, &os.PathError{Op: "write", Path: f.name, Err: f.fs.err()}
	}
	return f.File.Write(p)
}

func (f eioFile) Sync() error {
	if f.fs.failSync.Load() {
		return &os.PathError{Op: "sync", Path: f.name, Err: f.fs.err()}
	}
	return f.File.Sync()
}

func (f eioFile) SyncData() error {
	if f.fs.failSync.Load() {
		if f.fs.raw {
			return f.fs.err()
		}
		return &os.PathError{Op: "fdatasync", Path: f.name, Err: f.fs.err()}
	}
	return f.File.SyncData()
}

func (f eioFile) SyncTo(length int64) (bool, error) {
	if f.fs.failSync.Load() {
		if f.fs.raw {
			return false, f.fs.err()
		}
		return false, &os.PathError{Op: "sync_file_range", Path: f.name, Err: f.fs.err()}
	}
	return f.File.SyncTo(length)
}

func (fs *eioFS) wrap(name string, f vfs.File, err error) (vfs.File, error) {
	suffix := fs.suffix
	if suffix == "" {
		suffix = ".log"
	}
	if err != nil || !strings.HasSuffix(name, suffix) {
		return f, err
	}
	return eioFile{File: f, fs: fs, name: name}, nil
}

func (fs *eioFS) failsCreate(name string) error {
	suffix := fs.suffix
	if suffix == "" {
		suffix = ".log"
	}
	if fs.failCreate.Load() && strings.HasSuffix(name, suffix) {
		return &os.PathError{Op: "open", Path: name, Err: fs.err()}
	}
	return nil
}

type eioDir struct {
	vfs.File
	fs   *eioFS
	name string
}

func (d eioDir) Sync() error {
	if d.fs.failDirSync.Load() {
		return &os.PathError{Op: "sync", Path: d.name, Err: d.fs.err()}
	}
	return d.File.Sync()
}

func (fs *eioFS) OpenDir(name string) (vfs.File, error) {
	f, err := fs.FS.OpenDir(name)
	if err != nil {
		return f, err
	}
	return eioDir{File: f, fs: fs, name: name}, nil
}

func (fs *eioFS) Create(name string, c vfs.DiskWriteCategory) (vfs.File, error) {
	if err := fs.failsCreate(name); err != nil {
		return nil, err
	}
	f, err := fs.FS.Create(name, c)
	return fs.wrap(name, f, err)
}

func (fs *eioFS) ReuseForWrite(oldname, newname string, c vfs.DiskWriteCategory) (vfs.File, error) {
	if err := fs.failsCreate(newname); err != nil {
		return nil, err
	}
	f, err := fs.FS.ReuseForWrite(oldname, newname, c)
	return fs.wrap(newname, f, err)
}

func (fs *eioFS) OpenReadWrite(name string, c vfs.DiskWriteCategory, opts ...vfs.OpenOption) (vfs.File, error) {
	f, err := fs.FS.OpenReadWrite(name, c, opts...)
	return fs.wrap(name, f, err)
}

// A WAL write or fsync that fails with EIO is never carried on from:
// Pebble keeps the error (its WAL writer's error is sticky), the sync
// before a snapshot fails, and the next commit stops the process (a
// failed commit is fatal to Pebble). No later sync reports the lost
// writes as durable. The raft log holds everything above the stored
// applied index, so a stop loses nothing acknowledged.
func TestStoreWALIOErrorIsNeverCarriedOn(t *testing.T) {
	for _, what := range []string{"write", "sync"} {
		t.Run(what, func(t *testing.T) {
			old := exit
			exit = func(int) {} // the stop is TestStoreIOErrorStopsWithAdvice's
			t.Cleanup(func() { exit = old })
			fs := &eioFS{FS: vfs.Default}
			db, err := Open(t.TempDir(), Options{FS: fs, CacheBytes: 1 << 20})
			require.NoError(t, err)
			h := &harness{t: t, db: db}
			h.claim(t0, args(Scope{Principal: "p", Endpoint: "e", Key: "before"}))
			require.NoError(t, db.Sync())
			if what == "write" {
				fs.failWrite.Store(true)
			} else {
				fs.failSync.Store(true)
			}
			var got any
			func() {
				defer func() { got = recover() }()
				h.claim(t0+1, args(Scope{Principal: "p", Endpoint: "e", Key: "k1"}))
				db.Sync()
				h.claim(t0+2, args(Scope{Principal: "p", Endpoint: "e", Key: "k2"}))
				db.Sync()
			}()
			require.NotNil(t, got, "a failed WAL %s must stop the store", what)
			require.Contains(t, fmt.Sprint(got), "input/output error")
			// The disk works again: Pebble still refuses, it does not
			// retry the fsync and call the lost writes durable.
			fs.failWrite.Store(false)
			fs.failSync.Store(false)
			got = nil
			func() {
				defer func() { got = recover() }()
				db.Sync()
			}()
			require.NotNil(t, got, "after a failed WAL %s a later sync must not succeed", what)
		})
	}
}

// A store whose WAL write or fsync fails with EIO stops the process with
// a line that names the file, the error and what to do, by exit: a panic
// can be recovered by net/http when the failing commit is a request's
// (a backup's sync), and the node then went on.
//
// "fdatasync" is the fsync as the OS's files fail it: Pebble's linuxFile
// returns unix.Fdatasync's bare errno, with no *os.PathError, and the
// store's own failed WAL fsync was not seen as one (a panic net/http
// could recover, not the stop).
func TestStoreIOErrorStopsWithAdvice(t *testing.T) {
	for _, what := range []string{"write", "sync", "fdatasync", "sync ENOSPC"} {
		t.Run(what, func(t *testing.T) {
			var codes []int
			old := exit
			exit = func(code int) { codes = append(codes, code) }
			t.Cleanup(func() { exit = old })
			var logs strings.Builder
			fs := &eioFS{FS: vfs.Default, raw: what == "fdatasync"}
			said, advice := "input/output error", "Check the disk"
			if what == "sync ENOSPC" {
				// A WAL's fsync refused for lack of space is as uncertain
				// as a failed one: Pebble's fatal error said so without
				// the stop's advice.
				fs.errno, said, advice = syscall.ENOSPC, "no space left on device", "free space on the data dir's filesystem"
			}
			dir := t.TempDir()
			db, err := Open(dir, Options{FS: fs, CacheBytes: 1 << 20, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
			require.NoError(t, err)
			h := &harness{t: t, db: db}
			h.claim(t0, args(Scope{Principal: "p", Endpoint: "e", Key: "before"}))
			require.NoError(t, db.Sync())
			fs.failWrite.Store(what == "write")
			fs.failSync.Store(what != "write")
			func() {
				defer func() { recover() }() // Pebble must not go on past its fatal error
				h.claim(t0+1, args(Scope{Principal: "p", Endpoint: "e", Key: "k1"}))
				db.Sync()
				h.claim(t0+2, args(Scope{Principal: "p", Endpoint: "e", Key: "k2"}))
				db.Sync()
			}()
			require.Equal(t, []int{1}, codes, "the store must stop the process; it logged:\n%s", logs.String())
			require.Contains(t, logs.String(), "level=ERROR")
			require.Contains(t, logs.String(), filepath.Join(dir, "000002.log"))
			require.Contains(t, logs.String(), said)
			require.Contains(t, logs.String(), advice)
		})
	}
}

// Pebble's fatal errors stop the node with the I/O advice only for a
// store file's failed write or fsync: not for a full disk (the disk-full
// machinery's), a file closed under the write, a read, or anything else.
func TestOnlyAFailedWriteOfAStoreFileIsAnIOStop(t *testing.T) {
	for _, c := range []struct {
		args []any
		stop bool
	}{
		{[]any{&os.PathError{Op: "fdatasync", Path: "000002.log", Err: syscall.EIO}}, true},
		{[]any{"commit", fmt.Errorf("pebble: %w", &os.PathError{Op: "write", Path: "000002.log", Err: syscall.EIO})}, true},
		{[]any{&os.PathError{Op: "write", Path: "000002.log", Err: syscall.ENOSPC}}, false},
		{[]any{&os.PathError{Op: "fdatasync", Path: "000002.log", Err: syscall.ENOSPC}}, true},
		{[]any{&os.PathError{Op: "sync", Path: "MANIFEST-000001", Err: syscall.EDQUOT}}, true},
		{[]any{&os.PathError{Op: "write", Path: "000002.log", Err: syscall.EDQUOT}}, false},
		{[]any{&os.PathError{Op: "write", Path: "000002.log", Err: os.ErrClosed}}, false},
		{[]any{&os.PathError{Op: "open", Path: "MANIFEST", Err: syscall.EIO}}, false},
		{[]any{errors.New("pebble: corruption")}, false},
	} {
		_, _, ok := ioFailure(c.args)
		require.Equal(t, c.stop, ok, "%v", c.args)
	}
}

// A flush whose sstable write fails with EIO was retried at once, for
// ever (10,979 times in 3 s, logged every 10 s): on a disk that keeps
// failing the node's writes stalled and it hung rather than stopped. A
// background error that is a failed write or fsync of a store file stops
// the process as a failed WAL write does; others (out of file
// descriptors, a full disk) are still retried.
func TestStoreFlushIOErrorStopsWithAdvice(t *testing.T) {
	// "fdatasync": the table's fsync fails as the OS's files fail it, with
	// unix.Fdatasync's bare errno (eioFS.raw).
	for _, what := range []string{"write", "fdatasync"} {
		t.Run(what, func(t *testing.T) {
			var codes atomic.Int64
			old := exit
			exit = func(code int) { codes.Store(int64(code)) }
			t.Cleanup(func() { exit = old })
			var logs lockedBuilder
			fs := &eioFS{FS: vfs.Default, suffix: ".sst", raw: what == "fdatasync"}
			dir := t.TempDir()
			db, err := Open(dir, Options{FS: fs, CacheBytes: 1 << 20, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
			require.NoError(t, err)
			h := &harness{t: t, db: db}
			h.claim(t0, args(Scope{Principal: "p", Endpoint: "e", Key: "before"}))
			fs.failWrite.Store(what == "write")
			fs.failSync.Store(what != "write")
			done, err := db.pdb.AsyncFlush()
			require.NoError(t, err)
			require.Eventually(t, func() bool { return codes.Load() != 0 }, 10*time.Second, 10*time.Millisecond,
				"a flush failing with EIO must stop the process; it logged:\n%s", logs.String())
			require.EqualValues(t, 1, codes.Load())
			require.Contains(t, logs.String(), "level=ERROR")
			require.Contains(t, logs.String(), ".sst")
			require.Contains(t, logs.String(), "input/output error")
			require.Contains(t, logs.String(), "Check the disk")
			fs.failWrite.Store(false) // exit returned (a test): let the flush end
			fs.failSync.Store(false)
			<-done
			require.NoError(t, db.Close())
		})
	}
}

type lockedBuilder struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuilder) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuilder) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// A WAL rotation that meets a failed disk (the full WAL's closing fsync,
// or the creation of the next WAL file) stops the process with exit
// status 1 and the line naming the file and the way out. Pebble panics
// there with its DB mutex unlocked, and a deferred unlock made that Go's
// fatal "sync: unlock of unlocked mutex": no recover could see it, and
// the node died with exit status 2 and a goroutine dump (found on a FUSE
// filesystem failing the WAL's fsync under a claim load). A process of
// its own: the fatal error would end the test binary.
func TestStoreWALRotationIOErrorStopsWithAdvice(t *testing.T) {
	if what := os.Getenv("IDEM_TEST_WAL_ROTATION"); what != "" {
		walRotationChild(what)
		return
	}
	for _, what := range []string{"sync", "create", "create ENOSPC", "dir sync"} {
		t.Run(what, func(t *testing.T) {
			dir := t.TempDir()
			cmd := exec.Command(os.Args[0], "-test.run=^TestStoreWALRotationIOErrorStopsWithAdvice$", "-test.count=1")
			cmd.Env = append(os.Environ(), "IDEM_TEST_WAL_ROTATION="+what, "IDEM_TEST_WAL_ROTATION_DIR="+dir)
			out, err := cmd.CombinedOutput()
			var ee *exec.ExitError
			require.ErrorAs(t, err, &ee, "the child must stop; it said:\n%s", out)
			require.Equal(t, 1, ee.ExitCode(), "a failed WAL rotation must stop the node with status 1; it said:\n%.3000s", out)
			require.NotContains(t, string(out), "fatal error")
			require.Contains(t, string(out), "level=ERROR")
			if what != "dir sync" {
				require.Contains(t, string(out), ".log")
			}
			if what == "create ENOSPC" {
				// A full disk: the creation wrote nothing, and every
				// write before it was fsynced, so neither the disk nor
				// the page cache is in doubt (it was told to restart
				// the machine, as after a failed write).
				require.Contains(t, string(out), "the store could not make its next WAL file "+dir)
				require.Contains(t, string(out), "no space left on device")
				require.Contains(t, string(out), "Free space on the data dir's filesystem")
				require.Contains(t, string(out), "docs/DISK.md")
				require.NotContains(t, string(out), "restart the machine")
				require.NotContains(t, string(out), "page cache")
				require.NotContains(t, string(out), "can no longer tell what its disk holds")
				require.NotContains(t, string(out), "Check the disk")
			} else {
				require.Contains(t, string(out), "the store could not write "+dir)
				require.Contains(t, string(out), "input/output error")
				require.Contains(t, string(out), "Check the disk")
				require.Contains(t, string(out), "restart the machine")
			}
		})
	}
}

// walRotationChild claims into a store with small memtables until a WAL
// rotation meets the armed failure; it should never return.
func walRotationChild(what string) {
	fs := &eioFS{FS: vfs.Default}
	if what == "create ENOSPC" {
		fs.errno = syscall.ENOSPC
	}
	db, err := Open(os.Getenv("IDEM_TEST_WAL_ROTATION_DIR"), Options{FS: fs, CacheBytes: 1 << 20, MemTableBytes: 256 << 10,
		Logger: slog.New(slog.NewTextHandler(os.Stderr, nil))})
	if err != nil {
		fmt.Fprintln(os.Stderr, "open:", err)
		os.Exit(3)
	}
	h := &harness{t: &testing.T{}, db: db}
	h.claim(t0, args(Scope{Principal: "p", Endpoint: "e", Key: "before"}))
	switch what {
	case "sync":
		fs.failSync.Store(true)
	case "dir sync":
		fs.failDirSync.Store(true)
	default:
		fs.failCreate.Store(true)
	}
	for i := range 200000 {
		h.claim(t0+1, args(Scope{Principal: "p", Endpoint: "e", Key: fmt.Sprintf("k%d-%s", i, strings.Repeat("x", 200))}))
	}
	fmt.Fprintln(os.Stderr, "no rotation stopped the store")
	os.Exit(3)
}

// A store whose first WAL cannot be made as it opens (a full disk at a
// node's start, a failing one, an offline command's open) is not opened,
// and Open says why: the caller stops with its own line (idem serve's
// start error, a restore's). The stop of a failed WAL file is the
// rotation's only, where Pebble panics; it stopped the process from
// inside Open, with the advice of a failed write (restart the machine).
func TestOpenWhoseWALCannotBeMadeReturnsTheError(t *testing.T) {
	for _, errno := range []syscall.Errno{syscall.ENOSPC, syscall.EIO} {
		t.Run(errno.Error(), func(t *testing.T) {
			var codes []int
			old := exit
			exit = func(code int) { codes = append(codes, code) }
			t.Cleanup(func() { exit = old })
			fs := &eioFS{FS: vfs.Default, errno: errno}
			fs.failCreate.Store(true)
			db, err := Open(t.TempDir(), Options{FS: fs, CacheBytes: 1 << 20, MemTableBytes: 256 << 10})
			if err == nil {
				db.Close()
			}
			require.Error(t, err, "a store whose WAL cannot be made must not open")
			require.ErrorIs(t, err, errno)
			require.Empty(t, codes, "Open must return the error, not stop the process")
		})
	}
}

// An offline command's store (Options.Offline: a restore, a recover) stops
// on a failed write with the command's own words: the running node's
// ("this node stops … the next start replays it") told an operator whose
// restore had failed that a node had stopped.
func TestOfflineStoreIOErrorStopsWithItsOwnWords(t *testing.T) {
	var codes []int
	old := exit
	exit = func(code int) { codes = append(codes, code) }
	t.Cleanup(func() { exit = old })
	var logs strings.Builder
	fs := &eioFS{FS: vfs.Default}
	dir := t.TempDir()
	db, err := Open(dir, Options{FS: fs, CacheBytes: 1 << 20, Logger: slog.New(slog.NewTextHandler(&logs, nil)),
		Offline: "the restore failed: nothing was restored into /data"})
	require.NoError(t, err)
	h := &harness{t: t, db: db}
	fs.failWrite.Store(true)
	func() {
		defer func() { recover() }() // Pebble must not go on past its fatal error
		h.claim(t0+1, args(Scope{Principal: "p", Endpoint: "e", Key: "k1"}))
		db.Sync()
	}()
	require.Equal(t, []int{1}, codes, "the store must stop the process; it logged:\n%s", logs.String())
	said := logs.String()
	require.Contains(t, said, "the restore failed: nothing was restored into /data: the disk failed a write of "+filepath.Join(dir, "000002.log"))
	require.Contains(t, said, "Check the disk")
	require.Contains(t, said, "then run it again")
	require.NotContains(t, said, "this node stops")
	require.NotContains(t, said, "next start replays")
	require.NotContains(t, said, "restart the machine")
}

// An offline command's store whose next WAL file cannot be made for lack
// of space says the disk is full and to free space, not that the disk
// failed a write (Options.Offline).
func TestOfflineStoreNextWALOnAFullDiskSaysTheDiskIsFull(t *testing.T) {
	var codes []int
	old := exit
	exit = func(code int) { codes = append(codes, code) }
	t.Cleanup(func() { exit = old })
	var logs strings.Builder
	p := pebbleLogger{l: slog.New(slog.NewTextHandler(&logs, nil)), offline: "the restore failed: nothing was restored into /data"}
	err := &os.PathError{Op: "open", Path: "/data.tmp/fsm/000004.log", Err: syscall.ENOSPC}
	p.ioStop(err.Path, nextWALError{err}, "create the next WAL file: "+err.Error())
	require.Equal(t, []int{1}, codes)
	said := logs.String()
	require.Contains(t, said, "the restore failed: nothing was restored into /data: the store could not make its next WAL file /data.tmp/fsm/000004.log")
	require.Contains(t, said, "the disk is full. Free space on its filesystem (df), then run it again")
	require.NotContains(t, said, "the disk failed a write")
	require.NotContains(t, said, "Check the disk")
}
