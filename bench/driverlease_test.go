package bench

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idem-store/idem/internal/idemtest"
)

// Bug (membership walk): the HTTP driver decoded created_at and
// lease_expires_at into fields without json tags, so every won claim's
// lease read 0 and each takeover after the lease counted as a duplicate
// won (1,725 in an 8-minute run). Both drivers, against a real node,
// report the lease the node gave.
func TestDriversReportTheLeaseOfAWonClaim(t *testing.T) {
	node := idemtest.Start(t, idemtest.Options{})
	batch, err := NewBatchDriver([]string{node.URL}, "", 16, nil)
	require.NoError(t, err)
	for name, d := range map[string]Driver{"http": NewHTTPDriver([]string{node.URL}, ""), "batch": batch} {
		res, err := d.Claim(context.Background(), Scope{Principal: "p", Endpoint: "e", Key: "lease-" + name}, "c-"+name)
		require.NoError(t, err, name)
		require.Equal(t, Won, res.Outcome, name)
		require.Equal(t, 30*time.Second, res.Lease, name)
	}
}
