package raftfsm

import (
	"time"

	"github.com/hashicorp/raft"
)

// appendRetryPause is how long a follower that refused a leader's append
// for the room applying it would take (above its threshold: it goes on as
// its applies finish) holds its answer (paceRefused): the leader's next
// try comes that long after its last, and no later.
var appendRetryPause = 500 * time.Millisecond

// A follower whose disk is under its threshold holds its refusal until
// it has room again, reading the free space every appendRoomPoll, and at
// most appendFullHold: a full disk may stay so for hours, and each try
// resends up to 512 entries (of up to --max-response-bytes each), which a
// try every half second would send 20 times as often as raft's own
// back-off did; a leader stopping waits for the answer, so not much
// longer.
var (
	appendFullHold = 2 * time.Second
	appendRoomPoll = 100 * time.Millisecond
)

// paceRefused keeps a leader retrying, at a steady pace, an append this
// follower refuses for lack of disk space (diskGuard.admitAppend). Raft's
// leader counts each refused append as a failure and waits longer after
// each (10 ms doubling, up to about 10 s): a follower whose disk had been
// full for some seconds waited up to 10 s after its space was freed before
// the leader tried it again (10.3, 10.4, 10.7 and 11.0 s of five tries on
// real processes, and 0.5 s once), and another follower's refusal kept a
// write waiting as long. Such a refusal's answer now asks the leader not to
// back off (raft's NoRetryBackoff, which its own answers set for a log that
// does not match) and reaches it later (holdRefusal) from a goroutine of
// its own: raft's loop goes on at once, and its heartbeats and votes come
// outside this connection. On a full disk the answer goes as soon as the
// disk has room again, or after appendFullHold: the leader tries about
// every 2 s while the disk stays full (it sends no faster: it waits for
// each answer, pipelining being off), and within appendRoomPoll of space
// returning, when admitAppend, which reads the free space again at each
// append while the disk is full, takes the entries. A follower refusing
// only until its applies finish answers after appendRetryPause.
//
// Only an append with entries, while the disk guard refuses appends (its
// disk under the threshold, or an append refused since the last it took)
// is watched; the pause applies only when this very append was refused
// for space (refusals moved), never to one refused for another reason.
func (g *foreignGuard) paceRefused(rpc raft.RPC) raft.RPC {
	c, ok := rpc.Command.(*raft.AppendEntriesRequest)
	if !ok || len(c.Entries) == 0 || g.disk == nil || !g.disk.refusing() {
		return rpc
	}
	before := g.disk.refusals.Load()
	answer := make(chan raft.RPCResponse, 1)
	to := rpc.RespChan
	rpc.RespChan = answer
	go func() {
		var r raft.RPCResponse
		select {
		case r = <-answer:
		case <-g.stop:
			return // the transport stops with the node and stops waiting
		}
		if resp, ok := r.Response.(*raft.AppendEntriesResponse); ok && r.Error == nil && !resp.Success && g.disk.refusals.Load() != before {
			resp.NoRetryBackoff = true
			g.disk.holdRefusal(g.stop)
		}
		to <- r
	}()
	return rpc
}

// refusing says whether this follower refuses appends for lack of disk
// space now: its disk is under the threshold, or its last append was
// refused for the room applying it would take (admitAppend).
func (g *diskGuard) refusing() bool {
	return g.minFree != 0 && (g.full.Load() || g.appendRefusedAt.Load() != 0)
}

// holdRefusal waits before a refused append's answer goes back
// (paceRefused): on a disk under its threshold until it has room again or
// appendFullHold has passed, otherwise appendRetryPause.
func (g *diskGuard) holdRefusal(stop <-chan struct{}) {
	if !g.full.Load() {
		t := time.NewTimer(appendRetryPause)
		defer t.Stop()
		select {
		case <-t.C:
		case <-stop:
		}
		return
	}
	tick := time.NewTicker(appendRoomPoll)
	defer tick.Stop()
	for end := time.Now().Add(appendFullHold); time.Now().Before(end); {
		select {
		case <-tick.C:
		case <-stop:
			return
		}
		if g.read() == nil && g.free.Load() >= g.fullBelow {
			return // room again: the leader's next try is taken
		}
	}
}
