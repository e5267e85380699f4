package raftfsm

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/hashicorp/raft"
)

// The cluster's first claim pins the retention of the leader that decides
// it (engine.Txn.Claim). Nodes that bootstrap together compare their
// --retention, and a node joined later with another stays a non-voter
// (otherRetention); but a voter restarted with another --retention before
// that first claim was neither refused nor held back, and leading the
// first claim it pinned its own for every node: a cluster whose nodes run
// with --retention 24h gave its records an hour. An unpinned leader now
// decides a claim only when its own --retention is the one most voters
// run with, or no voter is known to differ; otherwise it refuses the
// claim (RetentionHeldError, nothing proposed) and hands the leadership to
// a healthy voter whose --retention most voters share, when there is one.

// retentionViewWait is how long a claim that would pin the cluster's
// retention waits for its leader's first health round of the term (a
// round asks every member within probeTimeout, every probeEvery). Past
// it the claim is decided without one: the voters' flags are then not
// known, as when their HTTP API cannot be reached.
const retentionViewWait = probeEvery + probeTimeout + 500*time.Millisecond

// retentionView is what the leader's health loop last saw of its voters'
// --retention (noteVoterRetention), for the write path.
type retentionView struct {
	term uint64
	// flags is every voter's --retention by id (this leader's own
	// included), 0 for one not known: it did not answer this term, or
	// runs a release that does not say.
	flags map[string]time.Duration
	// healthy are the voters the health checks judge healthy, for a
	// hand-off.
	healthy map[string]bool
	// denied are the voters whose last check this term was refused for
	// this leader's node token (a wrong one, or none): running, with a
	// --retention this leader cannot read.
	denied map[string]bool
}

// noteVoterRetention, run by the leader's health loop after its checks
// of the round, stores the view retentionHold reads. It costs nothing
// once the retention is pinned.
func (n *Node) noteVoterRetention() {
	if n.cfg.Retention <= 0 || n.db.Meta().RetentionMs != 0 {
		return
	}
	f := n.raft.GetConfiguration()
	if f.Error() != nil {
		return
	}
	now, term := time.Now(), n.term()
	v := &retentionView{term: term, flags: map[string]time.Duration{}, healthy: map[string]bool{}, denied: map[string]bool{}}
	n.peers.mu.Lock()
	defer n.peers.mu.Unlock()
	if n.peers.term != term {
		// The round measured another term: this node lost the leadership
		// during it (a candidate now, or leading again). Stamped with this
		// term, a view knowing no voter's flag let the first claim pin this
		// leader's --retention unchecked: the next round of this term
		// stores the view (a claim waits for it).
		return
	}
	for _, s := range f.Configuration().Servers {
		id := string(s.ID)
		if s.Suffrage != raft.Voter {
			continue
		}
		if id == n.self.ID {
			v.flags[id] = n.cfg.Retention
			continue
		}
		v.flags[id] = 0
		h := n.peers.byID[id]
		if h != nil && h.err != "" && h.denied {
			v.denied[id] = true
		}
		if h == nil || h.answeredAt.IsZero() || h.err != "" {
			continue
		}
		if d, err := time.ParseDuration(h.retention); err == nil && d > 0 {
			v.flags[id] = d
		}
		if ok, _ := n.judge(h, s.ID, now); ok {
			v.healthy[id] = true
		}
	}
	n.retView.Store(v)
}

// RetentionHeldError is a claim an unpinned leader refused rather than pin
// its own --retention, which is not the one most of the cluster's voters
// run with. Nothing was proposed.
type RetentionHeldError struct {
	// Leader is the refusing leader's id and Retention its --retention;
	// Flags names every voter's ("n1 24h0m0s", "n3 not known").
	Leader    string
	Retention time.Duration
	Flags     []string
	// HandingTo is the voter the leadership is being handed to, "" when
	// none is known to run with the --retention most voters share.
	HandingTo string
	// Denied are the voters that refuse this leader's node token (it has
	// a wrong one, or none): their --retention is not known here, and
	// when no voter is known to run with the one most share, the
	// leadership goes to another voter, which can read them (HandingOff).
	Denied     []string
	HandingOff bool
}

func (e *RetentionHeldError) Error() string { return "raftfsm: claim refused: " + e.Detail() }

// Unwrap makes the refusal an ErrNotProposed: a follower that forwarded
// the claim may try the next leader, and a batch may retry the op.
func (e *RetentionHeldError) Unwrap() error { return ErrNotProposed }

// Detail is the refusal for a client and an operator.
func (e *RetentionHeldError) Detail() string {
	runWith, isNot := "its voters run with different --retention", "it is not the one"
	if len(e.Denied) > 0 {
		runWith, isNot = "its voters' --retention is not all known", "it is not known to be the one"
	}
	s := fmt.Sprintf("no claim has pinned this cluster's retention yet, and %s (%s): the first claim would pin the leader's (%s, %s) for every node, and %s most voters run with, so the leader refuses claims; nothing was stored. ",
		runWith, strings.Join(e.Flags, ", "), e.Leader, e.Retention, isNot)
	if e.HandingTo != "" {
		return s + fmt.Sprintf("The leadership is moving to %s, whose --retention most voters share; retry shortly. An operator should restart %s with the others' --retention", e.HandingTo, e.Leader)
	}
	if len(e.Denied) > 0 {
		s += fmt.Sprintf("The leader cannot read the --retention of %s: they refuse its node token (%s has no --node-token-file, or their --auth-file lacks its entry). ", strings.Join(e.Denied, ", "), e.Leader)
		if e.HandingOff {
			return s + "The leadership is moving to another voter, which can; retry shortly"
		}
	}
	return s + "An operator must restart the odd nodes with the --retention the cluster should keep, or pin it (idem cluster set-retention --retention D); retry once done"
}

// retentionHold is asked by propose before it proposes c, after the
// term's barrier and the stamp: a claim that would pin the cluster's
// retention (none is pinned, and the state was not started by an earlier
// release, which pins nothing: engine.Txn.Claim) is refused while this
// leader's --retention is not one most voters run with and some voter is
// known to run with another.
func (n *Node) retentionHold(c *Command) error {
	if c.Op != OpClaim || c.Claim == nil || n.cfg.Retention <= 0 {
		return nil
	}
	if m := n.db.Meta(); m.RetentionMs != 0 || m.MaxRetentionMs != 0 {
		return nil
	}
	f := n.raft.GetConfiguration()
	if f.Error() != nil {
		return nil
	}
	voters := 0
	for _, s := range f.Configuration().Servers {
		if s.Suffrage == raft.Voter {
			voters++
		}
	}
	if voters <= 1 {
		return nil
	}
	v := n.awaitRetentionView()
	if v == nil {
		return nil
	}
	same, differs := 0, len(v.denied) > 0
	for _, d := range v.flags {
		switch {
		case d == n.cfg.Retention:
			same++
		case d != 0:
			differs = true
		}
	}
	if !differs || same > len(v.flags)/2 {
		return nil
	}
	err := &RetentionHeldError{Leader: n.self.ID, Retention: n.cfg.Retention, HandingTo: v.handOffTarget(n.self.ID)}
	for _, id := range slices.Sorted(maps.Keys(v.flags)) {
		switch d := v.flags[id]; {
		case d != 0:
			err.Flags = append(err.Flags, id+" "+d.String())
		case v.denied[id]:
			err.Flags = append(err.Flags, id+" not known (refuses this leader's node token)")
			err.Denied = append(err.Denied, id)
		default:
			err.Flags = append(err.Flags, id+" not known")
		}
	}
	// A leader whose node token the voters refuse cannot tell: another
	// voter can. Spaced widely, as every voter may lack the token.
	err.HandingOff = err.HandingTo == "" && len(err.Denied) > 0
	if err.HandingOff && n.retAnyHandOff.Allow(10*time.Second) {
		go func() {
			if terr := n.transferLeadership(context.Background(), "", transferHandOff); terr != nil {
				n.log.Warn("leadership transfer away from a leader that cannot read the voters' --retention failed", "error", terr)
			}
		}()
	}
	if err.HandingTo != "" && n.retHandOff.Allow(probeEvery) {
		go func() {
			if terr := n.transferLeadership(context.Background(), err.HandingTo, transferHandOff); terr != nil {
				n.log.Warn("leadership transfer to a voter with the --retention most voters run with failed", "to", err.HandingTo, "error", terr)
			}
		}()
	}
	if n.retLogged.Allow(10 * time.Second) {
		n.log.Error("refusing claims: no claim has pinned the cluster's retention and this leader's --retention is not the one most voters run with (the first claim would pin it for every node); restart the odd nodes with the --retention the cluster should keep, or pin it with idem cluster set-retention",
			"retention", n.cfg.Retention, "voters", strings.Join(err.Flags, ", "), "handing-to", err.HandingTo)
	}
	return err
}

// handOffTarget is a healthy voter other than self whose --retention is
// the one most voters run with, or "".
func (v *retentionView) handOffTarget(self string) string {
	count := map[time.Duration]int{}
	for _, d := range v.flags {
		if d != 0 {
			count[d]++
		}
	}
	for _, id := range slices.Sorted(maps.Keys(v.healthy)) {
		if id != self && count[v.flags[id]] > len(v.flags)/2 {
			return id
		}
	}
	return ""
}

// awaitRetentionView is this term's view, waiting up to retentionViewWait
// for a new leader's first health round; nil when there is none by then,
// or this node no longer leads.
func (n *Node) awaitRetentionView() *retentionView {
	deadline := time.Now().Add(retentionViewWait)
	for {
		term := n.term()
		if v := n.retView.Load(); v != nil && v.term == term {
			return v
		}
		if time.Now().After(deadline) || n.raft.State() != raft.Leader {
			return nil
		}
		select {
		case <-n.stop:
			return nil
		case <-time.After(20 * time.Millisecond):
		}
	}
}
