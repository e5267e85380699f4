package raftfsm

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idem-store/idem/engine"
)

// The raft log's marker (raft-wal/moved-from-raft.db, 16 bytes) is lost:
// deleted with other small files, or emptied. The node refused ("is not a
// raft log idem made", "is damaged (0 bytes)") with no way out; it now
// gives the command that puts the marker back, which works.
func TestLostRaftLogMarkerSaysHowToPutItBack(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cfg := DefaultConfig()
	cfg.NodeID, cfg.DataDir, cfg.Bootstrap, cfg.RaftAddr = "n1", dir, true, "127.0.0.1:0"
	n, err := Open(cfg)
	require.NoError(t, err)
	require.Eventually(t, n.IsLeader, 10*time.Second, 10*time.Millisecond)
	require.NoError(t, claim(n, "k"))
	require.NoError(t, n.Close())
	marker := filepath.Join(dir, logStoreDir, movedMarker)
	for _, lose := range []func() error{
		func() error { return os.Remove(marker) },
		func() error { return os.WriteFile(marker, nil, 0o600) },
	} {
		require.NoError(t, lose())
		_, err = Open(cfg)
		require.ErrorContains(t, err, "nothing was changed")
		require.ErrorContains(t, err, "head -c 16 /dev/zero > "+marker)
		require.NoError(t, os.WriteFile(marker, make([]byte, 16), 0o600))
		n, err = Open(cfg)
		require.NoError(t, err, "the marker put back as the message says")
		require.Eventually(t, n.IsLeader, 10*time.Second, 10*time.Millisecond)
		_, ok := n.db.Lookup(engine.Scope{Principal: "p", Endpoint: "e", Key: "k"}, false, n.db.Meta().NowMs)
		require.True(t, ok)
		require.NoError(t, n.Close())
	}
}
