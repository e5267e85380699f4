package api

import (
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
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

// An error with no answer that lasts (a store failing every request) is
// logged at most once every internalLogEvery, with the count since the
// last line: a client sending requests, or one batch of many ops, made a
// line at ERROR each.
func TestInternalErrorLinesAreSpaced(t *testing.T) {
	var logs lockedBuffer
	s := &Server{log: slog.New(slog.NewTextHandler(&logs, nil))}
	err := errors.New("raftfsm: the store is broken")
	for range 1000 {
		writeProblem(httptest.NewRecorder(), s.storeProblem(err))
	}
	require.Equal(t, 1, strings.Count(logs.String(), "level=ERROR"), logs.String())
	require.Contains(t, logs.String(), "internal-errors=1 since-last-line=1")

	s.internalLog.Reset() // internalLogEvery has passed
	writeProblem(httptest.NewRecorder(), s.storeProblem(err))
	require.Equal(t, 2, strings.Count(logs.String(), "level=ERROR"), logs.String())
	require.Contains(t, logs.String(), "internal-errors=1001 since-last-line=1000")
}
