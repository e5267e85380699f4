//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package engine

import (
	"io"
	"os"
	"syscall"
)

// lockHolder asks the OS whether another process holds the fcntl write
// lock Pebble takes on path, and which one (0 when the holder lives in
// another PID namespace).
func lockHolder(path string) (held bool, pid int) {
	f, err := os.Open(path)
	if err != nil {
		return false, 0
	}
	defer f.Close()
	lk := syscall.Flock_t{Type: syscall.F_WRLCK, Whence: io.SeekStart}
	if err := syscall.FcntlFlock(f.Fd(), syscall.F_GETLK, &lk); err != nil {
		return false, 0
	}
	if lk.Type == syscall.F_UNLCK {
		return false, 0
	}
	return true, int(lk.Pid)
}
