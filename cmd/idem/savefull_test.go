package main

import (
	"errors"
	"fmt"
	"os"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
)

// A save into a disk that filled midway (a walk: a 24 MiB tmpfs, a 40 MB
// backup) said only "receiving into b.snap.tmp-337719796: write
// b.snap.tmp-337719796: no space left on device (nothing was saved)":
// neither which disk, how far it got, nor what to do. It now says all
// three; other errors read as before.
func TestSaveOnAFullDiskNamesTheDiskAndTheWayOut(t *testing.T) {
	tmp := "/backups/b.snap.tmp-337719796"
	full := fmt.Errorf("flush: %w", &os.PathError{Op: "write", Path: tmp, Err: syscall.ENOSPC})
	msg := receiveFailure(full, "/backups/b.snap", tmp, 20971858)
	require.Contains(t, msg, "the disk holding /backups is full")
	require.Contains(t, msg, "after 20971858 bytes of the snapshot were received into "+tmp)
	require.Contains(t, msg, "nothing was saved")
	require.Contains(t, msg, "free space on that disk or save into a directory on another one")

	msg = receiveFailure(errors.New("unexpected EOF"), "/backups/b.snap", tmp, 10)
	require.Equal(t, "receiving into "+tmp+": unexpected EOF (nothing was saved)", msg)
}
