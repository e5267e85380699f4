package raftfsm

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/hashicorp/raft"
)

// A caught-up non-voter the leader keeps one (notPromotable: its state
// lacks records the others hold, having skipped entries on an earlier
// release; or it runs with another --scope, or lacks a key the stored
// values need) answered /readyz 200 and consistency=stale reads from its
// own state: a load balancer routing reads by /readyz sent them there, and
// a key the cluster holds could be read as absent. Writes and linearizable
// reads go to the leader, so only those reads were wrong.
//
// Only the leader knows (it compares the node's answer with its own
// state: a node upgraded on a data dir that skipped capped claims cannot
// tell from its own state that it lacks them). So a non-voter asks the
// leader, at each round of the health loop, for its status, the one the
// leader's measurements fill, and reads its own member's not_promoted.
// While the leader names a reason, this node is kept back: /readyz answers
// 503 with it (the api package), and Lookup refuses stale reads with a
// KeptBackError. It is cleared once the node is a voter, or once the
// leader, having measured it, has not named a reason in keptClearAfter
// answers in a row: a single answer without one (a leader that just took
// over and has not measured it, a round in which it was not caught up) is
// no proof its state is whole. An answer that does not come, or comes from
// a node that does not lead, changes nothing: a kept node stays so while
// no leader is heard, when stale reads are the only reads it serves.
//
// A node that starts (again) is not kept until it has asked: the leader
// names a reason only once it has measured the node, a second or so.

// keptClearAfter is how many answers in a row from the leader, each
// measuring this node and naming no reason, clear the mark.
const keptClearAfter = 3

// keptState is Node.kept.
type keptState struct {
	mu     sync.Mutex
	why    string    // the leader's not_promoted; "" when not kept
	leader string    // the leader that said it
	since  time.Time // when this node first learned it
	clean  int       // answers in a row naming no reason, while why is set
}

// KeptBackError is a stale read refused by a non-voter the leader keeps
// one: its state may lack records the others hold.
type KeptBackError struct {
	Node   string // this node
	Leader string // the leader that keeps it back
	Reason string // the leader's not_promoted
}

func (e *KeptBackError) Error() string { return "raftfsm: " + e.Detail() }

// Detail says what the node is, why, and what to do; /readyz's 503 and a
// refused stale read carry it.
func (e *KeptBackError) Detail() string {
	return fmt.Sprintf("this node (%s) is a non-voter that the leader %s keeps from becoming a voter: %s. "+
		"Until then it is not ready and answers no consistency=stale read (its state or settings are not the cluster's: it could answer a key the cluster holds as absent); "+
		"writes and linearizable reads sent here are still forwarded to the leader. Send reads to another node; "+
		"a node whose state lacks records is fixed only by starting it on an empty data dir with --join (stop it, move its data dir aside)",
		e.Node, e.Leader, e.Reason)
}

// KeptBack returns a *KeptBackError while the leader keeps this node, a
// non-voter, from being promoted (see above), nil otherwise.
func (n *Node) KeptBack() error {
	n.kept.mu.Lock()
	defer n.kept.mu.Unlock()
	if n.kept.why == "" {
		return nil
	}
	return &KeptBackError{Node: n.self.ID, Leader: n.kept.leader, Reason: n.kept.why}
}

// askWhetherKept asks the leader, for a non-voter, whether it keeps this
// node one, and notes the answer; a voter, or a node the configuration
// does not list, is not kept.
func (n *Node) askWhetherKept(ctx context.Context) {
	f := n.raft.GetConfiguration()
	if f.Error() != nil {
		return
	}
	nonvoter := false
	for _, s := range f.Configuration().Servers {
		if string(s.ID) == n.self.ID {
			nonvoter = s.Suffrage == raft.Nonvoter
		}
	}
	if !nonvoter {
		n.kept.clear(n)
		return
	}
	probe := n.peerProbe()
	l, ok := n.Leader()
	if probe == nil || !ok || l.HTTPAddr == "" || l.ID == n.self.ID {
		return
	}
	pctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	st, err := probe(pctx, l.HTTPAddr)
	if err != nil || st.Self.ID != l.ID || st.HealthFrom != l.ID {
		return // not an answer of the leader's measurements
	}
	for _, m := range st.Nodes {
		if m.ID != n.self.ID {
			continue
		}
		switch {
		case m.NotPromoted != "":
			n.kept.set(n, l.ID, m.NotPromoted)
		case m.CheckedAt != nil && m.Healthy:
			n.kept.notNamed(n)
		}
		return
	}
}

func (k *keptState) set(n *Node, leader, why string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.clean = 0
	if k.why == why && k.leader == leader {
		return
	}
	if k.why == "" {
		k.since = time.Now()
	}
	k.why, k.leader = why, leader
	n.log.Warn("the leader keeps this non-voter from becoming a voter: until it no longer does, /readyz answers 503 and consistency=stale reads are refused",
		"leader", leader, "reason", why)
}

// notNamed notes an answer of the leader that measured this node and
// named no reason.
func (k *keptState) notNamed(n *Node) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.why == "" {
		return
	}
	if k.clean++; k.clean >= keptClearAfter {
		k.clearLocked(n, "the leader no longer keeps it back")
	}
}

func (k *keptState) clear(n *Node) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.why != "" {
		k.clearLocked(n, "it is a voter, or no longer a member")
	}
}

func (k *keptState) clearLocked(n *Node, why string) {
	n.log.Info("this node is no longer kept a non-voter: /readyz and stale reads answer as usual again", "why", why, "kept-for", time.Since(k.since).Round(time.Millisecond))
	k.why, k.leader, k.clean, k.since = "", "", 0, time.Time{}
}
