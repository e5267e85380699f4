package raftfsm

import (
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
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

// voteHold keeps a node that started empty from electing a leader that
// misses acknowledged writes. A voter whose data dir was emptied (a lost
// disk, a data dir moved aside) and that is started again at its own
// addresses without idem cluster remove first is that voter again as soon
// as the leader reaches it: raft goes by address and id. Its log, empty or
// still catching up, no longer holds the entries it acknowledged before,
// and raft grants a vote to any candidate whose log is at least as up to
// date as the voter's own: so a candidate missing an entry that the old
// node had helped commit (n1 and the old n3 commit it while n2 is down; n3
// is emptied, n1 stops, n2 campaigns) could be elected with its vote, and
// the entry was lost. foreignGuard asks mayVote before a RequestVote or a
// RequestPreVote reaches raft, while the node has its joining file (it
// started empty and has not caught up past its admission) and has not got
// its vote back (below).
//
// Why the rule is safe. Let R be the moment this node started empty, and S
// the entries whose commitment may have counted the lost state: each was
// committed, by the leader of some term Tc, before R (the old node's
// acknowledgement had reached that leader). Let L, of term T, be a leader
// whose AppendEntries reached this node after R, naming its commit index
// K (the mark). L is the leader of Tc or a later one (a leader of an older
// term still acting after a newer one was elected would have to be within
// its lease, below), so L's log holds every entry of S (Leader
// Completeness), at indexes below L's first entry of term T, or, for those
// L committed itself in term T, at or below K: a leader's commit index
// only grows within its term. Now take any log (a candidate's, or this
// node's own) whose last entry is at (term t, index i) with t > T, or
// t = T and i >= K. If t > T: the leader of t holds every entry committed
// in an earlier term, so all of S, at indexes below its own entries of
// term t; that log ends with one of them and matches the leader of t's log
// up to there (Log Matching), so it holds S. If t = T: the log matches L's
// up to i; it holds an entry of term T, so all of L's entries before term
// T, and i >= K covers those L committed in T: it holds S. So a candidate
// at or past the mark holds every entry this node may have helped commit,
// and when this node's own log reaches the mark, its log holds them too:
// raft's own comparison is then enough, and the node gets its vote back
// for good (S is fixed at R; everything the node acknowledges after R it
// keeps). The mark is the leader's term and commit index, compared as
// raft compares logs: an index alone would let in a candidate holding many
// entries of a stale term, and a commit index without its term would be
// too low when a new leader has not committed in its own term yet.
//
// A node that has heard from no leader since it started knows no mark.
// It then votes only for a candidate whose log ends at index 1 or below:
// only the bootstrap configuration, the first election of a cluster formed
// with --bootstrap-expect, where the other nodes are still empty because a
// peer bootstrapped first and they asked to join instead (holding that
// vote deadlocked such a cluster: nobody could be elected). That exception
// is not proven safe: a voter that never got an entry past the bootstrap
// configuration (down since the cluster formed) could be elected with
// this node's vote while every member holding the cluster's writes is
// down. Nor is a leader of an older term, cut off from the newer leader
// the old node voted for but still reaching this node, which has
// forgotten that newer term with its data dir: its mark is too low, and
// worse, this node's acknowledgements give it a majority again (itself and
// this node, of three), so it keeps its lease and commits entries of its
// old term that the newer leader's will overwrite. No vote hold prevents
// that: only the removal before the empty node starts (docs/MEMBERSHIP.md),
// after which the leader that took the node in reaches it first in the
// usual case. Both need two failures at once beside the skipped removal.
//
// A node that learned a mark and was restarted before its log reached it
// reads it back from markFile: S is the same, so the mark still holds.
// The joining file goes as before, at its admission (caughtUp); both
// files go together, and the hold with them. Reaching the admission is
// enough as well: the leader named it after R, at or past an entry it had
// made after R and committed, so every entry of S lies below it, and a
// log that reaches it holds them (it matches, up to there, the log of a
// leader that reached this node after R). A leader of an earlier release
// names no admission; the file then goes at the first configuration that
// lists another member, which proves nothing: only while the cluster runs
// mixed releases.
type voteHold struct {
	mu       sync.Mutex
	mark     voteMark // zero: no leader has named a commit index since the node started empty
	unsaved  bool     // mark is not in markFile yet (saveMark)
	released atomic.Bool
	held     spacer     // the held vote's log line
	saving   sync.Mutex // one saveMark at a time
	// saveFailed spaces the failed save's log line.
	saveFailed spacer
}

// markFile holds the mark of a node that has its joining file (voteHold).
const markFile = "joining-vote"

const markFormat = "leader term %d commit index %d\n"

// voteMark is a leader's term and the commit index it named (voteHold).
type voteMark struct{ term, index uint64 }

// reachedBy reports whether a log whose last entry is at term, index is
// at or past m, compared as raft compares logs.
func (m voteMark) reachedBy(term, index uint64) bool {
	return term > m.term || term == m.term && index >= m.index
}

// readMark is the mark markFile records in dir, zero for none.
func readMark(dir string) voteMark {
	b, err := os.ReadFile(filepath.Join(dir, markFile))
	if err != nil {
		return voteMark{}
	}
	var m voteMark
	if _, err := fmt.Sscanf(string(b), markFormat, &m.term, &m.index); err != nil {
		return voteMark{}
	}
	return m
}

// voteHeld reports whether this node holds its vote (voteHold).
func (n *Node) voteHeld() bool {
	return n.joining.Load() && !n.votes.released.Load()
}

// leaderCommit learns, from an AppendEntries of the leader of term whose
// commit index is commit, this node's mark: the first commit index named
// by a leader of the highest term heard since it started empty. A
// heartbeat names no commit index (0), and is not counted; named says the
// request carries entries, whose commit index is the leader's even when it
// is 0. That 0 counts: a new leader replicating its first entries before it
// has committed any (the first leader of a --bootstrap-expect cluster) named
// no higher one, and a node that waited for one held its vote for good when
// that leader died first (its log past the bootstrap configuration, it
// refused every candidate, and did not campaign itself). The proof above
// holds for K = 0: the leader had committed nothing in its term yet.
func (n *Node) leaderCommit(term, commit uint64, named bool) {
	if commit == 0 && !named || term == 0 || !n.voteHeld() {
		return
	}
	n.votes.mu.Lock()
	defer n.votes.mu.Unlock()
	if term <= n.votes.mark.term {
		return
	}
	// It holds in memory at once; saveMark writes it for a restart, off
	// this path, which hands raft every RPC (two fsyncs here held them all).
	n.votes.mark, n.votes.unsaved = voteMark{term, commit}, true
}

// saveMark writes a mark leaderCommit learned to markFile, so a restart
// keeps it (refreshMembership, every 200 ms, and Close). Lost in a crash
// before that, the mark is learned again from the first leader that
// reaches the node after the restart, which is as good: that leader too
// reached it after it started empty.
func (n *Node) saveMark() {
	n.votes.saving.Lock()
	defer n.votes.saving.Unlock()
	n.votes.mu.Lock()
	m, unsaved := n.votes.mark, n.votes.unsaved
	n.votes.unsaved = false
	n.votes.mu.Unlock()
	if !unsaved || !n.voteHeld() {
		return
	}
	path := filepath.Join(n.cfg.DataDir, markFile)
	err := writeSynced(path+".tmp", fmt.Appendf(nil, markFormat, m.term, m.index))
	if err == nil {
		err = os.Rename(path+".tmp", path)
	}
	if err == nil {
		err = syncDir(n.cfg.DataDir)
	}
	if err != nil {
		n.votes.mu.Lock()
		n.votes.unsaved = n.votes.unsaved || n.votes.mark == m // tried again at the next refresh
		n.votes.mu.Unlock()
		if n.votes.saveFailed.allow(time.Minute) {
			n.log.Warn("could not record the leader's commit index this node votes from; it is kept in memory, retried, and learned again after a restart", "error", err)
		}
	}
}

func (n *Node) voteMark() voteMark {
	n.votes.mu.Lock()
	defer n.votes.mu.Unlock()
	return n.votes.mark
}

// lastEntry is the term and index of this node's last log entry, or of its
// newest snapshot when that is further (raft's own last entry for votes).
func (n *Node) lastEntry() (term, index uint64) {
	if last, err := n.logStore.LastIndex(); err == nil && last > 0 {
		var l raft.Log
		if n.logStore.GetLog(last, &l) == nil {
			term, index = l.Term, l.Index
		}
	}
	if list, err := n.snaps.List(); err == nil && len(list) > 0 && list[0].Index > index {
		term, index = list[0].Term, list[0].Index
	}
	return term, index
}

// releaseVote gives this node its vote back once its own log reaches its
// mark, and reports whether it holds none.
func (n *Node) releaseVote() bool {
	if !n.voteHeld() {
		return true
	}
	m := n.voteMark()
	if m.term == 0 {
		return false
	}
	term, index := n.lastEntry()
	if !m.reachedBy(term, index) {
		return false
	}
	if !n.votes.released.Swap(true) {
		n.log.Info("this node votes again: it started empty, and its log now holds what its cluster had committed when a leader first reached it",
			"leader-term", m.term, "leader-commit-index", m.index, "last-term", term, "last-index", index)
	}
	return true
}

// mayVote says why this node must not grant candidate from its vote or
// pre-vote, whose log ends at lastTerm, lastIndex, or nil: raft then
// decides as it does for any node (voteHold).
func (n *Node) mayVote(from raft.RPCHeader, lastTerm, lastIndex uint64) error {
	if n.releaseVote() {
		return nil
	}
	m := n.voteMark()
	var why string
	switch {
	case m.term == 0 && lastIndex <= 1:
		return nil // a new cluster's first election
	case m.term == 0:
		why = "no leader has reached it since it started"
	case m.reachedBy(lastTerm, lastIndex):
		return nil
	default:
		why = fmt.Sprintf("the candidate's log ends at term %d index %d, before what the leader of term %d had committed (index %d) when it reached this node", lastTerm, lastIndex, m.term, m.index)
	}
	if n.votes.held.allow(time.Minute) {
		n.log.Warn("not voting: this node started with an empty data dir (a new member, or one whose data dir was lost or moved aside) and has not caught up with its cluster, so it cannot tell whether the candidate misses writes the cluster acknowledged: "+why+". "+
			"It votes again once a leader has reached it and it has caught up. If the cluster has no leader meanwhile, start its members that are down (one holding the latest writes can be elected); "+
			"if they are lost for good, see idem recover (docs/MEMBERSHIP.md). A member whose data dir is lost is replaced by removing it first (idem cluster remove), then joining it empty",
			"candidate", string(from.ID), "candidate-last-term", lastTerm, "candidate-last-index", lastIndex, "data-dir", n.cfg.DataDir)
	}
	return fmt.Errorf("raftfsm: node %s holds its vote: it started empty and has not caught up with its cluster (%s); it votes once it has", n.self.ID, why)
}

// campaignHold keeps a node that holds its vote (voteHold) from standing
// for election as well. Raft's own candidacy is no RPC, so foreignGuard
// cannot hold it as it holds the votes asked of this node, and a node that
// started empty may find itself the only voter of its own configuration
// while it replays its cluster's log: a member replaced by an empty node
// under the id of the cluster's bootstrap node (docs/MEMBERSHIP.md)
// replays first the configuration of this id alone, for as many entries
// as the cluster ran as one node. When the leader was silent for a
// heartbeat timeout then (slow, cut off for a moment, or a leader change),
// raft elected the node leader of a cluster of its own over a prefix of
// its cluster's log, without any restart: it acknowledged claims of keys
// the cluster holds, and refused the real leader (foreignGuard). A restart
// in that stretch is handled apart (checkJoining sets the partial copy
// aside). Raft has no switch for its
// candidacy, but its heartbeat and election timeouts are reloadable: a
// node that starts holding its vote runs with both at campaignHoldTimeout,
// and gets the normal ones back (Raft.ReloadConfig, which restarts a
// follower's timer when the heartbeat timeout shrinks) as soon as it no
// longer holds its vote: its log has reached its mark, or its admission
// (refreshMembership, every 200 ms). A node that never gets its vote back
// never campaigns; it has nothing its cluster needs. A leader's hand-off
// (TimeoutNow) to a node that holds its vote is refused unless its log
// now reaches its mark (mayCampaign): a candidate of the hand-off would
// wait campaignHoldTimeout to try again, and lead with heartbeats as far
// apart. In a cluster formed with --bootstrap-expect, the nodes that asked
// to join hold their campaign as their vote: the node that bootstrapped
// removed its joining file, lifts its hold, and is elected with their
// votes (mayVote's first-election exception).
type campaignHold struct {
	mu                  sync.Mutex
	held                atomic.Bool
	heartbeat, election time.Duration // raft's own timeouts, given back when the hold is lifted
	failed              spacer        // the failed lift's log line
}

// campaignHoldTimeout is the heartbeat and election timeout of a node that
// holds its campaign: one that no leader's silence reaches in practice.
const campaignHoldTimeout = 24 * time.Hour

// holdCampaign sets rc, which raft is about to start with, so that this
// node does not stand for election (campaignHold).
func (n *Node) holdCampaign(rc *raft.Config) {
	n.campaign.heartbeat, n.campaign.election = rc.HeartbeatTimeout, rc.ElectionTimeout
	rc.HeartbeatTimeout, rc.ElectionTimeout = campaignHoldTimeout, campaignHoldTimeout
	n.campaign.held.Store(true)
	n.log.Info("this node started empty and will not stand for election until it has caught up with its cluster, as it holds its vote until then")
}

// liftCampaignHold gives raft its own timeouts back once this node no
// longer holds its vote (campaignHold). Safe to call at any time.
func (n *Node) liftCampaignHold() {
	if !n.campaign.held.Load() || n.voteHeld() {
		return
	}
	n.campaign.mu.Lock()
	defer n.campaign.mu.Unlock()
	if !n.campaign.held.Load() {
		return
	}
	rc := n.raft.ReloadableConfig()
	rc.HeartbeatTimeout, rc.ElectionTimeout = n.campaign.heartbeat, n.campaign.election
	if err := n.raft.ReloadConfig(rc); err != nil {
		if n.campaign.failed.allow(time.Minute) {
			n.log.Warn("could not give raft its election timeouts back; this node does not stand for election until it can, and retries", "error", err)
		}
		return
	}
	n.campaign.held.Store(false)
	n.log.Info("this node stands for election again: it has caught up with its cluster",
		"heartbeat-timeout", rc.HeartbeatTimeout, "election-timeout", rc.ElectionTimeout)
}

// mayCampaign says why this node must not take a leader's hand-off
// (TimeoutNow) from leader from, or nil (campaignHold).
func (n *Node) mayCampaign(from raft.RPCHeader) error {
	if n.releaseVote() {
		n.liftCampaignHold()
		return nil
	}
	return fmt.Errorf("raftfsm: node %s takes no leadership hand-off from %s: it started empty and has not caught up with its cluster, so it neither votes nor stands for election yet; hand leadership to another voter", n.self.ID, from.ID)
}

// staleLeader reports whether this node holds its campaign and has not
// heard from the leader it knows for longer than raft's own heartbeat
// timeout (foreignGuard.settle).
func (n *Node) staleLeader() bool {
	if !n.campaign.held.Load() || n.raft == nil {
		return false
	}
	if addr, _ := n.raft.LeaderWithID(); addr == "" {
		return false // raft's own checks know no leader either
	}
	return time.Since(n.raft.LastContact()) > n.campaign.heartbeat
}

// preVote answers a pre-vote as raft does when it knows no leader: granted
// to a voter of this node's configuration whose term is not older and
// whose log is at least as up to date as this node's (the vote hold has
// let it through already). A pre-vote changes nothing here.
func (n *Node) preVote(req *raft.RequestPreVoteRequest) *raft.RequestPreVoteResponse {
	term := n.raft.CurrentTerm()
	resp := &raft.RequestPreVoteResponse{
		RPCHeader: raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte(n.self.ID), Addr: []byte(n.self.RaftAddr)},
		Term:      term,
	}
	if req.Term < term {
		return resp
	}
	resp.Term = req.Term
	f := n.raft.GetConfiguration()
	if f.Error() != nil {
		return resp
	}
	servers := f.Configuration().Servers
	voter := len(servers) == 0
	for _, s := range servers {
		if string(s.ID) == string(req.ID) && s.Suffrage == raft.Voter {
			voter = true
		}
	}
	if !voter {
		return resp
	}
	lastTerm, lastIndex := n.lastEntry()
	if lastTerm > req.LastLogTerm || lastTerm == req.LastLogTerm && lastIndex > req.LastLogIndex {
		return resp
	}
	resp.Granted = true
	return resp
}
