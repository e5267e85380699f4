package api

import (
	"sync"
	"time"

	"github.com/idem-store/idem/internal/mono"
)

// logBudget lets at most per lines of one kind through in each window;
// the lines held back beyond that are counted, and the next line let
// through says how many (take's held). A line a client's request makes
// (a release's reason) is written as often as the client asks: one app
// token releasing an attempt again and again, 256 ops a batch, wrote
// 25,000 lines (56 MB) in 5 s to a node's log (a protocol walk).
type logBudget struct {
	mu    sync.Mutex
	start int64 // mono.Now when the current window began
	n     int   // lines let through in it
	held  int64 // lines held back since the last one let through
}

// take reports whether a line may be written now, and if so how many
// were held back before it.
func (b *logBudget) take(per int, window time.Duration) (held int64, ok bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := mono.Now()
	if b.start == 0 || time.Duration(now-b.start) >= window {
		b.start, b.n = now, 0
	}
	if b.n >= per {
		b.held++
		return 0, false
	}
	b.n++
	held, b.held = b.held, 0
	return held, true
}

// line is take for a line of args: ok when it may be written, its args
// then carrying key with the count of lines held back before it, if any.
func (b *logBudget) line(per int, window time.Duration, key string, args ...any) ([]any, bool) {
	held, ok := b.take(per, window)
	if ok && held > 0 {
		args = append(args, key, held)
	}
	return args, ok
}
