package api_test

import (
	"bytes"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idem-store/idem/raftfsm"
)

// GET /v1/admin/snapshot streams a backup that verifies and holds what was
// written; HEAD answers its headers only; it needs a token like every
// admin route; a node without a leader answers 503 after its wait.
func TestSnapshotRoute(t *testing.T) {
	n := mustNode(t, withBearer("secret"))
	for i := range 5 {
		r := n.post("/v1/claim", map[string]any{"principal": "p", "endpoint": "e", "key": "k" + strconv.Itoa(i), "fingerprint": "aa"})
		require.Equal(t, 201, r.status, "%s", r)
	}
	r := n.do("GET", "/v1/admin/snapshot", nil)
	require.Equal(t, 200, r.status, "%s", r)
	require.Equal(t, "application/octet-stream", r.header.Get("Content-Type"))
	require.Equal(t, "5", r.header.Get("X-Idem-Snapshot-Records"))
	info, err := raftfsm.VerifyBackup(bytes.NewReader(r.raw))
	require.NoError(t, err)
	require.Equal(t, int64(5), info.Stream.Records)
	require.Equal(t, strconv.FormatUint(info.Header.AppliedIndex, 10), r.header.Get("X-Idem-Snapshot-Index"))
	require.Equal(t, n.node.Self().ID, info.Header.NodeID)

	head := n.do("HEAD", "/v1/admin/snapshot", nil)
	require.Equal(t, 200, head.status)
	require.Empty(t, head.raw)
	require.Equal(t, "5", head.header.Get("X-Idem-Snapshot-Records"))

	r = n.do("POST", "/v1/admin/snapshot", nil)
	require.Equal(t, 405, r.status, "%s", r)
	n.bearer = ""
	r = n.do("GET", "/v1/admin/snapshot", nil)
	require.Equal(t, 401, r.status, "%s", r)
	r = n.do("POST", "/v1/admin/snapshot", nil)
	require.Equal(t, 401, r.status, "without a token, not even the method is told: %s", r)

	lone := mustNode(t, leaderless(100*time.Millisecond))
	r = lone.do("GET", "/v1/admin/snapshot", nil)
	require.Equal(t, 503, r.status, "%s", r)
	require.Equal(t, "unavailable", r.obj(t)["code"])
}
