package api_test

import (
	"errors"
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
