// Package faultfs is a passthrough FUSE filesystem for tests that fails
// chosen operations on chosen files: a disk that returns EIO (a bad
// sector, a dying disk, a lost SAN path) under a running store, without
// device-mapper.
//
// Mount needs root and /dev/fuse; tests call Skip first, which skips
// with the reason when either is missing. The mount is made with
// mount(2) itself (no fusermount).
//
// Writes go through to the backing directory at once (FUSE without a
// writeback cache), so a failed write or fsync is the caller's; reads
// may be answered from the page cache: Fail with OpRead drops it first.
package faultfs

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

// Op is an operation that can be failed.
type Op string

// The operations that can be failed.
const (
	OpWrite  Op = "write"  // write(2) to an open file
	OpFsync  Op = "fsync"  // fsync(2), fdatasync(2)
	OpRead   Op = "read"   // read(2) that reaches the filesystem
	OpCreate Op = "create" // creating a file
	OpRename Op = "rename" // rename(2), from or to a matching name
	OpOpen   Op = "open"   // opening an existing file
)

// Skip skips t when this process cannot mount a FUSE filesystem.
func Skip(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("faultfs: needs root to mount a FUSE filesystem (CI runs as root)")
	}
	if _, err := os.Stat("/dev/fuse"); err != nil {
		t.Skipf("faultfs: no /dev/fuse (%v)", err)
	}
}

type rule struct {
	op      Op
	pattern string
	once    bool
	errno   syscall.Errno
}

// Hit is an operation that was failed.
type Hit struct {
	Op   Op
	Path string // from the mount's root
}

// FS is a mounted fault filesystem.
type FS struct {
	// Dir is the mount point: use it as the data dir.
	Dir     string
	backing string
	srv     *fuse.Server
	watch   *os.Process // watchdog.go; nil if it could not start

	mu    sync.Mutex
	rules []rule
	hits  []Hit
}

// Mount mounts a fault filesystem over a new backing directory and
// unmounts it when t ends.
func Mount(t testing.TB) *FS {
	t.Helper()
	Skip(t)
	base := t.TempDir()
	backing, mnt := filepath.Join(base, "backing"), filepath.Join(base, "mnt")
	for _, d := range []string{mnt, backing} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	f, err := New(backing, mnt)
	if err != nil {
		t.Skipf("faultfs: cannot mount (%v)", err)
	}
	t.Cleanup(func() { f.Unmount() })
	return f
}

// New mounts at mnt a fault filesystem passing through to backing (both
// existing directories). The filesystem is served by this process: a
// store that maps its files into memory (bolt: raft.db, wal-meta.db)
// must run in another, as must one that exits on a failure: a page fault
// or a request served by the faulting process itself can hang it for
// good (the Go runtime's stop-the-world waits for the faulting thread; a
// process that ends while its own request waits never ends). Pebble
// alone reads and writes with system calls and may run here; should the
// process end while one of its requests waits (its test's -timeout, a
// kill), the mount's watchdog (watchdog.go) aborts the connection, so the
// process ends, and detaches mnt. It detaches mnt too after a process that
// ended without Unmount.
func New(backing, mnt string) (*FS, error) {
	f := &FS{Dir: mnt, backing: backing}
	lr, err := fs.NewLoopbackRoot(backing)
	if err != nil {
		return nil, err
	}
	root := &node{LoopbackNode: lr.(*fs.LoopbackNode), fs: f}
	root.RootData.RootNode = root
	zero := time.Duration(0)
	f.srv, err = fs.Mount(mnt, root, &fs.Options{
		AttrTimeout:  &zero,
		EntryTimeout: &zero,
		MountOptions: fuse.MountOptions{DirectMountStrict: true, FsName: "faultfs", Name: "faultfs"},
	})
	if err != nil {
		return nil, err
	}
	if f.watch, err = startWatchdog(mnt); err != nil {
		f.srv.Unmount()
		return nil, fmt.Errorf("faultfs: start the mount's watchdog: %w", err)
	}
	return f, nil
}

// Unmount unmounts the filesystem, detaching it if it stays busy.
func (f *FS) Unmount() {
	f.Clear()
	defer func() {
		if f.watch != nil {
			f.watch.Kill()
		}
	}()
	for range 50 {
		if f.srv.Unmount() == nil {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	Detach(f.Dir)
}

// Backing is the directory the filesystem passes through to: what the
// disk holds, read without faults.
func (f *FS) Backing() string { return f.backing }

// Detach unmounts mnt lazily: a mount whose process ended, or one still
// busy.
func Detach(mnt string) error { return syscall.Unmount(mnt, syscall.MNT_DETACH) }

// Fail makes op on the files whose name, or path from the mount's root,
// matches pattern (filepath.Match) fail with EIO: once, or until Clear.
func (f *FS) Fail(op Op, pattern string, once bool) { f.FailWith(op, pattern, once, syscall.EIO) }

// FailWith is Fail with another error.
func (f *FS) FailWith(op Op, pattern string, once bool, errno syscall.Errno) {
	if op == OpRead {
		// Clean pages of the files would answer reads without asking.
		syscall.Sync()
		os.WriteFile("/proc/sys/vm/drop_caches", []byte("1"), 0)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.rules = append(f.rules, rule{op: op, pattern: pattern, once: once, errno: errno})
}

// Clear ends every failure.
func (f *FS) Clear() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.rules = nil
}

// Hits returns the operations failed so far.
func (f *FS) Hits() []Hit {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]Hit(nil), f.hits...)
}

// String lists the failures made, for a test's message.
func (f *FS) String() string { return fmt.Sprint(f.Hits()) }

func (f *FS) check(op Op, path string) syscall.Errno {
	f.mu.Lock()
	defer f.mu.Unlock()
	for i, r := range f.rules {
		if r.op != op {
			continue
		}
		m1, _ := filepath.Match(r.pattern, filepath.Base(path))
		m2, _ := filepath.Match(r.pattern, path)
		if !m1 && !m2 {
			continue
		}
		f.hits = append(f.hits, Hit{Op: op, Path: path})
		if r.once {
			f.rules = append(f.rules[:i:i], f.rules[i+1:]...)
		}
		return r.errno
	}
	return 0
}

type node struct {
	*fs.LoopbackNode
	fs *FS
}

var (
	_ fs.NodeWrapChilder = (*node)(nil)
	_ fs.NodeOpener      = (*node)(nil)
	_ fs.NodeCreater     = (*node)(nil)
	_ fs.NodeRenamer     = (*node)(nil)
)

func (n *node) WrapChild(ctx context.Context, ops fs.InodeEmbedder) fs.InodeEmbedder {
	return &node{LoopbackNode: ops.(*fs.LoopbackNode), fs: n.fs}
}

func (n *node) path() string { return n.EmbeddedInode().Path(nil) }

func (n *node) Open(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	if e := n.fs.check(OpOpen, n.path()); e != 0 {
		return nil, 0, e
	}
	fh, ff, e := n.LoopbackNode.Open(ctx, flags)
	if e != 0 {
		return nil, 0, e
	}
	return &file{LoopbackFile: fh.(*fs.LoopbackFile), n: n}, ff, 0
}

func (n *node) Create(ctx context.Context, name string, flags uint32, mode uint32, out *fuse.EntryOut) (*fs.Inode, fs.FileHandle, uint32, syscall.Errno) {
	if e := n.fs.check(OpCreate, filepath.Join(n.path(), name)); e != 0 {
		return nil, nil, 0, e
	}
	in, fh, ff, e := n.LoopbackNode.Create(ctx, name, flags, mode, out)
	if e != 0 {
		return nil, nil, 0, e
	}
	return in, &file{LoopbackFile: fh.(*fs.LoopbackFile), n: in.Operations().(*node)}, ff, 0
}

func (n *node) Rename(ctx context.Context, name string, newParent fs.InodeEmbedder, newName string, flags uint32) syscall.Errno {
	if e := n.fs.check(OpRename, filepath.Join(n.path(), name)); e != 0 {
		return e
	}
	if e := n.fs.check(OpRename, filepath.Join(newParent.EmbeddedInode().Path(nil), newName)); e != 0 {
		return e
	}
	if p, ok := newParent.(*node); ok {
		newParent = p.LoopbackNode
	}
	return n.LoopbackNode.Rename(ctx, name, newParent, newName, flags)
}

type file struct {
	*fs.LoopbackFile
	n *node
}

// PassthroughFd: no kernel passthrough, every operation comes here.
func (f *file) PassthroughFd() (int, bool) { return 0, false }

func (f *file) Read(ctx context.Context, buf []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	if e := f.n.fs.check(OpRead, f.n.path()); e != 0 {
		return nil, e
	}
	return f.LoopbackFile.Read(ctx, buf, off)
}

func (f *file) Write(ctx context.Context, data []byte, off int64) (uint32, syscall.Errno) {
	if e := f.n.fs.check(OpWrite, f.n.path()); e != 0 {
		return 0, e
	}
	return f.LoopbackFile.Write(ctx, data, off)
}

func (f *file) Writev(ctx context.Context, data [][]byte, off int64) (uint32, syscall.Errno) {
	if e := f.n.fs.check(OpWrite, f.n.path()); e != 0 {
		return 0, e
	}
	return f.LoopbackFile.Writev(ctx, data, off)
}

func (f *file) Fsync(ctx context.Context, flags uint32) syscall.Errno {
	if e := f.n.fs.check(OpFsync, f.n.path()); e != 0 {
		return e
	}
	return f.LoopbackFile.Fsync(ctx, flags)
}
