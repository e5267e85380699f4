package main

import (
	"bytes"
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// A save into a FILE in the working directory whose stream the node cut
// (its disk failed a read of its store) named its own temporary file,
// which it was removing, as one "left from a save into b.snap that was
// stopped before it finished": CreateTemp names it ./b.snap.tmp-*, the
// directory's listing b.snap.tmp-* (an EIO walk).
func TestSnapshotSaveCutInTheWorkingDirectoryNamesNoLeftSave(t *testing.T) {
	ln, err := net.Listen("tcp", freePort(t)) // the test's own address (IDEM_TEST_IP)
	require.NoError(t, err)
	node := &httptest.Server{Listener: ln, Config: &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Write([]byte("IDEMBACK\x00\x00\x00\x01"))
		w.(http.Flusher).Flush()
		panic(http.ErrAbortHandler) // the stream cut short
	})}}
	node.Start()
	defer node.Close()
	t.Chdir(t.TempDir())

	var stdout, stderr bytes.Buffer
	code := run(context.Background(), []string{"snapshot", "save", "b.snap", "--addr", strings.TrimPrefix(node.URL, "http://")}, &stdout, &stderr)
	require.Equal(t, 1, code, stderr.String())
	require.Contains(t, stderr.String(), "the node stopped sending the snapshot after 12 bytes")
	require.NotContains(t, stderr.String(), "is left from a save")
	require.NoFileExists(t, "b.snap")
}
