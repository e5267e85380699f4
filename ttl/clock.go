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
// The elapsed time is Go's monotonic clock's (CLOCK_MONOTONIC), capped by
// the raw hardware clock's (CLOCK_MONOTONIC_RAW) times 1 + maxFreq. NTP
// steers CLOCK_MONOTONIC two ways: its frequency, by at most 500 ppm, to
// correct the hardware clock's own rate error (so Go's clock runs at the
// rate of real time where the raw one does not), and slews, up to 10%
// fast, to correct an offset (chronyd's default maxslewrate is 8.3%; a VM
// resumed from a pause is behind by the pause). A leader's elapsed time is
// cluster time's rate: by Go's clock alone, a leader being slewed forward
// ran cluster time that much fast while the slew lasted, so records
// expired, and leases were taken over, early by as much as the offset
// being corrected. Capped, a slew can run it at most maxFreq (plus the
// hardware clock's error, which NTP's frequency corrects) fast: a pause
// of an hour slewed back at 8.3% moves it by seconds, not the hour. The
// cap does not take the raw clock's own slowness (the lesser of the two
// clocks would lose it for good: 4 s a day at 50 ppm).
//
// The raw clock is a system call (~2 µs on a VM, against 60 ns for Go's
// clock), so it is read at most every rawEvery; in between, its progress
// is taken as Go's times minSlew, the slowest Go's clock runs against the
// raw one, so the estimate never runs ahead of the raw clock.
//
// A leader stamps with StampMs, which holds its stamps within RewindAfter
// of the applied time: a leader that stamped nothing for a while (stopped,
// paused) counted that time as a node that outlived an outage does, and
// Step would decide its first entry at a capped time.
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
	// logMs is the newest applied entry's cluster time, and logMono and
	// logRaw both clocks when it was observed (logRaw at most the raw
	// clock's reading then): the log's own time, extrapolated, for
	// FollowLog.
	logMs           int64
	logMono, logRaw time.Duration
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
	// maxFreq is the most NTP's frequency correction makes Go's clock run
	// faster than the raw one (the kernel's MAXFREQ, 500 ppm).
	maxFreq = 500e-6
)

// procStart is the origin of goMonotonic.
var procStart = time.Now()

// goMonotonic is Go's monotonic clock (CLOCK_MONOTONIC on Linux).
func goMonotonic() time.Duration { return time.Since(procStart) }

// sampleLocked reads both clocks at once, the raw one first: a pause
// between the two reads then makes the estimate (elapsedLocked) later, not
// earlier. Where the platform has no raw clock, or a read fails, the raw
// reading advances by Go's clock since the last sample (its origin kept).
func (c *Clock) sampleLocked() {
	raw, ok := c.raw()
	mono := c.mono()
	if !ok {
		raw = c.sampleRaw + (mono - c.sampleMono)
	}
	c.sampleMono, c.sampleRaw = mono, raw
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
// far it moved the reading back (0 when it did not). ms is the time of an
// applied entry stamped ms (ObserveEntry).
func (c *Clock) Observe(ms int64) (rewound time.Duration) { return c.ObserveEntry(ms, ms) }

// ObserveEntry is Observe for entries applied at cluster time ms whose
// newest stamp was stampMs: 0 for none (a snapshot installed, a batch of
// raft's own entries), less than ms for stamps older than the log's time
// (Step never goes back). Only a stamp that reached ms says the log's time
// was ms just now; the others leave when the log reached ms as it was.
func (c *Clock) ObserveEntry(ms, stampMs int64) (rewound time.Duration) {
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
		c.logMs, c.logMono, c.logRaw = ms, c.atMono, c.atRaw
		return 0
	}
	reading := c.nowLocked()
	now := max(reading, c.lastMs) // what was handed out, which a rewind takes back
	switch {
	case ms > reading:
		c.anchorLocked(ms)
		c.logMs, c.logMono, c.logRaw = ms, c.atMono, c.atRaw
	case now-ms > RewindAfter.Milliseconds():
		c.anchorLocked(ms)
		c.lastMs = ms
		c.logMs, c.logMono, c.logRaw = ms, c.atMono, c.atRaw
		return time.Duration(now-ms) * time.Millisecond
	case ms > c.logMs || (ms == c.logMs && stampMs >= ms):
		// Kept the reading (within RewindAfter of the log): note the
		// log's time, for FollowLog. The same time stamped again is seen
		// now: a leader restarted resumes from the last time it applied,
		// and its first stamp can be that time itself; extrapolated from
		// when this node first saw it (before the restart), the log's
		// time ran on by the restart, and a record created then expired
		// that much early once this node led. The same time applied
		// again without a stamp of it (raft's configuration entries, a
		// stale stamp) is not: noted now, it set the log's time back by
		// the time since, and FollowLog took cluster time back that far
		// (a new cluster's leader by its election). The raw clock is not
		// read here (the apply path): its reading now is taken as at most
		// Go's since its last read over minSlew, so the raw time since
		// then is never overstated.
		mono := c.mono()
		c.logMs, c.logMono = ms, mono
		c.logRaw = c.sampleRaw + time.Duration(float64(mono-c.sampleMono)/minSlew)
	}
	return 0
}

// FollowLog anchors the clock at the newest applied entry's cluster time,
// as of when it was applied, where the reading has run ahead of that; it
// returns how far back the reading went (0 when it did not). A leader
// calls it once it has applied its predecessors' log, before it stamps
// anything.
//
// Observe keeps a reading up to RewindAfter ahead of the log, which is
// how far a leader's own stamps run ahead of their apply. A follower's
// reading is that far ahead of the log only if it counted time the log did
// not: it stayed up through a restart of most nodes, whose leader then
// resumed from the last time it had applied. Once it led, its stamps moved
// cluster time on by that much at once (10 s an entry): a restart of two
// nodes of three taking 3 s, and records the restarted leader had created
// meanwhile were answered 404 and claimed afresh 3 s before their
// retention was up (a clock walk on real processes). The log's time is
// cluster time.
//
// Extrapolated, the log's time runs on while no entry is applied (an
// outage of most nodes this node stayed up through, a partition of all),
// but at most RewindAfter of that is kept: Step moves cluster time at most
// MaxStep an entry, so a leader stamping further past the applied time
// had its first entries decided at the capped time and the next ones,
// milliseconds later, moved it on by the rest at once: the records and
// leases those first entries granted ran out that much early (12 s of
// outage: 3.5 s).
func (c *Clock) FollowLog() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.anchored || c.logMs == 0 {
		return 0
	}
	reading := max(c.nowLocked(), c.lastMs)
	anchorMs, atMono, atRaw := c.anchorMs, c.atMono, c.atRaw
	c.anchorMs, c.atMono, c.atRaw = c.logMs, c.logMono, c.logRaw
	c.capAtLogLocked(c.nowLocked())
	if follows := c.nowLocked(); follows < reading {
		c.lastMs = follows
		return time.Duration(reading-follows) * time.Millisecond
	}
	c.anchorMs, c.atMono, c.atRaw = anchorMs, atMono, atRaw
	return 0
}

// StampMs is NowMs for a leader's stamp: the reading, held within
// RewindAfter of the newest applied entry's cluster time. It returns how
// far it moved the reading back (0 when it did not).
//
// A leader stamps at least every tick (a second), and each stamp is
// applied within RewindAfter of it, so its reading runs ahead of the
// applied time by its pipeline alone: milliseconds, seconds on a slow
// disk. A reading further on counted time in which this leader stamped
// nothing: it was stopped (SIGSTOP, docker pause, a VM paused; Go's
// monotonic clock counts that) or stalled, alone or with the whole
// cluster. Stamped as it was, the first entry past MaxStep is decided at
// the capped time and the next ones, milliseconds later, move cluster
// time on by the rest at once (Step): a one-node store stopped for 14 s
// answered 404 for a record created by the first claim after it 2.6 s
// before its retention was up, and a lease granted then runs out as
// early. So the reading is anchored at that time plus RewindAfter, now,
// as FollowLog does when a node takes the lead: at most RewindAfter of
// the stall is counted, and records live longer by the rest, as after an
// outage of the whole cluster.
func (c *Clock) StampMs() (ms int64, rewound time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	reading := max(c.nowLocked(), c.lastMs)
	if c.anchored && c.logMs > 0 && c.capAtLogLocked(reading) {
		c.lastMs = c.anchorMs
		return c.anchorMs, time.Duration(reading-c.anchorMs) * time.Millisecond
	}
	c.lastMs = reading
	return reading, 0
}

// PeekStampMs is what StampMs would return now, without anchoring the
// clock or taking the time as handed out: for a look at the state before
// a leader's term barrier (a first look at a claim that may need no entry),
// which must leave the clock to the barrier's FollowLog.
func (c *Clock) PeekStampMs() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	reading := max(c.nowLocked(), c.lastMs)
	if c.anchored && c.logMs > 0 && reading-c.logMs > RewindAfter.Milliseconds() {
		return c.logMs + RewindAfter.Milliseconds()
	}
	return reading
}

// capAtLogLocked anchors the clock at the log's time plus RewindAfter, now,
// where reading has run further than that past the log's time: at most
// RewindAfter of time in which nothing was applied is counted. It reports
// whether it anchored.
func (c *Clock) capAtLogLocked(reading int64) bool {
	if reading-c.logMs <= RewindAfter.Milliseconds() {
		return false
	}
	c.anchorLocked(c.logMs + RewindAfter.Milliseconds())
	return true
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

// elapsedLocked is the time since the anchor: Go's clock's, capped by the
// raw clock's (estimated since its last read) times 1 + maxFreq.
func (c *Clock) elapsedLocked() time.Duration {
	mono := c.mono()
	if mono-c.sampleMono >= rawEvery {
		c.sampleLocked()
		mono = c.sampleMono
	}
	raw := c.sampleRaw + time.Duration(float64(mono-c.sampleMono)*minSlew)
	return min(mono-c.atMono, time.Duration(float64(raw-c.atRaw)*(1+maxFreq)))
}
