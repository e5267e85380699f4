package api_test

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idem-store/idem/api"
	"github.com/idem-store/idem/engine"
	"github.com/idem-store/idem/raftfsm"
)

// A backup download whose first read of the store the disk fails (EIO
// under a table) is answered 200 and cut: the client sees a stream
// stopped short, not a connection closed without an answer, which
// idem snapshot save took for an address that does not speak HTTP (it
// named the raft address as the likely mistake; an EIO walk).
func TestSnapshotCutByADiskReadIsAnAnswerCutShort(t *testing.T) {
	n := mustNode(t)
	defer api.SetWriteBackup(func(io.Writer, raftfsm.BackupHeader, *engine.Snapshot) (int64, error) {
		return 0, &os.PathError{Op: "read", Path: "/d/fsm/000008.sst", Err: syscall.EIO}
	})()
	resp, err := http.Get(n.url + "/v1/admin/snapshot")
	require.NoError(t, err, "the node must answer before its stream is cut")
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	_, err = io.ReadAll(resp.Body)
	require.True(t, errors.Is(err, io.ErrUnexpectedEOF), "the stream is cut, not ended: %v", err)
}

// The records count of a backup's header is its first read of the store:
// a disk that failed it (EIO under a table) was answered 500 "the
// snapshot could not be taken: ... read /d/fsm/000008.sst: input/output
// error", where a request's read the disk failed is a 503 naming no file,
// and another member serves the backup; a node whose store closed under
// it (a stop) answered 500 too. Both are 503 with Retry-After now.
func TestSnapshotHeaderTheDiskFailedIs503(t *testing.T) {
	n := mustNode(t)
	for _, tc := range []struct {
		err        error
		says, wait string
	}{
		{fmt.Errorf("engine: snapshot value: %w", &os.PathError{Op: "read", Path: "/d/fsm/000008.sst", Err: syscall.EIO}), "could not read its store", "5"},
		{engine.ErrClosed, "shutting down", "1"},
	} {
		restore := api.SetNewBackupHeader(func(*engine.Snapshot, string) (raftfsm.BackupHeader, error) { return raftfsm.BackupHeader{}, tc.err })
		r := n.do("GET", "/v1/admin/snapshot", nil)
		restore()
		require.Equal(t, http.StatusServiceUnavailable, r.status, "%s", r)
		require.Equal(t, tc.wait, r.header.Get("Retry-After"))
		require.Contains(t, r.String(), tc.says)
		require.NotContains(t, r.String(), "000008.sst", "the answer names no file of the data dir")
	}
	require.Equal(t, http.StatusOK, n.do("GET", "/v1/admin/snapshot", nil).status)
}
