//go:build unix

package main

import (
	"fmt"
	"os"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
)

// A filesystem that refuses flock itself (ENOLCK, EOPNOTSUPP: some
// network and FUSE ones) leaves the data dir unlocked, as before the
// restore lock, and does not refuse a node or a restore there; only a lock
// held elsewhere (EWOULDBLOCK) refuses.
func TestFlockRefusedByTheFilesystemIsNoLockHeld(t *testing.T) {
	for _, errno := range []syscall.Errno{syscall.ENOLCK, syscall.EOPNOTSUPP, syscall.EINVAL} {
		require.True(t, flockUnsupported(fmt.Errorf("flock: %w", errno)), "%v", errno)
	}
	require.False(t, flockUnsupported(syscall.EWOULDBLOCK))
	require.False(t, flockUnsupported(os.ErrPermission))

	dir := t.TempDir()
	held, err := lockDir(dir, true)
	require.NoError(t, err)
	_, err = lockDir(dir, false)
	require.ErrorIs(t, err, syscall.EWOULDBLOCK, "a restore's lock held excludes serve's")
	held.Close()
}
