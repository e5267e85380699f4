package raftfsm

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A recover stopped after it rewrote the configuration left only the new
// one in the data dir: the run again that finishes it (idem recover)
// probed none of the members before, which the first run had refused to
// recover beside while one answered. The marker now records their
// addresses, and the data dir's state lists those members with them: here
// a member whose address only the old configuration held (no node record).
func TestUnfinishedRecoverKeepsTheAddressesOfTheMembersBefore(t *testing.T) {
	n := mustNode(t, func(c *Config) { c.ApplyTimeout = 500 * time.Millisecond })
	fill(t, n, 3)
	n.raft.AddVoter("ghost", "127.0.0.1:1", 0, 500*time.Millisecond).Error() // quorum is lost
	cfg := n.cfg
	require.NoError(t, n.Close())

	addr := freeRaftAddr(t)
	peers := []Peer{{ID: "n1", RaftAddr: addr}}
	stopped := errors.New("killed after the rewrite")
	recoverHook = func(s string) error {
		if s == "rewritten" {
			return stopped
		}
		return nil
	}
	_, err := Recover(cfg.DataDir, "n1", peers, nil)
	recoverHook = func(string) error { return nil }
	require.ErrorIs(t, err, stopped)

	st, err := ReadOfflineState(cfg.DataDir)
	require.NoError(t, err)
	require.NotNil(t, st.Unfinished)
	require.Equal(t, []Peer{{ID: "n1", RaftAddr: addr, Suffrage: "Voter"}}, st.Configuration, "the configuration was rewritten")
	require.Contains(t, st.Unfinished.BeforeAddrs, MemberAddrs{ID: "ghost", RaftAddr: "127.0.0.1:1"})
	require.Equal(t, []Peer{{ID: "ghost", RaftAddr: "127.0.0.1:1"}}, st.UnfinishedMembers)
	require.Contains(t, st.Members(), Peer{ID: "ghost", RaftAddr: "127.0.0.1:1"})

	// Run again (and stopped again): the marker keeps them.
	recoverHook = func(s string) error {
		if s == "rewritten" {
			return stopped
		}
		return nil
	}
	_, err = Recover(cfg.DataDir, "n1", peers, nil)
	recoverHook = func(string) error { return nil }
	require.ErrorIs(t, err, stopped)
	st, err = ReadOfflineState(cfg.DataDir)
	require.NoError(t, err)
	require.Equal(t, []Peer{{ID: "ghost", RaftAddr: "127.0.0.1:1"}}, st.UnfinishedMembers)

	// Finished, nothing is left over.
	_, err = Recover(cfg.DataDir, "n1", peers, nil)
	require.NoError(t, err)
	st, err = ReadOfflineState(cfg.DataDir)
	require.NoError(t, err)
	require.Nil(t, st.Unfinished)
	require.Empty(t, st.UnfinishedMembers)
}
