package main

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A node that stops sending a snapshot without closing the connection (a
// stopped or hung process, a network that drops everything) held `idem
// snapshot save` for ever, FILE.tmp-* half written: a nightly save never
// ended, and the next night's ran beside it. A save that receives nothing
// for saveStallTimeout fails, saying so, and removes its temporary file.
func TestSnapshotSaveGivesUpOnAStalledNode(t *testing.T) {
	old := saveStallTimeout
	saveStallTimeout = 300 * time.Millisecond
	defer func() { saveStallTimeout = old }()
	node := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Write([]byte("IDEMBACK\x00\x00\x00\x01"))
		w.(http.Flusher).Flush()
		<-r.Context().Done() // sends nothing more, and keeps the connection
	}))
	defer node.Close()
	defer node.CloseClientConnections() // first: a save that still waits ends
	file := filepath.Join(t.TempDir(), "b.snap")

	var stdout, stderr bytes.Buffer
	done := make(chan int, 1)
	go func() {
		done <- run(context.Background(), []string{"snapshot", "save", file, "--addr", strings.TrimPrefix(node.URL, "http://")}, &stdout, &stderr)
	}()
	select {
	case code := <-done:
		require.Equal(t, 1, code, stderr.String())
	case <-time.After(15 * time.Second):
		t.Fatal("the save still waits for a node that sends nothing")
	}
	require.Contains(t, stderr.String(), "the node sent nothing for 300ms after 12 bytes of the snapshot")
	require.NoFileExists(t, file)
	left, _ := filepath.Glob(file + ".tmp-*")
	require.Empty(t, left)
}
