package engine

import (
	"bytes"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/stretchr/testify/require"
)

// The cluster's retention is replicated state: the first claim pins the
// retention its command carries, a leader stamps the pinned one into every
// later claim (Meta.ClaimRetention, whatever its --retention), and only
// SetRetention changes it, for records claimed from then on.
func TestRetentionPinnedByFirstClaim(t *testing.T) {
	h := newHarness(t)
	const now = int64(1_700_000_000_000)
	require.Zero(t, h.db.Meta().RetentionMs, "nothing pinned before the first claim")
	// As raftfsm's leader stamps a claim.
	stamped := func(a ClaimArgs) ClaimArgs { a.RetentionMs = h.db.Meta().ClaimRetention(a); return a }

	first := h.claim(now, stamped(args(scope("a"))))
	require.Equal(t, OutcomeClaimed, first.Outcome)
	require.Equal(t, now+testRet, first.Record.ExpiresMs)
	require.Equal(t, int64(testRet), h.db.Meta().RetentionMs)

	// A leader with a shorter --retention stamps the pinned one.
	shortArgs := with(args(scope("b")), func(a *ClaimArgs) { a.RetentionMs = testRet / 4 })
	require.Equal(t, int64(testRet), stamped(shortArgs).RetentionMs)
	short := h.claim(now+1, stamped(shortArgs))
	require.Equal(t, OutcomeClaimed, short.Outcome)
	require.Equal(t, now+1+testRet, short.Record.ExpiresMs, "a claim gets the cluster's retention, not the leader's flag")
	peek, settled := h.db.PeekClaim(stamped(shortArgs), now+2)
	require.True(t, settled)
	require.Equal(t, now+1+testRet, peek.Record.ExpiresMs)

	// Changed: new records get the new retention; stored ones keep theirs.
	h.apply(now+3, func(tx *Txn, n int64, _ uint64) Result {
		tx.SetRetention(2 * testRet)
		return Result{NowMs: n}
	})
	require.Equal(t, int64(2*testRet), h.db.Meta().RetentionMs)
	later := h.claim(now+4, stamped(args(scope("c"))))
	require.Equal(t, now+4+2*testRet, later.Record.ExpiresMs)
	require.Equal(t, now+testRet, h.lookup(scope("a"), now+4).ExpiresMs, "a stored record keeps the expiry it was promised")
	require.Equal(t, int64(2*testRet), h.db.Meta().MaxRetentionMs, "lookups probe as far as the longest retention")

	// Shortened: a record of the longer retention is still found until
	// its own expiry.
	h.apply(now+5, func(tx *Txn, n int64, _ uint64) Result {
		tx.SetRetention(testRet / 2)
		return Result{NowMs: n}
	})
	require.Equal(t, now+6+testRet/2, h.claim(now+6, stamped(args(scope("d")))).Record.ExpiresMs)
	require.NotNil(t, h.lookup(scope("c"), now+4+2*testRet-1), "the 2x record lives to its own expiry")
	require.Equal(t, OutcomeInProgress, h.claim(now+7, stamped(with(args(scope("c")), func(a *ClaimArgs) { a.ClaimID = "other" }))).Outcome)
}

// An entry applies the same whatever the version of the replica: a claim
// proposed by a leader of a release before the cluster's retention (its
// own --retention in the command) gets that retention here too, as it did
// on the replicas that applied it before their upgrade, or that have not
// upgraded yet. Deciding with the pinned one instead gave the second
// record 24 h here and 1 h on those replicas: two states at one index.
func TestClaimAppliesAsEveryReleaseDid(t *testing.T) {
	h := newHarness(t)
	const now = int64(1_700_000_000_000)
	const day, hour = 24 * 3_600_000, 3_600_000
	h.claim(now, with(args(scope("a")), func(a *ClaimArgs) { a.RetentionMs = day }))
	b := h.claim(now+1, with(args(scope("b")), func(a *ClaimArgs) { a.RetentionMs = hour }))
	require.Equal(t, now+1+hour, b.Record.ExpiresMs, "decided with the command's retention, as 870ada1 did")
	require.Equal(t, int64(day), h.db.Meta().RetentionMs, "the first claim pinned the cluster's")
	require.Equal(t, int64(day), h.db.Meta().MaxRetentionMs)
}

func TestRetentionSurvivesReopenAndSnapshot(t *testing.T) {
	fs := vfs.NewMem()
	db := mustOpenFS(t, fs, "db")
	h := &harness{t: t, db: db}
	const now = int64(1_700_000_000_000)
	h.claim(now, args(scope("a")))
	h.apply(now+1, func(tx *Txn, n int64, _ uint64) Result {
		tx.SetRetention(3 * testRet)
		return Result{NowMs: n}
	})
	snap, err := db.Snapshot()
	require.NoError(t, err)
	require.Equal(t, int64(3*testRet), snap.Meta().RetentionMs)

	other := mustOpen(t)
	var buf bytes.Buffer
	_, err = snap.WriteTo(&buf)
	require.NoError(t, err)
	require.NoError(t, other.Restore(&buf))
	snap.Close()
	require.Equal(t, int64(3*testRet), other.Meta().RetentionMs, "a restored state keeps the cluster's retention")

	require.NoError(t, db.Close())
	re := mustOpenFS(t, fs, "db")
	require.Equal(t, int64(3*testRet), re.Meta().RetentionMs, "reopened")
	h2 := &harness{t: t, db: re, idx: 10}
	a := args(scope("b"))
	a.RetentionMs = re.Meta().ClaimRetention(a) // as the leader stamps it
	require.Equal(t, now+2+3*testRet, h2.claim(now+2, a).Record.ExpiresMs)
}

// A restore replaces the retention with the stream's, also when the
// stream has none (a state before its first claim, or a backup of an
// older release): the store is unpinned after it, in memory and on disk,
// as every replica that restores or replays that state.
func TestRestoreWithoutRetentionUnpins(t *testing.T) {
	const now = int64(1_700_000_000_000)
	src := newHarness(t)
	src.complete(now, scope("a"), 1, resp("x")) // fixes width and scope, claims nothing
	require.Zero(t, src.db.Meta().RetentionMs)
	snap, err := src.db.Snapshot()
	require.NoError(t, err)
	var buf bytes.Buffer
	_, err = snap.WriteTo(&buf)
	require.NoError(t, err)
	snap.Close()

	fs := vfs.NewMem()
	db := mustOpenFS(t, fs, "db")
	h := &harness{t: t, db: db}
	h.claim(now, args(scope("b")))
	h.apply(now+1, func(tx *Txn, n int64, _ uint64) Result { tx.SetRetention(3 * testRet); return Result{NowMs: n} })
	require.Equal(t, int64(3*testRet), db.Meta().RetentionMs)
	require.NoError(t, db.Restore(bytes.NewReader(buf.Bytes())))
	require.Zero(t, db.Meta().RetentionMs, "in memory")
	require.NoError(t, db.Close())
	re := mustOpenFS(t, fs, "db")
	require.Zero(t, re.Meta().RetentionMs, "on disk")
	h2 := &harness{t: t, db: re, idx: re.Meta().Applied}
	require.Equal(t, now+2+testRet/2, h2.claim(now+2, with(args(scope("c")), func(a *ClaimArgs) { a.RetentionMs = testRet / 2 })).Record.ExpiresMs,
		"the next claim pins its own")
	require.Equal(t, int64(testRet/2), re.Meta().RetentionMs)
}
