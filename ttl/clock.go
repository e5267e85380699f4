package ttl

import (
	"sync"
	"time"
)

// Clock is cluster time as seen by one node. It is anchored at the cluster
// time of the last applied entry and advances by this node's monotonic clock
// from the moment that entry was applied, so a node whose wall clock is
// minutes off never moves cluster time by those minutes.
//
// Between two applied entries its reading is this node's extrapolation,
// which the log never confirmed: a node that stayed up while most of the
// cluster was down counted the outage, the restarted nodes (resuming from
// their stored time) did not, and once that node led, its stamps moved
// cluster time forward by the outage (ten seconds an entry, so within
// seconds): leases granted meanwhile were taken over, and records
// expired, early (an attack on cluster time). So an applied entry more
// than RewindAfter behind the reading anchors the clock back at it: the
// log's time is cluster time. Within RewindAfter (an entry's usual way
// from its stamp to its apply) the reading never goes backwards.
//
// The elapsed time is the lesser of two monotonic clocks': Go's,
// CLOCK_MONOTONIC, which never steps but which NTP slews along with the
// wall clock, and CLOCK_MONOTONIC_RAW, which nothing adjusts. A leader's
// elapsed time is cluster time's rate: by Go's clock alone, a leader whose
// wall clock was behind and being slewed forward (chronyd runs the clock
// up to 8.3% fast to correct an offset, its default maxslewrate; a VM
// resumed from a pause is behind by the pause) ran cluster time that much
// fast while the slew lasted, so records expired, and leases were taken
// over, early by as much as the offset being corrected. A slew back only
// slows cluster time (records live longer, never less).
//
// The raw clock is a system call (~2 µs on a VM, against 60 ns for Go's
// clock), so it is read at most every rawEvery; in between, the raw
// clock's progress is taken as Go's times minSlew, the slowest a slewed
// clock runs against the raw one (the kernel's tick adjustment is at most
// 10%), so the estimate never runs ahead of the raw clock.
//
// Only the very first command of a new cluster takes its time from a wall
// clock (the bootstrap node's); from then on time flows through the log.
type Clock struct {
	mu       sync.Mutex
	anchorMs int64         // cluster time of the last observed applied entry
	anchored bool          // whether an entry was observed
	atMono   time.Duration // both monotonic clocks when that anchor was observed
	atRaw    time.Duration
	// sampleMono and sampleRaw are the last reading of the raw clock and
	// Go's at the same moment (rawEvery).
	sampleMono, sampleRaw time.Duration
	lastMs                int64 // last value handed out, for monotonicity
	wall                  func() time.Time
	mono                  func() time.Duration
	raw                   func() (time.Duration, bool)
	offset                time.Duration // test-only skew of this node's wall clock
	correct               time.Duration // agreed correction of the wall clock before anchoring
}

// NewClock returns a clock with no anchor. Until Observe is called it reads
// the wall clock (plus offset), which only matters for the first command of
// a brand-new cluster.
func NewClock(offset time.Duration) *Clock {
	return &Clock{wall: time.Now, mono: goMonotonic, raw: monotonicRaw, offset: offset}
}

const (
	// rawEvery is how often at most the raw clock is read (a system call).
	rawEvery = 10 * time.Millisecond
	// minSlew is the slowest a slewed clock runs against the raw one, with
	// a margin: Linux's tick adjustment (ADJ_TICK) is at most 10%, NTP's
	// frequency 0.05% more.
	minSlew = 0.9
)

// procStart is the origin of goMonotonic.
var procStart = time.Now()

// goMonotonic is Go's monotonic clock (CLOCK_MONOTONIC on Linux).
func goMonotonic() time.Duration { return time.Since(procStart) }

// sampleLocked reads both clocks at once: Go's, and the raw one where the
// platform has it (Go's again where not).
func (c *Clock) sampleLocked() {
	c.sampleMono = c.mono()
	raw, ok := c.raw()
	if !ok {
		raw = c.sampleMono
	}
	c.sampleRaw = raw
}

// anchorLocked anchors the clock at cluster time ms, now.
func (c *Clock) anchorLocked(ms int64) {
	c.anchorMs, c.anchored = ms, true
	c.sampleLocked()
	c.atMono, c.atRaw = c.sampleMono, c.sampleRaw
}

// RewindAfter is how far behind this node's reading an applied entry's
// cluster time must be for the clock to go back to it (Observe): longer
// than an entry takes from its stamp to its apply, even on a stalled disk.
const RewindAfter = 5 * time.Second

// Observe anchors the clock at cluster time ms, seen now, when that is
// ahead of the reading, or more than RewindAfter behind it; it returns how
// far it moved the reading back (0 when it did not).
func (c *Clock) Observe(ms int64) (rewound time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if ms <= 0 {
		return 0
	}
	if !c.anchored {
		// Reads before the first anchor were this node's wall clock: drop
		// them, or a skewed wall clock would stay in cluster time.
		c.anchorLocked(ms)
		c.lastMs = 0
		return 0
	}
	reading := c.nowLocked()
	now := max(reading, c.lastMs) // what was handed out, which a rewind takes back
	switch {
	case ms > reading:
		c.anchorLocked(ms)
	case now-ms > RewindAfter.Milliseconds():
		c.anchorLocked(ms)
		c.lastMs = ms
		return time.Duration(now-ms) * time.Millisecond
	}
	return 0
}

// WallMs is this node's own wall clock (with its test offset), uncorrected:
// what it tells peers agreeing on a new cluster's first time.
func (c *Clock) WallMs() int64 { return c.wall().Add(c.offset).UnixMilli() }

// Correct shifts the unanchored reading by d. Nodes forming a new cluster
// together agree on the median of their wall clocks, so a single node whose
// wall clock is off cannot start cluster time off; once anchored, time comes
// from the log and the correction no longer matters.
func (c *Clock) Correct(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.correct = d
}

// Anchored reports whether the clock has seen any cluster time.
func (c *Clock) Anchored() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.anchored
}

// NowMs returns cluster time in Unix milliseconds.
func (c *Clock) NowMs() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := c.nowLocked()
	if n < c.lastMs {
		n = c.lastMs
	}
	c.lastMs = n
	return n
}

func (c *Clock) nowLocked() int64 {
	if !c.anchored {
		return c.wall().Add(c.offset + c.correct).UnixMilli()
	}
	return c.anchorMs + c.elapsedLocked().Milliseconds()
}

// elapsedLocked is the time since the anchor: the lesser of Go's clock's
// and the raw clock's, the latter estimated since its last read.
func (c *Clock) elapsedLocked() time.Duration {
	mono := c.mono()
	if mono-c.sampleMono >= rawEvery {
		c.sampleLocked()
		mono = c.sampleMono
	}
	raw := c.sampleRaw + time.Duration(float64(mono-c.sampleMono)*minSlew)
	return min(mono-c.atMono, raw-c.atRaw)
}
