package api

import (
	"net/http"
	"os"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idem-store/idem/raftfsm"
)

// A read of the record that the node's disk failed (raftfsm's
// StoreReadError) is answered 503 with Retry-After, naming no file
// of the data dir (the node's log does), not the
// 500 of an unknown store error, and never as an absent record.
func TestStoreReadFailureIs503(t *testing.T) {
	p := storeProblem(&raftfsm.StoreReadError{Err: &os.PathError{Op: "read", Path: "/d/fsm/000018.sst", Err: syscall.EIO}})
	require.Equal(t, http.StatusServiceUnavailable, p.Status)
	require.Equal(t, codeUnavailable, p.Code)
	require.NotContains(t, p.Detail, "/d/fsm", "a tenant's answer names no file of the server's data dir")
	require.NotContains(t, p.Detail, "000018.sst")
	require.Contains(t, p.Detail, "could not read its store")
	require.Equal(t, 5, p.retryAfter)
}
