package api_test

import (
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idem-store/idem/api"
	"github.com/idem-store/idem/raftfsm"
)

// notLeaderOnce is the real node, whose first raft batches answer
// ErrNotLeader: leadership lost between a batch's read and its writes.
type notLeaderOnce struct {
	*raftfsm.Node
	fails atomic.Int32
}

func (s *notLeaderOnce) Batch(ops []raftfsm.BatchOp) []raftfsm.BatchResult {
	if s.fails.Add(-1) < 0 {
		return s.Node.Batch(ops)
	}
	out := make([]raftfsm.BatchResult, len(ops))
	for i := range out {
		out[i].Err = raftfsm.ErrNotLeader
	}
	return out
}

// A batch whose read was answered, then whose writes found the leader
// gone, is asked again whole: the read changed nothing, so nothing is
// decided yet. It answered each write 503 instead (a rolling upgrade's
// leadership transfers gave batched clients 3-14 of them each, and none
// to clients sending one request per claim).
func TestBatchReadThenLeaderLostIsAskedAgainWhole(t *testing.T) {
	t.Parallel()
	n := mustNode(t)
	n.mustClaim(sc("read-first"), fp1) // the cluster secret is set; this record is read below
	store := &notLeaderOnce{Node: n.node}
	store.fails.Store(1)
	srv := httptest.NewServer(api.New(store, api.Config{
		Retention: 24 * time.Hour, DefaultLease: 30 * time.Second, BucketWidth: time.Hour,
		Limits: api.DefaultLimits(), LeaderWait: 2 * time.Second,
	}))
	t.Cleanup(srv.Close)
	via := *n
	via.url = srv.URL

	res := via.batch(
		op("get", sc("read-first"), "consistency", "linearizable"),
		op("claim", sc("after-read-1"), "fingerprint", fp1),
		op("claim", sc("after-read-2"), "fingerprint", fp1),
	)
	require.Equal(t, http.StatusOK, res[0].Status, "%s", res[0].Body)
	require.Equal(t, http.StatusCreated, res[1].Status, "%s", res[1].Body)
	require.Equal(t, http.StatusCreated, res[2].Status, "%s", res[2].Body)
	require.Less(t, store.fails.Load(), int32(0), "the raft batch was not asked twice")
}
