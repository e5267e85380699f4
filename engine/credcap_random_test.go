package engine

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idem-store/idem/partition"
)

// The kept prefix counts stay equal to a recount through many Txns of
// several ops each (claims, deletes, bucket drops), more prefixes than
// the DB keeps, and counts taken from committed state between and during
// Txns (the leader's peek and best-effort check).
func TestKeptPrefixCountsMatchARecount(t *testing.T) {
	defer func(n int) { maxPrefixCounts = n }(maxPrefixCounts)
	maxPrefixCounts = 64 // overflowed again and again
	h := newHarness(t)
	rng := rand.New(rand.NewPCG(7, 9))
	prefixes := []string{"", "a"}
	for i := range 300 {
		prefixes = append(prefixes, fmt.Sprintf("a%d", i%40), fmt.Sprintf("a%d_%d", i%40, i))
	}
	principal := func() string { return fmt.Sprintf("a%d_%d%d", rng.IntN(40), rng.IntN(300), rng.IntN(3)) }
	pick := func() []string {
		out := []string{prefixes[rng.IntN(len(prefixes))]}
		if rng.IntN(3) == 0 {
			out = append(out, prefixes[rng.IntN(len(prefixes))])
		}
		return out
	}
	check := func(step int) {
		h.db.mu.RLock()
		kept := make(map[string]int64, len(h.db.prefixes))
		for p, n := range h.db.prefixes {
			kept[p] = n
		}
		h.db.mu.RUnlock()
		for p, n := range kept {
			require.Equal(t, bruteCount(t, h.db, p), n, "step %d: the kept count of %q", step, p)
		}
	}
	now := t0
	var scopes []Scope
	for step := range 400 {
		now += 500
		if step%100 == 99 {
			// Everything claimed so far expires; its buckets go.
			now += 2*testRet + 2*int64(testWidth)
			for b := partition.Of(t0, testWidth); b.End(testWidth) < now; b++ {
				h.drop(now, b)
			}
			scopes = nil
			check(step)
			continue
		}
		h.idx++
		tx := h.db.Begin()
		tx.EnsureWidth(testWidth)
		n := tx.Advance(now)
		for range 1 + rng.IntN(6) {
			if len(scopes) > 0 && rng.IntN(4) == 0 {
				i := rng.IntN(len(scopes))
				tx.Delete(scopes[i], false, n)
				scopes = append(scopes[:i], scopes[i+1:]...)
				continue
			}
			s := Scope{Principal: principal(), Endpoint: "e", Key: fmt.Sprint(rng.IntN(4))}
			a := capped(s.Principal, s.Key, int64(1+rng.IntN(400)), pick()...)
			if tx.Claim(a, h.idx, n).Outcome == OutcomeClaimed {
				scopes = append(scopes, s)
			}
			if rng.IntN(3) == 0 {
				_, err := h.db.CredentialLimited(capped(principal(), "k", 5, pick()...))
				require.NoError(t, err)
			}
		}
		require.NoError(t, tx.Commit(h.idx))
		if rng.IntN(2) == 0 {
			h.db.PeekClaim(capped(principal(), "k", 5, pick()...), now)
		}
		check(step)
	}
}
