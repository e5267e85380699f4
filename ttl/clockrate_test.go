package ttl

import (
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// fakeTicks are settable readings of the two monotonic clocks, counting
// the raw clock's reads.
type fakeTicks struct {
	mu        sync.Mutex
	mono, raw time.Duration
	rawReads  int
	rawFails  bool
}

func (f *fakeTicks) readMono() time.Duration {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.mono
}

func (f *fakeTicks) readRaw() (time.Duration, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.rawReads++
	return f.raw, !f.rawFails
}

func (f *fakeTicks) advance(mono, raw time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.mono += mono
	f.raw += raw
}

func fakeClock(t *testing.T) (*Clock, *fakeTicks) {
	t.Helper()
	c, _ := clockWithWall(0, wall0)
	ft := &fakeTicks{mono: time.Hour, raw: 3 * time.Hour} // unrelated origins
	c.mono, c.raw = ft.readMono, ft.readRaw
	return c, ft
}

// A leader whose wall clock is behind, corrected by chronyd's slewing,
// has a CLOCK_MONOTONIC running up to 8.3% fast (Go's monotonic clock is
// slewed with the wall clock; CLOCK_MONOTONIC_RAW is not). Its readings
// are the cluster's time: by the slewed clock alone, cluster time ran that
// much fast while the slew lasted, and records expired early by as much
// as the offset being corrected — a retry of a payment charged again.
// Cluster time must advance by the raw clock then, never faster.
func TestClockDoesNotRunFastWithASlewedMonotonicClock(t *testing.T) {
	const anchor = 1_700_000_000_000
	c, ft := fakeClock(t)
	c.Observe(anchor)

	ft.advance(2*time.Minute, time.Minute) // Go's clock runs 2x (faketime's x2, in the extreme)
	require.Equal(t, int64(anchor)+60_030, c.NowMs(), "cluster time advanced by more than the real minute and NTP's 500 ppm")

	// Slewed by chronyd's 8.3% for an hour, in steps shorter than the raw
	// clock's reads (rawEvery) and longer: never ahead of the raw clock.
	c.Observe(anchor + 10*time.Minute.Milliseconds())
	start, rawStart := c.NowMs(), ft.raw
	elapsed := func() time.Duration { c.mu.Lock(); defer c.mu.Unlock(); return c.elapsedLocked() }
	for i := 0; i < 3600*10; i++ {
		step := 3 * time.Millisecond
		if i%7 == 0 {
			step = 25 * time.Millisecond
		}
		ft.advance(time.Duration(float64(step)*1.083), step)
		require.LessOrEqual(t, elapsed(), time.Duration(float64(ft.raw-rawStart)*(1+maxFreq)), "step %d: cluster time ran ahead of the raw clock and NTP's 500 ppm", i)
	}
	// ... and not far behind it either: the estimate between reads is
	// within rawEvery of the raw clock.
	require.Greater(t, c.NowMs()-start, (ft.raw - rawStart - rawEvery).Milliseconds())

	// Slewed slow, it follows the slewed clock: records live longer.
	c.Observe(c.NowMs() + 60_000)
	at := c.NowMs()
	ft.advance(20*time.Second, 30*time.Second)
	require.Equal(t, at+20_000, c.NowMs())
}

// The raw clock is a system call (~2 µs on a VM): read at most every
// rawEvery however often cluster time is read, and at each anchor.
func TestClockReadsTheRawClockSeldom(t *testing.T) {
	c, ft := fakeClock(t)
	c.Observe(1_700_000_000_000)
	reads := ft.rawReads
	for i := 0; i < 1000; i++ {
		ft.advance(10*time.Microsecond, 10*time.Microsecond) // 10 ms in all
		c.NowMs()
	}
	require.LessOrEqual(t, ft.rawReads-reads, 2)
}

// The real clocks are read on this platform and advance.
func TestClockTicksAdvance(t *testing.T) {
	m0, r0 := goMonotonic(), time.Duration(0)
	if r, ok := monotonicRaw(); ok {
		r0 = r
	}
	time.Sleep(20 * time.Millisecond)
	m1 := goMonotonic()
	require.GreaterOrEqual(t, m1-m0, 20*time.Millisecond)
	if r1, ok := monotonicRaw(); ok {
		require.Greater(t, r1-r0, 15*time.Millisecond)
	}
}

// NTP's frequency correction makes Go's clock run at the rate of real time
// where the hardware (raw) clock runs slow: cluster time follows Go's
// clock then. Capped by the raw clock alone, it lost that error for good
// (4.3 s a day at 50 ppm), and a follower with a true clock rewound to the
// log every day, blaming an outage.
func TestClockKeepsRealTimeWhereTheRawClockRunsSlow(t *testing.T) {
	const anchor = 1_700_000_000_000
	c, ft := fakeClock(t)
	c.Observe(anchor)
	for range 24 * 60 {
		ft.advance(time.Minute, time.Duration(float64(time.Minute)*(1-50e-6)))
		c.NowMs()
	}
	require.Equal(t, int64(anchor)+(24*time.Hour).Milliseconds(), c.NowMs())
}

// A raw clock read that fails after one that did not keeps the raw
// reading's origin (it advances by Go's clock): read from Go's origin
// instead, the raw elapsed time went negative by the machine's uptime and
// cluster time froze.
func TestClockOutlivesAFailedRawRead(t *testing.T) {
	const anchor = 1_700_000_000_000
	c, ft := fakeClock(t)
	c.Observe(anchor)
	ft.advance(time.Second, time.Second)
	require.Equal(t, int64(anchor)+1000, c.NowMs())
	ft.mu.Lock()
	ft.rawFails = true
	ft.mu.Unlock()
	ft.advance(time.Second, time.Second)
	require.Equal(t, int64(anchor)+2000, c.NowMs())
	ft.advance(time.Second, time.Second)
	require.Equal(t, int64(anchor)+3000, c.NowMs())
}

// A node that stayed up while most of the cluster restarted counted the
// restart; the restarted leader resumed from the last time it had applied,
// and its stamps came within RewindAfter of this node's reading, which
// Observe keeps. Taking the lead, this node must stamp the log's time, not
// its own count, or records the restarted leader created meanwhile expire
// early by the restart's length (a clock walk on real processes: 3 s).
func TestClockTakingTheLeadFollowsTheLog(t *testing.T) {
	const t0 = 1_700_000_000_000
	c, ft := fakeClock(t)
	c.Observe(t0)
	ft.advance(3*time.Second, 3*time.Second) // the majority restarts; this node counts it
	require.Zero(t, c.Observe(t0+200), "within RewindAfter the reading is kept")
	ft.advance(100*time.Millisecond, 100*time.Millisecond)
	ahead := c.NowMs()
	require.InDelta(t, t0+3100, ahead, 20)
	back := c.FollowLog()
	require.InDelta(t, 2800*time.Millisecond, back, float64(20*time.Millisecond))
	require.InDelta(t, t0+300, c.NowMs(), 20, "the leader's stamps follow the log's time")
	ft.advance(time.Second, time.Second)
	require.InDelta(t, t0+1300, c.NowMs(), 20, "and run on from it at real time")
	require.Zero(t, c.FollowLog(), "a reading that follows the log is left alone")
}

// A leader restarted resumes from the last time it applied, and its first
// stamp can be that very time. Seen again here, it is the log's time now,
// not as of when this node first saw it (before the restart): extrapolated
// from then, taking the lead, this node ran the log's time on by the
// restart, and a record created by that first stamp expired that much
// early (TestLeaderThatCountedAMajorityRestartDoesNotJumpClusterTime, 1
// run in 6 on a loaded machine: 3.4 s).
func TestClockTakingTheLeadFollowsTheLogsTimeSeenAgain(t *testing.T) {
	const t0 = 1_700_000_000_000
	c, ft := fakeClock(t)
	c.Observe(t0)
	ft.advance(3*time.Second, 3*time.Second) // the restart; this node counts it
	require.Zero(t, c.Observe(t0), "the restarted leader's first stamp: the time it applied last")
	ft.advance(100*time.Millisecond, 100*time.Millisecond)
	back := c.FollowLog()
	require.InDelta(t, 3000*time.Millisecond, back, float64(20*time.Millisecond))
	require.InDelta(t, t0+100, c.NowMs(), 20, "the record stamped t0 a moment ago keeps its retention")
}

// The same time applied again without a stamp of it (a batch of raft's
// configuration entries, a stamp older than the log's time) says nothing
// of when the log reached it. Noted as now, it set the log's time back by
// the time since, and a leader then stamped that far behind: a new
// cluster's first leader by its election, a bucket dropped seconds late.
func TestClockTakingTheLeadIgnoresTheLogsTimeAppliedWithoutAStamp(t *testing.T) {
	const t0 = 1_700_000_000_000
	for name, stamp := range map[string]int64{"no stamp": 0, "stale stamp": t0 - 2000} {
		t.Run(name, func(t *testing.T) {
			c, ft := fakeClock(t)
			c.Observe(t0)
			ft.advance(2*time.Second, 2*time.Second)
			require.Zero(t, c.ObserveEntry(t0, stamp))
			ft.advance(100*time.Millisecond, 100*time.Millisecond)
			require.Zero(t, c.FollowLog(), "the log reached t0 2.1 s ago")
			require.InDelta(t, t0+2100, c.NowMs(), 20)
		})
	}
}

// A node that saw no entry applied for 13 s (an outage of the others it
// stayed up through) and then led: the log's time extrapolated over the
// outage is real time, but stamped, it ran past Step's MaxStep, so the
// first entry was decided at the capped time and the next, a moment
// later, moved cluster time on by the rest: the records and leases the
// first granted ran out 3 s early. At most RewindAfter of it is kept.
func TestClockTakingTheLeadAfterAnOutageStampsWithinAStep(t *testing.T) {
	const t0 = 1_700_000_000_000
	c, ft := fakeClock(t)
	c.Observe(t0)
	ft.advance(13*time.Second, 13*time.Second) // nothing applied meanwhile
	back := c.FollowLog()
	require.InDelta(t, 8*time.Second, back, float64(20*time.Millisecond))
	first := c.NowMs()
	require.InDelta(t, t0+RewindAfter.Milliseconds(), first, 20)
	require.Equal(t, first, Step(t0, first), "the first stamp is not capped")
	state := Step(t0, first) // a record created here...
	ft.advance(5*time.Millisecond, 5*time.Millisecond)
	next := Step(state, c.NowMs()) // ... is 5 ms older at the next entry
	require.LessOrEqual(t, next-state, int64(6))
}

// A leader that stays leader and stamps nothing for longer than MaxStep
// (a one-node store stopped by SIGSTOP or docker pause for 14 s, a whole
// cluster paused; Go's monotonic clock counts the pause): stamped as it
// read, its first entry after the pause was decided at the capped time
// and the next, a moment later, moved cluster time on by the rest, so a
// record the first claim created was answered 404 2.6 s before its
// retention was up (real processes). Its stamps are held within
// RewindAfter of the applied time; its pipeline's lead is left alone.
func TestClockStampAfterAStallStaysWithinAStep(t *testing.T) {
	const t0 = 1_700_000_000_000
	c, ft := fakeClock(t)
	c.Observe(t0)
	state := int64(t0)
	apply := func(stamp int64) {
		state = Step(state, stamp)
		c.ObserveEntry(state, stamp)
	}

	// Under load, with a slow FSM: stamps run ahead of the applied time by
	// up to 4.9 s, and are not set back.
	for range 49 {
		ft.advance(100*time.Millisecond, 100*time.Millisecond)
		ms, back := c.StampMs()
		require.Zero(t, back, "a pipeline within RewindAfter is left alone")
		require.Equal(t, c.NowMs(), ms)
	}
	apply(t0 + 4900)
	ms, back := c.StampMs()
	require.Zero(t, back)
	require.InDelta(t, t0+4900, ms, 20)
	apply(ms)

	// Stopped for 14 s: nothing stamped, nothing applied.
	ft.advance(14*time.Second, 14*time.Second)
	first, back := c.StampMs()
	require.InDelta(t, 9*time.Second, back, float64(20*time.Millisecond))
	require.InDelta(t, state+RewindAfter.Milliseconds(), first, 20)
	ft.advance(2*time.Millisecond, 2*time.Millisecond)
	second, _ := c.StampMs() // stamped before the first is applied
	created := Step(state, first)
	require.Equal(t, first, created, "the first stamp is not capped")
	ft.advance(5*time.Millisecond, 5*time.Millisecond)
	apply(first)
	apply(second)
	tick, _ := c.StampMs()
	apply(tick)
	require.LessOrEqual(t, state-created, int64(10), "the record the first stamp created aged by more than the 7 ms that passed")
	ft.advance(time.Second, time.Second)
	ms, back = c.StampMs()
	require.Zero(t, back)
	require.InDelta(t, created+1007, ms, 20, "and cluster time runs on at real time")
}

// PeekStampMs says what StampMs would, and moves nothing: a new leader's
// look at the state before its term barrier anchored the clock at the
// log's time plus RewindAfter, and said the leader had stamped nothing for
// a while, where it had only followed a log that stood still.
func TestClockPeekStampIsStampWithoutMovingTheClock(t *testing.T) {
	const t0 = 1_700_000_000_000
	c, ft := fakeClock(t)
	c.Observe(t0)
	ft.advance(7*time.Second, 7*time.Second) // nothing applied
	peek := c.PeekStampMs()
	require.Equal(t, int64(t0)+RewindAfter.Milliseconds(), peek)
	require.InDelta(t, t0+7000, c.NowMs(), 20, "the reading is where it was")
	require.Equal(t, 2*time.Second, c.FollowLog(), "the lead is left for FollowLog to find")
	ms, back := c.StampMs()
	require.Equal(t, peek, ms)
	require.Zero(t, back)
}
