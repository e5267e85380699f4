package raftfsm

import (
	"testing"
	"time"
)

// A spacer lets the first action through at once, then one per interval.
// (It reads the monotonic clock, internal/mono: a wall clock stepped back
// no longer holds it shut for the length of the step.)
func TestSpacer(t *testing.T) {
	var s spacer
	if !s.allow(time.Hour) {
		t.Fatal("the first action was held back")
	}
	if s.allow(time.Hour) {
		t.Fatal("a second action within the interval was let through")
	}
	time.Sleep(30 * time.Millisecond)
	if !s.allow(20 * time.Millisecond) {
		t.Fatal("an action after the interval was held back")
	}
}
