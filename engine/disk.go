package engine

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// DiskFree is the number of bytes an unprivileged writer can still use on
// the filesystem holding path (what df shows as available).
func DiskFree(path string) (uint64, error) {
	free, _, err := DiskSize(path)
	return free, err
}

// DiskSize is the bytes an unprivileged writer can still use on the
// filesystem holding path (as DiskFree) and the filesystem's whole size.
func DiskSize(path string) (free, total uint64, err error) {
	u, err := vfs.Default.GetDiskUsage(path)
	if err != nil {
		return 0, 0, fmt.Errorf("engine: disk usage of %s: %w", path, err)
	}
	return u.AvailBytes, u.TotalBytes, nil
}

// DiskSizeNear is DiskSize of the filesystem that holds path, or would
// hold it: path need not exist yet, and the nearest directory above it
// that does is asked (a data dir a command is about to make).
func DiskSizeNear(path string) (free, total uint64, err error) {
	at, err := filepath.Abs(path)
	if err != nil {
		return 0, 0, err
	}
	for {
		if _, err := os.Stat(at); err == nil || !errors.Is(err, os.ErrNotExist) {
			break
		}
		up := filepath.Dir(at)
		if up == at {
			break
		}
		at = up
	}
	return DiskSize(at)
}

// DiskFullFS is the OS filesystem for Options.FS with a hook for a full
// disk. Pebble cannot survive a failed write: a WAL write error is sticky
// and the next commit panics inside Pebble, and a failed MANIFEST write is
// fatal. Through this filesystem a write that fails with ENOSPC instead
// calls onFull, with every new write held until it returns, and is then
// retried once (Pebble's vfs.OnDiskFull). onFull makes room (removes a
// ballast) or waits until there is some.
func DiskFullFS(onFull func()) vfs.FS { return vfs.OnDiskFull(vfs.Default, onFull) }

// CreateBallast reserves size bytes in a file at path, so that removing it
// gives the space back when the disk fills. The blocks are allocated, not a
// sparse file: fallocate where the OS has it, zeros written elsewhere. The
// file appears whole or not at all (written under a temporary name).
func CreateBallast(path string, size int64) error {
	tmp := path + ".tmp"
	if err := writeBallast(tmp, size); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("engine: create ballast %s: %w", path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("engine: create ballast %s: %w", path, err)
	}
	if err := syncDir(vfs.Default, path); err != nil {
		return fmt.Errorf("engine: create ballast %s: %w", path, err)
	}
	return nil
}

func writeBallast(path string, size int64) error {
	f, err := vfs.Default.Create(path, vfs.WriteCategoryUnspecified)
	if err != nil {
		return err
	}
	defer f.Close()
	if runtime.GOOS == "linux" {
		// fallocate: the blocks are reserved at once, whatever the
		// filesystem compresses; Truncate then shows the size in ls.
		if err := f.Preallocate(0, size); err != nil {
			return err
		}
		if err := os.Truncate(path, size); err != nil {
			return err
		}
	} else {
		zeros := make([]byte, 1<<20)
		for left := size; left > 0; left -= int64(len(zeros)) {
			if _, err := f.Write(zeros[:min(left, int64(len(zeros)))]); err != nil {
				return err
			}
		}
	}
	return f.Sync()
}

// BallastSize is the size of the ballast at path, 0 when there is none.
func BallastSize(path string) (int64, error) {
	fi, err := os.Stat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("engine: ballast: %w", err)
	}
	return fi.Size(), nil
}

// RemoveBallast deletes the ballast, durably; a missing one is no error.
func RemoveBallast(path string) error {
	os.Remove(path + ".tmp")
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("engine: remove ballast: %w", err)
	}
	if err := syncDir(vfs.Default, path); err != nil {
		return fmt.Errorf("engine: remove ballast: %w", err)
	}
	return nil
}
