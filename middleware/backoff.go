package middleware

import (
	"math/rand/v2"
	"time"
)

// The pauses between the tries of a store call asked again in the
// background (the complete of an answer the store did not take, the
// extends of its lease, a failed extend while the handler runs) grow from
// backoffFloor to backoffCap, each drawn at random. Asked every second
// alike, up to 10,000 answers waiting to be stored sent as many requests a
// second, all in phase, at a store that was already failing.
const (
	backoffFloor = time.Second
	backoffCap   = 10 * time.Second
)

// The pauses between the tries of a store call asked again in the
// foreground, within StoreTimeout (a claim, a complete, a release: retry),
// grow from retryFloor to retryCap, each drawn at random as well. Alike
// (50 ms doubling to 1 s), the callers refused together by a leader
// change asked the new leader together, again and again, in phase.
const (
	retryFloor = 50 * time.Millisecond
	retryCap   = time.Second
)

// backoff is exponential backoff with full jitter above a floor: the n-th
// pause (n from 0) is uniformly random in [floor/2, min(cap,
// floor<<(n+1))), so that calls that failed together do not try again
// together. The floor and cap are backoffFloor and backoffCap (the
// background's) unless set (retry's: retryFloor and retryCap).
type backoff struct {
	n          int
	floor, cap time.Duration
}

func (b *backoff) next() time.Duration {
	floor, ceiling := b.floor, b.cap
	if floor == 0 {
		floor, ceiling = backoffFloor, backoffCap
	}
	if b.n < 8 { // floor<<9 is past any cap: 20 times it at most
		ceiling = min(ceiling, floor<<(b.n+1))
	}
	b.n++
	return jitter(floor/2, ceiling)
}

func (b *backoff) reset() { b.n = 0 }

// jitter is uniformly random in [lo, hi).
func jitter(lo, hi time.Duration) time.Duration {
	if hi <= lo {
		return lo
	}
	return lo + rand.N(hi-lo)
}

// extendPause is the pause before an extend is asked again after one that
// failed: the backoff's, but never past half the time left until held
// (when the lease surely still runs), nor past a tenth of the lease (at
// most backoffFloor) once that is less, so that an extend is tried well
// before the lease runs out whatever the backoff: a store back before
// held is asked in time. Past held, within the lease's last tenth by this
// clock (held keeps it for the clocks' rates: the store's may still run
// it), never past half the time left of it either: backed off alone, the
// first try past held came up to ten seconds later, and a store that took
// extends again within that tenth had let the lease run out by then.
// Past the lease's end, the backoff alone: the store's clock may keep the
// lease still (it stands still while the store is down), and the key is
// kept while no retry took it.
func extendPause(b *backoff, lease time.Duration, held time.Time) time.Duration {
	pause := b.next()
	short := min(lease/10, backoffFloor)
	if left := time.Until(held); left > 0 {
		pause = min(pause, max(left/2, jitter(short/2, short)))
	} else if left := time.Until(held.Add(lease / 10)); left > 0 {
		pause = min(pause, max(jitter(left/4, left/2), short/10))
	}
	return pause
}
