package engine

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// syncErrFS names the file and the call on a failed fsync of a store file.
// Pebble's own files (vfs.Default's linuxFile) return unix.Fdatasync's and
// unix.SyncFileRange's bare errno, with no *os.PathError: ioFailure, which
// looks for one, took a WAL's or a table's failed fsync for another error,
// and the process did not stop (a backup's sync then panicked into
// net/http, which recovered, and the node went on).
//
// It also stops the process itself (walStop) when a WAL file fails: its
// write or fsync (IOStop), or the creation of the next one. Pebble meets
// those at a WAL rotation (rotateWAL closes the full WAL, which syncs it,
// then creates the next) with a panic raised while its DB mutex is
// unlocked, which a deferred unlock turns into Go's fatal "unlock of
// unlocked mutex": no recover sees it, and the node died with exit
// status 2 and a goroutine dump, naming neither the file nor the way out.
type syncErrFS struct {
	vfs.FS
	// stopper stops the process on a failed WAL file (its ioStop); nil:
	// no stop. A pointer: the FS is compared (a func field is not comparable).
	stopper *pebbleLogger
}

// walStop is the stop of a failed WAL file: nil when none. It stops only
// once the store is open: pebble.Open returns a failed WAL file (the
// first WAL's creation on a full or failing disk at a node's start, an
// offline command's open) as its error, which the caller reports with its
// own advice; stopped from inside Open, a start on a full disk was told
// to restart the machine.
func (fs syncErrFS) walStop() func(path string, err error, what string) {
	if fs.stopper == nil {
		return nil
	}
	return func(path string, err error, what string) {
		if o := fs.stopper.opened; o != nil && !o.Load() {
			return
		}
		fs.stopper.ioStop(path, err, what)
	}
}

func (fs syncErrFS) Unwrap() vfs.FS { return fs.FS }

func (fs syncErrFS) Create(name string, c vfs.DiskWriteCategory) (vfs.File, error) {
	return fs.wrap(name)(fs.FS.Create(name, c))
}

func (fs syncErrFS) ReuseForWrite(oldname, newname string, c vfs.DiskWriteCategory) (vfs.File, error) {
	return fs.wrap(newname)(fs.FS.ReuseForWrite(oldname, newname, c))
}

func (fs syncErrFS) OpenReadWrite(name string, c vfs.DiskWriteCategory, opts ...vfs.OpenOption) (vfs.File, error) {
	return fs.wrap(name)(fs.FS.OpenReadWrite(name, c, opts...))
}

// OpenDir: the WAL directory's fsync after a new WAL file is made is at
// the rotation too (a failed one panics there as above); a directory's
// failed fsync anywhere else stopped the process already (a flush's as a
// background error, a MANIFEST's as Pebble's fatal error).
func (fs syncErrFS) OpenDir(name string) (vfs.File, error) {
	f, err := fs.FS.OpenDir(name)
	if err != nil {
		return f, err
	}
	return syncErrFile{File: f, name: name, stop: fs.walStop()}, nil
}

// isWAL says whether name is one of Pebble's WAL files (NNNNNN.log).
func isWAL(name string) bool { return filepath.Ext(name) == ".log" }

func (fs syncErrFS) wrap(name string) func(vfs.File, error) (vfs.File, error) {
	return func(f vfs.File, err error) (vfs.File, error) {
		if err != nil {
			// The next WAL cannot be made: Pebble panics (rotateWAL), as
			// above. A full disk too: vfs.OnDiskFull (DiskFullFS) has
			// made room and tried again already.
			if stop := fs.walStop(); isWAL(name) && stop != nil && !errors.Is(err, os.ErrClosed) {
				stop(name, nextWALError{err}, "create the next WAL file: "+err.Error())
			}
			return f, err
		}
		sf := syncErrFile{File: f, name: name}
		if isWAL(name) {
			sf.stop = fs.walStop()
		}
		return sf, nil
	}
}

// nextWALError is a failed creation of the store's next WAL file (a
// rotation's): for lack of space (ENOSPC, EDQUOT) nothing was written,
// and ioStop gives a full disk's advice, not a failed write's.
type nextWALError struct{ error }

func (e nextWALError) Unwrap() error { return e.error }

// noRoomForNextWAL reports whether err is the creation of the next WAL
// file refused for lack of space.
func noRoomForNextWAL(err error) bool {
	var nw nextWALError
	return errors.As(err, &nw) && (errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT))
}

type syncErrFile struct {
	vfs.File
	name string
	stop func(path string, err error, what string) // a WAL's: walStop
}

// failed stops the process when err is a failed write or fsync of a WAL
// file, and returns err.
func (f syncErrFile) failed(err error) error {
	if err != nil && f.stop != nil {
		if path, cause, ok := IOStop(err); ok {
			f.stop(path, cause, err.Error())
		}
	}
	return err
}

func (f syncErrFile) Write(p []byte) (int, error) {
	n, err := f.File.Write(p)
	return n, f.failed(err)
}

func (f syncErrFile) WriteAt(p []byte, off int64) (int, error) {
	n, err := f.File.WriteAt(p, off)
	return n, f.failed(err)
}

func (f syncErrFile) Sync() error {
	return f.failed(pathErr("sync", f.name, f.File.Sync()))
}

func (f syncErrFile) SyncData() error {
	return f.failed(pathErr("fdatasync", f.name, f.File.SyncData()))
}

func (f syncErrFile) SyncTo(length int64) (bool, error) {
	full, err := f.File.SyncTo(length)
	return full, f.failed(pathErr("sync_file_range", f.name, err))
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
