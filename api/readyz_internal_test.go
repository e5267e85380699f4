package api

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// /readyz on a follower asked the leader for its commit index once per
// call, and the leader counts those requests against its --max-inflight:
// clients polling followers could fill it. The callers that come while a
// request is on its way now share the next one, and none gets an answer
// the leader gave before its call began.
func TestReadyzProbesOfTheLeaderAreShared(t *testing.T) {
	var p sharedProbe
	var runs atomic.Int64
	gate := make(chan struct{})
	probe := func() (uint64, error) {
		n := runs.Add(1)
		<-gate
		return uint64(n), nil
	}
	const callers = 20
	type answer struct{ before, got uint64 }
	answers := make(chan answer, callers+1)
	call := func() {
		before := uint64(runs.Load())
		v, err := p.do(context.Background(), "leader:7070", probe)
		if err != nil {
			t.Error(err)
		}
		answers <- answer{before, v}
	}
	go call() // starts the first request, held at the gate
	waitUntil(t, func() bool { return runs.Load() == 1 })
	var wg sync.WaitGroup
	for range callers {
		wg.Add(1)
		go func() { defer wg.Done(); call() }()
	}
	// All of them wait, sharing the run after the one on its way.
	waitUntil(t, func() bool {
		p.mu.Lock()
		defer p.mu.Unlock()
		c := p.next["leader:7070"]
		return c != nil && c.waiters == callers
	})
	close(gate)
	wg.Wait()
	for range callers + 1 {
		a := <-answers
		if a.got <= a.before {
			t.Errorf("a caller got the answer of run %d, which began before its call (run %d had)", a.got, a.before)
		}
	}
	if n := runs.Load(); n != 2 {
		t.Errorf("%d callers made %d requests to the leader; want 2 (the one on its way, then one for all who came meanwhile)", callers+1, n)
	}

	// A caller that gives up does not stop the run for the others.
	gate = make(chan struct{})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := p.do(ctx, "leader:7070", probe); !errors.Is(err, context.Canceled) {
		t.Fatalf("a cancelled caller got %v", err)
	}
	close(gate)
	v, err := p.do(context.Background(), "leader:7070", probe)
	if err != nil || v < 3 {
		t.Fatalf("after a cancelled caller: %d, %v", v, err)
	}
}

func waitUntil(t *testing.T, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met in 10 s")
		}
		time.Sleep(time.Millisecond)
	}
}
