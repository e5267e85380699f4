package main

import (
	"net"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// A second node started on ports in use (make run beside make cluster, a
// pasted command) said only "--http-addr: listen tcp …: bind: address
// already in use". It names the address, what may hold it and the way out,
// and creates no data dir.
func TestServeOnAPortInUseSaysWhatToDo(t *testing.T) {
	taken := freePort(t)
	ln, err := net.Listen("tcp", taken)
	require.NoError(t, err)
	defer ln.Close()
	for _, tc := range []struct{ flag, http, raft string }{
		{"--http-addr", taken, freePort(t)},
		{"--raft-addr", freePort(t), taken},
	} {
		dir := filepath.Join(t.TempDir(), "new")
		out, err := idemCmd(t, "serve", "--data-dir", dir, "--http-addr", tc.http, "--raft-addr", tc.raft)
		require.Equal(t, 1, exitCode(err), out)
		require.Contains(t, out, "idem serve: "+tc.flag+" "+taken+" is in use by another process (another idem node?")
		require.Contains(t, out, "stop it, or give this node another "+tc.flag+"; nothing was started or written")
		require.NotContains(t, out, "bind: address already in use")
		require.NoDirExists(t, dir)
	}
}
