package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// idem cluster status --state-hashes shows each member's state hash (GET
// /v1/admin/state) beside its applied index, so an operator sees at a
// glance whether the replicas agree.
func TestClusterStatusShowsEachMembersStateHash(t *testing.T) {
	t.Parallel()
	h1, r1 := freePort(t), freePort(t)
	start(t, t.TempDir(), h1, r1, "--node-id", "n1")
	h2, r2 := freePort(t), freePort(t)
	launch(t, t.TempDir(), h2, r2, "--node-id", "n2", "--join", h1)
	waitFor(t, 30*time.Second, "n2 a voter", func() (bool, string) {
		m, _ := memberAt(t, h1, "n2")
		return m.Suffrage == "voter", m.Suffrage
	})
	a := call("POST", h1, "/v1/claim", claimReq("hashed", "c-hashed"))
	require.Equal(t, 201, a.code, "%s", a)

	var out string
	waitFor(t, 15*time.Second, "both replicas hashed at the same index", func() (bool, string) {
		var code int
		out, code = cli(t, "status", "--addr", h1, "--state-hashes")
		return code == 0 && !strings.Contains(out, "no two replicas"), out
	})
	code, body := get(t, h1, "/v1/admin/state")
	require.Equal(t, 200, code, "%s", body)
	var st struct {
		StateHash          string `json:"state_hash"`
		StateHashWithGated string `json:"state_hash_with_gated"`
	}
	require.NoError(t, json.Unmarshal(body, &st))
	// What a release before December 5, 2026 answers for this state, for
	// comparing one of its replicas: no capped claim, so the same hash.
	require.Equal(t, st.StateHash, st.StateHashWithGated, "%s", body)
	require.Contains(t, out, "state hashes (GET /v1/admin/state")
	for _, id := range []string{"n1", "n2"} {
		line := ""
		for _, l := range strings.Split(out, "\n") {
			if strings.HasPrefix(strings.TrimSpace(l), id+" ") && strings.Contains(l, "applied ") {
				line = l
			}
		}
		require.Contains(t, line, st.StateHash, "%s's hash: %s", id, out)
	}
	require.NotContains(t, out, "states differ")

	out, code = cli(t, "status", "--addr", h1)
	require.Equal(t, 0, code, "%s", out)
	require.NotContains(t, out, "state hashes", "only with --state-hashes: it reads every record")
}

// Replicas whose hashes differ at the same applied index are named;
// hashes at different indexes do not compare.
func TestStateHashesNameReplicasThatDiffer(t *testing.T) {
	var w bytes.Buffer
	printStateHashes(&w, []stateHash{{id: "n1", hash: "aaa", applied: 9}, {id: "n2", hash: "aaa", applied: 9}, {id: "n3", hash: "bbb", applied: 9}, {id: "n4", err: "connection refused"}})
	require.Contains(t, w.String(), "WARNING: the replicas' states differ at applied index 9 (n1, n2 aaa; n3 bbb)")
	require.Contains(t, w.String(), "n4  -")
	require.NotContains(t, w.String(), "not compared", "every replica read was compared")
	w.Reset()
	// n3, read at another index, was not compared: its row alone read as
	// if it agreed with the others.
	printStateHashes(&w, []stateHash{{id: "n1", hash: "aaa", applied: 9}, {id: "n2", hash: "aaa", applied: 9}, {id: "n3", hash: "ccc", applied: 12}})
	require.NotContains(t, w.String(), "WARNING")
	require.Contains(t, w.String(), "NOTE: not compared with any other replica, read alone at its applied index: n3 at 12")
	w.Reset()
	printStateHashes(&w, []stateHash{{id: "n1", hash: "aaa", applied: 9}, {id: "n2", hash: "bbb", applied: 10}})
	require.NotContains(t, w.String(), "WARNING")
	require.Contains(t, w.String(), "no two replicas were read at the same applied index")
}

// A replica of a release before December 5, 2026 hashes the record of
// applied gated kinds too and sends no state_hash_with_gated: in a rolling
// upgrade it agrees with an upgraded member whose state_hash_with_gated is
// its state_hash (a walk's --state-hashes warned that an old replica holding
// every record the others held differed, and told the operator to copy
// every data dir aside).
func TestStateHashesCompareAnEarlierReleasesReplica(t *testing.T) {
	var w bytes.Buffer
	printStateHashes(&w, []stateHash{{id: "n1", hash: "new", withGated: "all", applied: 9}, {id: "n2", hash: "new", withGated: "all", applied: 9}, {id: "n3", hash: "all", applied: 9}})
	require.NotContains(t, w.String(), "WARNING", "n3, an earlier release, holds the same state")
	w.Reset()
	// A release before the gated record writes none: its hash is state_hash.
	printStateHashes(&w, []stateHash{{id: "n1", hash: "new", withGated: "all", applied: 9}, {id: "n3", hash: "new", applied: 9}})
	require.NotContains(t, w.String(), "WARNING")
	w.Reset()
	printStateHashes(&w, []stateHash{{id: "n1", hash: "new", withGated: "all", applied: 9}, {id: "n2", hash: "new", withGated: "all", applied: 9}, {id: "n3", hash: "all", applied: 9}, {id: "n4", hash: "other", applied: 9}})
	require.Contains(t, w.String(), "WARNING: the replicas' states differ at applied index 9 (n1, n2, n3 new; n4 other)")
	w.Reset()
	// Only an earlier release's replica is matched that way: two members of
	// this release whose state_hash differ still do.
	printStateHashes(&w, []stateHash{{id: "n1", hash: "new", withGated: "all", applied: 9}, {id: "n2", hash: "all", withGated: "all2", applied: 9}})
	require.Contains(t, w.String(), "WARNING: the replicas' states differ at applied index 9")
}
