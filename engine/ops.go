package engine

import (
	"encoding/binary"
	"fmt"

	"github.com/cockroachdb/pebble/v2"

	"github.com/idem-store/idem/partition"
	"github.com/idem-store/idem/ttl"
)

// Outcome is the result of an operation on a record. Losing a claim is an
// outcome, not an error.
type Outcome uint8

// Outcomes.
const (
	OutcomeClaimed Outcome = iota + 1
	OutcomeReplay
	OutcomeInProgress
	OutcomeFingerprintMismatch
	OutcomeQuotaExceeded
	OutcomeCompleted
	OutcomeAlreadyCompleted
	OutcomeTokenMismatch
	OutcomeNotFound
	OutcomeReleased
	OutcomeExtended
	OutcomeDeleted
	OutcomeDropped
	OutcomeDropRefused
	OutcomePrincipalLimit // a claim that would add a principal beyond ClaimArgs.MaxPrincipals
)

var outcomeNames = [...]string{"", "claimed", "replay", "in_progress", "fingerprint_mismatch",
	"quota_exceeded", "completed", "already_completed", "token_mismatch", "not_found",
	"released", "extended", "deleted", "dropped", "drop_refused", "principal_limit"}

func (o Outcome) String() string {
	if int(o) < len(outcomeNames) {
		return outcomeNames[o]
	}
	return fmt.Sprintf("outcome(%d)", o)
}

// Result is what an operation decided. Record is the record after the
// operation (or the conflicting record for a losing claim).
type Result struct {
	Outcome  Outcome
	Record   *Record
	Takeover bool  // a claim took over an in-progress record whose lease ran out
	NowMs    int64 // cluster time the decision was made at
	Dropped  int64 // records removed by a bucket drop
	Bytes    int64 // bytes removed by a bucket drop
	// ByCredential says an OutcomePrincipalLimit is the claiming
	// credential's cap (ClaimArgs.CredentialMaxPrincipals), not the
	// cluster's bound.
	ByCredential bool
}

// ClaimArgs are the inputs of a claim. Everything that changes the decision
// is here, so Apply needs no local configuration.
type ClaimArgs struct {
	Scope          Scope
	PrincipalScope bool
	Fingerprint    string
	ClaimID        string
	CorrelationID  string
	LeaseMs        int64
	RetentionMs    int64
	MaxKeys        int64 // live keys per principal; 0 = unlimited
	// MaxPrincipals bounds the principals holding stored keys, cluster
	// wide; 0 = unlimited. It travels in the command (like MaxKeys) so
	// every replica decides with the leader's value, never its own flag.
	MaxPrincipals int64
	// CredentialPrefixes and CredentialMaxPrincipals are the cap of the
	// credential that made the claim (credcap.go): a principal under one
	// of the prefixes that holds no key is refused while the principals
	// under them holding keys number CredentialMaxPrincipals or more.
	// 0 = no cap. They travel in the command as MaxPrincipals does.
	CredentialPrefixes      []string
	CredentialMaxPrincipals int64
}

// TokenArgs address the current attempt of a record.
type TokenArgs struct {
	Scope          Scope
	PrincipalScope bool
	Token          uint64
}

// Claim is the compare-and-insert: it creates the record when there is no
// live one, or decides what the caller gets instead. token is the fencing
// token of a new attempt (the raft index of the command).
func (t *Txn) Claim(a ClaimArgs, token uint64, nowMs int64) Result {
	// The command's retention decides, as in every release before the
	// cluster's retention: the leader stamps the cluster's into it
	// (raftfsm's Node.Claim, Meta.ClaimRetention), so an entry applies the
	// same on a replica of any version, and a replay after an upgrade
	// gives the records the expiry they were acknowledged with.
	//
	// The first claim of a new cluster pins the cluster's retention
	// (Meta.RetentionMs). A state that an older release started (it holds
	// MaxRetentionMs, which every release keeps, but no pin) is pinned only
	// by OpSetRetention, which waits for every member to run this release:
	// whether such a replica has applied a claim since its own upgrade is
	// no part of the log, so pinning there gave replicas different pins.
	if t.meta.RetentionMs == 0 && t.meta.MaxRetentionMs == 0 && a.RetentionMs > 0 {
		t.meta.RetentionMs = a.RetentionMs
	}
	if a.RetentionMs > t.meta.MaxRetentionMs {
		t.meta.MaxRetentionMs = a.RetentionMs
	}
	scope := AppendScope(nil, a.Scope, t.PinScope(a.PrincipalScope))
	res := Result{NowMs: nowMs}
	f, ok := probe(t.b, t.d.filter, t.meta, scope, nowMs)
	if !ok || !ttl.Live(f.rec.ExpiresMs, nowMs) {
		keys := t.liveKeys(a.Scope.Principal)
		if a.MaxKeys > 0 && keys >= a.MaxKeys {
			res.Outcome = OutcomeQuotaExceeded
			return res
		}
		// Only a principal with no stored key is a new one (principals.go).
		if a.MaxPrincipals > 0 && keys == 0 && t.principals.live >= a.MaxPrincipals {
			res.Outcome = OutcomePrincipalLimit
			return res
		}
		if keys == 0 && t.credentialLimited(&a) {
			res.Outcome, res.ByCredential = OutcomePrincipalLimit, true
			return res
		}
		r := &Record{
			Scope: a.Scope, State: StateInProgress, Fingerprint: a.Fingerprint,
			Attempt: 1, Token: token, ClaimID: a.ClaimID, CorrelationID: a.CorrelationID,
			CreatedMs: nowMs, ExpiresMs: nowMs + a.RetentionMs,
		}
		r.LeaseMs = leaseUntil(nowMs, a.LeaseMs, r.ExpiresMs)
		b := partition.Of(r.ExpiresMs, t.meta.Width)
		// An expired record of this scope may still sit in b (the probe
		// found the newest one, and b is never older than it): replace it
		// rather than count it twice or leave its lease entry behind.
		var stale *Record
		staleSize := 0
		if ok && f.bucket == b {
			stale, staleSize = f.rec, f.size
		}
		t.put(b, scope, r, stale, staleSize)
		if stale == nil {
			t.addQuota(b, a.Scope.Principal, 1)
		}
		res.Outcome, res.Record = OutcomeClaimed, r
		return res
	}
	old := f.rec
	res.Record = old
	switch {
	case old.Fingerprint != a.Fingerprint:
		res.Outcome = OutcomeFingerprintMismatch
		return res
	case old.State == StateCompleted:
		res.Outcome = OutcomeReplay
		return res
	case old.State == StateInProgress && ttl.LeaseHeld(old.LeaseMs, nowMs):
		if a.ClaimID != "" && a.ClaimID == old.ClaimID {
			res.Outcome = OutcomeClaimed // the same attempt asked again
			return res
		}
		res.Outcome = OutcomeInProgress
		return res
	}
	// failed, or in progress with a lease that ran out: a new attempt.
	r := *old
	res.Takeover = old.State == StateInProgress
	r.State = StateInProgress
	r.Attempt++
	r.Token = token
	r.ClaimID = a.ClaimID
	if a.CorrelationID != "" {
		r.CorrelationID = a.CorrelationID
	}
	r.LeaseMs = leaseUntil(nowMs, a.LeaseMs, r.ExpiresMs)
	t.put(f.bucket, scope, &r, old, f.size)
	res.Outcome, res.Record = OutcomeClaimed, &r
	return res
}

// leaseUntil caps a lease at the record's expiry: past it the record is gone.
func leaseUntil(nowMs, leaseMs, expiresMs int64) int64 {
	if l := nowMs + leaseMs; l < expiresMs {
		return l
	}
	return expiresMs
}

// current finds the live record and checks the caller holds its token.
func (t *Txn) current(a TokenArgs, nowMs int64) (found, []byte, Result, bool) {
	scope := AppendScope(nil, a.Scope, t.PinScope(a.PrincipalScope))
	res := Result{NowMs: nowMs}
	f, ok := findLive(t.b, t.d.filter, t.meta, scope, nowMs)
	if !ok {
		res.Outcome = OutcomeNotFound
		return f, scope, res, false
	}
	res.Record = f.rec
	if f.rec.Token != a.Token {
		res.Outcome = OutcomeTokenMismatch
		return f, scope, res, false
	}
	return f, scope, res, true
}

// Complete stores the response of the attempt holding token. It is
// idempotent: the same token with the same response succeeds again.
func (t *Txn) Complete(a TokenArgs, resp *Response, nowMs int64) Result {
	f, scope, res, ok := t.current(a, nowMs)
	if !ok {
		return res
	}
	switch f.rec.State {
	case StateCompleted:
		if f.rec.Response.Equal(resp) {
			res.Outcome = OutcomeCompleted
		} else {
			res.Outcome = OutcomeAlreadyCompleted
		}
		return res
	case StateFailed:
		res.Outcome = OutcomeTokenMismatch // the attempt was released
		return res
	}
	r := *f.rec
	r.State = StateCompleted
	r.Response = resp
	r.CompletedMs = nowMs
	r.LeaseMs = 0
	r.ClaimID = ""
	t.put(f.bucket, scope, &r, f.rec, f.size)
	res.Outcome, res.Record = OutcomeCompleted, &r
	return res
}

// Release ends the attempt holding token without an effect: the record
// becomes failed and the next claim runs again.
func (t *Txn) Release(a TokenArgs, nowMs int64) Result {
	f, scope, res, ok := t.current(a, nowMs)
	if !ok {
		return res
	}
	switch f.rec.State {
	case StateFailed:
		res.Outcome = OutcomeReleased
		return res
	case StateCompleted:
		res.Outcome = OutcomeAlreadyCompleted
		return res
	}
	r := *f.rec
	r.State = StateFailed
	r.LeaseMs = 0
	r.ClaimID = ""
	t.put(f.bucket, scope, &r, f.rec, f.size)
	res.Outcome, res.Record = OutcomeReleased, &r
	return res
}

// Extend moves the lease of the attempt holding token to now+leaseMs
// (never past the record's expiry).
func (t *Txn) Extend(a TokenArgs, leaseMs, nowMs int64) Result {
	f, scope, res, ok := t.current(a, nowMs)
	if !ok {
		return res
	}
	switch f.rec.State {
	case StateCompleted:
		res.Outcome = OutcomeAlreadyCompleted
		return res
	case StateFailed:
		res.Outcome = OutcomeTokenMismatch
		return res
	}
	r := *f.rec
	r.LeaseMs = leaseUntil(nowMs, leaseMs, r.ExpiresMs)
	t.put(f.bucket, scope, &r, f.rec, f.size)
	res.Outcome, res.Record = OutcomeExtended, &r
	return res
}

// Delete evicts the live record of a scope (an operator action).
func (t *Txn) Delete(s Scope, principalScope bool, nowMs int64) Result {
	scope := AppendScope(nil, s, t.PinScope(principalScope))
	res := Result{NowMs: nowMs}
	f, ok := findLive(t.b, t.d.filter, t.meta, scope, nowMs)
	if !ok {
		res.Outcome = OutcomeNotFound
		return res
	}
	t.del(RecordKey(f.bucket, scope))
	if f.rec.State == StateInProgress {
		t.del(leaseKey(f.bucket, f.rec.LeaseMs, scope))
	}
	t.addStats(f.bucket, -1, -int64(f.size), 0)
	t.addQuota(f.bucket, f.rec.Principal, -1)
	res.Outcome, res.Record = OutcomeDeleted, f.rec
	return res
}

// DropBucket removes bucket b with one range deletion, but only when every
// record it can hold has expired at cluster time nowMs. A drop proposed
// early (a skewed leader, a stale proposal) is refused.
func (t *Txn) DropBucket(b partition.Bucket, nowMs int64) Result {
	res := Result{NowMs: nowMs}
	if t.meta.Width == 0 || !b.WhollyExpired(nowMs, t.meta.Width) {
		res.Outcome = OutcomeDropRefused
		return res
	}
	v, _ := t.get(statsKey(b))
	s := decodeStats(v)
	t.subtractQuotas(b)
	start, end := partition.Range(b)
	if err := t.b.DeleteRange(start, end, nil); err != nil {
		panic(fmt.Errorf("engine: delete range: %w", err))
	}
	t.forget(b)
	t.dropped = append(t.dropped, b)
	res.Outcome, res.Dropped, res.Bytes = OutcomeDropped, s.Records, s.Bytes
	return res
}

// Lookup returns the live record of a scope from committed state.
func (d *DB) Lookup(s Scope, principalScope bool, nowMs int64) (*Record, bool) {
	d.mu.RLock()
	defer d.mu.RUnlock()
	if d.closed {
		return nil, false
	}
	if d.meta.Scope != ScopeUnset {
		principalScope = d.meta.Scope == ScopePrincipal // the pinned mode wins
	}
	f, ok := findLive(d.pdb, d.filter, d.meta, AppendScope(nil, s, principalScope), nowMs)
	return f.rec, ok
}

// ExpiredBuckets returns, oldest first, the buckets that hold data and are
// wholly expired at nowMs: what the leader's sweeper proposes to drop.
func (d *DB) ExpiredBuckets(nowMs int64, max int) ([]partition.Bucket, error) {
	m := d.Meta()
	if m.Width == 0 {
		return nil, nil
	}
	var out []partition.Bucket
	err := d.eachBucket(func(it *pebble.Iterator, b partition.Bucket) bool {
		if !b.WhollyExpired(nowMs, m.Width) || len(out) >= max {
			return false
		}
		out = append(out, b)
		return true
	})
	return out, err
}

// eachBucket calls fn for every bucket that has at least one key, in order,
// seeking from bucket to bucket rather than scanning keys.
func (d *DB) eachBucket(fn func(it *pebble.Iterator, b partition.Bucket) bool) error {
	if !d.use() {
		return ErrClosed
	}
	defer d.users.Done()
	lo, hi := partition.AllRange()
	it, err := d.pdb.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: hi})
	if err != nil {
		return fmt.Errorf("engine: iter: %w", err)
	}
	defer it.Close()
	for ok := it.First(); ok; {
		b, _, good := partition.Parse(it.Key())
		if !good {
			return fmt.Errorf("%w: key %s", ErrCorrupt, keyForError(it.Key()))
		}
		if !fn(it, b) {
			break
		}
		_, next := partition.Range(b)
		ok = it.SeekGE(next)
	}
	return it.Error()
}

// subtractQuotas removes bucket b's per-principal key counts from the
// principals' totals before the bucket goes: one update per principal with
// keys in b.
func (t *Txn) subtractQuotas(b partition.Bucket) {
	lo := bucketKey(nil, b, kindQuota)
	hi := bucketKey(nil, b, kindQuota+1)
	t.flush() // the iterator reads the batch
	it, err := t.b.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: hi})
	if err != nil {
		panic(fmt.Errorf("engine: quota iter: %w", err))
	}
	type count struct {
		principal string
		n         int64
	}
	var counts []count
	for ok := it.First(); ok; ok = it.Next() {
		p, _, good := readString(it.Key()[len(lo):])
		v, verr := it.ValueAndErr()
		if !good || verr != nil || len(v) != 8 {
			// The key holds a principal: named as every corrupt key is.
			panic(fmt.Errorf("%w: quota key %s or its value (%d bytes)", ErrCorrupt, keyForError(it.Key()), len(v)))
		}
		counts = append(counts, count{p, int64(binary.BigEndian.Uint64(v))})
	}
	if err := it.Close(); err != nil {
		panic(fmt.Errorf("engine: quota iter: %w", err))
	}
	for _, c := range counts {
		t.addTotal(c.principal, -c.n)
	}
}
