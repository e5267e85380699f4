package raftfsm

import (
	"log/slog"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	"github.com/stretchr/testify/require"
)

// Raft panics when its term or vote cannot be recorded; before it does,
// the node says at ERROR which file, why and what to do (an operator walk
// got only raft's goroutine dump after ext4 went read-only).
func TestStableStoreSaysWhyRaftStops(t *testing.T) {
	calls := stopHook(t)
	dir := t.TempDir()
	bs, err := raftboltdb.New(raftboltdb.Options{Path: filepath.Join(dir, "raft.db")})
	require.NoError(t, err)
	var logs logBuffer
	s := loudStable{bs, slog.New(slog.NewTextHandler(&logs, nil)), dir}

	require.NoError(t, s.SetUint64([]byte("CurrentTerm"), 3))
	require.Empty(t, logs.String(), "a recorded term says nothing")
	got, err := s.GetUint64([]byte("CurrentTerm"))
	require.NoError(t, err)
	require.Equal(t, uint64(3), got)

	// The store failing for real (closed under raft).
	require.NoError(t, bs.Close())
	require.Error(t, s.SetUint64([]byte("CurrentTerm"), 4))
	require.Contains(t, logs.String(), "level=ERROR")
	require.Contains(t, logs.String(), "raft cannot record its CurrentTerm in raft.db")
	require.Contains(t, logs.String(), "file="+filepath.Join(dir, "raft.db"))

	// What the walk's read-only remount and a full disk return.
	ro := &os.PathError{Op: "write", Path: filepath.Join(dir, "raft.db"), Err: syscall.EROFS}
	require.ErrorIs(t, s.said([]byte("LastVoteTerm"), ro), syscall.EROFS)
	require.Contains(t, logs.String(), "the data dir's filesystem is read-only")
	full := &os.PathError{Op: "write", Path: filepath.Join(dir, "raft.db"), Err: syscall.ENOSPC}
	require.ErrorIs(t, s.said([]byte("LastVoteCand"), full), syscall.ENOSPC)
	require.Contains(t, logs.String(), "the disk is full")

	require.Zero(t, calls.Load(), "a closed store, a read-only filesystem or a full disk is raft's own stop")

	// An I/O error stops the node at once: raft went on after a vote it
	// could not record (it panicked only for the term), fsyncing raft.db
	// again over pages the OS may have dropped.
	eio := &os.PathError{Op: "write", Path: filepath.Join(dir, "raft.db"), Err: syscall.EIO}
	require.ErrorIs(t, s.said([]byte("LastVoteTerm"), eio), syscall.EIO)
	require.EqualValues(t, 1, calls.Load(), "a vote raft.db failed to write with EIO must stop the node")
	require.ErrorIs(t, s.said([]byte("LastVoteCand"), syscall.EIO), syscall.EIO) // bolt's bare fdatasync errno
	require.EqualValues(t, 2, calls.Load(), "a failed fsync of raft.db must stop the node")
}
