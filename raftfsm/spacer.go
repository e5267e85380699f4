package raftfsm

import (
	"sync"
	"time"

	"github.com/idem-store/idem/internal/mono"
)

// keySpacer lets an action through once per interval for each key (the
// refused handshakes': a remote host and the reason), up to max keys an
// interval: a flood from one address is one line a minute, and does not
// hide the first line of another (a member refused for its certificate
// while a scanner hits the port).
type keySpacer struct {
	mu    sync.Mutex
	start int64 // mono.Now() of the interval's start
	keys  map[string]struct{}
}

// allow reports whether key has not been let through in this interval,
// and fewer than max keys have, and if so counts it.
func (h *keySpacer) allow(key string, d time.Duration, max int) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.keys == nil || mono.Since(h.start) >= d {
		h.start, h.keys = mono.Now(), map[string]struct{}{}
	}
	if _, seen := h.keys[key]; seen || len(h.keys) >= max {
		return false
	}
	h.keys[key] = struct{}{}
	return true
}
