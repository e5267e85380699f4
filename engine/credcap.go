package engine

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/cockroachdb/pebble/v2"
)

// Per-credential principal caps. A claim may carry the principal prefixes
// of the credential that made it and the most principals those prefixes
// may hold keys for (ClaimArgs.CredentialPrefixes, CredentialMaxPrincipals):
// without it, one credential with a prefix pattern could create principals
// until the cluster's bound (MaxPrincipals) refuses every tenant.
//
// The count of live principals under a prefix is, like the cluster's count
// (principals.go), a pure function of the q/<principal> keys and is not
// stored: it is counted the first time a prefix is asked for and then moved
// by every commit in which a principal appears or goes (addTotal). Replicas
// at the same applied index agree on it whenever they counted it, and the
// on-disk format and state hash are unchanged. Restore and bulk load forget
// every count.

// maxPrefixCounts bounds the prefixes whose counts the DB keeps: past it
// they are forgotten and counted again when next asked for. It is well
// above the capped prefixes of any auth file (a few bytes and a count
// each): at 256, an auth file capping 300 services forgot every count
// over and over, and each claim counted its prefix's principals again.
var maxPrefixCounts = 1 << 14 // a variable for the test that overflows it

// principalMove is a principal that appeared (+1) or went (-1) in a Txn.
type principalMove struct {
	principal string
	delta     int64
}

// minimalPrefixes drops every prefix another one of ps covers (and
// repeats), so the rest match disjoint sets of principals and their counts
// add up to the count of principals matching any of them.
func minimalPrefixes(ps []string) []string {
	if len(ps) <= 1 {
		return ps
	}
	s := slices.Clone(ps)
	slices.SortFunc(s, func(a, b string) int { return len(a) - len(b) })
	out := s[:0]
	for _, p := range s {
		covered := false
		for _, q := range out {
			if strings.HasPrefix(p, q) {
				covered = true
				break
			}
		}
		if !covered {
			out = append(out, p)
		}
	}
	return out
}

func underAny(principal string, ps []string) bool {
	for _, p := range ps {
		if strings.HasPrefix(principal, p) {
			return true
		}
	}
	return false
}

// countPrefix counts the q/<principal> keys of g whose principal starts
// with prefix. Keys are ordered by the principal's length first (a uvarint,
// prefix-free), so it visits each length present once: a seek to the
// length's prefix range, and a seek past the length.
func countPrefix(newIter func(*pebble.IterOptions) (*pebble.Iterator, error), prefix string) (int64, error) {
	lo, hi := totalQuotaRange[0], totalQuotaRange[1]
	it, err := newIter(&pebble.IterOptions{LowerBound: lo, UpperBound: hi})
	if err != nil {
		return 0, fmt.Errorf("engine: count principals of %q: %w", prefix, err)
	}
	var n int64
	ok := it.First()
	for ok {
		k := it.Key()
		l, w := binary.Uvarint(k[len(lo):])
		if w <= 0 {
			err = fmt.Errorf("%w: quota key %s", ErrCorrupt, keyForError(k))
			break
		}
		head := append([]byte(nil), k[:len(lo)+w]...) // q/<length>
		if l >= uint64(len(prefix)) {
			start := append(slices.Clone(head), prefix...)
			for ok = it.SeekGE(start); ok && bytes.HasPrefix(it.Key(), start); ok = it.Next() {
				n++
			}
		}
		// Past every key of this length: the uvarint's last byte is under
		// 0x80, so adding one to it is the next length's first key.
		head[len(head)-1]++
		ok = it.SeekGE(head)
	}
	if err = errors.Join(err, it.Error(), it.Close()); err != nil {
		return 0, fmt.Errorf("engine: count principals of %q: %w", prefix, err)
	}
	return n, nil
}

// prefixLive is the count of live principals under prefix, as this Txn
// sees them.
func (t *Txn) prefixLive(prefix string) int64 {
	if prefix == "" {
		return t.principals.live
	}
	if n, ok := t.prefixes[prefix]; ok {
		return n
	}
	if t.prefixes == nil {
		t.prefixes = map[string]int64{}
	}
	t.d.mu.RLock()
	n, ok := t.d.prefixes[prefix]
	t.d.mu.RUnlock()
	if ok {
		// Committed before this Txn: add what the Txn moved since.
		for _, m := range t.moves {
			if strings.HasPrefix(m.principal, prefix) {
				n += m.delta
			}
		}
	} else {
		t.flush() // the iterator reads the batch
		var err error
		if n, err = countPrefix(t.b.NewIter, prefix); err != nil {
			panic(err)
		}
	}
	t.prefixes[prefix] = n
	return n
}

// movePrincipal records that principal appeared (+1) or went (-1).
func (t *Txn) movePrincipal(principal string, delta int64) {
	t.moves = append(t.moves, principalMove{principal, delta})
	for p := range t.prefixes {
		if strings.HasPrefix(principal, p) {
			t.prefixes[p] += delta
		}
	}
}

// credentialLimited reports whether a's credential cap refuses a new
// principal (one holding no key): it is under the credential's prefixes,
// and the live principals under them number at least the cap.
func (t *Txn) credentialLimited(a *ClaimArgs) bool {
	if a.CredentialMaxPrincipals <= 0 {
		return false
	}
	ps := minimalPrefixes(a.CredentialPrefixes)
	if !underAny(a.Scope.Principal, ps) {
		return false
	}
	var n int64
	for _, p := range ps {
		n += t.prefixLive(p)
	}
	return n >= a.CredentialMaxPrincipals
}

// commitPrefixes hands the Txn's counts to the DB. The caller holds d.mu
// (write). A count the DB holds that the Txn never read was committed
// before the Txn: the Txn's moves bring it up to date.
func (t *Txn) commitPrefixes() {
	d := t.d
	if len(t.moves) > 0 {
		for p := range d.prefixes {
			if _, ok := t.prefixes[p]; ok {
				continue
			}
			for _, m := range t.moves {
				if strings.HasPrefix(m.principal, p) {
					d.prefixes[p] += m.delta
				}
			}
		}
	}
	if len(t.prefixes) == 0 {
		return
	}
	if d.prefixes == nil || len(d.prefixes)+len(t.prefixes) > maxPrefixCounts {
		d.prefixes = make(map[string]int64, len(t.prefixes))
	}
	for p, n := range t.prefixes {
		d.prefixes[p] = n
	}
}

// cachedCredentialLive is credentialLimited's count from committed state
// when every prefix's count is known (callers hold d.mu); known is false
// otherwise. under says whether the principal is under the prefixes.
func (d *DB) cachedCredentialLive(a *ClaimArgs) (n int64, under, known bool) {
	ps := minimalPrefixes(a.CredentialPrefixes)
	if !underAny(a.Scope.Principal, ps) {
		return 0, false, true
	}
	for _, p := range ps {
		if p == "" {
			n += d.principals.live
			continue
		}
		c, ok := d.prefixes[p]
		if !ok {
			return 0, true, false
		}
		n += c
	}
	return n, true, true
}

// CredentialLimited reports whether, as of the last commit, a claim of a
// would be refused by its credential's cap (CredentialMaxPrincipals): its
// principal holds no key, is under the credential's prefixes, and those
// already hold keys of as many principals as the cap. It counts a prefix
// not counted yet. This is the leader's check while the cluster cannot
// carry the cap in its commands (an older member): best effort, since
// claims already proposed are not seen. pending are the principals of
// claims the caller let through and has not proposed yet (a batch's
// earlier ops): each under the prefixes and holding no key counts once.
func (d *DB) CredentialLimited(a ClaimArgs, pending ...string) (bool, error) {
	if a.CredentialMaxPrincipals <= 0 {
		return false, nil
	}
	if err := d.countPrefixes(&a); err != nil {
		return false, err
	}
	d.mu.RLock()
	defer d.mu.RUnlock()
	if d.closed {
		return false, ErrClosed
	}
	n, under, known := d.cachedCredentialLive(&a)
	if !under || !known || storedKeys(d.pdb, a.Scope.Principal) > 0 {
		return false, nil // known is false only after a restore meanwhile
	}
	if len(pending) > 0 {
		ps := minimalPrefixes(a.CredentialPrefixes)
		seen := map[string]bool{a.Scope.Principal: true}
		for _, p := range pending {
			if seen[p] || !underAny(p, ps) {
				continue
			}
			seen[p] = true
			if storedKeys(d.pdb, p) == 0 {
				n++
			}
		}
	}
	return n >= a.CredentialMaxPrincipals, nil
}

// countPrefixes counts, from committed state, the prefixes of a's
// credential whose counts the DB does not keep yet, and keeps them. It
// holds d.mu while it counts (commits wait): once per prefix after open,
// restore or load, or after the kept counts overflowed.
func (d *DB) countPrefixes(a *ClaimArgs) error {
	if a.CredentialMaxPrincipals <= 0 {
		return nil
	}
	d.mu.RLock()
	_, under, known := d.cachedCredentialLive(a)
	d.mu.RUnlock()
	if !under || known {
		return nil
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return ErrClosed
	}
	for _, p := range minimalPrefixes(a.CredentialPrefixes) {
		if _, ok := d.prefixes[p]; ok || p == "" {
			continue
		}
		c, err := countPrefix(d.pdb.NewIter, p)
		if err != nil {
			return err
		}
		if d.prefixes == nil || len(d.prefixes) >= maxPrefixCounts {
			d.prefixes = map[string]int64{}
		}
		d.prefixes[p] = c
	}
	return nil
}

// PrefixPrincipals counts, from committed state, the principals holding
// keys whose name starts with prefix (for tests and operators; it does
// not keep the count).
func (d *DB) PrefixPrincipals(prefix string) (int64, error) {
	d.mu.RLock()
	defer d.mu.RUnlock()
	if d.closed {
		return 0, ErrClosed
	}
	return countPrefix(d.pdb.NewIter, prefix)
}
