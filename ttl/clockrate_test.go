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
	return f.raw, true
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
	require.Equal(t, int64(anchor)+time.Minute.Milliseconds(), c.NowMs(), "cluster time advanced by more than the real minute")

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
		require.LessOrEqual(t, elapsed(), ft.raw-rawStart, "step %d: cluster time ran ahead of the raw clock", i)
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
