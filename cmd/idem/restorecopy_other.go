//go:build !unix

package main

import "os"

// lockRestoreCopy creates path; without flock it holds no lock, and no
// copy is ever taken for abandoned (restoreCopyAbandoned).
func lockRestoreCopy(path string) (*os.File, error) {
	return os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o600)
}

// restoreCopyAbandoned cannot tell a running restore from an ended one
// here: copies are only named.
func restoreCopyAbandoned(string) bool { return false }

// isMountPoint cannot tell here: a restore builds beside the directory.
func isMountPoint(string) bool { return false }

// restoreCopyHeld cannot tell here: no copy is taken for held.
func restoreCopyHeld(string) bool { return false }

// lockDir takes no lock here: a directory cannot be opened for one.
func lockDir(string, bool) (*os.File, error) { return nil, nil }

// dirLockHolder cannot tell here.
func dirLockHolder(string) (int, bool) { return 0, false }
