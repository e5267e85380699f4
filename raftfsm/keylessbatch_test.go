package raftfsm

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idem-store/idem/engine"
)

// Review probe: POST /v1/batch goes through batchCommand, which must refuse
// like the single routes on a keyless leader of an encrypted cluster.
func TestKeylessLeaderRefusesBatchSeals(t *testing.T) {
	c := newMemCluster(t)
	n1 := c.open("n1", "", true)
	c.leader(n1)
	n2 := c.open("n2", "", false)
	c.join(n2, n1) // a voter before encryption is on: a keyless non-voter is not promoted
	n1.setKeyring(testRing(t, "k1"))
	write(t, n1, "before")
	n2.SetPeerProbe(func(ctx context.Context, addr string) (Status, error) { return Status{}, errors.New("unreachable") })
	electAnyway(t, n1, n2) // TransferLeadershipTo refuses a voter without the key in use
	require.Eventually(t, n2.IsLeader, 10*time.Second, 10*time.Millisecond)
	s := engine.Scope{Principal: "cus_1", Endpoint: "POST /pay", Key: "b1"}
	res, _, err := n2.Claim(engine.ClaimArgs{Scope: s, Fingerprint: "aa", LeaseMs: 60_000, RetentionMs: 3_600_000})
	require.NoError(t, err)
	out := n2.Batch([]BatchOp{
		{Op: OpClaim, Claim: &engine.ClaimArgs{Scope: engine.Scope{Principal: "cus_1", Endpoint: "POST /pay", Key: "b2"}, Fingerprint: "aa", CorrelationID: secretCorrelation, LeaseMs: 60_000, RetentionMs: 3_600_000}},
		{Op: OpComplete, Target: &engine.TokenArgs{Scope: s, Token: res.Record.Token}, Response: &engine.Response{Status: 201, Body: secretBody}},
		{Op: OpClaim, Claim: &engine.ClaimArgs{Scope: engine.Scope{Principal: "cus_1", Endpoint: "POST /pay", Key: "b3"}, Fingerprint: "aa", LeaseMs: 60_000, RetentionMs: 3_600_000}},
	})
	var refused *SealRefusedError
	require.ErrorAs(t, out[0].Err, &refused)
	require.ErrorAs(t, out[1].Err, &refused)
	require.NoError(t, out[2].Err)
	require.Equal(t, engine.StateInProgress, storedOn(t, n1, s).State)
}
