package engine

import (
	"github.com/idem-store/idem/ttl"
)

// Peeks decide an operation from committed state without a Txn, for the
// leader to answer, without a raft entry, what would change nothing: a
// refusal (quota, principal limit, not found, token mismatch, in progress,
// fingerprint mismatch, already completed) or a repeat that writes nothing
// (a replay, a completed attempt completed again with the same response).
//
// Each peek mirrors its Txn operation (ops.go) read for read and answers
// ok only for the outcomes in which that operation writes nothing; for
// every other outcome it answers !ok and the caller proposes the command,
// so Apply still decides every write. proposedMs is the cluster time the
// leader would stamp on the command; the decision is taken at
// ttl.Step(applied cluster time, proposedMs), the time Apply would use were
// the command the next entry. A peek is only as fresh as the committed
// state: the caller proves it is the leader and has applied its commit
// index before trusting one (raftfsm's read barrier).
//
// A store whose bucket width or scope mode is not fixed yet is never
// peeked: the first command fixes them, and must reach the log.
//
// TestPeeksAgreeWithApply holds each peek to its operation.

// peekState is the committed state a peek reads, under d.mu.
func (d *DB) peekState(proposedMs int64) (Meta, int64, bool) {
	m := d.meta
	if d.closed || m.Width == 0 || m.Scope == ScopeUnset {
		return m, 0, false
	}
	return m, ttl.Step(m.NowMs, proposedMs), true
}

// PeekClaim is Txn.Claim without writing: ok when the claim would change
// nothing.
func (d *DB) PeekClaim(a ClaimArgs, proposedMs int64) (Result, bool) {
	if d.countPrefixes(&a) != nil {
		return Result{}, false
	}
	d.mu.RLock()
	defer d.mu.RUnlock()
	m, now, ok := d.peekState(proposedMs)
	if !ok {
		return Result{}, false
	}
	if a.RetentionMs > m.MaxRetentionMs {
		m.MaxRetentionMs = a.RetentionMs // as Claim widens the span it probes
	}
	scope := AppendScope(nil, a.Scope, m.Scope == ScopePrincipal)
	res := Result{NowMs: now}
	f, found := probe(d.pdb, d.filter, m, scope, now)
	if !found || !ttl.Live(f.rec.ExpiresMs, now) {
		// The principal's count is a Pebble read on every new claim: read
		// it only when some principal may be at its quota or the cluster
		// at its bound (otherwise neither refusal can apply).
		quota := a.MaxKeys > 0 && d.principals.mostKeys >= a.MaxKeys
		bound := a.MaxPrincipals > 0 && d.principals.live >= a.MaxPrincipals
		// The credential's cap, from the kept counts (countPrefixes made
		// them; a restore since forgot them: then Apply decides).
		var capped bool
		if a.CredentialMaxPrincipals > 0 {
			n, under, known := d.cachedCredentialLive(&a)
			if under && !known {
				return Result{}, false
			}
			capped = under && n >= a.CredentialMaxPrincipals
		}
		if !quota && !bound && !capped {
			return Result{}, false // a new record
		}
		keys := storedKeys(d.pdb, a.Scope.Principal)
		switch {
		case a.MaxKeys > 0 && keys >= a.MaxKeys:
			res.Outcome = OutcomeQuotaExceeded
		case a.MaxPrincipals > 0 && keys == 0 && d.principals.live >= a.MaxPrincipals:
			res.Outcome = OutcomePrincipalLimit
		case capped && keys == 0:
			res.Outcome, res.ByCredential = OutcomePrincipalLimit, true
		default:
			return Result{}, false // a new record
		}
		return res, true
	}
	old := f.rec
	res.Record = old
	switch {
	case old.Fingerprint != a.Fingerprint:
		res.Outcome = OutcomeFingerprintMismatch
	case old.State == StateCompleted:
		res.Outcome = OutcomeReplay
	case old.State == StateInProgress && ttl.LeaseHeld(old.LeaseMs, now):
		if a.ClaimID != "" && a.ClaimID == old.ClaimID {
			res.Outcome = OutcomeClaimed // the same attempt asked again
		} else {
			res.Outcome = OutcomeInProgress
		}
	default:
		return Result{}, false // a new attempt
	}
	return res, true
}

// peekCurrent is Txn.current on committed state: the live record and
// whether the caller holds its token. Callers hold d.mu.
func (d *DB) peekCurrent(a TokenArgs, m Meta, now int64) (*Record, Result, bool) {
	res := Result{NowMs: now}
	f, ok := findLive(d.pdb, d.filter, m, AppendScope(nil, a.Scope, m.Scope == ScopePrincipal), now)
	if !ok {
		res.Outcome = OutcomeNotFound
		return nil, res, false
	}
	res.Record = f.rec
	if f.rec.Token != a.Token {
		res.Outcome = OutcomeTokenMismatch
		return nil, res, false
	}
	return f.rec, res, true
}

// PeekComplete is Txn.Complete without writing. resp must be the
// response exactly as the command would carry it.
func (d *DB) PeekComplete(a TokenArgs, resp *Response, proposedMs int64) (Result, bool) {
	d.mu.RLock()
	defer d.mu.RUnlock()
	m, now, ok := d.peekState(proposedMs)
	if !ok {
		return Result{}, false
	}
	rec, res, held := d.peekCurrent(a, m, now)
	if !held {
		return res, true
	}
	switch rec.State {
	case StateCompleted:
		if rec.Response.Equal(resp) {
			res.Outcome = OutcomeCompleted
		} else {
			res.Outcome = OutcomeAlreadyCompleted
		}
	case StateFailed:
		res.Outcome = OutcomeTokenMismatch
	default:
		return Result{}, false // stores the response
	}
	return res, true
}

// PeekRelease is Txn.Release without writing.
func (d *DB) PeekRelease(a TokenArgs, proposedMs int64) (Result, bool) {
	d.mu.RLock()
	defer d.mu.RUnlock()
	m, now, ok := d.peekState(proposedMs)
	if !ok {
		return Result{}, false
	}
	rec, res, held := d.peekCurrent(a, m, now)
	if !held {
		return res, true
	}
	switch rec.State {
	case StateFailed:
		res.Outcome = OutcomeReleased
	case StateCompleted:
		res.Outcome = OutcomeAlreadyCompleted
	default:
		return Result{}, false // marks the attempt failed
	}
	return res, true
}

// PeekExtend is Txn.Extend without writing.
func (d *DB) PeekExtend(a TokenArgs, proposedMs int64) (Result, bool) {
	d.mu.RLock()
	defer d.mu.RUnlock()
	m, now, ok := d.peekState(proposedMs)
	if !ok {
		return Result{}, false
	}
	rec, res, held := d.peekCurrent(a, m, now)
	if !held {
		return res, true
	}
	switch rec.State {
	case StateCompleted:
		res.Outcome = OutcomeAlreadyCompleted
	case StateFailed:
		res.Outcome = OutcomeTokenMismatch
	default:
		return Result{}, false // moves the lease
	}
	return res, true
}

// PeekDelete is Txn.Delete without writing: ok (not found) when there is
// no live record to evict.
func (d *DB) PeekDelete(s Scope, proposedMs int64) (Result, bool) {
	d.mu.RLock()
	defer d.mu.RUnlock()
	m, now, ok := d.peekState(proposedMs)
	if !ok {
		return Result{}, false
	}
	if _, found := findLive(d.pdb, d.filter, m, AppendScope(nil, s, m.Scope == ScopePrincipal), now); found {
		return Result{}, false
	}
	return Result{Outcome: OutcomeNotFound, NowMs: now}, true
}
