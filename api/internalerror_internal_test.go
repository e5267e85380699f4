package api

import (
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idem-store/idem/raftfsm"
)

// A store error with no answer of its own is a 500 "internal error": the
// caller is told nothing of it, and the node's log said nothing either (a
// join that met a compaction was seen only by its client). The log names
// it now; known errors are answered as before and logged nowhere here.
func TestInternalErrorIsLoggedAndNotTold(t *testing.T) {
	var logs lockedBuffer
	s := &Server{log: slog.New(slog.NewTextHandler(&logs, nil))}
	w := httptest.NewRecorder()
	writeProblem(w, s.storeProblem(errors.New("raftfsm: read raft log entry 39 for the configuration: log not found")))
	require.Equal(t, http.StatusInternalServerError, w.Code)
	require.NotContains(t, w.Body.String(), "log not found")
	require.Contains(t, logs.String(), "level=ERROR")
	require.Contains(t, logs.String(), "read raft log entry 39 for the configuration: log not found")

	logs.mu.Lock()
	logs.b.Reset()
	logs.mu.Unlock()
	w = httptest.NewRecorder()
	writeProblem(w, s.storeProblem(raftfsm.ErrNoLeader))
	require.Equal(t, http.StatusServiceUnavailable, w.Code)
	require.Empty(t, logs.String())
}
