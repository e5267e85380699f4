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
// The elapsed time is the lesser of two monotonic clocks' (ticks): Go's,
// CLOCK_MONOTONIC, which never steps but which NTP slews along with the
// wall clock (chronyd corrects an offset by running the clock up to 8.3%
// fast, its default maxslewrate), and CLOCK_MONOTONIC_RAW, which nothing
// adjusts. A leader's elapsed time is cluster time's rate: by Go's clock
// alone, a leader whose wall clock was behind and being slewed forward ran
// cluster time up to 8.3% fast, so records expired, and leases were taken
// over, that much early (a 24 h record was free after 22 h).
//
// Only the very first command of a new cluster takes its time from a wall
// clock (the bootstrap node's); from then on time flows through the log.
type Clock struct {
	mu       sync.Mutex
	anchorMs int64         // cluster time of the last observed applied entry
	anchored bool          // whether an entry was observed
	atMono   time.Duration // ticks when that anchor was observed
	atRaw    time.Duration
	lastMs   int64 // last value handed out, for monotonicity
	wall     func() time.Time
	ticks    func() (mono, raw time.Duration)
	offset   time.Duration // test-only skew of this node's wall clock
	correct  time.Duration // agreed correction of the wall clock before anchoring
}

// NewClock returns a clock with no anchor. Until Observe is called it reads
// the wall clock (plus offset), which only matters for the first command of
// a brand-new cluster.
func NewClock(offset time.Duration) *Clock {
	return &Clock{wall: time.Now, ticks: ticks, offset: offset}
}

// procStart is the origin of Go's monotonic reading in ticks.
var procStart = time.Now()

// ticks reads both monotonic clocks; raw is the monotonic one where the
// platform has no raw clock (monotonicRaw).
func ticks() (mono, raw time.Duration) {
	mono = time.Since(procStart)
	raw, ok := monotonicRaw()
	if !ok {
		raw = mono
	}
	return mono, raw
}

// anchorLocked anchors the clock at cluster time ms, now.
func (c *Clock) anchorLocked(ms int64) {
	c.anchorMs, c.anchored = ms, true
	c.atMono, c.atRaw = c.ticks()
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
	mono, raw := c.ticks()
	return c.anchorMs + min(mono-c.atMono, raw-c.atRaw).Milliseconds()
}
