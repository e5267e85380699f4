//go:build unix

package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
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

// restoreCopyHeld reports whether a running restore holds the lock at path
// (its copy's): the file is there and its flock cannot be taken.
func restoreCopyHeld(path string) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		return true
	}
	syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
	return false
}

// isMountPoint reports whether dir is the root of a filesystem mounted
// there (a disk for the data dir, say): its device differs from its
// parent's, or, on Linux, the kernel's mount table lists it (a bind
// mount of a directory of the parent's own filesystem, whose device is
// the parent's: a systemd BindPaths=, a container's -v of a host dir
// beside another). Such a directory cannot be removed or renamed over
// (EBUSY), nor renamed into from outside it (EXDEV).
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
	if ok1 && ok2 && a.Dev != b.Dev {
		return true
	}
	return listedMountPoint(dir)
}

// listedMountPoint reports whether /proc/self/mountinfo (Linux) names dir,
// its links resolved, as a mount point; false where there is no such file.
func listedMountPoint(dir string) bool {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return false
	}
	if real, err := filepath.EvalSymlinks(abs); err == nil {
		abs = real
	}
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return false
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		// id parent major:minor root mount-point options ...
		f := strings.Fields(line)
		if len(f) > 4 && unescapeMountPath(f[4]) == abs {
			return true
		}
	}
	return false
}

// unescapeMountPath undoes mountinfo's octal escapes (\040 for a space,
// \011, \012, \134) of a path.
func unescapeMountPath(s string) string {
	if !strings.Contains(s, "\\") {
		return s
	}
	var out []byte
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				out = append(out, byte(v))
				i += 3
				continue
			}
		}
		out = append(out, s[i])
	}
	return string(out)
}

// lockDir takes an flock on dir itself, exclusive for a restore into it,
// shared for idem serve on it, held until the returned file is closed or
// the process ends (a kill -9 included). Neither Pebble's lock (an fcntl
// lock on fsm/LOCK) nor bolt's (an flock on raft.db) is on dir, and a
// restore touches neither until its last step: two restores into one
// mount point, or a serve started while a restore filled its data dir,
// each went on beside the other. It fails with EWOULDBLOCK when another
// process holds a lock that excludes this one (dirLockHolder names it).
func lockDir(dir string, exclusive bool) (*os.File, error) {
	f, err := os.Open(dir)
	if err != nil {
		return nil, err
	}
	how := syscall.LOCK_SH
	if exclusive {
		how = syscall.LOCK_EX
	}
	if err := syscall.Flock(int(f.Fd()), how|syscall.LOCK_NB); err != nil {
		f.Close()
		if flockUnsupported(err) {
			return nil, nil // Pebble's and bolt's own locks still hold
		}
		return nil, err
	}
	return f, nil
}

// flockUnsupported reports whether err is a filesystem's refusal of flock
// itself (some network and FUSE filesystems), not a lock held elsewhere:
// there the dir goes unlocked, as before the lock, rather than a node or
// a restore refused on a data dir it used to run on.
func flockUnsupported(err error) bool {
	return errors.Is(err, syscall.ENOLCK) || errors.Is(err, syscall.EOPNOTSUPP) || errors.Is(err, syscall.ENOTSUP) || errors.Is(err, syscall.EINVAL)
}

// dirLockHolder is the pid of a process holding an flock on dir (lockDir),
// and whether that lock is exclusive (a restore's), as Linux's /proc/locks
// lists them; 0 where it cannot tell.
func dirLockHolder(dir string) (pid int, exclusive bool) {
	st, err := os.Stat(dir)
	if err != nil {
		return 0, false
	}
	s, ok := st.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, false
	}
	b, err := readProcLocks()
	if err != nil {
		return 0, false
	}
	dev := uint64(s.Dev)
	major := (dev>>8)&0xfff | (dev>>32)&^uint64(0xfff)
	minor := dev&0xff | (dev>>12)&^uint64(0xff)
	want := fmt.Sprintf("%02x:%02x:%d", major, minor, s.Ino)
	for line := range strings.SplitSeq(string(b), "\n") {
		// 1: FLOCK  ADVISORY  WRITE 1234 08:01:5678 0 EOF
		f := strings.Fields(line)
		if len(f) < 6 || f[1] != "FLOCK" || f[5] != want {
			continue
		}
		p, err := strconv.Atoi(f[4])
		if err != nil {
			continue
		}
		return p, f[3] == "WRITE"
	}
	return 0, false
}

// readProcLocks reads /proc/locks in as few reads as it can: the kernel
// walks its list of locks anew at each read, and a lock released between
// two reads shifts the ones after it, so that one listed throughout could
// be skipped (seen on a busy machine: a restore's lock, held for 200 ms,
// was in none of twenty reads of 4 KiB at a time).
func readProcLocks() ([]byte, error) {
	f, err := os.Open("/proc/locks")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	buf := make([]byte, 0, 1<<20)
	for {
		n, err := f.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if err != nil || n == 0 {
			return buf, nil
		}
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
	}
}
