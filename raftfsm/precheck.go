package raftfsm

import (
	"context"

	"github.com/hashicorp/raft"

	"github.com/idem-store/idem/engine"
)

// proposeUnlessSettled is propose for client operations, except that an
// operation the leader's applied state already decides without a write (a
// claim over quota or over the principal bound, a replay, an in_progress,
// a not_found or token_mismatch, ...; engine's Peek* list them) is answered
// from that state and adds no log entry: refusals cost a read instead of a
// replicated, fsynced write, and a flood of them no longer grows the log.
//
// A peek is trusted only after the read barrier of linearizable reads
// (this node leads, and has applied every entry committed before the
// barrier), and it is taken again after it: the answer then reflects every
// write acknowledged before the request arrived, as the log would have.
// Everything else, and every case where the barrier fails, goes through
// propose, and Apply decides it as before.
func (n *Node) proposeUnlessSettled(c *Command) (*ApplyResult, error) {
	var r *ApplyResult
	var ok bool
	// A read the disk failed is answered, not proposed: the apply would
	// meet it too and stop the node.
	if err := readStore(n.log, func() { r, ok = n.settled(c) }); err != nil {
		return nil, err
	}
	if ok {
		return r, nil
	}
	return n.propose(c)
}

func (n *Node) settled(c *Command) (*ApplyResult, bool) {
	// The injected bug lives in Apply: every claim must reach it, or the
	// chaos check could not catch it.
	if n.fsm.skipUniqueness || n.closing.Load() || n.raft.State() != raft.Leader {
		return nil, false
	}
	peek := n.peeker(c)
	if peek == nil {
		return nil, false
	}
	// A first look at the state as it is: almost every operation writes,
	// and those pay no barrier. Judged at the time this leader would stamp
	// the command (firstLookMs: stampMs without moving the clock, before the
	// term barrier), not its clock's reading: after a pause the
	// reading runs past it, and a record cluster time still held live was
	// answered not_found.
	if _, ok := peek(n.firstLookMs()); !ok {
		return nil, false
	}
	ctx, cancel := context.WithTimeout(context.Background(), n.cfg.ApplyTimeout)
	defer cancel()
	if err := n.readBarrier(ctx); err != nil {
		return nil, false // propose answers, or fails the same way
	}
	res, ok := peek(n.stampMs())
	if !ok {
		return nil, false
	}
	return &ApplyResult{Result: res}, true
}

// peeker returns the engine peek of a command, or nil for a command that
// is always proposed.
func (n *Node) peeker(c *Command) func(nowMs int64) (engine.Result, bool) {
	switch {
	case c.Op == OpClaim && c.Claim != nil:
		return func(now int64) (engine.Result, bool) { return n.db.PeekClaim(*c.Claim, now) }
	case c.Target == nil:
		return nil
	case c.Op == OpComplete && c.Response != nil:
		return func(now int64) (engine.Result, bool) { return n.db.PeekComplete(*c.Target, c.Response, now) }
	case c.Op == OpRelease:
		return func(now int64) (engine.Result, bool) { return n.db.PeekRelease(*c.Target, now) }
	case c.Op == OpExtend:
		return func(now int64) (engine.Result, bool) { return n.db.PeekExtend(*c.Target, now) }
	case c.Op == OpDelete:
		return func(now int64) (engine.Result, bool) { return n.db.PeekDelete(c.Target.Scope, now) }
	}
	return nil
}
