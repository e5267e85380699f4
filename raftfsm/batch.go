package raftfsm

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/hashicorp/raft"

	"github.com/idem-store/idem/engine"
)

// Batches (POST /v1/batch). The client operations of one batch (claim,
// complete, release, extend) become one raft entry that holds them in
// order: one append, one replication round and one fsync for all of them,
// applied in the FSM's Pebble batch of that raft batch, each op with its
// own result. Each op is decided exactly as if it had been proposed alone
// at its place in the batch:
//
//   - Apply runs the ops of an entry one after the other on the same Txn,
//     so an op sees every earlier op of its entry, at the entry's cluster
//     time (one stamp per entry, as for a single command).
//   - A claim's fencing token is the raft index of its entry. Two claims of
//     one entry on the same (principal, key) could both win (a claim, its
//     release, a claim again) and would then share a token; such a claim
//     starts a new entry, so one attempt per scope per entry and tokens of
//     a scope still grow with every attempt.
//   - What the applied state already settles (a replay, a refusal: the
//     peeks of precheck.go) is answered without a log entry, after one read
//     barrier for the whole batch, exactly as proposeUnlessSettled answers
//     a single op. An op is peeked only while no earlier op of the batch
//     that goes to the log touches its (principal, key): that earlier op
//     could change the answer, so the op goes to the log after it and
//     Apply decides it. The refusals a peek gives for other scopes (quota,
//     principal bound) cannot be undone by the batch's earlier ops, which
//     only add keys.
//
// An entry of one op is proposed as that op's own command, which every
// version of idem decodes.

// codecBatch starts a batch entry: byte codecBatch, varint now, varint
// width, uvarint n, then n × (uvarint length, the op's command encoded as
// a single entry is, with now and width zero: the entry's apply to all).
const codecBatch = 0x02

func isBatchEntry(b []byte) bool { return len(b) > 0 && b[0] == codecBatch }

// batchable reports whether op may be part of a batch entry.
func batchable(op Op) bool {
	return op == OpClaim || op == OpComplete || op == OpRelease || op == OpExtend
}

// encodeBatch returns the log bytes of a batch entry of ops.
func encodeBatch(nowMs, widthMs int64, ops []*Command) ([]byte, error) {
	b := make([]byte, 0, 64+len(ops)*160)
	b = append(b, codecBatch)
	b = binary.AppendVarint(b, nowMs)
	b = binary.AppendVarint(b, widthMs)
	b = binary.AppendUvarint(b, uint64(len(ops)))
	for i, c := range ops {
		if !batchable(c.Op) {
			return nil, fmt.Errorf("raftfsm: encode batch: op %d (%d) may not be batched", i, c.Op)
		}
		sub := *c
		sub.NowMs, sub.WidthMs = 0, 0
		e, err := sub.Encode()
		if err != nil {
			return nil, fmt.Errorf("raftfsm: encode batch op %d: %w", i, err)
		}
		b = binary.AppendUvarint(b, uint64(len(e)))
		b = append(b, e...)
	}
	return b, nil
}

// decodeBatch splits a batch entry into its stamp and its ops' bytes.
func decodeBatch(b []byte) (nowMs, widthMs int64, ops [][]byte, err error) {
	d := decoder{b: b}
	if d.byte() != codecBatch {
		return 0, 0, nil, fmt.Errorf("%w: not a batch entry", ErrBadCommand)
	}
	nowMs, widthMs = d.varint(), d.varint()
	n := d.uvarint()
	if d.err == nil && n > uint64(len(d.b)) {
		return 0, 0, nil, fmt.Errorf("%w: batch of %d ops in %d bytes", ErrBadCommand, n, len(d.b))
	}
	ops = make([][]byte, 0, n)
	for i := uint64(0); i < n && d.err == nil; i++ {
		ops = append(ops, d.bytes())
	}
	if d.err != nil {
		return 0, 0, nil, fmt.Errorf("%w: batch: %w", ErrBadCommand, d.err)
	}
	if len(d.b) != 0 {
		return 0, 0, nil, fmt.Errorf("%w: batch: %d trailing bytes", ErrBadCommand, len(d.b))
	}
	return nowMs, widthMs, ops, nil
}

// applyBatch applies the ops of a batch entry in order on txn, each with
// its own result. An op that does not decode is refused alone: the bytes
// are the same on every replica, so is the refusal.
func (f *FSM) applyBatch(txn *engine.Txn, l *raft.Log) *ApplyResult {
	res := &ApplyResult{Index: l.Index}
	nowMs, widthMs, ops, err := decodeBatch(l.Data)
	if err != nil {
		res.Err = err
		return res
	}
	now := f.advance(txn, nowMs, widthMs)
	res.NowMs = now
	res.Batch = make([]*ApplyResult, len(ops))
	for i, b := range ops {
		c, err := DecodeCommand(b)
		switch {
		case err != nil:
			res.Batch[i] = &ApplyResult{Index: l.Index, Err: err}
		case !batchable(c.Op):
			res.Batch[i] = &ApplyResult{Index: l.Index, Err: fmt.Errorf("%w: op %d in a batch", ErrBadCommand, c.Op)}
		default:
			res.Batch[i] = f.applyOp(txn, c, l.Index, now)
		}
	}
	return res
}

// BatchOp is one operation of a batch: a claim (Claim), or a complete
// (Target, Response), release (Target) or extend (Target, LeaseMs) of the
// attempt whose token Target carries.
type BatchOp struct {
	Op       Op
	Claim    *engine.ClaimArgs
	Target   *engine.TokenArgs
	Response *engine.Response
	LeaseMs  int64
}

// BatchResult is the decision of one op of a batch, as the op's own method
// (Claim, Complete, Release, Extend) would return it: its result, or the
// error that method would return. Index is the raft index of the entry
// that decided a claim (its token).
type BatchResult struct {
	engine.Result
	Index uint64
	Err   error
}

// Batch decides ops in order, each as its own method would decide it had
// it been called alone at its place (see the comment at the top of this
// file), and returns one result per op, in order. Ops the applied state
// settles add no log entry; the others go to the log in as few entries as
// fencing allows (usually one).
func (n *Node) Batch(ops []BatchOp) []BatchResult {
	start := time.Now()
	out := make([]BatchResult, len(ops))
	cmds := make([]*Command, len(ops))
	for i := range ops {
		cmds[i], out[i].Err = n.batchCommand(&ops[i])
	}
	// What the applied state settles, in order, with one barrier.
	var logged []int
	touched := map[string]bool{}
	barrier := 0 // 0: not taken yet; 1: taken; -1: failed (everything goes to the log)
	for i, c := range cmds {
		if c == nil {
			continue
		}
		if c.Op == OpClaim {
			// While the leader checks credential caps itself, the claims
			// it lets through count for the ones after them (in this batch
			// or another) until they are decided.
			r, refused, release, term, err := n.capGate(c.Claim)
			defer release()
			if err != nil {
				out[i].Err = err
				continue
			}
			c.capTerm = term
			if refused {
				out[i].Result = r
				continue
			}
		}
		k := touchKey(c)
		if !touched[k] {
			if r, ok := n.settledInBatch(c, &barrier); ok {
				out[i].Result = r
				continue
			}
		}
		touched[k] = true
		logged = append(logged, i)
	}
	for _, entry := range splitEntries(cmds, logged) {
		n.proposeFitting(cmds, entry, out)
	}
	for i, c := range cmds {
		if c == nil || out[i].Err != nil {
			continue
		}
		out[i].Result, out[i].Err = n.batchDecided(c.Op, out[i].Result, start)
	}
	return out
}

// batchCommand is the command of op, sealed as its own method seals it.
func (n *Node) batchCommand(op *BatchOp) (*Command, error) {
	bad := func(what string) error {
		return fmt.Errorf("%w: %w: batch op %d without %s", ErrNotProposed, ErrBadCommand, op.Op, what)
	}
	switch op.Op {
	case OpClaim:
		if op.Claim == nil {
			return nil, bad("claim")
		}
		a := *op.Claim
		n.stampRetention(&a)
		term, err := n.sealClaim(&a)
		if err != nil {
			return nil, err
		}
		return &Command{Op: OpClaim, Claim: &a, sealTerm: term}, nil
	case OpComplete:
		if op.Target == nil || op.Response == nil {
			return nil, bad("target and response")
		}
		sealed, term, err := n.sealComplete(*op.Target, op.Response)
		if err != nil {
			return nil, err
		}
		return &Command{Op: OpComplete, Target: op.Target, Response: sealed, sealTerm: term}, nil
	case OpRelease:
		if op.Target == nil {
			return nil, bad("target")
		}
		return &Command{Op: OpRelease, Target: op.Target}, nil
	case OpExtend:
		if op.Target == nil {
			return nil, bad("target")
		}
		return &Command{Op: OpExtend, Target: op.Target, LeaseMs: op.LeaseMs}, nil
	}
	return nil, fmt.Errorf("%w: %w: op %d may not be batched", ErrNotProposed, ErrBadCommand, op.Op)
}

// touchKey names the record an op touches: its principal and key. The
// endpoint is left out, so with --scope principal two endpoints of one key
// are one record; with endpoint scopes that only orders a little more.
func touchKey(c *Command) string {
	var s engine.Scope
	if c.Claim != nil {
		s = c.Claim.Scope
	} else if c.Target != nil {
		s = c.Target.Scope
	}
	return string(engine.AppendScope(nil, engine.Scope{Principal: s.Principal, Key: s.Key}, true))
}

// settledInBatch is settled (precheck.go) with one read barrier for the
// whole batch: the barrier makes the applied state hold every write
// acknowledged before it, which is after the batch arrived.
func (n *Node) settledInBatch(c *Command, barrier *int) (engine.Result, bool) {
	if n.fsm.skipUniqueness || n.closing.Load() || n.raft.State() != raft.Leader {
		return engine.Result{}, false
	}
	peek := n.peeker(c)
	if peek == nil {
		return engine.Result{}, false
	}
	if _, ok := peek(n.firstLookMs()); !ok { // at the time it would stamp (settled)
		return engine.Result{}, false
	}
	if *barrier == 0 {
		ctx, cancel := context.WithTimeout(context.Background(), n.cfg.ApplyTimeout)
		*barrier = 1
		if n.readBarrier(ctx) != nil {
			*barrier = -1
		}
		cancel()
	}
	if *barrier < 0 {
		return engine.Result{}, false
	}
	return peek(n.stampMs())
}

// splitEntries groups the logged ops (indexes into cmds, in order) into
// entries: a claim whose (principal, key) an earlier claim of the entry
// named starts the next one, so no two attempts of a record share a token.
func splitEntries(cmds []*Command, logged []int) [][]int {
	var entries [][]int
	var cur []int
	claimed := map[string]bool{}
	for _, i := range logged {
		if cmds[i].Op == OpClaim {
			k := touchKey(cmds[i])
			if claimed[k] {
				entries = append(entries, cur)
				cur, claimed = nil, map[string]bool{}
			}
			claimed[k] = true
		}
		cur = append(cur, i)
	}
	if len(cur) > 0 {
		entries = append(entries, cur)
	}
	return entries
}

// proposeFitting commits the ops of entry (indexes into cmds, in order)
// as one entry and puts each op's result in out. An entry over
// MaxEntryBytes is proposed as two halves, in order, each halved again as
// needed: nothing of a refused entry was proposed, and ops that each fit
// must not be refused because the batch put them together (the client's
// Batcher packs the calls of unrelated callers into one request). Only an
// op too large alone is refused with ErrEntryTooLarge.
func (n *Node) proposeFitting(cmds []*Command, entry []int, out []BatchResult) {
	subs := make([]*Command, len(entry))
	for j, i := range entry {
		subs[j] = cmds[i]
	}
	rs, err := n.proposeEntry(subs)
	if len(entry) > 1 && errors.Is(err, ErrEntryTooLarge) {
		half := len(entry) / 2
		n.proposeFitting(cmds, entry[:half], out)
		n.proposeFitting(cmds, entry[half:], out)
		return
	}
	for j, i := range entry {
		if err != nil {
			out[i].Err = err
			continue
		}
		out[i].Result, out[i].Index, out[i].Err = rs[j].Result, rs[j].Index, rs[j].Err
	}
}

// proposeEntry commits ops as one entry and returns each op's result. One
// op is proposed as its own command. It keeps propose's order of checks:
// shutdown, leadership, disk space, the term's barrier, then the stamp.
func (n *Node) proposeEntry(ops []*Command) ([]*ApplyResult, error) {
	if len(ops) == 1 {
		r, err := n.propose(ops[0])
		if err != nil && (r == nil || r.Err == nil) {
			return nil, err
		}
		return []*ApplyResult{r}, nil
	}
	if n.closing.Load() {
		return nil, fmt.Errorf("%w: %w", ErrShutdown, ErrNotProposed)
	}
	if n.raft.State() != raft.Leader {
		return nil, n.notLeader()
	}
	for _, c := range ops {
		if err := n.disk.admit(c.Op); err != nil {
			return nil, err
		}
		if err := n.votersRoom(c.Op); err != nil {
			return nil, err
		}
	}
	if err := n.proposalBarrier(); err != nil {
		return nil, err
	}
	for _, c := range ops {
		if err := n.checkProposal(c); err != nil {
			return nil, err
		}
	}
	data, err := encodeBatch(n.stampMs(), n.widthMs, ops)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrNotProposed, err)
	}
	release, err := n.disk.reserve(len(data))
	if err != nil {
		return nil, err
	}
	r, err := n.applyClientEntry(data, release)
	if err != nil {
		return nil, err
	}
	if len(r.Batch) != len(ops) {
		return nil, fmt.Errorf("%w: %d results for %d ops", ErrBadCommand, len(r.Batch), len(ops))
	}
	return r.Batch, nil
}

// batchDecided counts a decided op as its own method does and decrypts
// the record it returns.
func (n *Node) batchDecided(op Op, r engine.Result, start time.Time) (engine.Result, error) {
	switch op {
	case OpClaim:
		observeSince(n.metrics.ClaimLatency, start)
		n.metrics.Claims.WithLabelValues(r.Outcome.String()).Inc()
		if r.Takeover {
			n.metrics.Takeovers.Inc()
		}
		return n.opened("claim", r, r.Outcome == engine.OutcomeReplay)
	case OpComplete:
		n.metrics.Completes.WithLabelValues(r.Outcome.String()).Inc()
		return n.opened("complete", r, r.Outcome == engine.OutcomeCompleted)
	case OpRelease:
		n.metrics.Releases.WithLabelValues(r.Outcome.String()).Inc()
		return n.opened("release", r, false)
	case OpExtend:
		n.metrics.Extends.WithLabelValues(r.Outcome.String()).Inc()
		return n.opened("extend", r, false)
	}
	return r, nil
}
