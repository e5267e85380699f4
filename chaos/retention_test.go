package chaos

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Only an acknowledged claim whose expires_at - created_at is not the
// cluster's retention is a violation; answers without the times, and
// claims that won nothing, say nothing of it.
func TestRetentionChecks(t *testing.T) {
	ret := 11 * time.Minute
	ops := []*Op{
		{ID: 1, Kind: KindClaim, Status: 201, RetentionMs: ret.Milliseconds(), Node: "n1"},
		{ID: 2, Kind: KindClaim, Status: 201, RetentionMs: time.Minute.Milliseconds(), Node: "n3", Key: "k2"},
		{ID: 3, Kind: KindClaim, Status: 201}, // times not in the answer
		{ID: 4, Kind: KindClaim, Status: 200, RetentionMs: 5},
		{ID: 5, Kind: KindLookup, Status: 200, RetentionMs: 5},
	}
	v := RetentionChecks(ops, ret)
	require.Len(t, v, 1)
	require.Equal(t, VRetention, v[0].Kind)
	require.Equal(t, []int{2}, v[0].Ops)
	require.Contains(t, v[0].Detail, "claimed through n3 with a retention of 1m0s; the cluster's is 11m0s")
}
