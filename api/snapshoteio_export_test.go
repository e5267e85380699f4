package api

import (
	"io"

	"github.com/idem-store/idem/engine"
	"github.com/idem-store/idem/raftfsm"
)

// SetWriteBackup replaces the stream of GET /v1/admin/snapshot until the
// returned function puts it back.
func SetWriteBackup(f func(io.Writer, raftfsm.BackupHeader, *engine.Snapshot) (int64, error)) func() {
	old := writeBackup
	writeBackup = f
	return func() { writeBackup = old }
}

// SetNewBackupHeader replaces how GET /v1/admin/snapshot describes the
// state it streams until the returned function puts it back.
func SetNewBackupHeader(f func(*engine.Snapshot, string) (raftfsm.BackupHeader, error)) func() {
	old := newBackupHeader
	newBackupHeader = f
	return func() { newBackupHeader = old }
}
