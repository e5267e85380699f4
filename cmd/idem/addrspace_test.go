package main

import (
	"bytes"
	"context"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// An address with a space in its host (IDEM_HTTP_ADVERTISE=" 10.0.0.4:7070"
// from a unit file, a value pasted with its indent) passed the host:port
// check: --http-advertise " 127.0.0.1:7070" started, and the cluster
// recorded the node's HTTP address with the space, which no member can
// dial; --http-addr " 127.0.0.1:7070" was refused as "non-loopback", and
// with --insecure exited 1 on a failed DNS lookup. Each is refused at
// start naming the flag, before the data dir is made.
func TestServeAddressWithSpaceIsRefusedNamingTheFlag(t *testing.T) {
	httpAddr, raftAddr, other := freePort(t), freePort(t), freePort(t)
	host, port, _ := net.SplitHostPort(other)
	for _, tc := range []struct{ flag, v string }{
		{"--http-advertise", " " + httpAddr},
		{"--raft-advertise", host + " :" + port},
		{"--http-addr", " " + other},
		{"--raft-addr", "\t" + other},
		{"--health-addr", " " + other},
		{"--join", other + ", " + host + " :" + port},
	} {
		dir := filepath.Join(t.TempDir(), "d")
		args := []string{"serve", "--data-dir", dir, tc.flag, tc.v}
		for _, f := range [][2]string{{"--http-addr", httpAddr}, {"--raft-addr", raftAddr}} {
			if f[0] != tc.flag {
				args = append(args, f[0], f[1])
			}
		}
		// Accepted, the node would run: stop it soon, so that the test fails
		// rather than hangs.
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		var stdout, stderr bytes.Buffer
		code := run(ctx, args, &stdout, &stderr)
		cancel()
		require.Equal(t, 2, code, "%s %q: %s", tc.flag, tc.v, stderr.String())
		require.True(t, strings.HasPrefix(stderr.String(), "idem serve: "+tc.flag), "%s %q: %s", tc.flag, tc.v, stderr.String())
		require.Contains(t, stderr.String(), "space", "%s %q", tc.flag, tc.v)
		_, err := os.Stat(dir)
		require.True(t, os.IsNotExist(err), "%s %q: the data dir was made", tc.flag, tc.v)
	}
}

// IDEM_DATA_DIR="/var/lib/idem " (a trailing space in a unit file) or " "
// started a new, empty one-node store in a directory of that name, beside
// the node's own: every key free again, with only a warning. A data dir
// whose name begins or ends with a space is refused unless it already
// holds a node.
func TestServeDataDirWithSpaceIsRefused(t *testing.T) {
	root := t.TempDir()
	t.Chdir(root) // " " is relative
	for _, dir := range []string{filepath.Join(root, "d") + " ", " ", "\t" + filepath.Join(root, "e")} {
		t.Setenv("IDEM_DATA_DIR", dir)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		var stdout, stderr bytes.Buffer
		code := run(ctx, []string{"serve", "--http-addr", freePort(t), "--raft-addr", freePort(t)}, &stdout, &stderr)
		cancel()
		require.Equal(t, 2, code, "%q: %s", dir, stderr.String())
		require.Contains(t, stderr.String(), "idem serve: --data-dir "+strconv.Quote(dir)+" begins or ends with a space", "%q", dir)
		require.Contains(t, stderr.String(), "(set by $IDEM_DATA_DIR)", "%q", dir)
		entries, err := os.ReadDir(root)
		require.NoError(t, err)
		require.Empty(t, entries, "%q: a directory was made", dir)
	}
}
