package api

import (
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idem-store/idem/raftfsm"
)

// supersededNode is a real node that a recovery of its cluster left out.
type supersededNode struct {
	*raftfsm.Node
	why string
}

func (n *supersededNode) Superseded() string { return n.why }

// A node left out of a recovery answers every request 503 but its status,
// which an operator still reads: that status showed its own view, a table
// of healthy voters with itself leading, and nothing of why every claim,
// lookup and /readyz fails there. It says why now; a node asking (the
// forwarded mark) still gets the 503.
func TestClusterStatusOfASupersededNodeSaysSo(t *testing.T) {
	rc := raftfsm.DefaultConfig()
	rc.DataDir, rc.RaftAddr, rc.Bootstrap = t.TempDir(), "127.0.0.1:0", true
	rc.TickInterval, rc.SweepInterval = time.Hour, time.Hour
	node, err := raftfsm.Open(rc)
	require.NoError(t, err)
	defer node.Close()
	require.Eventually(t, func() bool { return node.IsLeader() && node.Ready() }, 10*time.Second, 10*time.Millisecond)
	const why = "raftfsm: this node was left out of a recovery of its cluster: n1 answered"
	srv := httptest.NewServer(New(&supersededNode{Node: node, why: why}, Config{
		Retention: 24 * time.Hour, DefaultLease: 30 * time.Second, BucketWidth: rc.BucketWidth,
		Limits: DefaultLimits(), Logger: slog.New(slog.DiscardHandler),
	}))
	defer srv.Close()

	resp, err := http.Get(srv.URL + "/v1/cluster")
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode, "an operator still sees the status")
	var st raftfsm.Status
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&st))
	require.Equal(t, why, st.Superseded)

	req, err := http.NewRequest(http.MethodGet, srv.URL+"/v1/cluster", nil)
	require.NoError(t, err)
	req.Header.Set(forwardedHeader, "n3")
	fresp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	fresp.Body.Close()
	require.Equal(t, http.StatusServiceUnavailable, fresp.StatusCode, "a node asking gets the 503")
}
