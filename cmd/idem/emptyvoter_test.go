package main

import (
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// An operator walk: a voter restarted in a rolling restart from another
// working directory, its relative --data-dir naming a new, empty one,
// joined as "n2 is a voter already" at INFO and caught up as that voter,
// while the data dir it ran on was left behind, and nothing said so. A
// node that started empty and whose first join is answered that it is a
// voter that ran at these addresses before (ran_before) warns, naming the
// data dir as an absolute path. A member of a new cluster's first
// configuration, whose addresses its own join records first, is answered
// without ran_before and says nothing.
func TestEmptyNodeAdmittedAsAVoterThatRanBeforeWarns(t *testing.T) {
	t.Parallel()
	for _, ranBefore := range []bool{true, false} {
		member := startNotIdem(t, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			if ranBefore {
				w.Write([]byte(`{"outcome":"joined","suffrage":"voter","detail":"n2 is a voter already; its addresses are recorded","ran_before":true}`))
				return
			}
			w.Write([]byte(`{"outcome":"joined","suffrage":"voter","detail":"n2 is a voter already; its addresses are recorded"}`))
		})
		dir := filepath.Join(t.TempDir(), "data")
		p := launch(t, dir, freePort(t), freePort(t), "--node-id", "n2", "--join", member.addr)
		waitFor(t, 20*time.Second, "the join admitted", func() (bool, string) {
			logs := p.logs.String()
			return strings.Contains(logs, "cluster membership recorded"), logs
		})
		time.Sleep(2 * time.Second) // more rounds: said once, for the first answer
		logs := p.logs.String()
		if !ranBefore {
			require.NotContains(t, logs, "lists it as a voter that ran at these addresses before", logs)
			continue
		}
		require.Equal(t, 1, strings.Count(logs, "this node started with an empty data dir, and the cluster lists it as a voter that ran at these addresses before"), logs)
		require.Contains(t, logs, "data-dir="+dir, logs)
	}
}
