package raftfsm

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/hashicorp/raft"

	"github.com/idem-store/idem/internal/mono"
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
// The mark is kept in KeptFile, in the data dir, from when the node learns
// it until it is cleared: a kept node that restarted was not kept until the
// leader had measured it and it had asked (a second or two), and for as
// long as no leader answered it (restarted while the leader was down), it
// served stale reads from a state that may lack records; stale reads are
// then the only reads it serves. At start, a node whose file exists is kept
// with the recorded leader and reason while its configuration lists it as
// a non-voter, until cleared as above; a voter, or a node its configuration
// does not list, removes the file. A node never kept has no file, and
// nothing is written for it. A write that fails (a full disk) is logged and
// retried at the next round: the mark in memory holds meanwhile.

// keptClearAfter is how many answers in a row from the leader, each
// measuring this node and naming no reason, clear the mark.
const keptClearAfter = 3

// KeptFile is the data dir's record that the leader keeps this node a
// non-voter (keptRecord, JSON); it exists only while the mark holds.
const KeptFile = "kept-back"

// keptRecord is KeptFile's content.
type keptRecord struct {
	Leader string    `json:"leader"`
	Reason string    `json:"reason"`
	Since  time.Time `json:"since"`
	Note   string    `json:"note"`
}

const keptNote = "the leader keeps this node a non-voter; until it is promoted (or the leader answers three times without a reason), it is not ready and refuses consistency=stale reads, also across restarts. idem removes this file then"

// keptState is Node.kept.
type keptState struct {
	mu     sync.Mutex
	why    string    // the leader's not_promoted; "" when not kept
	leader string    // the leader that said it
	since  time.Time // when this node first learned it
	clean  int       // answers in a row naming no reason, while why is set

	// file orders the writes of KeptFile (held before mu, and across the
	// write, so that reads of the mark never wait for the disk).
	file   sync.Mutex
	onDisk bool        // KeptFile may exist: written (or tried), not yet removed
	saved  bool        // KeptFile records the mark in memory
	failed mono.Spacer // a failed write's or removal's log line
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
	if !isNonvoter(f.Configuration(), n.self.ID) {
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

// isNonvoter reports whether conf lists id as a non-voter.
func isNonvoter(conf raft.Configuration, id string) bool {
	s, err := server(conf, id)
	return err == nil && s.Suffrage == raft.Nonvoter
}

func (k *keptState) set(n *Node, leader, why string) {
	k.file.Lock()
	defer k.file.Unlock()
	k.mu.Lock()
	k.clean = 0
	if k.why != why || k.leader != leader {
		if k.why == "" {
			k.since = time.Now()
		}
		k.why, k.leader = why, leader
		k.saved = false
		n.log.Warn("the leader keeps this non-voter from becoming a voter: until it no longer does, /readyz answers 503 and consistency=stale reads are refused",
			"leader", leader, "reason", why)
	}
	rec := keptRecord{Leader: k.leader, Reason: k.why, Since: k.since.UTC(), Note: keptNote}
	saved := k.saved
	k.mu.Unlock()
	if !saved {
		k.save(n, rec)
	}
}

// save writes rec to KeptFile; k.file is held.
func (k *keptState) save(n *Node, rec keptRecord) {
	b, err := json.Marshal(rec)
	if err == nil {
		k.onDisk = true // a failed write may leave it, or its .tmp
		err = replaceSynced(n.cfg.DataDir, KeptFile, append(b, '\n'))
	}
	if err != nil {
		if k.failed.Allow(time.Minute) {
			n.log.Error("could not record in the data dir that the leader keeps this node a non-voter (tried again each round): it is kept meanwhile, but restarted before the record is written it would serve stale reads until the leader answers it",
				"file", filepath.Join(n.cfg.DataDir, KeptFile), "error", err)
		}
		return
	}
	k.saved = true
}

// unsave removes KeptFile, if this node may have one; k.file is held.
func (k *keptState) unsave(n *Node) {
	if !k.onDisk {
		return
	}
	os.Remove(filepath.Join(n.cfg.DataDir, KeptFile+".tmp"))
	if err := removeSynced(n.cfg.DataDir, KeptFile); err != nil {
		if k.failed.Allow(time.Minute) {
			n.log.Error("could not remove the data dir's record that the leader kept this node a non-voter (tried again each round): restarted as a non-voter before it is removed, the node would be kept until the leader answers it",
				"file", filepath.Join(n.cfg.DataDir, KeptFile), "error", err)
		}
		return
	}
	k.onDisk, k.saved = false, false
}

// notNamed notes an answer of the leader that measured this node and
// named no reason.
func (k *keptState) notNamed(n *Node) {
	k.file.Lock()
	defer k.file.Unlock()
	k.mu.Lock()
	if k.why != "" {
		if k.clean++; k.clean >= keptClearAfter {
			k.clearLocked(n, "the leader no longer keeps it back")
		}
	}
	kept := k.why != ""
	k.mu.Unlock()
	if !kept {
		k.unsave(n)
	}
}

func (k *keptState) clear(n *Node) {
	k.file.Lock()
	defer k.file.Unlock()
	k.mu.Lock()
	if k.why != "" {
		k.clearLocked(n, "it is a voter, or no longer a member")
	}
	k.mu.Unlock()
	k.unsave(n)
}

func (k *keptState) clearLocked(n *Node, why string) {
	n.log.Info("this node is no longer kept a non-voter: /readyz and stale reads answer as usual again", "why", why, "kept-for", time.Since(k.since).Round(time.Millisecond))
	k.why, k.leader, k.clean, k.since = "", "", 0, time.Time{}
}

// loadKept reads KeptFile at start, with the stores open and before raft
// runs: a node its configuration lists as a non-voter is kept with the
// recorded leader and reason until cleared as a running node is; for
// another (a voter: promoted, or recovered, before the file was removed;
// a node its configuration does not list) the file is stale and goes.
// A data dir without the file costs a stat.
func (n *Node) loadKept() error {
	path := filepath.Join(n.cfg.DataDir, KeptFile)
	if _, err := os.Lstat(path); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	k := &n.kept
	k.file.Lock()
	defer k.file.Unlock()
	k.onDisk = true
	conf, _, err := latestConfiguration(n.logStore, n.snaps)
	if err != nil {
		return err
	}
	if !isNonvoter(conf, n.self.ID) {
		// Not read: a stale record that cannot be (its mode, a directory
		// in its place) refused a voter's start, though it goes unread.
		n.log.Info("removing the record that the leader kept this node a non-voter: its configuration lists it as a voter, or not at all", "file", path)
		k.unsave(n)
		return nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("raftfsm: read the record that the leader kept this node a non-voter: %w", err) // names path
	}
	var rec keptRecord
	if err := json.Unmarshal(b, &rec); err != nil || rec.Reason == "" {
		// Damaged by hand: still kept, the leader says again why.
		rec = keptRecord{Leader: "(unknown)", Reason: fmt.Sprintf("this node's %s says so, and is damaged (%v)", path, err), Since: time.Now()}
	}
	k.mu.Lock()
	k.why, k.leader, k.since, k.saved = rec.Reason, rec.Leader, rec.Since, true
	k.mu.Unlock()
	n.log.Warn("the leader kept this non-voter from becoming a voter when it last heard (recorded in the data dir): until a leader no longer does, /readyz answers 503 and consistency=stale reads are refused",
		"leader", rec.Leader, "reason", rec.Reason, "file", path)
	return nil
}

// readKept returns the leader and the reason dir's KeptFile records, ""
// when there is none; a file that cannot be read or is damaged is told so
// as the reason.
func readKept(dir string) (leader, reason string) {
	path := filepath.Join(dir, KeptFile)
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return "", ""
	}
	var rec keptRecord
	if err == nil {
		err = json.Unmarshal(b, &rec)
	}
	if err != nil || rec.Reason == "" {
		return "(unknown)", fmt.Sprintf("%s says so, and cannot be read (%v)", path, err)
	}
	return rec.Leader, rec.Reason
}
