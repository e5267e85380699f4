package main

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idem-store/idem/raftfsm"
)

// `idem recover --peers n1=…,n6=…` (n6 a typo for a survivor n3, or a
// new node) printed the plan and, with --yes, made n6 a voter of the
// recovered cluster: it holds nothing and no data dir of it can be
// recovered with the same --peers, so the survivor alone, one of two
// voters, elected no leader. A peer that is no member of the data dir's
// configuration is refused, exit 2, naming it and the members.
func TestRecoverRefusesAPeerThatIsNoMember(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "n1")
	httpAddr, raftAddr := freePort(t), freePort(t)
	p := start(t, dir, httpAddr, raftAddr)
	p.cmd.Process.Kill()
	p.wait()
	before, err := raftfsm.ReadOfflineState(dir)
	require.NoError(t, err)

	for _, yes := range []bool{false, true} {
		args := []string{"recover", "--data-dir", dir, "--node-id", "n1", "--peers", "n1=" + raftAddr + ",n6=127.0.0.6:7071"}
		if yes {
			args = append(args, "--yes")
		}
		out, err := idemCmd(t, args...)
		require.Equal(t, 2, exitCode(err), "%s", out)
		require.Contains(t, out, "--peers n6=127.0.0.6:7071: not a member of this data dir's configuration (n1)")
		require.Contains(t, out, "nothing was changed")
	}
	after, err := raftfsm.ReadOfflineState(dir)
	require.NoError(t, err)
	require.Equal(t, before.Configuration, after.Configuration)

	// The members themselves are taken as before.
	out, err := idemCmd(t, "recover", "--data-dir", dir, "--node-id", "n1", "--peers", "n1="+raftAddr)
	require.Equal(t, 0, exitCode(err), "%s", out)
}
