package raftfsm

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idem-store/idem/engine"
)

func TestClaimCodecCarriesMaxPrincipals(t *testing.T) {
	a := engine.ClaimArgs{Scope: engine.Scope{Principal: "p", Endpoint: "e", Key: "k"}, Fingerprint: "aa",
		LeaseMs: 1000, RetentionMs: 60_000, MaxKeys: 7, PrincipalScope: true}
	without, err := (&Command{Op: OpClaim, NowMs: 5, WidthMs: 9, Claim: &a}).Encode()
	require.NoError(t, err)
	a.MaxPrincipals = 1_000_000
	with, err := (&Command{Op: OpClaim, NowMs: 5, WidthMs: 9, Claim: &a}).Encode()
	require.NoError(t, err)
	c, err := DecodeCommand(with)
	require.NoError(t, err)
	require.Equal(t, a, *c.Claim)
	// Without a bound the entry is what builds before the bound wrote
	// (no flag, no trailing varint), and it decodes as unlimited.
	c, err = DecodeCommand(without)
	require.NoError(t, err)
	require.Zero(t, c.Claim.MaxPrincipals)
	require.True(t, c.Claim.PrincipalScope)
	const flagsAt = 4 // codec version, op, varint now (5), varint width (9)
	require.Equal(t, byte(1), without[flagsAt])
	require.Equal(t, byte(1|flagMaxPrincipals), with[flagsAt])
	old := append([]byte(nil), with[:len(without)]...)
	old[flagsAt] = 1
	require.Equal(t, without, old)
}

// Operations the leader's applied state already refuses, or repeats
// without a change, add no entry to the raft log; the ones that change
// something still do.
func TestSettledOperationsAddNoLogEntry(t *testing.T) {
	n := mustNode(t, func(c *Config) { c.TickInterval, c.SweepInterval = time.Hour, time.Hour })
	s := func(p, k string) engine.Scope { return engine.Scope{Principal: p, Endpoint: "e", Key: k} }
	ca := func(sc engine.Scope, claimID string) engine.ClaimArgs {
		return engine.ClaimArgs{Scope: sc, Fingerprint: "aa", ClaimID: claimID, LeaseMs: 60_000, RetentionMs: 3_600_000,
			MaxKeys: 1, MaxPrincipals: 1}
	}
	res, _, err := n.Claim(ca(s("p", "k1"), "c1"))
	require.NoError(t, err)
	require.Equal(t, engine.OutcomeClaimed, res.Outcome)
	token := res.Record.Token

	last := n.raft.LastIndex()
	hash, _, err := n.StateHash()
	require.NoError(t, err)
	unchanged := func(what string) {
		t.Helper()
		require.Equal(t, last, n.raft.LastIndex(), "%s added a log entry", what)
		h, _, err := n.StateHash()
		require.NoError(t, err)
		require.Equal(t, hash, h, "%s changed the state", what)
	}
	claimIs := func(a engine.ClaimArgs, want engine.Outcome) {
		t.Helper()
		res, _, err := n.Claim(a)
		require.NoError(t, err)
		require.Equal(t, want, res.Outcome)
		unchanged(want.String())
	}
	claimIs(ca(s("p", "k2"), ""), engine.OutcomeQuotaExceeded)
	claimIs(ca(s("q", "k1"), ""), engine.OutcomePrincipalLimit)
	claimIs(ca(s("p", "k1"), "other"), engine.OutcomeInProgress)
	claimIs(ca(s("p", "k1"), "c1"), engine.OutcomeClaimed) // the same attempt again: same token
	mismatch := ca(s("p", "k1"), "")
	mismatch.Fingerprint = "bb"
	claimIs(mismatch, engine.OutcomeFingerprintMismatch)

	target := engine.TokenArgs{Scope: s("p", "k1"), Token: token}
	wrong := engine.TokenArgs{Scope: s("p", "k1"), Token: token + 1}
	missing := engine.TokenArgs{Scope: s("p", "nothing"), Token: token}
	body := &engine.Response{Status: 201, Body: []byte("ok")}
	for _, op := range []struct {
		name string
		do   func() (engine.Result, error)
		want engine.Outcome
	}{
		{"complete, wrong token", func() (engine.Result, error) { return n.Complete(wrong, body) }, engine.OutcomeTokenMismatch},
		{"complete, no record", func() (engine.Result, error) { return n.Complete(missing, body) }, engine.OutcomeNotFound},
		{"release, no record", func() (engine.Result, error) { return n.Release(missing) }, engine.OutcomeNotFound},
		{"extend, wrong token", func() (engine.Result, error) { return n.Extend(wrong, 5000) }, engine.OutcomeTokenMismatch},
		{"delete, no record", func() (engine.Result, error) { return n.Delete(missing.Scope, false) }, engine.OutcomeNotFound},
	} {
		res, err := op.do()
		require.NoError(t, err, op.name)
		require.Equal(t, op.want, res.Outcome, op.name)
		unchanged(op.name)
	}

	// A change goes through the log ...
	res, err = n.Complete(target, body)
	require.NoError(t, err)
	require.Equal(t, engine.OutcomeCompleted, res.Outcome)
	require.Greater(t, n.raft.LastIndex(), last)
	last = n.raft.LastIndex()
	hash, _, err = n.StateHash()
	require.NoError(t, err)
	// ... and its repeats do not.
	res, err = n.Complete(target, body)
	require.NoError(t, err)
	require.Equal(t, engine.OutcomeCompleted, res.Outcome)
	unchanged("a repeated complete")
	claimIs(ca(s("p", "k1"), ""), engine.OutcomeReplay)
	res, err = n.Release(target)
	require.NoError(t, err)
	require.Equal(t, engine.OutcomeAlreadyCompleted, res.Outcome)
	unchanged("release of a completed record")
}

// The injected uniqueness bug lives in Apply: with it, claims must still
// reach the log, or the chaos check could not see the bug.
func TestInjectedBugClaimsStillReachTheLog(t *testing.T) {
	n := mustNode(t, func(c *Config) {
		c.TickInterval, c.SweepInterval, c.InjectBug = time.Hour, time.Hour, BugSkipUniqueness
	})
	a := engine.ClaimArgs{Scope: engine.Scope{Principal: "p", Endpoint: "e", Key: "k"}, Fingerprint: "aa", LeaseMs: 60_000, RetentionMs: 60_000}
	_, _, err := n.Claim(a)
	require.NoError(t, err)
	last := n.raft.LastIndex()
	res, _, err := n.Claim(a)
	require.NoError(t, err)
	require.Equal(t, engine.OutcomeClaimed, res.Outcome, "the injected bug grants the second claim")
	require.Greater(t, n.raft.LastIndex(), last)
}
