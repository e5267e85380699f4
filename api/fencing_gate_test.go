package api

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idem-store/idem/engine"
	"github.com/idem-store/idem/raftfsm"
)

// withMember is a real node whose configuration shows one more member, at
// the HTTP address of a stand-in.
type withMember struct {
	*raftfsm.Node
	addr string
}

func (m *withMember) Status() (raftfsm.Status, error) {
	st, err := m.Node.Status()
	st.Nodes = append(st.Nodes, raftfsm.Member{NodeInfo: raftfsm.NodeInfo{ID: "n-old", HTTPAddr: m.addr}, Suffrage: "Voter"})
	return st, err
}

// The leader makes the cluster secret only once every member says it
// knows the secret's entry: a member of an older version would skip it and
// never hold the secret. Meanwhile claims return bare raft indexes, which
// keep working for their attempts once the secret exists.
func TestSecretWaitsForEveryMember(t *testing.T) {
	retry := secretGateRetry
	secretGateRetry = 50 * time.Millisecond
	t.Cleanup(func() { secretGateRetry = retry })

	var knows atomic.Bool
	old := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if knows.Load() {
			w.Header().Set(featuresHeader, "other,"+featureSecret)
		}
		io.WriteString(w, `{"status":"ok"}`)
	}))
	defer old.Close()

	rc := raftfsm.DefaultConfig()
	rc.DataDir, rc.RaftAddr, rc.Bootstrap = t.TempDir(), "127.0.0.1:0", true
	rc.TickInterval, rc.SweepInterval = time.Hour, time.Hour
	node, err := raftfsm.Open(rc)
	require.NoError(t, err)
	defer node.Close()
	require.Eventually(t, func() bool { return node.IsLeader() && node.Ready() }, 10*time.Second, 10*time.Millisecond)
	srv := httptest.NewServer(New(&withMember{Node: node, addr: strings.TrimPrefix(old.URL, "http://")}, Config{
		Retention: 24 * time.Hour, DefaultLease: 30 * time.Second, BucketWidth: rc.BucketWidth,
		Limits: DefaultLimits(), Logger: slog.New(slog.DiscardHandler),
	}))
	defer srv.Close()
	claim := func(key string) string {
		resp, err := http.Post(srv.URL+"/v1/claim", "application/json", strings.NewReader(
			`{"principal":"cus_1","endpoint":"POST /x","key":"`+key+`","fingerprint":"aa"}`))
		require.NoError(t, err)
		defer resp.Body.Close()
		require.Equal(t, 201, resp.StatusCode)
		var c struct{ Token string }
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&c))
		return c.Token
	}

	early := claim("k1")
	require.Regexp(t, `^[0-9]+$`, early, "a member without the secret's entry: bare raft indexes, as before")
	time.Sleep(2 * secretGateRetry)
	require.Regexp(t, `^[0-9]+$`, claim("k2"))
	_, has, err := node.ClusterSecret()
	require.NoError(t, err)
	require.False(t, has)

	knows.Store(true)
	time.Sleep(2 * secretGateRetry)
	late := claim("k3")
	require.Regexp(t, `^[0-9]{20}\.[0-9a-f]{32}$`, late)
	_, has, err = node.ClusterSecret()
	require.NoError(t, err)
	require.True(t, has)

	// The early claim's bare index still completes its attempt.
	resp, err := http.Post(srv.URL+"/v1/complete", "application/json", strings.NewReader(
		`{"principal":"cus_1","endpoint":"POST /x","key":"k1","token":"`+early+`","response":{"status":200}}`))
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, 200, resp.StatusCode)
	rec, found, err := node.Lookup(context.Background(), engine.Scope{Principal: "cus_1", Endpoint: "POST /x", Key: "k1"}, false, true)
	require.NoError(t, err)
	require.True(t, found)
	require.Equal(t, engine.StateCompleted, rec.State)
}
