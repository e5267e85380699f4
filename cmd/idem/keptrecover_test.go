package main

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idem-store/idem/raftfsm"
)

// recover names the kept mark of a node its configuration lists as a
// non-voter, and says what recovering from it costs; a voter's mark is
// stale (idem serve removes it) and is not named.
func TestRecoverNamesTheKeptMark(t *testing.T) {
	st := raftfsm.OfflineState{
		Configuration: []raftfsm.Peer{{ID: "n1", Suffrage: "Voter"}, {ID: "n3", Suffrage: "Nonvoter"}},
		KeptBackBy:    "n1",
		KeptBack:      "its state, caught up, records no claim",
	}
	note := keptBackNote("/d", "n3", st)
	require.Contains(t, note, "/d/"+raftfsm.KeptFile+" is there: the leader n1 kept this node a non-voter")
	require.Contains(t, note, "its state, caught up, records no claim")
	require.Contains(t, note, "Prefer another survivor")
	require.Empty(t, keptBackNote("/d", "n1", st), "a voter's stale mark")
	st.KeptBack = ""
	require.Empty(t, keptBackNote("/d", "n3", st))
}
