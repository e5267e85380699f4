package raftfsm

import (
	"sync/atomic"
	"time"

	"github.com/idem-store/idem/internal/mono"
)

// spacer lets an action through at most once per interval, whichever
// goroutine asks: a log line that would otherwise repeat on every request,
// an attempt that need not be retried at once.
type spacer struct {
	last atomic.Int64 // mono.Now() of the last action let through; 0: none yet
}

// allow reports whether d has passed since the last action let through,
// and if so counts this one as the last.
func (s *spacer) allow(d time.Duration) bool {
	last := s.last.Load()
	return mono.Since(last) >= d && s.last.CompareAndSwap(last, mono.Now())
}
