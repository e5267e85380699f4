// Package gcfloor keeps the Go garbage collector from running before the
// heap reaches a floor.
//
// An idem node's live Go heap is a few MiB: records live in Pebble, whose
// memtables and block cache are not on the Go heap. At Go's default pacing
// (GOGC=100: collect when the heap doubles) a node under load collected
// about 25 times a second, and collection with its write barriers cost
// 8–15% of the node's CPU. A floor lets garbage pile up to a fixed size
// first, so the heap's bound stays a configured number rather than a
// multiple of whatever is live.
//
// The floor only ever relaxes the pacing: once the live heap is past half
// the floor, GOGC is left where it was (the environment's GOGC, or 100),
// and GOGC=off and GOMEMLIMIT keep their meaning.
package gcfloor

import (
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync"
	"time"
)

// heapMinimum is the runtime's smallest heap goal at GOGC=100; it scales
// with GOGC, so a GOGC of p never collects below heapMinimum*p/100.
const heapMinimum = 4 << 20

// Floor paces garbage collection; Stop restores the pacing it found.
type Floor struct {
	floor uint64
	base  int // the GOGC in force before Start

	mu      sync.Mutex
	stopped bool
	percent int    // the GOGC this Floor set last
	cycles  uint64 // the collections completed when tune last measured
	sample  []metrics.Sample
	done    chan struct{} // closed by Stop: ends watch
}

// watchEvery is how often watch looks for a collection the cleanup chain
// missed.
const watchEvery = 100 * time.Millisecond

// Start paces collection so that, while the live heap is small, the heap
// grows to about floor bytes before the next collection. floor <= 0, or a
// GOGC of off, leaves the pacing alone. Call Stop to undo it.
func Start(floor int64) *Floor {
	f := &Floor{sample: []metrics.Sample{{Name: "/gc/heap/live:bytes"}, {Name: "/gc/cycles/total:gc-cycles"}}, done: make(chan struct{})}
	f.base = debug.SetGCPercent(100)
	debug.SetGCPercent(f.base)
	f.percent = f.base
	if floor <= 0 || f.base < 0 {
		f.stopped = true
		return f
	}
	f.floor = uint64(floor)
	f.tune()
	f.arm()
	go f.watch()
	return f
}

// Stop restores the GOGC in force before Start. Safe to call more than once.
func (f *Floor) Stop() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.stopped {
		return
	}
	f.stopped = true
	close(f.done)
	debug.SetGCPercent(f.base)
}

// Percent is the GOGC the floor has set last (the base one when idle).
func (f *Floor) Percent() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.percent
}

// sentinel is an object nothing refers to: its cleanup runs after each
// collection, which re-tunes and arms a new one. It has a pointer field so
// that it is not placed in a tiny-allocator block, whose cleanups may wait
// for the block's other objects.
type sentinel struct{ _ *int }

// arm registers the cleanup of a new sentinel. A sentinel allocated while
// a collection is marking is allocated live and outlives that collection:
// its cleanup runs only after the next one, and the collection between
// goes untuned. Under load (the cleanup runs late, the heap refills
// meanwhile) that happened at the end of a burst, and the heap goal stayed
// at the GOGC set for the live heap before it, 174-462 MiB under a 64 MiB
// floor, until another collection. watch catches those.
func (f *Floor) arm() {
	runtime.AddCleanup(new(sentinel), func(f *Floor) {
		if f.tune() {
			f.arm()
		}
	}, f)
}

// watch re-tunes after a collection the cleanup chain missed (see arm),
// until Stop.
func (f *Floor) watch() {
	t := time.NewTicker(watchEvery)
	defer t.Stop()
	s := []metrics.Sample{{Name: "/gc/cycles/total:gc-cycles"}}
	for {
		select {
		case <-f.done:
			return
		case <-t.C:
		}
		metrics.Read(s)
		if s[0].Value.Kind() != metrics.KindUint64 {
			return
		}
		f.mu.Lock()
		missed := s[0].Value.Uint64() > f.cycles
		f.mu.Unlock()
		if missed {
			f.tune()
		}
	}
}

// tune sets GOGC from the live heap the last collection measured; false
// once stopped.
func (f *Floor) tune() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.stopped {
		return false
	}
	metrics.Read(f.sample)
	var live uint64
	if f.sample[0].Value.Kind() == metrics.KindUint64 {
		live = f.sample[0].Value.Uint64()
	}
	if f.sample[1].Value.Kind() == metrics.KindUint64 {
		f.cycles = f.sample[1].Value.Uint64()
	}
	p := percentFor(f.floor, live, f.base)
	// SetGCPercent is cheap, but skip changes under a tenth, except back to
	// the base: past half the floor GOGC is the one found, exactly (a
	// floor left at 105 once, tuned for 31 MiB live, with 48 MiB live).
	if diff := p - f.percent; diff > f.percent/10 || -diff > f.percent/10 || (p == f.base && p != f.percent) {
		debug.SetGCPercent(p)
		f.percent = p
	}
	return true
}

// percentFor is the GOGC that puts the next collection at about floor
// bytes of heap when live bytes are live, never below base. The heap goal
// is the larger of live*(1+p/100) and heapMinimum*p/100; both stay within
// the floor.
func percentFor(floor, live uint64, base int) int {
	p := int(floor * 100 / heapMinimum)
	if live > 0 {
		if live >= floor/2 {
			return base
		}
		p = min(p, int((floor-live)*100/live))
	}
	return max(base, p)
}
