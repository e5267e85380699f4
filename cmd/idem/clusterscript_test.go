package main

import (
	"bytes"
	"context"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestClusterScriptRefusesATakenAddress: `make cluster` beside a running
// `make run` node (127.0.0.1:7070) started n2 and n3 anyway; n1 failed to
// bind, and the other two joined the one-node cluster answering there, their
// data dirs now members of it. The script must refuse before it starts
// anything, naming the address.
func TestClusterScriptRefusesATakenAddress(t *testing.T) {
	busy, err := net.Listen("tcp", freePortOn(t, "127.0.0.11"))
	require.NoError(t, err)
	defer busy.Close()
	_, httpPort, _ := net.SplitHostPort(busy.Addr().String())
	_, raftPort, _ := net.SplitHostPort(freePortOn(t, "127.0.0.11"))
	data := filepath.Join(t.TempDir(), "cluster-data")

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "../../scripts/cluster.sh")
	cmd.Env = append(os.Environ(),
		"CLUSTER_IPS=127.0.0.11 127.0.0.12 127.0.0.13",
		"CLUSTER_HTTP_PORT="+httpPort, "CLUSTER_RAFT_PORT="+raftPort, "CLUSTER_DATA="+data)
	// Without the check the script runs nodes until stopped: end them all.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM) }
	cmd.WaitDelay = 10 * time.Second
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	err = cmd.Run()
	var exit *exec.ExitError
	require.True(t, errors.As(err, &exit), "the script must refuse: %v\n%s", err, stderr.String())
	require.Equal(t, 2, exit.ExitCode(), stderr.String())
	require.Contains(t, stderr.String(), "already listens on 127.0.0.11:"+httpPort+" (n1)")
	require.NoDirExists(t, data, "nothing may start, not even a data dir")
}
