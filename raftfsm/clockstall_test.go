package raftfsm

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idem-store/idem/engine"
)

// A leader that stays leader and stamps nothing for longer than
// ttl.MaxStep: a one-node store (the default deployment) stopped by
// SIGSTOP or docker pause, a whole cluster paused; Go's monotonic clock
// counts the pause. Here it is an idle leader whose tick never comes. Its
// first stamp after the pause ran past the applied time by more than a
// step, so the first claim was decided at the capped time and the next
// entry, a moment later, moved cluster time on by the rest: on real
// processes a 14 s SIGSTOP and a record the first claim created was
// answered 404 2.6 s before its retention was up, a lease granted so runs
// out as early (a second claimant takes over a key whose holder still
// holds it). Cluster time must never run ahead of real time since a
// record was created.
func TestLeaderThatStampedNothingForAWhileDoesNotAgeItsFirstRecordsAtOnce(t *testing.T) {
	n := idleLeader(t)
	require.NoError(t, claim(n, "before"))

	// Between MaxStep and MaxStep + RewindAfter: the first entry's
	// capped time is within RewindAfter of the reading, which the apply
	// keeps (ttl.Clock.Observe).
	time.Sleep(12 * time.Second)

	s := engine.Scope{Principal: "p", Endpoint: "e", Key: "first"}
	created := time.Now() // before the record's stamp: what passed is not undercounted
	res, _, err := n.Claim(engine.ClaimArgs{Scope: s, Fingerprint: "aa", LeaseMs: 30_000, RetentionMs: 60_000})
	require.NoError(t, err)
	require.Equal(t, engine.OutcomeClaimed, res.Outcome)
	require.NoError(t, claim(n, "after"))
	passed := time.Since(created)
	advanced := time.Duration(n.db.Meta().NowMs-res.Record.CreatedMs) * time.Millisecond
	require.LessOrEqual(t, advanced, passed+300*time.Millisecond,
		"cluster time ran %s in %s since the record was created: it expires, and its lease runs out, that much early", advanced, passed)
}
