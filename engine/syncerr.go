package engine

import (
	"errors"
	"os"
	"syscall"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// syncErrFS names the file and the call on a failed fsync of a store file.
// Pebble's own files (vfs.Default's linuxFile) return unix.Fdatasync's and
// unix.SyncFileRange's bare errno, with no *os.PathError: ioFailure, which
// looks for one, took a WAL's or a table's failed fsync for another error,
// and the process did not stop (a backup's sync then panicked into
// net/http, which recovered, and the node went on).
type syncErrFS struct{ vfs.FS }

func (fs syncErrFS) Unwrap() vfs.FS { return fs.FS }

func (fs syncErrFS) Create(name string, c vfs.DiskWriteCategory) (vfs.File, error) {
	return syncErrWrap(name)(fs.FS.Create(name, c))
}

func (fs syncErrFS) ReuseForWrite(oldname, newname string, c vfs.DiskWriteCategory) (vfs.File, error) {
	return syncErrWrap(newname)(fs.FS.ReuseForWrite(oldname, newname, c))
}

func (fs syncErrFS) OpenReadWrite(name string, c vfs.DiskWriteCategory, opts ...vfs.OpenOption) (vfs.File, error) {
	return syncErrWrap(name)(fs.FS.OpenReadWrite(name, c, opts...))
}

func syncErrWrap(name string) func(vfs.File, error) (vfs.File, error) {
	return func(f vfs.File, err error) (vfs.File, error) {
		if err != nil {
			return f, err
		}
		return syncErrFile{File: f, name: name}, nil
	}
}

type syncErrFile struct {
	vfs.File
	name string
}

func (f syncErrFile) SyncData() error {
	return pathErr("fdatasync", f.name, f.File.SyncData())
}

func (f syncErrFile) SyncTo(length int64) (bool, error) {
	full, err := f.File.SyncTo(length)
	return full, pathErr("sync_file_range", f.name, err)
}

// pathErr makes a bare errno a *os.PathError of op on name; any other
// error (nil, already named) is returned as it is.
func pathErr(op, name string, err error) error {
	var errno syscall.Errno
	var pe *os.PathError
	if err == nil || errors.As(err, &pe) || !errors.As(err, &errno) {
		return err
	}
	return &os.PathError{Op: op, Path: name, Err: err}
}
