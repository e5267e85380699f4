package engine

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/cockroachdb/pebble/v2"
)

// Live principals: a principal is live while it has a total quota counter
// q/<principal>, i.e. at least one stored key (expired keys count until
// their bucket is dropped, as for the per-principal quota). The count
// bounds how many principals one cluster accepts (ClaimArgs.MaxPrincipals):
// without it, one credential spreading keys over fresh principals escapes
// the per-principal quota.
//
// The count is not stored: it is a pure function of the q/ keys, counted
// when the store opens or is restored and moved by every commit, so
// replicas at the same applied index agree on it and the on-disk format
// (and the state hash) is unchanged.

// principalStats is what the engine keeps in memory about principals.
type principalStats struct {
	live int64 // principals with a total quota counter
	// mostKeys bounds from above every principal's total: the most any
	// had at open (or restore, or load) or reached since. It only goes
	// down when counted again; it lets a peek skip reading a principal's
	// count while no principal can be at a quota (see PeekClaim).
	mostKeys int64
}

// totalQuotaRange bounds the q/<principal> keys.
var totalQuotaRange = [2][]byte{[]byte("q/"), []byte("q0")}

// countPrincipals counts the total quota counters. Callers make sure no
// commit runs meanwhile (Open, or Restore under d.mu).
func (d *DB) countPrincipals() (principalStats, error) {
	var st principalStats
	it, err := d.pdb.NewIter(&pebble.IterOptions{LowerBound: totalQuotaRange[0], UpperBound: totalQuotaRange[1]})
	if err != nil {
		return st, fmt.Errorf("engine: count principals: %w", err)
	}
	for ok := it.First(); ok; ok = it.Next() {
		st.live++
		if v, err := it.ValueAndErr(); err == nil && len(v) == 8 {
			st.mostKeys = max(st.mostKeys, int64(binary.BigEndian.Uint64(v)))
		}
	}
	if err := errors.Join(it.Error(), it.Close()); err != nil {
		return principalStats{}, fmt.Errorf("engine: count principals: %w", err)
	}
	return st, nil
}

// loadedPrincipals is the count of a bulk load's totals.
func loadedPrincipals(totals map[string]int64) principalStats {
	st := principalStats{live: int64(len(totals))}
	for _, n := range totals {
		st.mostKeys = max(st.mostKeys, n)
	}
	return st
}

// livePrincipals is the committed count.
func (d *DB) livePrincipals() principalStats {
	d.mu.RLock()
	defer d.mu.RUnlock()
	return d.principals
}

// Principals is how many principals hold stored keys (expired keys count
// until their bucket is dropped), as of the last commit.
func (d *DB) Principals() int64 { return d.livePrincipals().live }

// addTotal moves the principal's total key count by delta, and the count
// of live principals when the total appears or goes.
func (t *Txn) addTotal(principal string, delta int64) {
	k := totalQuotaKey(principal)
	before := t.liveKeys(principal)
	t.addCounter(k, delta)
	after := before + delta
	switch {
	case before <= 0 && after > 0:
		t.principals.live++
		t.movePrincipal(principal, 1)
	case before > 0 && after <= 0:
		t.principals.live--
		t.movePrincipal(principal, -1)
	}
	t.principals.mostKeys = max(t.principals.mostKeys, after)
}

// storedKeys reads a principal's total key count from committed state
// (g is the DB, read under d.mu).
func storedKeys(g getter, principal string) int64 {
	if v, ok := getValue(g, totalQuotaKey(principal)); ok && len(v) == 8 {
		return int64(binary.BigEndian.Uint64(v))
	}
	return 0
}
