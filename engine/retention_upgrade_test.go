package engine

import (
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/stretchr/testify/require"
)

// forgetRetention makes h's state what a data dir written by a release
// before the cluster's retention holds: the same records, no m/retention.
func forgetRetention(t *testing.T, h *harness) {
	t.Helper()
	require.NoError(t, h.db.pdb.Delete(keyRetention, pebble.Sync))
	h.db.mu.Lock()
	h.db.meta.RetentionMs = 0
	h.db.mu.Unlock()
}

// Apply must be a function of the state and the log. During and after a
// rolling upgrade from a release without m/retention, whether a replica
// holds the pin depends on whether it had applied a claim since its own
// upgrade, which is no part of the log: a replica upgraded after the others
// (the leader, restarted last) pins whatever the next claim carries, while
// the others give that claim their own pin. Found on real processes: n1
// restarted on the new binary with --retention 10m, handed leadership
// before any claim, answered expires_at +10m and pinned 10m; n2 and n3
// stored the same claim with +1m, and after a leadership change the key
// was claimed again 1 min later although the client was promised 10.
func TestReplicaUpgradedFromAnOldDataDirDecidesAsTheOthers(t *testing.T) {
	const now = int64(1_700_000_000_000)
	a, b := newHarness(t), newHarness(t)
	// Both replicas ran the old release, which writes no m/retention.
	for _, h := range []*harness{a, b} {
		h.claim(now, args(scope("old")))
		forgetRetention(t, h)
	}
	// a is upgraded and applies the next entry; b applies it still on the
	// old release, and is upgraded right after.
	a.claim(now, args(scope("before")))
	b.claim(now, args(scope("before")))
	forgetRetention(t, b)

	// The next claim, proposed by a leader whose --retention is 10x.
	long := with(args(scope("after")), func(x *ClaimArgs) { x.RetentionMs = 10 * testRet })
	ra, rb := a.claim(now+1, long), b.claim(now+1, long)
	require.Equal(t, ra.Record.ExpiresMs, rb.Record.ExpiresMs, "two replicas applying the same entry gave the record different expiries")
	ha, err := a.db.StateHash()
	require.NoError(t, err)
	hb, err := b.db.StateHash()
	require.NoError(t, err)
	require.Equal(t, ha, hb, "replicas diverged")
}
