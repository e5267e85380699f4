package ttl

import (
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// fakeTicks are settable readings of the two monotonic clocks.
type fakeTicks struct {
	mu        sync.Mutex
	mono, raw time.Duration
}

func (f *fakeTicks) read() (time.Duration, time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.mono, f.raw
}

func (f *fakeTicks) advance(mono, raw time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.mono += mono
	f.raw += raw
}

// A leader whose wall clock is behind, corrected by chronyd's slewing,
// has a CLOCK_MONOTONIC running up to 8.3% fast (Go's monotonic clock is
// slewed with the wall clock; CLOCK_MONOTONIC_RAW is not). Its readings
// are the cluster's time: by the slewed clock alone, cluster time ran that
// much fast and a 24 h record was free after 22 h — a retry of a payment
// charged again. Run with a monotonic clock twice as fast as the raw one
// (faketime's 'x2', in the extreme), cluster time must advance by real
// time, never faster.
func TestClockDoesNotRunFastWithASlewedMonotonicClock(t *testing.T) {
	const anchor = 1_700_000_000_000
	c, _ := clockWithWall(0, wall0)
	ft := &fakeTicks{mono: time.Hour, raw: 3 * time.Hour} // unrelated origins
	c.ticks = ft.read
	c.Observe(anchor)

	ft.advance(2*time.Minute, time.Minute) // the slewed clock runs 2x
	require.Equal(t, int64(anchor)+time.Minute.Milliseconds(), c.NowMs(), "cluster time advanced by more than the real minute")

	// Re-anchoring at an applied entry measures from then on by both
	// clocks; slewed slow, it follows the slewed clock: records live
	// longer, never less.
	c.Observe(anchor + 10*time.Minute.Milliseconds())
	ft.advance(30*time.Second, 20*time.Second)
	require.Equal(t, int64(anchor)+10*time.Minute.Milliseconds()+20_000, c.NowMs())
	ft.advance(10*time.Second, 40*time.Second)
	require.Equal(t, int64(anchor)+10*time.Minute.Milliseconds()+40_000, c.NowMs())
}

// The real raw clock is read on Linux and advances.
func TestClockTicksAdvance(t *testing.T) {
	m0, r0 := ticks()
	time.Sleep(20 * time.Millisecond)
	m1, r1 := ticks()
	require.GreaterOrEqual(t, m1-m0, 20*time.Millisecond)
	require.Greater(t, r1-r0, 15*time.Millisecond)
}
