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
	w := fsmWatch{every: fsmWatchTick}
	for {
		select {
		case <-n.stop:
			return
		case <-t.C:
		}
		n.checkFSM(&w, mono.Now())
	}
}

// fsmWatch is the watchdog's memory between ticks.
type fsmWatch struct {
	every   time.Duration // the ticks' period
	call    int64         // start of the call last logged
	logged  int64         // when it was last logged
	longest time.Duration // how long it had run when last logged
	tick    int64         // the previous tick
	resumed int64         // the end of the latest stall of the whole process
}

// fsmStall is how late a tick may come before the watchdog takes the
// process to have been stopped (SIGSTOP, a paused VM or container): no
// call ran meanwhile, so a call is timed from the end of the stall. After
// a whole-cluster pause of 14.6 s a chaos run's follower logged "fsm: a
// call has been running for 15s" and "a slow call returned" of an apply
// that had run for milliseconds on either side of the stop.
const fsmStall = 2 * time.Second

// checkFSM is one tick of the watchdog, at now (mono.Now()).
func (n *Node) checkFSM(w *fsmWatch, now int64) {
	if w.tick != 0 && time.Duration(now-w.tick) > w.every+fsmStall {
		w.resumed = now
	}
	w.tick = now
	b := &n.fsm.busy
	since := b.since.Load()
	if since != w.call && w.call != 0 {
		// The slow call has returned.
		n.log.Warn("fsm: a slow call returned", "call", *b.what.Load(), "took-at-least", w.longest.Round(time.Second))
		w.call = 0
	}
	if since == 0 {
		return
	}
	took := time.Duration(now - max(since, w.resumed))
	if took < fsmSlowAfter || (since == w.call && time.Duration(now-w.logged) < fsmSlowEvery) {
		return
	}
	w.call, w.logged, w.longest = since, now, took
	st := n.raft.Stats()
	n.log.Warn("fsm: a call has been running for "+took.Round(time.Second).String()+"; raft queues what it commits behind it and stops answering its peers once the queue is full",
		"call", *b.what.Load(), "first-index", b.first.Load(), "last-index", b.last.Load(),
		"raft-commit-index", st["commit_index"],
		"raft-applied-index", st["applied_index"], "raft-last-log-index", st["last_log_index"],
		"fsm-queue", st["fsm_pending"], "raft-state", st["state"])
}
