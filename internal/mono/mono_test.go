package mono

import (
	"testing"
	"time"
)

func TestNowIsNeverZeroAndNeverGoesBack(t *testing.T) {
	prev := Now()
	if prev <= 0 {
		t.Fatalf("Now() = %d, want > 0", prev)
	}
	for range 1000 {
		n := Now()
		if n < prev {
			t.Fatalf("Now() went back: %d after %d", n, prev)
		}
		prev = n
	}
}

func TestSince(t *testing.T) {
	if Since(0) < 100*365*24*time.Hour {
		t.Fatalf("Since(0) = %s: 0 must count as long ago", Since(0))
	}
	t0 := Now()
	time.Sleep(20 * time.Millisecond)
	if d := Since(t0); d < 20*time.Millisecond {
		t.Fatalf("Since = %s after a 20ms sleep", d)
	}
}

// A Spacer lets the first action through at once, then one per interval.
func TestSpacer(t *testing.T) {
	var s Spacer
	if !s.Allow(time.Hour) {
		t.Fatal("the first action was held back")
	}
	if s.Allow(time.Hour) {
		t.Fatal("a second action within the interval was let through")
	}
	time.Sleep(30 * time.Millisecond)
	if !s.Allow(20 * time.Millisecond) {
		t.Fatal("an action after the interval was held back")
	}
	s.Reset()
	if !s.Allow(time.Hour) {
		t.Fatal("the first action after a Reset was held back")
	}
}
