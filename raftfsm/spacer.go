package raftfsm

import (
	"sync/atomic"
	"time"
)

// spacer lets an action through at most once per interval, whichever
// goroutine asks: a log line that would otherwise repeat on every request,
// an attempt that need not be retried at once.
type spacer struct {
	last atomic.Int64 // Unix ns of the last action let through
}

// allow reports whether d has passed since the last action let through,
// and if so counts this one as the last.
func (s *spacer) allow(d time.Duration) bool {
	now := time.Now().UnixNano()
	last := s.last.Load()
	return now-last >= int64(d) && s.last.CompareAndSwap(last, now)
}
