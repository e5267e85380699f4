package raftfsm

import (
	"bytes"
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idem-store/idem/engine"
)

// raft-wal writes an entry of any size but reads none over 64 MiB: a node
// that acknowledged the completion of a 100 MiB response (--max-request-bytes
// and --max-response-bytes raised) panicked at its next start ("WAL is
// corrupt: frame header indicates a record larger than MaxEntrySize"). A
// command whose entry would be over MaxEntryBytes is refused before it is
// proposed, alone or in a batch, and the node restarts with what it
// acknowledged.
func TestEntryOverTheLogsLimitIsRefusedAndTheNodeRestarts(t *testing.T) {
	n := mustNode(t)
	sc := func(k string) engine.Scope { return engine.Scope{Principal: "p", Endpoint: "e", Key: k} }
	claim := func(k string) *engine.Record {
		t.Helper()
		r, _, err := n.Claim(engine.ClaimArgs{Scope: sc(k), Fingerprint: "aa", LeaseMs: 60_000, RetentionMs: 3_600_000})
		require.NoError(t, err)
		require.Equal(t, engine.OutcomeClaimed, r.Outcome)
		return r.Record
	}

	big := claim("big")
	huge := &engine.Response{Status: 201, Body: bytes.Repeat([]byte{7}, MaxEntryBytes)}
	_, err := n.Complete(engine.TokenArgs{Scope: sc("big"), Token: big.Token}, huge)
	var tooLarge *EntryTooLargeError
	require.ErrorAs(t, err, &tooLarge)
	require.True(t, errors.Is(err, ErrEntryTooLarge))
	require.Greater(t, tooLarge.Bytes, MaxEntryBytes)

	// Two ops of 40 MiB each: each fits alone, the batch's one entry does
	// not. They go as two entries, never refused for being batched
	// together (the client's Batcher packs unrelated callers' calls).
	half := &engine.Response{Status: 201, Body: bytes.Repeat([]byte{8}, 40<<20)}
	other := claim("other")
	rs := n.Batch([]BatchOp{
		{Op: OpComplete, Target: &engine.TokenArgs{Scope: sc("big"), Token: big.Token}, Response: half},
		{Op: OpComplete, Target: &engine.TokenArgs{Scope: sc("other"), Token: other.Token}, Response: half},
	})
	for _, r := range rs {
		require.NoError(t, r.Err)
		require.Equal(t, engine.OutcomeCompleted, r.Outcome)
	}

	// An op too large alone is refused in a batch too, and the op beside
	// it is decided.
	third, fourth := claim("third"), claim("fourth")
	rs = n.Batch([]BatchOp{
		{Op: OpComplete, Target: &engine.TokenArgs{Scope: sc("third"), Token: third.Token}, Response: huge},
		{Op: OpComplete, Target: &engine.TokenArgs{Scope: sc("fourth"), Token: fourth.Token}, Response: half},
	})
	require.ErrorIs(t, rs[0].Err, ErrEntryTooLarge)
	require.NoError(t, rs[1].Err)

	// What fits is stored, and the node starts again on its log.
	m := reopen(t, n)
	got, found, err := m.Lookup(context.Background(), sc("big"), false, true)
	require.NoError(t, err)
	require.True(t, found)
	require.Equal(t, engine.StateCompleted, got.State)
	require.Len(t, got.Response.Body, 40<<20)
	for k, want := range map[string]engine.State{"other": engine.StateCompleted, "third": engine.StateInProgress, "fourth": engine.StateCompleted} {
		got, found, err = m.Lookup(context.Background(), sc(k), false, true)
		require.NoError(t, err)
		require.True(t, found)
		require.Equal(t, want, got.State, k)
	}
}
