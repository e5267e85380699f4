package main

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// BACKUP.md: recover exits 2 for a bad flag. A --node-id other than the
// one node.json records (n11 for n1, the wrong survivor's id) exited 1, as
// a refusal for the data dir's sake does, and did not say which id to give;
// idem serve refuses the same with exit 2, naming it.
func TestRecoverWithAnotherNodeIDIsAUsageError(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "n1")
	httpAddr, raftAddr := freePort(t), freePort(t)
	p := start(t, dir, httpAddr, raftAddr)
	p.cmd.Process.Kill()
	p.wait()
	out, err := idemCmd(t, "recover", "--data-dir", dir, "--node-id", "n11", "--peers", "n11="+raftAddr)
	require.Equal(t, 2, exitCode(err), "%s", out)
	require.Contains(t, out, `--node-id "n11" differs from "n1"`)
	require.Contains(t, out, "run it with --node-id n1")
}
