package engine

import (
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2"
)

// writeStalls counts Pebble's write stalls: every commit waits while one
// lasts, so a claim's latency jumps by its length. Pebble stalls writes
// when its memtables queued for flushing reach
// MemTableStopWritesThreshold (a flush slower than the writes: a busy or
// full disk) or level 0 holds L0StopWritesThreshold sublevels (compactions
// behind). A stall of stallLogAfter or more is logged with its reason and
// length; every one is counted (idem_store_write_stalls_total).
type writeStalls struct {
	log *slog.Logger

	mu     sync.Mutex
	began  time.Time
	reason string

	count atomic.Int64
	nanos atomic.Int64
}

// stallLogAfter is the shortest stall that is logged: shorter ones are
// counted only, so a disk that keeps up barely does not flood the log.
const stallLogAfter = 100 * time.Millisecond

func (w *writeStalls) listen(l *pebble.EventListener) {
	l.WriteStallBegin = w.begin
	l.WriteStallEnd = w.end
}

func (w *writeStalls) begin(info pebble.WriteStallBeginInfo) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.began, w.reason = time.Now(), info.Reason
	w.count.Add(1)
}

func (w *writeStalls) end() {
	w.mu.Lock()
	took, reason := time.Since(w.began), w.reason
	w.mu.Unlock()
	w.nanos.Add(int64(took))
	if took >= stallLogAfter && w.log != nil {
		w.log.Warn("the store stalled writes: every commit waited", "reason", reason, "took", took.Round(time.Millisecond),
			"stalls", w.count.Load())
	}
}

// WriteStalls reports how many times Pebble stalled writes since the
// store was opened, and for how long in all.
func (d *DB) WriteStalls() (int64, time.Duration) {
	return d.stalls.count.Load(), time.Duration(d.stalls.nanos.Load())
}
