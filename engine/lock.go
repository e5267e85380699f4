package engine

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/cockroachdb/pebble/v2"
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
	if pebble.IsCorruptionError(err) {
		return fmt.Errorf("engine: open %s: %w. The store is damaged and this node cannot read its state. Nothing was changed. %s", dir, err, damagedAdvice)
	}
	// A file the MANIFEST lists is gone or cut short (removed by hand, a
	// filesystem repair): Pebble names it, not what to do.
	if msg := err.Error(); errors.Is(err, fs.ErrNotExist) || strings.Contains(msg, "does not exist") || strings.Contains(msg, "object size mismatch") {
		return fmt.Errorf("engine: open %s: %w. A file of the store is missing or cut short and this node cannot read its state. Nothing was changed. %s", dir, err, damagedAdvice)
	}
	return fmt.Errorf("engine: open %s: %w", dir, err)
}

// damagedAdvice is what to do with a node whose store is damaged; it never
// advises deleting the data dir, which may hold the only copy.
const damagedAdvice = "If other members of the cluster are healthy, move this node's data dir aside (keep it: mv it to a new name) and start the node with an empty data dir and --join, so the leader sends it the state; " +
	"if this is the only node, build a new data dir from the newest backup (idem snapshot restore)"
