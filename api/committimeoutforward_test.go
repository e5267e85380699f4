package api_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idem-store/idem/api"
	"github.com/idem-store/idem/engine"
	"github.com/idem-store/idem/raftfsm"
)

// followerOf is the real node taken for a follower of a leader at addr:
// its claims find it is not the leader.
type followerOf struct {
	*raftfsm.Node
	addr string
}

func (s *followerOf) Claim(engine.ClaimArgs) (engine.Result, uint64, error) {
	return engine.Result{}, 0, raftfsm.ErrNotLeader
}

func (s *followerOf) Leader() (raftfsm.NodeInfo, bool) {
	return raftfsm.NodeInfo{ID: "leader", HTTPAddr: s.addr}, true
}

// --commit-timeout raised lets the leader wait longer for a quorum on a
// slow disk; a follower forwarding a write cut it at its own 3 s all the
// same (503 outcome unknown, a warning logged), though the leader would
// have answered it. A forward now waits what the flag adds to its 5 s
// default; at the default it is cut at 3 s as before.
func TestForwardWaitsWhatCommitTimeoutAdds(t *testing.T) {
	t.Parallel()
	n := mustNode(t)
	leader := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(4 * time.Second) // a commit on a slow disk
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		w.Write([]byte(`{"outcome":"claimed"}`))
	}))
	t.Cleanup(leader.Close)
	addr := strings.TrimPrefix(leader.URL, "http://")

	claim := func(commit time.Duration) (int, time.Duration) {
		t.Helper()
		follower := httptest.NewServer(api.New(&followerOf{Node: n.node, addr: addr}, api.Config{
			Retention: 24 * time.Hour, DefaultLease: 30 * time.Second, BucketWidth: time.Hour,
			Limits: api.DefaultLimits(), CommitTimeout: commit,
		}))
		defer follower.Close()
		start := time.Now()
		resp, err := http.Post(follower.URL+"/v1/claim", "application/json",
			strings.NewReader(`{"principal":"p","endpoint":"e","key":"k","fingerprint":"ab"}`))
		require.NoError(t, err)
		resp.Body.Close()
		return resp.StatusCode, time.Since(start)
	}
	code, took := claim(10 * time.Second)
	require.Equal(t, http.StatusCreated, code, "a forward with --commit-timeout 10s, the leader answering after 4 s (%s)", took)
	code, took = claim(0)
	require.Equal(t, http.StatusServiceUnavailable, code, "at the default, a forward is cut at LeaderWait (%s)", took)
	require.Less(t, took, 4*time.Second)
}
