//go:build unix

package main

import (
	"bytes"
	"context"
	"net"
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
	// On the test's own address (IDEM_TEST_IP), not 127.0.0.1.
	ln, err := net.Listen("tcp", freePort(t))
	require.NoError(t, err)
	node := &httptest.Server{Listener: ln, Config: &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		asked.Store(true)
		http.Error(w, "no", http.StatusServiceUnavailable)
	})}}
	node.Start()
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

// `save --force latest.snap`, latest.snap a link to the newest backup (on
// another disk, say), renamed the new backup over the link: latest.snap
// became a plain file beside the link's directory, and the file it named
// kept the old backup. The backup is written through the link, into the
// file it names; the link stays.
func TestSnapshotSaveForceWritesThroughALink(t *testing.T) {
	httpAddr := freePort(t)
	start(t, filepath.Join(t.TempDir(), "n1"), httpAddr, freePort(t))
	claimOK(t, httpAddr, "k")
	dir := t.TempDir()
	require.NoError(t, os.Mkdir(filepath.Join(dir, "nas"), 0o700))
	target := filepath.Join(dir, "nas", "newest.snap")
	require.NoError(t, os.WriteFile(target, []byte("last week's backup"), 0o600))
	link := filepath.Join(dir, "latest.snap")
	require.NoError(t, os.Symlink(filepath.Join("nas", "newest.snap"), link))

	out, err := idemCmd(t, "snapshot", "save", "--force", link, "--addr", httpAddr)
	require.NoError(t, err, out)
	require.Contains(t, out, "saved "+link+" (through the link, into "+target+")")
	lst, err := os.Lstat(link)
	require.NoError(t, err)
	require.NotZero(t, lst.Mode()&os.ModeSymlink, "the link was replaced by a file")
	out, err = idemCmd(t, "snapshot", "inspect", target)
	require.NoError(t, err, "the file the link names does not hold the new backup: %s", out)
	for _, pattern := range []string{link + ".tmp-*", target + ".tmp-*"} {
		left, _ := filepath.Glob(pattern)
		require.Empty(t, left)
	}
}
