//go:build unix

package main

import (
	"os"
	"syscall"
)

// lockRestoreCopy creates path and takes an exclusive flock on it, held
// until the returned file is closed or the process ends (a kill -9
// included: the kernel drops it then).
func lockRestoreCopy(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// restoreCopyAbandoned reports whether the restore that made the copy
// holding lock path has ended: the lock file is there and no process holds
// its flock. A copy without it (made by an earlier release) cannot be told
// from a restore that runs: false.
func restoreCopyAbandoned(path string) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		return false
	}
	syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
	return true
}

// isMountPoint reports whether dir is the root of a filesystem mounted
// there (a disk for the data dir, say): its device differs from its
// parent's. Such a directory cannot be removed or renamed over (EBUSY).
func isMountPoint(dir string) bool {
	st, err := os.Stat(dir)
	if err != nil {
		return false
	}
	up, err := os.Stat(dir + "/..")
	if err != nil {
		return false
	}
	a, ok1 := st.Sys().(*syscall.Stat_t)
	b, ok2 := up.Sys().(*syscall.Stat_t)
	return ok1 && ok2 && a.Dev != b.Dev
}
