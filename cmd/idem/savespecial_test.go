//go:build unix

package main

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
)

// `idem snapshot save --force /dev/stdout` (refused without --force: it
// exists) streamed the backup into /dev/stdout.tmp-* and renamed it over
// /dev/stdout: run as root, the system's /dev/stdout link became a regular
// file of every record (and /dev/null likewise). A FILE that is not a
// regular file, nor a link to one, is refused, --force or not, before the
// node is asked.
func TestSnapshotSaveRefusesAFileThatIsNotARegularFile(t *testing.T) {
	var asked atomic.Bool
	node := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		asked.Store(true)
		http.Error(w, "no", http.StatusServiceUnavailable)
	}))
	defer node.Close()
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	require.NoError(t, syscall.Mkfifo(fifo, 0o600))
	stdout := filepath.Join(dir, "stdout")
	require.NoError(t, os.Symlink("/proc/self/fd/1", stdout))
	toFifo := filepath.Join(dir, "tofifo")
	require.NoError(t, os.Symlink(fifo, toFifo))
	for _, file := range []string{fifo, stdout, toFifo, "/dev/null"} {
		before, err := os.Lstat(file)
		require.NoError(t, err)
		var out, errb bytes.Buffer
		code := run(context.Background(), []string{"snapshot", "save", "--force", file, "--addr", node.URL}, &out, &errb)
		require.Equal(t, 2, code, "%s: %s", file, errb.String())
		require.Contains(t, errb.String(), file+" is not a regular file", file)
		after, err := os.Lstat(file)
		require.NoError(t, err)
		require.Equal(t, before.Mode(), after.Mode(), "%s was replaced", file)
		matches, _ := filepath.Glob(file + ".tmp-*")
		require.Empty(t, matches)
	}
	require.False(t, asked.Load(), "the node was asked")
}
