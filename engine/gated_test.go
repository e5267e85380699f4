package engine

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/stretchr/testify/require"
)

// Meta.Gated says which kinds of entries an earlier release skips this
// state applied: a leader refuses to promote (or lead with) a member
// lacking them on it. It must survive a restart, a snapshot installed on
// another replica and a backup's scan, and a state without it (an earlier
// release's data dir) records none.
func TestGatedKindsSurviveRestartAndSnapshot(t *testing.T) {
	const now = int64(1_700_000_000_000)
	fs := vfs.NewMem()
	db := mustOpenFS(t, fs, "db")
	h := &harness{t: t, db: db}
	h.claim(now, args(scope("a")))
	require.Zero(t, db.Meta().Gated, "nothing marked: nothing recorded, as in an earlier release's data dir")
	_, _, err := db.pdb.Get(keyGated)
	require.ErrorIs(t, err, pebble.ErrNotFound, "no key is written before a gated entry is applied")

	h.apply(now, func(tx *Txn, n int64, idx uint64) Result {
		tx.MarkGated(1 << 0)
		return tx.Claim(args(scope("b")), idx, n)
	})
	h.apply(now, func(tx *Txn, n int64, idx uint64) Result {
		tx.MarkGated(1 << 2)
		return Result{NowMs: n}
	})
	h.claim(now, args(scope("c")))
	const want = uint64(1<<0 | 1<<2)
	require.Equal(t, want, db.Meta().Gated, "kept by later commits")

	snap, err := db.Snapshot()
	require.NoError(t, err)
	require.Equal(t, want, snap.Meta().Gated)
	var buf bytes.Buffer
	_, err = snap.WriteTo(&buf)
	require.NoError(t, err)
	require.NoError(t, snap.Close())
	info, err := ScanStream(bytes.NewReader(buf.Bytes()))
	require.NoError(t, err)
	require.Equal(t, want, info.Meta.Gated, "a backup's scan")
	dst := newHarness(t)
	dst.claim(now, args(scope("other")))
	require.NoError(t, dst.db.Restore(bytes.NewReader(buf.Bytes())))
	require.Equal(t, want, dst.db.Meta().Gated, "a replica the snapshot is installed on")
	require.Equal(t, h.hash(), dst.hash())

	require.NoError(t, db.Close())
	db2 := mustOpenFS(t, fs, "db")
	require.Equal(t, want, db2.Meta().Gated, "a restart")
}

// A replica of a release before Meta.Gated applies a capped claim without
// recording it: its records are the same, and so is its hash (operators
// compare replicas by it after a rollback or during an upgrade).
func TestGatedRecordIsNotPartOfTheStateHash(t *testing.T) {
	const now = int64(1_700_000_000_000)
	before, after := newHarness(t), newHarness(t)
	for _, h := range []*harness{before, after} {
		h.claim(now, args(scope("a")))
	}
	before.apply(now, func(tx *Txn, n int64, idx uint64) Result { return tx.Claim(args(scope("b")), idx, n) })
	after.apply(now, func(tx *Txn, n int64, idx uint64) Result {
		tx.MarkGated(1 << 0)
		return tx.Claim(args(scope("b")), idx, n)
	})
	require.NotZero(t, after.db.Meta().Gated)
	require.Zero(t, before.db.Meta().Gated)
	require.Equal(t, before.hash(), after.hash())

	// A record that differs still shows.
	after.claim(now, args(scope("c")))
	before.claim(now, args(scope("d")))
	require.NotEqual(t, before.hash(), after.hash())
}

// Releases before December 5, 2026 hashed every key and value, the record of
// applied gated kinds too: StateHashes gives that hash beside state_hash,
// from the same view, so a replica still on such a release is compared with
// an upgraded one (a rolling upgrade's --state-hashes warned that replicas
// holding the same records differed).
func TestStateHashesGiveTheEarlierReleasesHash(t *testing.T) {
	const now = int64(1_700_000_000_000)
	h := newHarness(t)
	h.claim(now, args(scope("a")))
	sum, withGated, applied, err := h.db.StateHashes()
	require.NoError(t, err)
	require.Equal(t, sum, withGated, "no gated kind applied: one hash")
	require.Equal(t, earlierStateHash(t, h.db), withGated)

	h.apply(now, func(tx *Txn, n int64, idx uint64) Result {
		tx.MarkGated(1 << 0)
		return tx.Claim(args(scope("b")), idx, n)
	})
	sum, withGated, applied2, err := h.db.StateHashes()
	require.NoError(t, err)
	require.Greater(t, applied2, applied)
	require.Equal(t, h.hash(), sum)
	require.NotEqual(t, sum, withGated, "the gated record is in withGated alone")
	require.Equal(t, earlierStateHash(t, h.db), withGated, "what a release before December 5 answers for the same state")
}

// earlierStateHash is StateHash as releases before December 5, 2026
// computed it: every key and value.
func earlierStateHash(t *testing.T, db *DB) string {
	t.Helper()
	it, err := db.pdb.NewIter(nil)
	require.NoError(t, err)
	defer it.Close()
	h := sha256.New()
	var hdr [binary.MaxVarintLen64]byte
	for ok := it.First(); ok; ok = it.Next() {
		h.Write(hdr[:binary.PutUvarint(hdr[:], uint64(len(it.Key())))])
		h.Write(it.Key())
		v, err := it.ValueAndErr()
		require.NoError(t, err)
		h.Write(hdr[:binary.PutUvarint(hdr[:], uint64(len(v)))])
		h.Write(v)
	}
	require.NoError(t, it.Error())
	return hex.EncodeToString(h.Sum(nil))
}
