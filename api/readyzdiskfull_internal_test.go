package api

import (
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idem-store/idem/raftfsm"
)

// behindNode is a real node that has not applied what its leader
// committed (a follower whose full disk takes no raft entries).
type behindNode struct{ *raftfsm.Node }

func (behindNode) Ready() bool { return false }

// A follower whose disk is full stays behind; its /readyz said only "this
// node has no leader or has not applied its commit index", and an
// operator routed away from it without learning why (a disk-full walk on
// real processes). The answer now names the full disk and its path. On a
// private tmpfs, filled by another file.
func TestReadyzOfANodeBehindOnAFullDiskSaysSo(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("skipped: needs root to mount a small tmpfs")
	}
	mnt := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=512m", "tmpfs", mnt).CombinedOutput(); err != nil {
		t.Skipf("skipped: cannot mount a tmpfs here (%v: %s)", err, strings.TrimSpace(string(out)))
	}
	t.Cleanup(func() { exec.Command("umount", "-l", mnt).Run() })

	rc := raftfsm.DefaultConfig() // --min-free-disk 256MiB
	rc.DataDir, rc.RaftAddr, rc.Bootstrap = filepath.Join(mnt, "d"), "127.0.0.1:0", true
	rc.TickInterval, rc.SweepInterval = time.Hour, time.Hour
	node, err := raftfsm.Open(rc)
	require.NoError(t, err)
	defer node.Close()
	require.Eventually(t, func() bool { return node.IsLeader() && node.Ready() }, 10*time.Second, 10*time.Millisecond)
	srv := httptest.NewServer(New(behindNode{node}, Config{
		Retention: 24 * time.Hour, DefaultLease: 30 * time.Second, BucketWidth: rc.BucketWidth,
		Limits: DefaultLimits(), Logger: slog.New(slog.DiscardHandler),
	}))
	defer srv.Close()
	readyz := func() (int, string) {
		resp, err := http.Get(srv.URL + "/readyz")
		require.NoError(t, err)
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	code, body := readyz()
	require.Equal(t, http.StatusServiceUnavailable, code)
	require.NotContains(t, body, "disk is full", "a disk with room")

	out, err := exec.Command("fallocate", "-l", "200m", filepath.Join(mnt, "filler")).CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.Eventually(t, func() bool { return node.DiskFull() != nil }, 5*time.Second, 50*time.Millisecond)
	code, body = readyz()
	require.Equal(t, http.StatusServiceUnavailable, code)
	require.Contains(t, body, "its disk is full", "the answer names the cause")
	require.Contains(t, body, rc.DataDir, "and the path")
}
