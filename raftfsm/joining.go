package raftfsm

import (
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
)

// joiningFile marks a data dir whose node started empty and asked a
// cluster to take it in (MarkJoining), until the node has caught up past
// its admission: its log reaches the index the leader's join answer named
// (Admitted; refreshMembership removes the file then).
// Listing another member is not enough: replaying the log from its start,
// the node passes every configuration the cluster ever had, and one that
// ran as this id alone, took in another node and removed it, ran as this
// id alone again further on.
//
// It is for one case raft cannot tell from a node's files: a fresh node
// under the id of its cluster's bootstrap node (a member replaced by an
// empty node under the same id, as docs/MEMBERSHIP.md shows) replays the
// cluster's log from its start, and that log begins with a configuration
// of this id alone, for as many entries as the cluster ran as one node.
// Stopped in the middle of that stretch, the node restarted with a
// configuration of itself alone, as a one-node store does: it elected
// itself leader over a prefix of the cluster's log and answered claims
// from it (keys the cluster holds claimed again), and foreignGuard, armed
// by that configuration, refused the real leader for good. With the file
// present, such a node instead sets its state aside and starts empty: what
// it holds is a copy of part of its cluster's log, and it joins again and
// replays the whole of it.
const joiningFile = "joining"

// setAsideState names what a node's state is made of in its data dir;
// node.json, the ballast and the key files stay.
var setAsideState = []string{"fsm", "fsm.filters", logStoreDir, "raft.db", "snapshots"}

// errStartEmpty is open's answer for a node that must start empty (above).
var errStartEmpty = errors.New("raftfsm: restart empty")

// MarkJoining records that this node, empty, asks a cluster to take it in:
// call it before the join request. It does nothing for a node with state.
func (n *Node) MarkJoining() error {
	if n.HasState() || n.joining.Load() {
		return nil
	}
	return n.writeJoining()
}

func (n *Node) writeJoining() error {
	// A mark left beside no joining file is another start's (voteHold).
	if err := os.Remove(filepath.Join(n.cfg.DataDir, markFile)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("raftfsm: remove %s: %w", filepath.Join(n.cfg.DataDir, markFile), err)
	}
	if err := writeSynced(filepath.Join(n.cfg.DataDir, joiningFile), []byte("this node started empty and asked a cluster to take it in; idem removes this file once the node has caught up past its admission\n")); err != nil {
		return err
	}
	if err := syncDir(n.cfg.DataDir); err != nil {
		return err
	}
	n.joining.Store(true)
	return nil
}

// admissionUnknown is the admission of a node whose leader's answer named
// no configuration (a leader of an earlier release): the file is then
// forgotten at the first configuration that lists another member, as it
// was before answers named one.
const admissionUnknown = math.MaxUint64

// Admitted records the log index a leader's join answer named (0: it
// named none) in the joining file of a node that joined empty. It
// does nothing for a node that has no joining file or knows its admission.
func (n *Node) Admitted(index uint64) error {
	if !n.joining.Load() || n.admission.Load() != 0 {
		return nil
	}
	if index == 0 {
		index = admissionUnknown
	}
	path := filepath.Join(n.cfg.DataDir, joiningFile)
	if err := writeSynced(path+".tmp", fmt.Appendf(nil, "%s%d\n", admissionPrefix, index)); err != nil {
		return err
	}
	if err := os.Rename(path+".tmp", path); err != nil {
		return fmt.Errorf("raftfsm: write %s: %w", path, err)
	}
	if err := syncDir(n.cfg.DataDir); err != nil {
		return err
	}
	n.admission.Store(index)
	return nil
}

// AdmissionPending: the node joined empty, has raft state, and knows no
// configuration index of its admission yet (taken in before it asked, or
// its answer was lost): it should ask the leader again, which names it.
func (n *Node) AdmissionPending() bool {
	return n.joining.Load() && n.admission.Load() == 0 && n.HasState()
}

// Outside reports whether this node has state and the newest configuration
// it knows leaves it out: it was removed. A node that joined empty and
// replays the cluster's log up to its admission is not outside: the
// configurations it passes are older than the one that took it in (a
// cluster's log holding many entries before the join, or a snapshot taken
// before it, kept a joining node "outside" for seconds, and idem serve
// warned that it had been removed).
//
// A member whose removal never reached it (a leader makes one last attempt
// to send a removed node the configuration that removes it, and stops
// sending to it when that attempt fails) is outside too once a leader
// told idem serve so (MarkRemovedUnheard, RemovedUnheard): its own log
// still lists it, and it campaigned for ever, answering writes "no leader
// is available; retry shortly".
func (n *Node) Outside() bool {
	if _, ok := n.RemovedUnheard(); ok {
		return true
	}
	replaying, ok := n.leftOut()
	return ok && !replaying
}

// RemovedError is a stale read refused by a node that is Outside the
// cluster (removed): its replica stopped at its removal, so it could
// answer a key the cluster claimed since as absent, or an attempt
// completed since as in progress, for as long as it runs.
type RemovedError struct {
	Node string // this node
}

func (e *RemovedError) Error() string { return "raftfsm: " + e.Detail() }

// Detail says what the node is and what to do; a refused stale read
// carries it.
func (e *RemovedError) Detail() string {
	return fmt.Sprintf("this node (%s) is not in the cluster's configuration (it was removed): its state stopped at its removal, "+
		"so it answers no consistency=stale read (it could answer a key the cluster holds as absent). "+
		"Send reads to a member, or add this node back (idem cluster join; it needs no restart)", e.Node)
}

// leftOut tells, for a node with state that the newest configuration it
// knows leaves out (ok false for any other, and when the configuration
// cannot be read: the node stopping), whether it joined empty and its log
// has not reached its admission yet: it replays entries older than the
// one that took it in.
func (n *Node) leftOut() (replaying, ok bool) {
	if !n.HasState() || n.IsMember() {
		return false, false
	}
	if !n.joining.Load() {
		return false, true
	}
	f := n.raft.GetConfiguration()
	if f.Error() != nil {
		return false, false
	}
	return !n.caughtUp(f.Configuration(), n.raft.LastIndex()), true
}

// stateOnItsWayWithin is how lately a node without state must have heard
// from a leader for StateOnItsWay: a leader sends heartbeats every tenth of
// a heartbeat timeout, during an install of its snapshot as well.
const stateOnItsWayWithin = 5 * time.Second

// StateOnItsWay reports whether this node holds no configuration yet but
// has heard from a leader within stateOnItsWayWithin: that leader has it in
// its configuration and is sending it the cluster's state (an install of
// its snapshot lasts as long as the state is large), so asking it again to
// join would change nothing. A node restarted at addresses the leader does
// not know hears from no leader, and asks.
func (n *Node) StateOnItsWay() bool {
	return !n.HasState() && n.leaderHeard()
}

// leaderHeard reports whether this node heard from a leader within
// stateOnItsWayWithin.
func (n *Node) leaderHeard() bool {
	lc := n.raft.LastContact()
	return !lc.IsZero() && time.Since(lc) < stateOnItsWayWithin
}

// ReplayingUnheard reports whether this node joined, replays the cluster's
// log short of its admission (so neither a member nor Outside), and has
// heard from no leader within stateOnItsWayWithin. Its own state cannot
// tell why: it was removed before it caught up (a leader stops sending to
// a node it removed, which never sees the removal), it was restarted at a
// raft address the leader does not know (killed while it replayed, and
// started with another --raft-addr: the leader sends to the old one), or
// the leader is down. Only the cluster's view tells (idem serve's
// membership loop asks it); before, such a node waited in silence for
// ever.
func (n *Node) ReplayingUnheard() bool {
	if n.leaderHeard() {
		return false
	}
	replaying, ok := n.leftOut()
	return ok && replaying
}

// MemberUnheard reports whether this node has state, its configuration
// lists it, it does not lead, and it has heard from no leader within
// stateOnItsWayWithin (counted from its start when it never has). Its own
// state cannot tell why: the leader is down or out of reach, or it was
// removed and the removal never reached it (a leader stops sending to a
// node it removes after one last attempt, which a busy machine or a lost
// packet fails). Only the cluster's leader tells (idem serve's membership
// loop asks it, and MarkRemovedUnheard records its answer).
func (n *Node) MemberUnheard() bool {
	if !n.IsMember() || n.IsLeader() || !n.HasState() {
		return false
	}
	lc := n.raft.LastContact()
	if lc.IsZero() {
		lc = n.startedAt
	}
	return time.Since(lc) >= stateOnItsWayWithin
}

// MarkRemovedUnheard records that a leader of term leaderTerm, asked at
// member (its HTTP address), does not list this node, a member that hears
// from no leader (MemberUnheard): it was removed, and the removal never
// reached it. It reports whether the answer counts: only a leader whose
// term is at least this node's current term speaks for the cluster. A
// leader of an older term was deposed (this node heard of a later term, so
// a majority moved past that leader) and its configuration may hold a
// removal that was never committed. member "" forgets the mark (a leader
// lists the node).
func (n *Node) MarkRemovedUnheard(member string, leaderTerm uint64) bool {
	if member != "" && (leaderTerm < n.term() || !n.MemberUnheard()) {
		return false
	}
	n.markRemoved(&n.removedUnheard, member)
	return true
}

// RemovedUnheard reports whether this node is a member by its own log but
// was removed (MarkRemovedUnheard), with the HTTP address of the leader
// that said so. It holds while no leader has been heard from since: added
// back, the leader sends to it again, and it is a member as before.
func (n *Node) RemovedUnheard() (member string, ok bool) {
	return n.removedSince(&n.removedUnheard, n.MemberUnheard)
}

const admissionPrefix = "admitted at raft index "

// readAdmission is the admission a joining file records, 0 for none.
func readAdmission(dir string) uint64 {
	b, err := os.ReadFile(filepath.Join(dir, joiningFile))
	if err != nil {
		return 0
	}
	v, ok := strings.CutPrefix(strings.TrimSpace(string(b)), admissionPrefix)
	if !ok {
		return 0
	}
	i, err := strconv.ParseUint(v, 10, 64)
	if err != nil {
		return 0
	}
	return i
}

// caughtUp reports whether a node whose log ends at last, with conf its
// latest configuration, is past its admission: from there on, a
// configuration of this node alone can only be one the cluster made (every
// other member removed), and must never be discarded. The entries up to the
// admission were committed before the leader named it, so a log that
// reaches it holds them.
func (n *Node) caughtUp(conf raft.Configuration, last uint64) bool {
	switch a := n.admission.Load(); a {
	case 0:
		return false
	case admissionUnknown:
		for _, s := range conf.Servers {
			if string(s.ID) != n.self.ID {
				return true
			}
		}
		return false
	default:
		return last >= a
	}
}

// forgetJoining removes the joining file once the node's configuration is
// past its admission (caughtUp).
func (n *Node) forgetJoining(conf raft.Configuration) {
	if !n.joining.Load() || !n.caughtUp(conf, n.raft.LastIndex()) {
		return
	}
	if err := removeJoining(n.cfg.DataDir); err != nil {
		n.log.Warn("could not remove the joining marker; retrying", "error", err)
		return
	}
	n.joining.Store(false)
}

func removeJoining(dir string) error {
	// The mark first: a joining file without it holds the vote until a
	// leader names one again (voteHold).
	if err := os.Remove(filepath.Join(dir, markFile)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("raftfsm: remove %s: %w", filepath.Join(dir, markFile), err)
	}
	if err := os.Remove(filepath.Join(dir, joiningFile)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("raftfsm: remove %s: %w", filepath.Join(dir, joiningFile), err)
	}
	return syncDir(dir)
}

// checkJoining decides, with the stores open and before raft starts, what
// the joining file means: for a node without raft state, that it is still
// joining (the leader may have taken it in, and its entries may arrive
// before the node asks again), unless it bootstraps a one-node cluster now,
// which the file must not outlive; for a node past its admission (caughtUp),
// nothing, and the file goes; errStartEmpty for a node whose latest
// configuration is itself alone.
func (n *Node) checkJoining(existing bool) error {
	if _, err := os.Stat(filepath.Join(n.cfg.DataDir, joiningFile)); err != nil {
		if !existing && !n.cfg.Bootstrap {
			// Empty, and not starting a cluster of its own: whatever state
			// it gets comes from a cluster, whose leader may send entries
			// before the node asks (it was joined by hand before it
			// started), and MarkJoining would then come too late.
			return n.writeJoining()
		}
		return nil
	}
	if !existing {
		if n.cfg.Bootstrap {
			if aside, _ := filepath.Glob(filepath.Join(n.cfg.DataDir, "set-aside-*")); len(aside) > 0 {
				// Emptied by setAside, not created empty: its state
				// comes from the cluster it joined, and a cluster of its
				// own would take claims of keys that cluster holds.
				n.cfg.Bootstrap = false
				n.log.Warn("not starting a new cluster: this node set its partial copy of its cluster aside and waits to be taken in again; start it with --join naming a member, or add it by hand (idem cluster join)", "set-aside", aside)
			} else {
				return removeJoining(n.cfg.DataDir)
			}
		}
		n.admission.Store(readAdmission(n.cfg.DataDir))
		n.votes.mark = readMark(n.cfg.DataDir)
		n.joining.Store(true)
		return nil
	}
	conf, last, err := latestConfiguration(n.logStore, n.snaps)
	if err != nil {
		return err
	}
	n.admission.Store(readAdmission(n.cfg.DataDir))
	if n.caughtUp(conf, last) {
		return removeJoining(n.cfg.DataDir)
	}
	if len(conf.Servers) == 1 && string(conf.Servers[0].ID) == n.self.ID {
		if n.admission.Load() == 0 {
			// Stopped before the leader's answer arrived, or taken in by
			// hand and never told: this node alone may be a stretch of its
			// cluster's past, or the cluster now (its other members
			// removed while it could not ask). Neither guess is safe.
			return fmt.Errorf("raftfsm: this node joined a cluster empty (%s) but never learned where it was admitted, and its raft configuration lists it alone; nothing was changed. "+
				"If its cluster has other members, it holds part of their log: stop it, move %s aside and start it on an empty data dir with --join. "+
				"If it is its cluster's last member (the others were removed), its state is the cluster's: delete %s and start it again",
				filepath.Join(n.cfg.DataDir, joiningFile), n.cfg.DataDir, filepath.Join(n.cfg.DataDir, joiningFile))
		}
		return errStartEmpty
	}
	n.votes.mark = readMark(n.cfg.DataDir)
	n.joining.Store(true)
	return nil
}

// latestConfiguration is the configuration raft starts with (the last one
// in the log, else the newest snapshot's), and the last index of the log
// or the snapshot.
func latestConfiguration(logs raft.LogStore, snaps raft.SnapshotStore) (raft.Configuration, uint64, error) {
	first, err := logs.FirstIndex()
	if err != nil {
		return raft.Configuration{}, 0, fmt.Errorf("raftfsm: read the raft log: %w", err)
	}
	last, err := logs.LastIndex()
	if err != nil {
		return raft.Configuration{}, 0, fmt.Errorf("raftfsm: read the raft log: %w", err)
	}
	for i := last; i >= first && i > 0; i-- {
		var l raft.Log
		if err := logs.GetLog(i, &l); err != nil {
			return raft.Configuration{}, 0, fmt.Errorf("raftfsm: read raft log entry %d: %w", i, err)
		}
		if l.Type == raft.LogConfiguration {
			return raft.DecodeConfiguration(l.Data), last, nil
		}
	}
	list, err := snaps.List()
	if err != nil || len(list) == 0 {
		return raft.Configuration{}, last, err
	}
	return list[0].Configuration, max(last, list[0].Index), nil
}

// setAside moves a node's state into a new directory of its data dir, kept
// for inspection, and returns its path.
func setAside(dir string, log *slog.Logger) (string, error) {
	// A name of its own even for a second set-aside in the same second
	// (after one that failed part-way).
	aside, err := os.MkdirTemp(dir, "set-aside-"+time.Now().UTC().Format("20060102T150405Z")+"-")
	if err != nil {
		return "", fmt.Errorf("raftfsm: set aside this node's partial copy: %w", err)
	}
	for _, name := range setAsideState {
		err := os.Rename(filepath.Join(dir, name), filepath.Join(aside, name))
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return "", fmt.Errorf("raftfsm: set aside this node's partial copy (%s is partly moved; move the rest of %s into it to start empty): %w", aside, setAsideState, err)
		}
	}
	if err := removeJoining(dir); err != nil {
		return "", err
	}
	log.Warn("this node joined its cluster empty and was stopped while it replayed a stretch of the cluster's log whose configuration lists this node alone: started as it was, it would have led a cluster of its own over part of the log. "+
		"Its partial copy is set aside and it starts empty, to join and replay the log again. Delete the set-aside directory once the node has caught up",
		"set-aside", aside)
	return aside, nil
}

// RemovedBeforeCaughtUp is what a node that joined says once the cluster's
// leader no longer lists it while it replays the cluster's log toward its
// admission (idem serve's log line, and its answer to writes and reads).
const RemovedBeforeCaughtUp = "this node was removed from the cluster before it caught up with the cluster's log (the leader's configuration no longer lists it): it answers no writes or reads until it is added back (no restart needed)"

// removedMark is the record of a leader's word that this node was
// removed (MarkRemovedWhileReplaying, MarkRemovedUnheard): the member that
// said so, and the node's last contact with a leader then.
type removedMark struct {
	member  string
	contact time.Time
}

// markRemoved stores in p that member said this node was removed; member
// "" forgets it.
func (n *Node) markRemoved(p *atomic.Pointer[removedMark], member string) {
	if member == "" {
		p.Store(nil)
		return
	}
	p.Store(&removedMark{member: member, contact: n.raft.LastContact()})
}

// removedSince is the member of the mark in p while it holds: no leader
// has been heard from since it was made (added back, the leader sends to
// the node again) and unheard, the condition it was made under, still
// holds.
func (n *Node) removedSince(p *atomic.Pointer[removedMark], unheard func() bool) (string, bool) {
	m := p.Load()
	if m == nil || !n.raft.LastContact().Equal(m.contact) || !unheard() {
		return "", false
	}
	return m.member, true
}

// MarkRemovedWhileReplaying records that the leader, asked at member (its
// HTTP address), no longer lists this node, which replays toward its
// admission and hears from no leader (ReplayingUnheard): it was removed
// before it caught up. member "" forgets it (the leader lists it).
func (n *Node) MarkRemovedWhileReplaying(member string) {
	n.markRemoved(&n.removedReplaying, member)
}

// RemovedWhileReplaying reports whether this node was removed before it
// caught up (MarkRemovedWhileReplaying), with the HTTP address of the
// member to ask to add it back. It holds while no leader has been heard
// from since: added back, the leader sends to it again. Such a node
// answered writes "no leader is available; retry shortly" while its log
// said it was removed.
func (n *Node) RemovedWhileReplaying() (member string, ok bool) {
	return n.removedSince(&n.removedReplaying, n.ReplayingUnheard)
}

// LearnAddrs records the members' addresses as the cluster answered them
// at this node's join. Leader uses them for a leader whose HTTP address
// this node's state does not record: a node installing the leader's
// snapshot holds no records until the install ends (seconds for a large
// state), and a write or read through it waited LeaderWait, then was
// answered 503 "no leader", while it knew the leader's raft address.
func (n *Node) LearnAddrs(nodes []NodeInfo) {
	nodes = slices.Clone(nodes)
	n.told.Store(&nodes)
}

// toldHTTPAddr is the HTTP address LearnAddrs recorded for the member id
// at raft address addr, or "".
func (n *Node) toldHTTPAddr(id raft.ServerID, addr raft.ServerAddress) string {
	told := n.told.Load()
	if told == nil {
		return ""
	}
	for _, m := range *told {
		if m.ID == string(id) && m.RaftAddr == string(addr) {
			return m.HTTPAddr
		}
	}
	return ""
}

// replayingQuiet reports whether this node joined empty and its log has
// not reached its admission: raft's routine lines of a catch-up (hclog.go's
// warnLevel) are said at debug then. Read by raft's logger, it reads only
// atomics (no call into raft's loop).
func (n *Node) replayingQuiet() bool {
	if !n.joining.Load() {
		return false
	}
	a := n.admission.Load()
	if a == 0 || a == admissionUnknown {
		return true
	}
	last, err := n.logStore.LastIndex()
	return err == nil && last < a
}
