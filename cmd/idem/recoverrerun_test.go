package main

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idem-store/idem/raftfsm"
)

// idem recover probes the other members of the node's configuration and
// refuses while one answers: recovering beside a live cluster makes a
// second cluster that claims the same keys again. A recover stopped after
// it rewrote the configuration (killed, a lost ssh session) leaves its
// recovering.json, and the run again that finishes it read only the new
// configuration: it probed none of the old members and went ahead while
// they served. It now probes the members the marker lists, at the
// addresses the marker or the state records for them.
func TestRecoverRunAgainProbesTheMembersItsMarkerLists(t *testing.T) {
	c := newCluster(t, viaJoin, nil, nil)
	leader := c.leader()
	claimOK(t, leader.http, "before-recover")
	waitSameState(t, c.nodes...)
	target := c.others(leader)[0]
	target.kill(t)
	live := c.others(target)
	peers := target.id + "=" + target.raft

	// The state of a recover stopped past its rewrite (with the marker an
	// earlier release wrote, ids only): the configuration is the new one,
	// recovering.json still lists the members before, and the members it
	// left out are not recorded yet.
	out, err := idemCmd(t, "recover", "--data-dir", target.dir, "--node-id", target.id, "--peers", peers, "--yes", "--force")
	require.NoError(t, err, out)
	var ids []string
	for _, n := range c.nodes {
		ids = append(ids, n.id)
	}
	marker, _ := json.Marshal(map[string]any{"node": target.id, "peers": []raftfsm.Peer{{ID: target.id, RaftAddr: target.raft}}, "started_at": time.Now().UTC(), "members_before": ids})
	require.NoError(t, os.WriteFile(filepath.Join(target.dir, raftfsm.RecoveringFile), marker, 0o600))
	if err := os.Remove(filepath.Join(target.dir, "recovered.json")); !errors.Is(err, os.ErrNotExist) {
		require.NoError(t, err)
	}
	before, err := raftfsm.ReadOfflineState(target.dir)
	require.NoError(t, err)
	require.NotNil(t, before.Unfinished)
	require.Len(t, before.Configuration, 1)

	out, err = idemCmd(t, "recover", "--data-dir", target.dir, "--node-id", target.id, "--peers", peers, "--yes")
	require.Equal(t, 1, exitCode(err), out)
	for _, n := range live {
		require.Contains(t, out, n.id+": raft address "+n.raft, out)
		require.Contains(t, out, n.id+": HTTP address "+n.http, out)
	}
	require.NotContains(t, out, target.id+": raft address", "this node itself is not probed")
	require.Contains(t, out, "nothing was changed")
	after, err := raftfsm.ReadOfflineState(target.dir)
	require.NoError(t, err)
	require.Equal(t, before, after, "a refused recover changed the data dir")

	// Once they are stopped, the run again finishes the recovery.
	for _, n := range live {
		n.kill(t)
	}
	out, err = idemCmd(t, "recover", "--data-dir", target.dir, "--node-id", target.id, "--peers", peers, "--yes")
	require.NoError(t, err, out)
	require.Contains(t, out, "recovered: configuration is now "+peers)
	after, err = raftfsm.ReadOfflineState(target.dir)
	require.NoError(t, err)
	require.Nil(t, after.Unfinished)
}

// A member before an unfinished recover of which nothing records an
// address (the file of an earlier release lists ids only, and the state
// has no node record for it) cannot be probed: the run again said "none
// answered at their raft or HTTP addresses" as if it had tried every
// member. It names those it could not try.
func TestRecoverNamesTheMembersItCouldNotProbe(t *testing.T) {
	c := newCluster(t, viaJoin, nil, nil)
	claimOK(t, c.leader().http, "before-recover")
	waitSameState(t, c.nodes...)
	for _, n := range c.nodes {
		n.kill(t)
	}
	target := c.nodes[0]
	peers := target.id + "=" + target.raft
	out, err := idemCmd(t, "recover", "--data-dir", target.dir, "--node-id", target.id, "--peers", peers, "--yes", "--force")
	require.NoError(t, err, out)
	ids := []string{"ghost"}
	for _, n := range c.nodes {
		ids = append(ids, n.id)
	}
	marker, _ := json.Marshal(map[string]any{"node": target.id, "peers": []raftfsm.Peer{{ID: target.id, RaftAddr: target.raft}}, "started_at": time.Now().UTC(), "members_before": ids})
	require.NoError(t, os.WriteFile(filepath.Join(target.dir, raftfsm.RecoveringFile), marker, 0o600))

	out, err = idemCmd(t, "recover", "--data-dir", target.dir, "--node-id", target.id, "--peers", peers)
	require.NoError(t, err, out)
	require.Contains(t, out, "not checked:           ghost: no address known", out)
	for _, n := range c.others(target) {
		require.NotContains(t, out, "not checked:           "+n.id, "its address is recorded: %s", out)
	}

	st := raftfsm.OfflineState{
		Configuration:     []raftfsm.Peer{{ID: "n1", RaftAddr: "127.0.0.1:1"}},
		UnfinishedMembers: []raftfsm.Peer{{ID: "n2", RaftAddr: "127.0.0.1:2"}, {ID: "n3"}, {ID: "n4"}},
		HTTPAddrs:         map[string]string{"n4": "127.0.0.1:4"},
	}
	require.Equal(t, []string{"n3"}, unprobedMembers(st, "n1"))
}

// The refusal of a run again named the members before the stopped
// recover "members of the current configuration", which no longer lists
// them: an operator reading cluster status found no such member there.
func TestRecoverSaysWhichConfigurationTheLiveMembersAreOf(t *testing.T) {
	st := raftfsm.OfflineState{
		Configuration:     []raftfsm.Peer{{ID: "n1", RaftAddr: "127.0.0.1:1"}, {ID: "n4", RaftAddr: "127.0.0.1:4"}},
		UnfinishedMembers: []raftfsm.Peer{{ID: "n2", RaftAddr: "127.0.0.1:2"}, {ID: "n3"}},
	}
	require.Equal(t, "configuration before the unfinished recover", membersWhat(st, []liveMember{{id: "n2", kind: "raft"}}))
	require.Equal(t, "current configuration", membersWhat(st, []liveMember{{id: "n4", kind: "raft"}}))
	require.Equal(t, "current configuration, or of the one before the unfinished recover,", membersWhat(st, []liveMember{{id: "n2"}, {id: "n4"}}))
	require.Equal(t, "current configuration, or of the one before the unfinished recover,", membersWhat(st, nil), "what must be stopped")
	require.Equal(t, "current configuration", membersWhat(raftfsm.OfflineState{Configuration: st.Configuration}, nil))
	require.Equal(t, "n2=127.0.0.1:2, n3 (no raft address known)", fmtPeers(st.UnfinishedMembers))
}
