// Package mono is a monotonic clock read as an int64, for the times that
// are kept in atomics (when an action was last let through, when a call
// began). Stored as Unix nanoseconds, such times were wall-clock readings:
// a wall clock stepped back by D (an NTP correction, an operator's date)
// made every "has d passed since then?" answer no for D more, so a leader
// without the sealing key stopped trying to hand leadership over, idle
// ticks stopped and rate-limited warnings went silent, for as long as the
// step. Go's monotonic reading, which time.Since uses, does not step.
package mono

import (
	"sync/atomic"
	"time"
)

var start = time.Now()

// Now is the nanoseconds since the process started, plus one: never 0, so
// that 0 can mean "never".
func Now() int64 { return int64(time.Since(start)) + 1 }

// Since is the time since t, a value of Now (0 counts as long ago).
func Since(t int64) time.Duration {
	if t == 0 {
		return time.Duration(1<<63 - 1)
	}
	return time.Duration(Now() - t)
}

// Spacer lets an action through at most once per interval, whichever
// goroutine asks: a log line that would otherwise repeat on every request,
// an attempt that need not be retried at once. The zero value lets the
// first action through.
type Spacer struct {
	last atomic.Int64 // Now() of the last action let through; 0: none yet
}

// Allow reports whether d has passed since the last action let through,
// and if so counts this one as the last.
func (s *Spacer) Allow(d time.Duration) bool {
	last := s.last.Load()
	return Since(last) >= d && s.last.CompareAndSwap(last, Now())
}

// Reset lets the next action through at once.
func (s *Spacer) Reset() { s.last.Store(0) }
