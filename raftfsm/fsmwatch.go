package raftfsm

import (
	"sync/atomic"
	"time"

	"github.com/idem-store/idem/internal/mono"
)

// raft hands the FSM one batch (or a restore, or a snapshot) at a time, from
// one goroutine, and queues at most 128 batches in front of it: an FSM call
// that does not return soon backs raft up until its main loop stops taking
// RPCs, and the node falls silent without a word in its log. The watchdog
// says so while it lasts.

// fsmSlowAfter is how long one FSM call may run before the watchdog logs
// it; it logs again every fsmSlowEvery while the call goes on.
var (
	fsmSlowAfter = 5 * time.Second
	fsmSlowEvery = 10 * time.Second
	fsmWatchTick = time.Second
)

// fsmBusy is what the FSM is doing now.
type fsmBusy struct {
	since       atomic.Int64 // mono.Now() when the current call started; 0 when idle
	what        atomic.Pointer[string]
	first, last atomic.Uint64 // raft indexes of the batch (0 for a restore)
}

// begin marks the start of an FSM call; the returned func marks its end.
func (b *fsmBusy) begin(what string, first, last uint64) func() {
	b.what.Store(&what)
	b.first.Store(first)
	b.last.Store(last)
	b.since.Store(mono.Now())
	return func() { b.since.Store(0) }
}

// watchFSM logs an FSM call that runs longer than fsmSlowAfter, with what
// raft has queued behind it, until the node stops.
func (n *Node) watchFSM() {
	defer n.wg.Done()
	t := time.NewTicker(fsmWatchTick)
	defer t.Stop()
	var call int64       // start of the call last logged
	var logged time.Time // when it was last logged
	var longest time.Duration
	for {
		select {
		case <-n.stop:
			return
		case <-t.C:
		}
		b := &n.fsm.busy
		since := b.since.Load()
		if since != call && call != 0 {
			// The slow call has returned.
			n.log.Warn("fsm: a slow call returned", "call", *b.what.Load(), "took-at-least", longest.Round(time.Second))
			call = 0
		}
		if since == 0 {
			continue
		}
		took := mono.Since(since)
		if took < fsmSlowAfter || (since == call && time.Since(logged) < fsmSlowEvery) {
			continue
		}
		call, logged, longest = since, time.Now(), took
		st := n.raft.Stats()
		n.log.Warn("fsm: a call has been running for "+took.Round(time.Second).String()+"; raft queues what it commits behind it and stops answering its peers once the queue is full",
			"call", *b.what.Load(), "first-index", b.first.Load(), "last-index", b.last.Load(),
			"raft-commit-index", st["commit_index"],
			"raft-applied-index", st["applied_index"], "raft-last-log-index", st["last_log_index"],
			"fsm-queue", st["fsm_pending"], "raft-state", st["state"])
	}
}
