package main

import (
	"context"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idem-store/idem/client"
	"github.com/idem-store/idem/raftfsm"
)

// A leader of an earlier release reports no member's release: a rolling
// upgrade walk's status, asked of an upgraded n1 while the old n3 still
// led, read "n2 ? (an earlier release)" for an n2 already upgraded, so
// which nodes were done could not be told. Each such member is asked for
// its own release.
func TestClusterStatusAsksEachMemberItsReleaseUnderAnOldLeader(t *testing.T) {
	hosts := configByHost{
		"n2:7070": `{"self":{"id":"n2"},"version":"v1.5.0"}`,
		"n3:7070": `{"self":{"id":"n3"}}`, // the earlier release: no version
	}
	opts := []client.Option{client.WithHTTPClient(&http.Client{Transport: hosts})}
	member := func(id, version string) raftfsm.Member {
		var m raftfsm.Member
		m.ID, m.HTTPAddr, m.Healthy, m.Version = id, id+":7070", true, version
		return m
	}
	st := raftfsm.Status{Leader: &raftfsm.NodeInfo{ID: "n3"}, Nodes: []raftfsm.Member{member("n1", "v1.5.0"), member("n2", ""), member("n3", "")}}
	st.Self.ID = "n1"
	memberVersions(context.Background(), &st, opts)
	require.Equal(t, []string{"n1 v1.5.0", "n2 v1.5.0", "n3 ?"}, []string{st.Nodes[0].ID + " " + st.Nodes[0].Version, st.Nodes[1].ID + " " + st.Nodes[1].Version, st.Nodes[2].ID + " ?" + st.Nodes[2].Version})
	require.Contains(t, upgradeNotes(st)[0], "n1 v1.5.0, n2 v1.5.0, n3 ? (an earlier release)")

	// A leader that reports releases is trusted: nobody else is asked.
	st = raftfsm.Status{Leader: &raftfsm.NodeInfo{ID: "n1"}, Nodes: []raftfsm.Member{member("n1", "v1.5.0"), member("n2", "")}}
	memberVersions(context.Background(), &st, opts)
	require.Empty(t, st.Nodes[1].Version, "n2's empty release is the leader's word: an earlier release")
}

// Under a leader of an earlier release the KEYS column read "?" (not
// known) for every upgraded member but the one asked: the leader reports
// no keys. A member asked for its release gives its keys too, "none" when
// it reports a release and no keys; one of the earlier release stays "?".
func TestClusterStatusAsksEachMemberItsKeysUnderAnOldLeader(t *testing.T) {
	hosts := configByHost{
		"n2:7070": `{"self":{"id":"n2"},"version":"v1.5.0","keys":[{"id":"k2","check":"c2"},{"id":"k1","check":"c1"}]}`,
		"n3:7070": `{"self":{"id":"n3"}}`, // the earlier release: no version
		"n4:7070": `{"self":{"id":"n4"},"version":"v1.5.0"}`,
	}
	opts := []client.Option{client.WithHTTPClient(&http.Client{Transport: hosts})}
	member := func(id string) raftfsm.Member {
		var m raftfsm.Member
		m.ID, m.HTTPAddr, m.Healthy = id, id+":7070", true
		return m
	}
	st := raftfsm.Status{Leader: &raftfsm.NodeInfo{ID: "n3"}, Nodes: []raftfsm.Member{member("n1"), member("n2"), member("n3"), member("n4")}}
	st.Self.ID = "n1"
	st.Nodes[0].Version, st.Nodes[0].Keys = "v1.5.0", []raftfsm.NodeKey{{ID: "k1", Check: "c1"}} // its own row
	memberVersions(context.Background(), &st, opts)
	var keys []string
	for _, m := range st.Nodes {
		keys = append(keys, m.ID+" "+keyIDs(m.Keys))
	}
	require.Equal(t, []string{"n1 k1", "n2 k2,k1", "n3 ?", "n4 none"}, keys)
}
