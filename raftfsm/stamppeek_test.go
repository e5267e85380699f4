package raftfsm

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idem-store/idem/engine"
)

// A leader that stamped nothing for longer than ttl.RewindAfter stamps its
// next entry at most RewindAfter past the applied time (Clock.StampMs).
// The precheck that answers an operation without proposing it (settled,
// settledInBatch) must judge at that same time: judged at the clock's
// reading, which counted the whole pause, a complete of a record that
// cluster time still holds live was answered not_found (a delete of it,
// "nothing to evict"), while a claim a moment later, stamped within
// RewindAfter, found it live and in progress.
func TestSettledJudgesAtTheTimeALeaderWouldStamp(t *testing.T) {
	for _, batch := range []bool{false, true} {
		name := map[bool]string{false: "complete", true: "batch"}[batch]
		t.Run(name, func(t *testing.T) {
			n := idleLeader(t)
			require.NoError(t, n.SetRetention(6500*time.Millisecond))
			require.NoError(t, claim(n, "before"))

			s := engine.Scope{Principal: "p", Endpoint: "e", Key: "k"}
			res, token, err := n.Claim(engine.ClaimArgs{Scope: s, Fingerprint: "aa", LeaseMs: 1000, RetentionMs: 6500})
			require.NoError(t, err)
			require.Equal(t, engine.OutcomeClaimed, res.Outcome)

			// Idle past RewindAfter, and past the record's retention by
			// the reading; its next stamp is at most RewindAfter on.
			time.Sleep(7500 * time.Millisecond)

			target, resp := engine.TokenArgs{Scope: s, Token: token}, &engine.Response{Status: 200}
			var done engine.Result
			if batch {
				br := n.Batch([]BatchOp{{Op: OpComplete, Target: &target, Response: resp}})
				require.Len(t, br, 1)
				require.NoError(t, br[0].Err)
				done = br[0].Result
			} else {
				done, err = n.Complete(target, resp)
				require.NoError(t, err)
			}
			require.Equal(t, engine.OutcomeCompleted, done.Outcome,
				"the record is live at the time this leader stamps (applied time %d, record expires %d), yet the complete was answered %s at %d",
				n.db.Meta().NowMs, res.Record.ExpiresMs, done.Outcome, done.NowMs)
		})
	}
}
