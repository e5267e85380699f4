package raftfsm

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// A cut at the state's applied index replaces an entry the state holds:
// diverged. One at the next index replaces only entries not applied yet,
// which a new leader does to any follower: nothing to say.
func TestTailCutAtTheAppliedIndexIsDivergedAndPastItIsNot(t *testing.T) {
	n := mustNode(t)
	fill(t, n, 3)
	applied := n.db.Meta().Applied

	n.tailCut(nil, applied+1, applied+5)
	require.Empty(t, n.Superseded(), "a cut of entries not applied yet")

	n.tailCut(nil, applied, applied+5)
	require.Contains(t, n.Superseded(), "this node's state holds entries its cluster does not")
	rec, err := readSuperseded(n.cfg.DataDir)
	require.NoError(t, err)
	require.True(t, rec.Diverged)
	require.Equal(t, applied, rec.CutFrom)
}
