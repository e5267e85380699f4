package raftfsm

import (
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"

	"github.com/idem-store/idem/internal/mono"
)

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
	held     mono.Spacer // the held vote's log line
	saving   sync.Mutex  // one saveMark at a time
	// saveFailed spaces the failed save's log line.
	saveFailed mono.Spacer
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
		if n.votes.saveFailed.Allow(time.Minute) {
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
	if n.votes.held.Allow(time.Minute) {
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
	failed              mono.Spacer   // the failed lift's log line
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
		if n.campaign.failed.Allow(time.Minute) {
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
