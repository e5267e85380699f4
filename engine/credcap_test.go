package engine

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// bruteCount is the principals under any of prefixes as the q/ keys say.
func bruteCount(t *testing.T, db *DB, prefixes ...string) int64 {
	t.Helper()
	var n int64
	for _, k := range rawKeys(t, db, totalQuotaRange[0], totalQuotaRange[1]) {
		p, _, ok := readString(k[len(totalQuotaRange[0]):])
		require.True(t, ok)
		if underAny(p, prefixes) {
			n++
		}
	}
	return n
}

func capped(principal, key string, max int64, prefixes ...string) ClaimArgs {
	return with(args(Scope{Principal: principal, Endpoint: "POST /e", Key: key}), func(a *ClaimArgs) {
		a.CredentialPrefixes, a.CredentialMaxPrincipals = prefixes, max
	})
}

// A credential's cap refuses its new principals once its prefixes hold
// keys of that many, and nothing else: another credential's principals,
// a principal that already holds keys, a principal outside the prefixes.
func TestCredentialPrincipalCap(t *testing.T) {
	h := newHarness(t)
	now := t0
	claim := func(a ClaimArgs) Result { now++; return h.claim(now, a) }
	require.Equal(t, OutcomeClaimed, claim(capped("cus_1", "k", 2, "cus_")).Outcome)
	require.Equal(t, OutcomeClaimed, claim(capped("cus_10", "k", 2, "cus_")).Outcome)
	before := h.hash()
	refused := claim(capped("cus_3", "k", 2, "cus_"))
	require.Equal(t, OutcomePrincipalLimit, refused.Outcome)
	require.True(t, refused.ByCredential)
	require.Nil(t, refused.Record)
	require.NotEqual(t, before, h.hash()) // the applied index and time only

	// Another tenant still creates principals; a held principal adds keys;
	// a name outside the prefixes (an exact pattern) is not counted.
	require.Equal(t, OutcomeClaimed, claim(capped("acme_1", "k", 1, "acme_")).Outcome)
	require.Equal(t, OutcomeClaimed, claim(capped("cus_1", "k2", 2, "cus_")).Outcome)
	require.Equal(t, OutcomeClaimed, claim(capped("alice", "k", 2, "cus_")).Outcome)
	// The cluster's bound still answers as itself.
	r := claim(with(capped("cus_4", "k", 2, "cus_"), func(a *ClaimArgs) { a.MaxPrincipals = 4 }))
	require.Equal(t, OutcomePrincipalLimit, r.Outcome)
	require.False(t, r.ByCredential)

	// Overlapping prefixes count a principal once; "" is every principal.
	require.Equal(t, OutcomeClaimed, claim(capped("cus_5", "k", 3, "cus_", "cus_1", "cus_")).Outcome)
	require.Equal(t, OutcomePrincipalLimit, claim(capped("cus_6", "k", 3, "cus_1", "cus_")).Outcome)
	require.Equal(t, OutcomePrincipalLimit, claim(capped("x", "k", 5, "")).Outcome)
	require.Equal(t, OutcomeClaimed, claim(capped("x", "k", 6, "")).Outcome)

	// A principal whose last key goes frees its place.
	require.Equal(t, OutcomeDeleted, h.del(now+1, Scope{Principal: "cus_10", Endpoint: "POST /e", Key: "k"}).Outcome)
	now++
	require.Equal(t, OutcomeClaimed, claim(capped("cus_6", "k", 3, "cus_")).Outcome)
	require.Equal(t, OutcomePrincipalLimit, claim(capped("cus_7", "k", 3, "cus_")).Outcome)

	for _, p := range []string{"cus_", "cus_1", "acme_", "a", "", "zz"} {
		n, err := h.db.PrefixPrincipals(p)
		require.NoError(t, err)
		require.Equal(t, bruteCount(t, h.db, p), n, "prefix %q", p)
	}
	h.db.mu.RLock()
	for p, n := range h.db.prefixes {
		require.Equal(t, bruteCount(t, h.db, p), n, "kept count of %q", p)
	}
	h.db.mu.RUnlock()

	// Dropping the buckets takes them all away.
	late := now + testRet + 2*int64(testWidth)
	buckets, err := h.db.ExpiredBuckets(late, 100)
	require.NoError(t, err)
	for _, b := range buckets {
		require.Equal(t, OutcomeDropped, h.drop(late, b).Outcome)
	}
	require.Zero(t, h.db.prefixes["cus_"])
	require.Equal(t, OutcomeClaimed, h.claim(late+1, capped("cus_9", "k", 1, "cus_")).Outcome)
}

// Counts of principals of many lengths, some far longer than 127 bytes
// (two-byte length headers), agree with the q/ keys.
func TestCountPrefixAcrossLengths(t *testing.T) {
	h := newHarness(t)
	names := []string{"c", "cu", "cus", "cus_1", "cus_12", "cut", "d", "cus_" + strings.Repeat("x", 200),
		"cus_" + strings.Repeat("y", 127), "cus" + strings.Repeat("z", 124), strings.Repeat("c", 300), "b" + strings.Repeat("c", 127)}
	for i, p := range names {
		h.claim(t0+int64(i), args(Scope{Principal: p, Endpoint: "e", Key: "k"}))
	}
	for _, p := range []string{"", "c", "cu", "cus", "cus_", "cus_1", "cut", "ccc", "b", strings.Repeat("c", 129), "e"} {
		n, err := h.db.PrefixPrincipals(p)
		require.NoError(t, err)
		require.Equal(t, bruteCount(t, h.db, p), n, "prefix %q", p)
	}
}

// The counts are the state's: a reopened store and a restored one count
// what the original kept, and decide the same.
func TestCredentialCapSurvivesReopenAndRestore(t *testing.T) {
	dir := t.TempDir()
	db, err := Open(dir, Options{CacheBytes: 1 << 20})
	require.NoError(t, err)
	h := &harness{t: t, db: db}
	for i := range 5 {
		require.Equal(t, OutcomeClaimed, h.claim(t0+int64(i), capped(fmt.Sprint("cus_", i), "k", 5, "cus_")).Outcome)
	}
	require.Equal(t, OutcomePrincipalLimit, h.claim(t0+10, capped("cus_9", "k", 5, "cus_")).Outcome)
	snap, err := db.Snapshot()
	require.NoError(t, err)
	var buf bytes.Buffer
	_, err = snap.WriteTo(&buf)
	require.NoError(t, err)
	snap.Close()
	hash := h.hash()
	require.NoError(t, db.Close())

	h = &harness{t: t, db: mustOpenDir(t, dir), idx: h.idx}
	require.Equal(t, hash, h.hash())
	require.Equal(t, OutcomePrincipalLimit, h.claim(t0+11, capped("cus_9", "k", 5, "cus_")).Outcome, "counted again after a reopen")

	dst := newHarness(t)
	// The restored store kept a count of its own before: it must go.
	dst.claim(t0, capped("cus_a", "k", 5, "cus_"))
	require.EqualValues(t, 1, dst.db.prefixes["cus_"])
	require.NoError(t, dst.db.Restore(bytes.NewReader(buf.Bytes())))
	dst.idx = 100
	require.Equal(t, OutcomePrincipalLimit, dst.claim(t0+11, capped("cus_9", "k", 5, "cus_")).Outcome, "counted again after a restore")
	require.Equal(t, OutcomeClaimed, dst.claim(t0+12, capped("cus_9", "k", 6, "cus_")).Outcome)
	require.EqualValues(t, 6, dst.db.prefixes["cus_"])
}

// A count the leader's peek (or the best-effort check) kept from
// committed state between two commits is moved by the next commit, like
// one the Txn counted itself.
func TestKeptCountFollowsLaterCommits(t *testing.T) {
	h := newHarness(t)
	h.claim(t0, capped("cus_1", "k", 9, "cus_"))
	limited, err := h.db.CredentialLimited(capped("cus_2", "k", 2, "cus_"))
	require.NoError(t, err)
	require.False(t, limited)
	h.db.mu.Lock()
	h.db.prefixes = map[string]int64{}
	h.db.mu.Unlock()
	tx := h.db.Begin()
	tx.EnsureWidth(testWidth)
	n := tx.Advance(t0 + 1)
	require.Equal(t, OutcomeClaimed, tx.Claim(capped("cus_2", "k", 0), 2, n).Outcome)
	// Counted from committed state while the Txn is open (the peek does).
	limited, err = h.db.CredentialLimited(capped("cus_3", "k", 2, "cus_"))
	require.NoError(t, err)
	require.False(t, limited, "committed state holds one")
	require.NoError(t, tx.Commit(2))
	h.idx = 2
	require.EqualValues(t, 2, h.db.prefixes["cus_"])
	limited, err = h.db.CredentialLimited(capped("cus_3", "k", 2, "cus_"))
	require.NoError(t, err)
	require.True(t, limited)
	require.Equal(t, OutcomePrincipalLimit, h.claim(t0+2, capped("cus_3", "k", 2, "cus_")).Outcome)
}

// A cluster whose auth file caps a few hundred tokens, each with its own
// prefix, keeps every prefix's count: past the bound every count is
// forgotten, and each claim of a forgotten prefix counts its principals
// again (under the DB's write lock when the leader peeks).
func TestKeptCountsCoverManyTokens(t *testing.T) {
	h := newHarness(t)
	const tokens = 1000
	for i := range tokens {
		p := fmt.Sprintf("svc%d_", i)
		require.Equal(t, OutcomeClaimed, h.claim(t0+int64(i), capped(p+"1", "k", 10, p)).Outcome)
	}
	h.db.mu.RLock()
	kept := len(h.db.prefixes)
	h.db.mu.RUnlock()
	require.Equal(t, tokens, kept)
}
