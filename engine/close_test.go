package engine

import (
	"strings"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/stretchr/testify/require"
)

// fullFS fails every write to a WAL file with ENOSPC once full is set: a
// disk that filled while the store was open.
type fullFS struct {
	vfs.FS
	full atomic.Bool
}

type fullFile struct {
	vfs.File
	fs *fullFS
}

func (f fullFile) Write(p []byte) (int, error) {
	if f.fs.full.Load() {
		return 0, syscall.ENOSPC
	}
	return f.File.Write(p)
}

func (fs *fullFS) wrap(name string, f vfs.File, err error) (vfs.File, error) {
	if err != nil || !strings.HasSuffix(name, ".log") {
		return f, err
	}
	return fullFile{File: f, fs: fs}, nil
}

func (fs *fullFS) Create(name string, c vfs.DiskWriteCategory) (vfs.File, error) {
	f, err := fs.FS.Create(name, c)
	return fs.wrap(name, f, err)
}

func (fs *fullFS) ReuseForWrite(oldname, newname string, c vfs.DiskWriteCategory) (vfs.File, error) {
	f, err := fs.FS.ReuseForWrite(oldname, newname, c)
	return fs.wrap(newname, f, err)
}

func (fs *fullFS) OpenReadWrite(name string, c vfs.DiskWriteCategory, opts ...vfs.OpenOption) (vfs.File, error) {
	f, err := fs.FS.OpenReadWrite(name, c, opts...)
	return fs.wrap(name, f, err)
}

// Closing on a full disk returns an error; it used to panic (a synced
// LogData before Pebble's Close is a commit, and a commit that cannot
// write the WAL is fatal to Pebble), so a node stopped on a full disk
// died instead of stopping.
func TestCloseOnAFullDiskReturnsAnError(t *testing.T) {
	fs := &fullFS{FS: vfs.NewMem()}
	db, err := Open("db", Options{FS: fs, CacheBytes: 1 << 20})
	require.NoError(t, err)
	h := &harness{t: t, db: db}
	h.claim(1000, args(Scope{Principal: "p", Endpoint: "e", Key: "k"}))
	fs.full.Store(true)
	var closeErr error
	require.NotPanics(t, func() { closeErr = db.Close() })
	require.ErrorIs(t, closeErr, syscall.ENOSPC)
	require.Contains(t, closeErr.Error(), "engine: close")
	require.NoError(t, db.Close(), "a second Close is a no-op")
}
