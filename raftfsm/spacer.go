package raftfsm

import (
	"sync"
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

// hostSpacer lets an action through once per interval for each host, up
// to max hosts an interval: a flood from one address is one line a
// minute, and does not hide the first line of another (a member refused
// for its certificate while a scanner hits the port).
type hostSpacer struct {
	mu    sync.Mutex
	start int64 // mono.Now() of the interval's start
	hosts map[string]struct{}
}

// allow reports whether host has not been let through in this interval,
// and fewer than max hosts have, and if so counts it.
func (h *hostSpacer) allow(host string, d time.Duration, max int) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.hosts == nil || mono.Since(h.start) >= d {
		h.start, h.hosts = mono.Now(), map[string]struct{}{}
	}
	if _, seen := h.hosts[host]; seen || len(h.hosts) >= max {
		return false
	}
	h.hosts[host] = struct{}{}
	return true
}
