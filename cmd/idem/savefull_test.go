package main

import (
	"errors"
	"fmt"
	"io"
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

	msg = receiveFailure(errors.New("connection reset by peer"), "/backups/b.snap", tmp, 10)
	require.Equal(t, "receiving into "+tmp+": connection reset by peer (nothing was saved)", msg)

	// A node that stops mid-stream (a walk: a damaged store file, found as
	// the save read it, stops the node) said only "unexpected EOF".
	msg = receiveFailure(fmt.Errorf("copy: %w", io.ErrUnexpectedEOF), "/backups/b.snap", tmp, 4096)
	require.Contains(t, msg, "the node stopped sending the snapshot after 4096 bytes, before its end")
	require.Contains(t, msg, "says why")
	require.Contains(t, msg, "nothing was saved")
}

// A restore whose disk filled midway (the check of free space passed, and
// another writer took the room; a walk) said "raftfsm: restore: raftfsm:
// write …/moved-from-raft.db: write …/moved-from-raft.db: no space left on
// device": the path twice, and neither the disk nor the way out.
func TestRestoreOnADiskThatFillsNamesTheDiskAndTheWayOut(t *testing.T) {
	tmp := "/data/n1.restore-123"
	full := fmt.Errorf("raftfsm: restore: %w", &os.PathError{Op: "write", Path: tmp + "/raft-wal/00001.wal", Err: syscall.ENOSPC})
	msg := restoreFailure(full, "b.snap", tmp, "/data/n1", 90<<20+1)
	require.Contains(t, msg, "the disk holding /data filled while b.snap was restored into "+tmp+", which is removed (nothing was written to /data/n1)")
	require.Contains(t, msg, "free space on that disk (the restore needs about 91 MiB) or restore into a data dir on another disk")

	msg = restoreFailure(errors.New("raftfsm: restore: truncated"), "b.snap", tmp, "/data/n1", 0)
	require.Equal(t, "b.snap: raftfsm: restore: truncated (nothing was written to /data/n1)", msg)
}
