package engine

import (
	"errors"
	"fmt"
	"path/filepath"
	"syscall"
)

// ErrInUse means another process holds the store's directory: two
// processes must never share one, and Pebble's LOCK file refuses it.
var ErrInUse = errors.New("engine: in use by another process")

// InUseError is ErrInUse with the directory and, when the OS tells, the
// process holding it.
type InUseError struct {
	Dir string
	PID int // 0 when unknown
	Err error
}

func (e *InUseError) Error() string {
	if e.PID > 0 {
		return fmt.Sprintf("engine: %s is in use by another process (pid %d)", e.Dir, e.PID)
	}
	return fmt.Sprintf("engine: %s is in use by another process", e.Dir)
}

func (e *InUseError) Is(target error) bool { return target == ErrInUse }
func (e *InUseError) Unwrap() error        { return e.Err }

// Holder reports whether another process holds the store in dir, and its
// pid when the OS tells (0 otherwise): for messages of tools that find a
// node's data dir locked.
func Holder(dir string) (held bool, pid int) { return lockHolder(filepath.Join(dir, "LOCK")) }

// openError explains a failed pebble.Open. Pebble takes an fcntl lock on
// dir/LOCK; when another process holds it, the bare error would read
// "resource temporarily unavailable".
func openError(dir string, err error) error {
	if errors.Is(err, syscall.EAGAIN) || errors.Is(err, syscall.EACCES) {
		if held, pid := lockHolder(filepath.Join(dir, "LOCK")); held {
			return &InUseError{Dir: dir, PID: pid, Err: err}
		}
	}
	return fmt.Errorf("engine: open %s: %w", dir, err)
}
