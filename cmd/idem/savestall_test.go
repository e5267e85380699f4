package main

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
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
	ln, err := net.Listen("tcp", freePort(t)) // the test's own address (IDEM_TEST_IP)
	require.NoError(t, err)
	node := &httptest.Server{Listener: ln, Config: &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Write([]byte("IDEMBACK\x00\x00\x00\x01"))
		w.(http.Flusher).Flush()
		<-r.Context().Done() // sends nothing more, and keeps the connection
	})}}
	node.Start()
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

// The save's stall cut is per byte received, not per piece: a node (or a
// link) that sends slowly but never stops, slower than any piece size
// over the timeout, is waited for to the end, and the save succeeds.
func TestSnapshotSaveWaitsForASlowButSteadyNode(t *testing.T) {
	httpAddr := freePort(t)
	start(t, filepath.Join(t.TempDir(), "n1"), httpAddr, freePort(t))
	claimOK(t, httpAddr, "k")
	resp, err := http.Get("http://" + httpAddr + "/v1/admin/snapshot")
	require.NoError(t, err)
	backup, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.NoError(t, err)

	old := saveStallTimeout
	saveStallTimeout = 300 * time.Millisecond
	defer func() { saveStallTimeout = old }()
	ln, err := net.Listen("tcp", freePort(t))
	require.NoError(t, err)
	node := &httptest.Server{Listener: ln, Config: &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/octet-stream")
		for p := backup; len(p) > 0; { // 32 bytes every 50 ms: well under a KB/s
			n := min(len(p), 32)
			w.Write(p[:n])
			w.(http.Flusher).Flush()
			p = p[n:]
			time.Sleep(50 * time.Millisecond)
		}
	})}}
	node.Start()
	defer node.Close()
	file := filepath.Join(t.TempDir(), "b.snap")
	var stdout, stderr bytes.Buffer
	code := run(context.Background(), []string{"snapshot", "save", file, "--addr", ln.Addr().String()}, &stdout, &stderr)
	require.Equal(t, 0, code, stderr.String())
	got, err := os.ReadFile(file)
	require.NoError(t, err)
	require.Equal(t, backup, got)
}
