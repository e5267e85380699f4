package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idem-store/idem/raftfsm"
)

// Key rotation step 2 done on one node before step 1 reached the others
// (docs/SECURITY.md): the leader refused a transfer to it (409
// no_transfer_target), but idem cluster status said nothing of it; only
// its KEYS column read k2,k1 beside the others' k1. It now warns, naming
// the key, who holds it and both ways out. A rotation in the order the
// docs give, and encryption being turned on, are not warned of.
func TestClusterStatusWarnsOfRotationStepsOutOfOrder(t *testing.T) {
	k1, k2 := raftfsm.NodeKey{ID: "k1", Check: "c1"}, raftfsm.NodeKey{ID: "k2", Check: "c2"}
	status := func(keys ...[]raftfsm.NodeKey) raftfsm.Status {
		st := raftfsm.Status{Self: raftfsm.NodeInfo{ID: "n1"}, Leader: &raftfsm.NodeInfo{ID: "n1"}, HealthFrom: "n1"}
		for i, k := range keys {
			st.Nodes = append(st.Nodes, raftfsm.Member{NodeInfo: raftfsm.NodeInfo{ID: "n" + string(rune('1'+i))}, Suffrage: "voter", Healthy: true, Keys: k})
		}
		return st
	}
	print := func(st raftfsm.Status) string {
		var out bytes.Buffer
		printStatus(&out, st)
		return out.String()
	}

	out := print(status([]raftfsm.NodeKey{k1}, []raftfsm.NodeKey{k1}, []raftfsm.NodeKey{k2, k1}))
	require.Contains(t, out, `WARNING: n3 encrypts with key "k2" (the first in its --encryption-key-file), which only 1 of the 3 voters hold (n3): key rotation step 2 was done there before step 1 reached the other nodes.`)
	require.Contains(t, out, "409 no_transfer_target")
	require.Contains(t, out, `Add "k2" to every node's key file after the current first key (rotation step 1, docs/SECURITY.md) and restart them one at a time, or put "k1" first again on n3`)

	for name, st := range map[string]raftfsm.Status{
		"step 1 on every node":                     status([]raftfsm.NodeKey{k1, k2}, []raftfsm.NodeKey{k1, k2}, []raftfsm.NodeKey{k1, k2}),
		"step 2 rolling out after step 1":          status([]raftfsm.NodeKey{k2, k1}, []raftfsm.NodeKey{k1, k2}, []raftfsm.NodeKey{k1, k2}),
		"step 1 rolling out":                       status([]raftfsm.NodeKey{k1, k2}, []raftfsm.NodeKey{k1}, []raftfsm.NodeKey{k1}),
		"keys of two voters not known yet":         status(nil, nil, []raftfsm.NodeKey{k2, k1}),
		"encryption being turned on, one by one":   status([]raftfsm.NodeKey{k1}, []raftfsm.NodeKey{}, []raftfsm.NodeKey{}),
		"a key file of one node on a one-node set": status([]raftfsm.NodeKey{k2, k1}),
	} {
		require.NotContains(t, print(st), "rotation step 2 was done", name)
	}

	// Two nodes of five ahead: one warning naming both.
	out = print(status([]raftfsm.NodeKey{k1}, []raftfsm.NodeKey{k1}, []raftfsm.NodeKey{k1}, []raftfsm.NodeKey{k2, k1}, []raftfsm.NodeKey{k2, k1}))
	require.Equal(t, 1, strings.Count(out, "rotation step 2 was done"), out)
	require.Contains(t, out, `WARNING: n4, n5 encrypt with key "k2" (the first in their --encryption-key-file), which only 2 of the 5 voters hold (n4, n5)`)
}
