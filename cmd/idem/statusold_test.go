package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idem-store/idem/raftfsm"
)

// A walk of a rollback in place: n2 stopped, the leadership moved, n2
// started on e861e54 on its data dir. The new leader logged the downgrade
// at ERROR and its GET /v1/cluster showed n2's downgraded, but `idem
// cluster status --addr` n2 itself, the node an operator just rolled back,
// printed no WARNING: that release passes on the leader's measurements
// without the field. The command now reads it from the leader when the
// node asked runs a release that does not say its version.
func TestStatusAskedOnAnEarlierReleaseFollowerWarnsOfTheLeadersDowngrade(t *testing.T) {
	why := "since 2026-12-05T18:21:28Z it runs a release (version not said) whose Apply lacks credential-max-principals"
	members := func(downgraded string) []raftfsm.Member {
		return []raftfsm.Member{
			{NodeInfo: raftfsm.NodeInfo{ID: "n1"}, Suffrage: "voter", Healthy: true},
			{NodeInfo: raftfsm.NodeInfo{ID: "n2"}, Suffrage: "voter", Healthy: true, Downgraded: downgraded},
			{NodeInfo: raftfsm.NodeInfo{ID: "n3"}, Suffrage: "voter", Healthy: true},
		}
	}
	serve := func(st *raftfsm.Status) *httptest.Server {
		return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Method != http.MethodGet || r.URL.Path != "/v1/cluster" {
				http.NotFound(w, r)
				return
			}
			w.Header().Set("Content-Type", "application/json")
			json.NewEncoder(w).Encode(st)
		}))
	}
	leaderSt := &raftfsm.Status{Self: raftfsm.NodeInfo{ID: "n3"}, Version: "dev", HealthFrom: "n3", Nodes: members(why)}
	leader := serve(leaderSt)
	defer leader.Close()
	leaderAddr := strings.TrimPrefix(leader.URL, "http://")
	leaderSt.Leader = &raftfsm.NodeInfo{ID: "n3", HTTPAddr: leaderAddr}
	// The earlier release: the leader's measurements, no version, no downgraded.
	oldSt := &raftfsm.Status{Self: raftfsm.NodeInfo{ID: "n2"}, Leader: &raftfsm.NodeInfo{ID: "n3", HTTPAddr: leaderAddr}, HealthFrom: "n3", Nodes: members("")}
	old := serve(oldSt)
	defer old.Close()

	var stdout, stderr bytes.Buffer
	code := run(context.Background(), []string{"cluster", "status", "--addr", strings.TrimPrefix(old.URL, "http://")}, &stdout, &stderr)
	require.Equal(t, 0, code, "stdout %s stderr %s", stdout.String(), stderr.String())
	require.Contains(t, stdout.String(), "WARNING: n2 was downgraded in place: "+why)
	require.NotContains(t, stdout.String(), "n1 was downgraded")
}
