// Package ttl owns the time rules of idem: how long a record is kept, when a
// lease or a record has run out, how long a loser should wait, and cluster
// time — the clock every node agrees on, which never jumps with one node's
// wall clock (docs/DESIGN.md invariant 3).
//
// The decision functions are pure and take time as an argument.
package ttl

import (
	"errors"
	"fmt"
	"time"
)

// MinRetention is the shortest retention a production node accepts.
const MinRetention = time.Minute

// ErrShortRetention is returned for a retention under MinRetention when
// short retentions are not allowed.
var ErrShortRetention = errors.New("ttl: retention below 1m")

// ValidateRetention checks a retention setting. Retentions below MinRetention
// are only for tests and demos and must be allowed explicitly.
func ValidateRetention(r time.Duration, allowShort bool) error {
	if r <= 0 {
		return fmt.Errorf("ttl: retention must be positive (got %s)", r)
	}
	if r < MinRetention && !allowShort {
		return fmt.Errorf("%w: %s would reopen the duplicate window for retries after %s; pass --allow-short-retention for tests", ErrShortRetention, r, r)
	}
	return nil
}

// MaxSpanBuckets bounds retention / bucket width. A claim probes every
// bucket a live record could sit in, so the span is paid on every claim,
// and the state remembers the longest retention ever used: a typo such as
// 20000h would slow every claim for as long as the cluster lives.
const MaxSpanBuckets = 10_000

// ValidateSpan checks that a retention spans at most MaxSpanBuckets
// buckets of the given width.
func ValidateSpan(retention, width time.Duration) error {
	if width <= 0 {
		return nil
	}
	// n whole widths and a part of one more is over the limit too (20001h
	// at 2h is 10,000.5 widths); comparing with MaxSpanBuckets*width could
	// overflow for a wide bucket.
	if n := retention / width; n > MaxSpanBuckets || (n == MaxSpanBuckets && retention%width != 0) {
		return fmt.Errorf("ttl: retention %s spans more than %d buckets of width %s, over the %d a claim may probe; choose a shorter retention, or a wider --bucket-width (fixed when a data dir is created)", retention, n, width, MaxSpanBuckets)
	}
	return nil
}

// MaxStep is the most one log entry can move cluster time forward. A
// healthy leader stamps entries at least every tick (a second), so honest
// steps are small; a leader whose clock is wrong moves time by at most this
// much per entry instead of by its whole error at once. Leaders stamp with
// cluster time (Clock), not their wall clocks, so time during which the
// whole cluster was down is never caught up: windows grow by the outage.
// The cap errs on the safe side for the entry it caps, not for the ones
// after it: a leader stamping past it moves cluster time by MaxStep an
// entry, and records created by the first of them age by that within
// milliseconds, so a leader keeps its stamps within RewindAfter of the
// applied time: when it takes the lead (Clock.FollowLog), and at every
// stamp, for a leader that stamped nothing for a while (Clock.StampMs).
const MaxStep = 10 * time.Second

// Step returns the cluster time after an entry stamped proposedMs is
// applied at cluster time curMs: never back, and never more than MaxStep
// forward. The first time of a new log (curMs 0) is taken as it is.
// Deterministic: it reads no clock.
func Step(curMs, proposedMs int64) int64 {
	switch {
	case proposedMs <= curMs:
		return curMs
	case curMs > 0 && proposedMs-curMs > MaxStep.Milliseconds():
		return curMs + MaxStep.Milliseconds()
	}
	return proposedMs
}

// Live reports whether a record expiring at expiresMs is still live at nowMs.
// A record is live up to, not including, its expires_at.
func Live(expiresMs, nowMs int64) bool { return nowMs < expiresMs }

// LeaseHeld reports whether a lease that runs out at leaseMs is still held.
func LeaseHeld(leaseMs, nowMs int64) bool { return nowMs < leaseMs }

// RetryAfter is the whole number of seconds (at least 1) a caller should
// wait until untilMs, for a Retry-After header.
func RetryAfter(untilMs, nowMs int64) int {
	d := untilMs - nowMs
	if d <= 0 {
		return 1
	}
	s := int((d + 999) / 1000)
	if s < 1 {
		s = 1
	}
	return s
}

// ExpiresAt is the expiry of a record created at createdMs with retention.
func ExpiresAt(createdMs int64, retention time.Duration) int64 {
	return createdMs + retention.Milliseconds()
}

// Millis converts a time to Unix milliseconds.
func Millis(t time.Time) int64 { return t.UnixMilli() }

// Time converts Unix milliseconds to a UTC time.
func Time(ms int64) time.Time { return time.UnixMilli(ms).UTC() }
