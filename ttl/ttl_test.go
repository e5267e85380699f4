package ttl

import (
	"errors"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestValidateRetention(t *testing.T) {
	tests := []struct {
		name       string
		r          time.Duration
		allowShort bool
		wantShort  bool // ErrShortRetention
		wantErr    bool
	}{
		{"zero is refused", 0, false, false, true},
		{"zero is refused even when short is allowed", 0, true, false, true},
		{"negative is refused", -time.Minute, true, false, true},
		{"one millisecond is refused by default", time.Millisecond, false, true, true},
		{"just under a minute is refused by default", time.Minute - time.Millisecond, false, true, true},
		{"a minute is accepted", time.Minute, false, false, false},
		{"a day is accepted", 24 * time.Hour, false, false, false},
		{"one second is accepted when allowed", time.Second, true, false, false},
		{"one millisecond is accepted when allowed", time.Millisecond, true, false, false},
		{"a day is accepted when short is allowed", 24 * time.Hour, true, false, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := ValidateRetention(tc.r, tc.allowShort)
			if !tc.wantErr {
				require.NoError(t, err)
				return
			}
			require.Error(t, err)
			require.Contains(t, err.Error(), "ttl:")
			require.Equal(t, tc.wantShort, errors.Is(err, ErrShortRetention), "errors.Is(ErrShortRetention): %v", err)
			if tc.wantShort {
				require.Contains(t, err.Error(), "--allow-short-retention")
			}
		})
	}
}

func TestLive(t *testing.T) {
	tests := []struct {
		name         string
		expires, now int64
		want         bool
	}{
		{"well before expiry", 1000, 0, true},
		{"one millisecond before expiry", 1000, 999, true},
		{"at expiry it is gone", 1000, 1000, false},
		{"after expiry", 1000, 1001, false},
		{"zero expiry is never live at a positive time", 0, 1, false},
		{"far future", math.MaxInt64, math.MaxInt64 - 1, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, Live(tc.expires, tc.now))
		})
	}
}

func TestLeaseHeld(t *testing.T) {
	tests := []struct {
		name       string
		lease, now int64
		want       bool
	}{
		{"well before the lease runs out", 5000, 1000, true},
		{"one millisecond before", 5000, 4999, true},
		{"at the deadline the lease is gone", 5000, 5000, false},
		{"after the deadline", 5000, 6000, false},
		{"unset lease is never held", 0, 1, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, LeaseHeld(tc.lease, tc.now))
		})
	}
}

func TestRetryAfter(t *testing.T) {
	const now = 1_700_000_000_000
	tests := []struct {
		name  string
		until int64
		want  int
	}{
		{"already past is one second", now - 5000, 1},
		{"exactly now is one second", now, 1},
		{"one millisecond rounds up to one second", now + 1, 1},
		{"just under a second", now + 999, 1},
		{"exactly one second", now + 1000, 1},
		{"just over a second rounds up", now + 1001, 2},
		{"two and a half seconds round up", now + 2500, 3},
		{"a minute", now + 60_000, 60},
		{"a minute and a millisecond", now + 60_001, 61},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := RetryAfter(tc.until, now)
			require.Equal(t, tc.want, got)
			require.GreaterOrEqual(t, got, 1)
		})
	}
}

// Waiting RetryAfter seconds always reaches the deadline.
func TestRetryAfterNeverUndershoots(t *testing.T) {
	for d := int64(-3); d < 5000; d += 7 {
		s := RetryAfter(d, 0)
		require.GreaterOrEqual(t, int64(s)*1000, d, "d=%dms", d)
		require.Less(t, int64(s-1)*1000, max(d, 1), "d=%dms: one second less would also do", d)
	}
}

func TestExpiresAt(t *testing.T) {
	tests := []struct {
		name    string
		created int64
		r       time.Duration
		want    int64
	}{
		{"a minute", 1000, time.Minute, 61_000},
		{"a day", 1_700_000_000_000, 24 * time.Hour, 1_700_086_400_000},
		{"sub-millisecond parts are dropped", 1000, time.Second + 999*time.Microsecond, 2000},
		{"zero retention expires at creation", 5, 0, 5},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			exp := ExpiresAt(tc.created, tc.r)
			require.Equal(t, tc.want, exp)
			if tc.r >= time.Millisecond {
				require.True(t, Live(exp, tc.created), "a fresh record is live")
				require.False(t, Live(exp, exp), "a record is gone at its expiry")
			}
		})
	}
}

func TestMillisTime(t *testing.T) {
	tm := time.Date(2024, 3, 1, 12, 30, 45, 123_456_789, time.FixedZone("x", 3600))
	ms := Millis(tm)
	require.Equal(t, tm.UnixMilli(), ms)
	back := Time(ms)
	require.Equal(t, time.UTC, back.Location())
	require.True(t, back.Equal(tm.Truncate(time.Millisecond)), "%s vs %s", back, tm)
	require.Equal(t, ms, Millis(back))
}

// fakeWall is a settable wall clock.
type fakeWall struct {
	mu sync.Mutex
	t  time.Time
}

func (f *fakeWall) now() time.Time  { f.mu.Lock(); defer f.mu.Unlock(); return f.t }
func (f *fakeWall) set(t time.Time) { f.mu.Lock(); defer f.mu.Unlock(); f.t = t }

func clockWithWall(offset time.Duration, wall time.Time) (*Clock, *fakeWall) {
	c := NewClock(offset)
	fw := &fakeWall{t: wall}
	c.wall = fw.now
	return c, fw
}

var wall0 = time.UnixMilli(1_700_000_000_000)

func TestClockUnanchoredReadsWallPlusOffset(t *testing.T) {
	tests := []struct {
		name   string
		offset time.Duration
	}{
		{"no offset", 0},
		{"ten minutes ahead", 10 * time.Minute},
		{"a second behind", -time.Second},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, fw := clockWithWall(tc.offset, wall0)
			require.False(t, c.Anchored())
			require.Equal(t, wall0.Add(tc.offset).UnixMilli(), c.NowMs())
			fw.set(wall0.Add(5 * time.Second))
			require.Equal(t, wall0.Add(5*time.Second+tc.offset).UnixMilli(), c.NowMs(), "follows the wall clock")
		})
	}
}

// Unanchored, a wall clock that steps back does not move NowMs back.
func TestClockUnanchoredNeverGoesBackwards(t *testing.T) {
	c, fw := clockWithWall(0, wall0)
	require.Equal(t, wall0.UnixMilli(), c.NowMs())
	fw.set(wall0.Add(-time.Hour))
	require.Equal(t, wall0.UnixMilli(), c.NowMs())
}

func TestClockAnchoredAdvancesByMonotonicTimeOnly(t *testing.T) {
	const anchor = 1_600_000_000_000 // far from the fake wall: must not matter
	c, fw := clockWithWall(0, wall0)
	start := time.Now() // before the anchor, so elapsed-since-start bounds it
	c.Observe(anchor)
	require.True(t, c.Anchored())

	first := c.NowMs()
	require.GreaterOrEqual(t, first, int64(anchor))
	require.LessOrEqual(t, first, int64(anchor)+time.Since(start).Milliseconds())

	// The wall clock jumping has no effect once anchored.
	fw.set(wall0.Add(365 * 24 * time.Hour))
	time.Sleep(30 * time.Millisecond)
	got := c.NowMs()
	require.GreaterOrEqual(t, got, int64(anchor)+30, "advances with monotonic time")
	require.LessOrEqual(t, got, int64(anchor)+time.Since(start).Milliseconds(), "advances by monotonic time only")
}

// An applied entry a little behind the reading (its way from stamp to
// apply) never moves it back; a newer one moves it forward.
func TestClockObserveNeverMovesBackwardsWithinRewindAfter(t *testing.T) {
	const anchor = 1_700_000_000_000
	c, _ := clockWithWall(0, wall0)
	c.Observe(anchor)
	require.Zero(t, c.Observe(anchor-RewindAfter.Milliseconds()+500))
	got := c.NowMs()
	require.GreaterOrEqual(t, got, int64(anchor))
	require.Less(t, got, int64(anchor)+1000)

	// A newer anchor moves time forward.
	c.Observe(anchor + 60_000)
	got = c.NowMs()
	require.GreaterOrEqual(t, got, int64(anchor)+60_000)
	require.Less(t, got, int64(anchor)+61_000)

	// And one a little older after that still does not move it back.
	require.Zero(t, c.Observe(anchor+60_000-1000))
	require.GreaterOrEqual(t, c.NowMs(), got)
}

// Bug: a node that stayed up while most of the cluster was down counted
// the outage; the restarted nodes resumed from their stored time, and the
// entries they applied, far behind this node's reading, were ignored.
// Leading later, it stamped its own time: cluster time jumped by the
// outage, and leases and records granted meanwhile ran out early. An
// entry more than RewindAfter behind the reading anchors the clock at it.
func TestClockFollowsTheLogWhenItsReadingRanAhead(t *testing.T) {
	const anchor = 1_700_000_000_000
	c, _ := clockWithWall(0, wall0)
	c.Observe(anchor + 150_000) // this node's reading, 150 s on: it counted an outage
	c.NowMs()
	back := c.Observe(anchor) // what the restarted majority applied since
	require.InDelta(t, 150*time.Second, back, float64(time.Second))
	got := c.NowMs()
	require.GreaterOrEqual(t, got, int64(anchor))
	require.Less(t, got, int64(anchor)+1000, "the reading follows the log, not the node's extrapolation")
	// The log's later entries move it on as before.
	c.Observe(anchor + 2000)
	require.GreaterOrEqual(t, c.NowMs(), int64(anchor)+2000)
}

// A node whose wall clock is ten minutes ahead agrees with cluster time once
// it has seen an applied entry (docs/DESIGN.md invariant 3).
func TestClockOffsetIgnoredOnceAnchored(t *testing.T) {
	for _, offset := range []time.Duration{10 * time.Minute, -10 * time.Minute} {
		t.Run(offset.String(), func(t *testing.T) {
			cluster := time.Now().UnixMilli()
			c := NewClock(offset)
			c.Observe(cluster)
			got := c.NowMs()
			require.GreaterOrEqual(t, got, cluster)
			require.Less(t, got, cluster+1000, "offset %s leaked into cluster time", offset)
		})
	}
}

// Reading the clock before the first anchor (e.g. to stamp a proposal that
// is then lost) must not leave this node's skew in cluster time afterwards.
func TestClockOffsetReadBeforeAnchorDoesNotStick(t *testing.T) {
	c := NewClock(10 * time.Minute)
	skewed := c.NowMs()
	cluster := time.Now().UnixMilli()
	require.Greater(t, skewed, cluster+9*60_000, "unanchored reads include the offset")

	c.Observe(cluster)
	got := c.NowMs()
	require.GreaterOrEqual(t, got, cluster)
	require.Less(t, got, cluster+1000, "the pre-anchor skew of %dms stuck", skewed-cluster)
	// From then on it never goes backwards.
	for range 100 {
		n := c.NowMs()
		require.GreaterOrEqual(t, n, got)
		got = n
	}
}

func TestClockMonotonicUnderConcurrency(t *testing.T) {
	const anchor = 1_700_000_000_000
	c, _ := clockWithWall(0, wall0)
	c.Observe(anchor)
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			last := int64(0)
			for i := range 2000 {
				if g%2 == 0 && i%50 == 0 {
					// Anchors both behind and ahead of current time.
					c.Observe(anchor + int64((i%200)-100))
				}
				n := c.NowMs()
				if n < last {
					errs <- errors.New("clock went backwards")
					return
				}
				last = n
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	require.GreaterOrEqual(t, c.NowMs(), int64(anchor)+50)
}

// Observe(0) is "no time yet" (e.g. a fresh store's meta) and must not
// anchor the clock at the epoch.
func TestClockObserveZeroDoesNotAnchor(t *testing.T) {
	c, _ := clockWithWall(0, wall0)
	c.Observe(0)
	require.False(t, c.Anchored())
	require.Equal(t, wall0.UnixMilli(), c.NowMs())
}

// A correction agreed with peers moves the unanchored reading (the first
// command of a new cluster) but not the node's own wall reading, and stops
// mattering once the clock is anchored.
func TestClockCorrectionBeforeAnchor(t *testing.T) {
	c := NewClock(10 * time.Minute)
	real := time.Now().UnixMilli()
	require.InDelta(t, real+10*60_000, c.WallMs(), 1000)
	c.Correct(-10 * time.Minute)
	require.InDelta(t, real, c.NowMs(), 1000, "the corrected first reading is the agreed time")
	require.InDelta(t, real+10*60_000, c.WallMs(), 1000, "the node still reports its own wall clock")
	c.Observe(real + 5000)
	c.Correct(time.Hour)
	require.InDelta(t, real+5000, c.NowMs(), 1000, "an anchored clock ignores corrections")
}

// One entry moves cluster time forward by at most MaxStep, never back; a
// new log takes its first time as it is; time that truly passed is caught
// up entry by entry.
func TestStepCapsHowFarOneEntryMovesTime(t *testing.T) {
	step := MaxStep.Milliseconds()
	cases := []struct {
		name          string
		cur, proposed int64
		want          int64
	}{
		{"first time of a new log", 0, 1_700_000_000_000, 1_700_000_000_000},
		{"forward by less than the cap", 5000, 5000 + step - 1, 5000 + step - 1},
		{"forward by exactly the cap", 5000, 5000 + step, 5000 + step},
		{"a clock an hour ahead moves time by the cap only", 5000, 5000 + 3_600_000, 5000 + step},
		{"behind never moves time back", 5000, 4000, 5000},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := Step(c.cur, c.proposed); got != c.want {
				t.Fatalf("Step(%d, %d) = %d, want %d", c.cur, c.proposed, got, c.want)
			}
		})
	}
	now := int64(5000)
	for i := 0; i < 6; i++ {
		now = Step(now, 5000+60_000)
	}
	if now != 5000+60_000 {
		t.Fatalf("a minute of real time is caught up in six entries: got %d", now)
	}
}

// 20001h at the default 2h width is 10,000.5 widths: integer division
// called it 10,000 and the API accepted it while the docs say at most
// 10,000 widths (20,000 h).
func TestValidateSpanRefusesAPartialWidthOverTheLimit(t *testing.T) {
	w := 2 * time.Hour
	if err := ValidateSpan(20000*time.Hour, w); err != nil {
		t.Fatalf("20000h: %v", err)
	}
	for _, r := range []time.Duration{20000*time.Hour + time.Millisecond, 20001 * time.Hour, 20002 * time.Hour} {
		if err := ValidateSpan(r, w); err == nil {
			t.Fatalf("%s accepted", r)
		}
	}
	if err := ValidateSpan(2_000_000*time.Hour, 1000*time.Hour); err != nil { // no overflow for a wide bucket
		t.Fatalf("2000 widths of 1000h: %v", err)
	}
}
