package raftfsm

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hashicorp/raft"

	"github.com/idem-store/idem/internal/mono"
)

// foreignGuard keeps a node that is a one-node cluster of its own (its
// latest configuration is itself alone: a store started without --join,
// a backup restored with idem snapshot restore, a node rebuilt with idem
// recover) from taking entries or a snapshot from any other leader. Such a
// leader belongs to another cluster: an operator ran idem cluster join for
// this node's addresses there, or the node was given another cluster's
// data dir. Raft cannot tell: the two logs agree wherever their terms
// happen to agree (both start with a bootstrap entry of term 1), so it
// appended the other cluster's entries after this node's own, the FSM
// skipped those up to its own applied index, and the node, caught up by
// its applied index, was promoted there with the wrong state: leading, it
// claimed again a scope that cluster held. The guard answers those RPCs
// with an error naming the mistake (the other leader logs it) and logs it
// here once a minute; the node stays its own cluster's leader, never
// follows the other one, and so is never judged healthy nor promoted there.
//
// A node never sends raft RPCs to itself, so with a configuration of
// itself alone every append or snapshot comes from elsewhere. A node with
// no configuration yet (an empty data dir waiting to join), or one that
// lists other members, is not affected.
//
// The guard holds only in a process that started with such a
// configuration (armed). A node that started empty and joined replays
// its cluster's log from the start, and that log may begin with a
// configuration of this node alone: its own id was the cluster's
// bootstrap node (a member replaced by a fresh node under the same id).
// Between two batches of that replay its latest configuration is itself
// alone; refused, it would never catch up, and, hearing no leader, would
// elect itself leader over a prefix of the log. Restarted at such a point,
// it starts empty instead (joining.go), so the guard is never armed there.
//
// The guard also holds the vote of a node that started empty until it is
// safe to give (votehold.go's voteHold), armed or not, and a leader's
// hand-off to it (votehold.go's campaignHold).
type foreignGuard struct {
	*raft.NetworkTransport
	self    raft.ServerID
	armed   atomic.Bool                // the configuration at start was this node alone
	r       *atomic.Pointer[raft.Raft] // set once raft runs
	ready   chan struct{}              // closed once r is set
	stop    chan struct{}
	rpcs    chan raft.RPC
	log     *slog.Logger
	refused mono.Spacer
	// lastRefused is when (mono.Now()) a leader of another cluster was
	// last refused, and from is that leader; see Node.ForeignLeader.
	lastRefused atomic.Int64
	from        atomic.Pointer[string]
	// votes, set before raft runs, holds the vote of a node that started
	// empty, and learns from leaders' AppendEntries what it needs to give
	// it (votehold.go's voteHold).
	votes voteGate
	// hook, when set (tests only), is asked first about each RPC: an
	// error refuses it as the guard's own do.
	hook atomic.Pointer[func(raft.RPC) error]
	// leftOut, set before raft runs, names the members this data dir's
	// recoveries left out (superseded.go): their appends are answered
	// with leftOutError. onLeftOut is told when a member answers this
	// node's own append so.
	leftOut   recoveryRecord
	onLeftOut func(raft.ServerID, raft.ServerAddress, error)
	// onTwin is told when a member this node's recovery left out probes
	// it: that member was recovered without this node (twins.go).
	onTwin func(id string, addr raft.ServerAddress)
	// leftOutTold spaces the log of left-out members told, leftOutAhead
	// that of one whose log ends past this recovery's state.
	leftOutTold, leftOutAhead mono.Spacer
	// disk, set before raft runs, is the node's disk guard: an append it
	// refuses is answered at a steady pace (appendpace.go).
	disk *diskGuard
}

// AppendEntries is the transport's, and learns from a member's answer that
// this node was left out of a recovery (superseded.go). Raft's heartbeats
// and appends come this way (pipelining is off, see newRaftTransport), so
// a leader learns it within one heartbeat.
func (g *foreignGuard) AppendEntries(id raft.ServerID, target raft.ServerAddress, args *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse) error {
	err := g.NetworkTransport.AppendEntries(id, target, args, resp)
	g.toldLeftOut(id, target, err)
	return err
}

// errStaleSnapshotSend is a snapshot's send refused in a term this node
// no longer holds (foreignGuard.InstallSnapshot): raft logs it at info.
var errStaleSnapshotSend = errors.New("raftfsm: a snapshot is not sent in a term this node has left (its state may hold entries of a later term)")

// InstallSnapshot is the transport's, refused when this node's raft term
// is no longer the one the send is in (args.Term). hashicorp/raft's
// replication to a follower it could not reach waits out its backoff (up
// to 10 s) without watching for the end of the leadership, then sends the
// snapshot in the term it led; the stream is this node's state at the
// send (snapshotStore.Open), which by then may hold a later term's
// entries, applied as a follower. A follower still in the old term took
// it, its term at the install below those entries', and the new leader's
// entries there, in their own term, then marked that healthy follower
// diverged for good (guardedLogStore.checkApplied). The term read here is
// at least the one the stream's state was read in: the same, and that
// state holds no entry of a later term. Raft logs the refused send, at
// info (errorLevel); the leader of the current term sends its own.
func (g *foreignGuard) InstallSnapshot(id raft.ServerID, target raft.ServerAddress, args *raft.InstallSnapshotRequest, resp *raft.InstallSnapshotResponse, data io.Reader) error {
	if r := g.r.Load(); r != nil {
		if term := r.CurrentTerm(); term != args.Term {
			return fmt.Errorf("%w: not sent to %s in term %d, this node is in term %d now", errStaleSnapshotSend, id, args.Term, term)
		}
	}
	return g.NetworkTransport.InstallSnapshot(id, target, args, resp, data)
}

// RequestVote and RequestPreVote are the transport's, and learn from a
// member's answer that this node, a candidate, was left out of a recovery
// (superseded.go): so a left-out member learns it when it first stands for
// election, as a rule before it leads (its appends would tell it only once
// it leads).
//
// Both are asked again on a stale pooled connection (freshConn).
func (g *foreignGuard) RequestVote(id raft.ServerID, target raft.ServerAddress, args *raft.RequestVoteRequest, resp *raft.RequestVoteResponse) error {
	err := freshConn(func() error { return g.NetworkTransport.RequestVote(id, target, args, resp) })
	g.toldLeftOut(id, target, err)
	return err
}

func (g *foreignGuard) RequestPreVote(id raft.ServerID, target raft.ServerAddress, args *raft.RequestPreVoteRequest, resp *raft.RequestPreVoteResponse) error {
	err := freshConn(func() error { return g.NetworkTransport.RequestPreVote(id, target, args, resp) })
	g.toldLeftOut(id, target, err)
	return err
}

// freshConn runs rpc, a vote or pre-vote request to a peer, again while
// it fails as one sent on a connection the peer had closed: raft's
// transport pools the connections it opened to each peer (newRaftTransport's
// MaxPool) and hands an RPC one without checking it, so the first RPCs to
// a peer restarted since fail at once (EOF, a reset), each dropping its
// connection, and the last try dials a new one. A follower opens
// connections only when it campaigns or leads, so its pool to every peer
// restarted since it last did is stale: its vote requests to them failed,
// and raft asks each voter once an election. A leader's hand-off target
// with three such peers of five got two votes: the old leader stepped
// down for the term, nobody won it, and the old leader won the next
// (TestTransferTargetWinsWithStaleConnectionsToRestartedPeers). Asking a
// vote or a pre-vote again changes nothing a first answer did: a voter
// grants the same candidate the same term again, and a pre-vote changes
// nothing. A leader's hand-off (TimeoutNow) is not asked again: one that
// reached its target and lost only its answer would make the target, a
// candidate or already the new leader, campaign once more; and a leader's
// pool is kept fresh by its own appends.
func freshConn(rpc func() error) error {
	var err error
	for try := 0; try <= raftMaxPool; try++ {
		if err = rpc(); !peerHungUp(err) {
			return err
		}
	}
	return err
}

// peerHungUp reports whether err is what a connection its peer had closed
// gives: the peer's end of file, or a reset (an RPC sent on a stale pooled
// connection, freshConn; a TLS handshake cut short, serverConn.handshake).
func peerHungUp(err error) bool {
	return err != nil && (errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE))
}

// toldLeftOut tells onLeftOut when err is a member's answer that this
// node was left out of a recovery.
func (g *foreignGuard) toldLeftOut(id raft.ServerID, target raft.ServerAddress, err error) {
	if err != nil && g.onLeftOut != nil && strings.Contains(err.Error(), supersededMarker) {
		g.onLeftOut(id, target, err)
	}
}

// voteGate is the part of a Node the guard asks about votes.
type voteGate interface {
	leaderCommit(term, commit uint64, named bool)
	mayVote(from raft.RPCHeader, lastTerm, lastIndex uint64) error
	mayCampaign(from raft.RPCHeader) error
	staleLeader() bool
	preVote(req *raft.RequestPreVoteRequest) *raft.RequestPreVoteResponse
}

func newForeignGuard(t *raft.NetworkTransport, self raft.ServerID, r *atomic.Pointer[raft.Raft], ready, stop chan struct{}, log *slog.Logger) *foreignGuard {
	g := &foreignGuard{NetworkTransport: t, self: self, r: r, ready: ready, stop: stop, rpcs: make(chan raft.RPC), log: log}
	go g.forward()
	return g
}

// arm makes the guard hold when r's configuration, as raft starts, is
// this node alone. Called before r is published to check.
func (g *foreignGuard) arm(r *raft.Raft) {
	f := r.GetConfiguration()
	if f.Error() != nil {
		return
	}
	s := f.Configuration().Servers
	g.armed.Store(len(s) == 1 && s[0].ID == g.self)
}

// Consumer is what raft reads its RPCs from: the transport's, filtered.
func (g *foreignGuard) Consumer() <-chan raft.RPC { return g.rpcs }

func (g *foreignGuard) forward() {
	select {
	case <-g.ready:
	case <-g.stop:
		return
	}
	in := g.NetworkTransport.Consumer()
	for {
		select {
		case rpc := <-in:
			if err := g.check(rpc); err != nil {
				rpc.Respond(nil, err)
				continue
			}
			if g.answerProbe(rpc) {
				continue
			}
			if g.settle(rpc) {
				continue
			}
			rpc = g.paceRefused(rpc) // appendpace.go
			select {
			case g.rpcs <- rpc:
			case <-g.stop:
				return
			}
		case <-g.stop:
			return
		}
	}
}

// SetHeartbeatHandler filters heartbeats too: they come outside Consumer,
// and one taken would make this node follow the other leader.
//
// Raft answers a heartbeat on the transport's goroutine, beside its main
// loop, and a heartbeat of a newer term makes the node a follower of that
// term there. A leader's loop checks that it still leads, then stamps the
// batch it appends with the current term: a heartbeat landing between the
// two had the leader append its own entries under the newer term, at
// indexes where that term's leader appended others. Raft's log matching
// then took the two logs for one (same index, same term) and kept both:
// two replicas at one applied index with different states (hashicorp/raft
// issue 695). So only a heartbeat that changes nothing but the time of the
// last contact takes the shortcut: this node follows, in the heartbeat's
// own term. Any other goes to raft's main loop with the other RPCs, where
// a step-down cannot interleave with an append. The term only grows, so a
// heartbeat let through here can at most find a newer term by the time raft
// reads it, and raft ignores it then. What is left is the gap between two
// statements of raft's own appendEntries (its term check and its state
// check): a whole election would have to pass inside it.
func (g *foreignGuard) SetHeartbeatHandler(cb func(raft.RPC)) {
	g.NetworkTransport.SetHeartbeatHandler(func(rpc raft.RPC) {
		if err := g.check(rpc); err != nil {
			rpc.Respond(nil, err)
			return
		}
		if !g.routine(rpc) {
			select {
			case g.rpcs <- rpc:
			case <-g.stop:
				rpc.Respond(nil, raft.ErrRaftShutdown)
			}
			return
		}
		cb(rpc)
	})
}

// routine reports whether heartbeat rpc may take raft's shortcut: this
// node follows, in the heartbeat's term (SetHeartbeatHandler).
func (g *foreignGuard) routine(rpc raft.RPC) bool {
	r := g.r.Load()
	c, ok := rpc.Command.(*raft.AppendEntriesRequest)
	return ok && r != nil && r.State() == raft.Follower && c.Term == r.CurrentTerm()
}

// rpcHook, when set (tests only), is asked about each RPC of every node
// first, with the node's id: unlike a guard's hook, it holds from a node's
// start (a node restarted in a test votes at once).
var rpcHook atomic.Pointer[func(self raft.ServerID, rpc raft.RPC) error]

// check says why rpc must not reach raft, or nil.
func (g *foreignGuard) check(rpc raft.RPC) error {
	if h := rpcHook.Load(); h != nil {
		if err := (*h)(g.self, rpc); err != nil {
			return err
		}
	}
	if h := g.hook.Load(); h != nil {
		if err := (*h)(rpc); err != nil {
			return err
		}
	}
	switch c := rpc.Command.(type) {
	case *raft.AppendEntriesRequest:
		if err := g.foreign(c.RPCHeader); err != nil {
			return err
		}
		if g.votes != nil {
			// A heartbeat carries no commit index (its 0 says nothing);
			// one carrying entries names the leader's, 0 included.
			g.votes.leaderCommit(c.Term, c.LeaderCommitIndex, len(c.Entries) > 0)
		}
		return nil
	case *raft.InstallSnapshotRequest:
		return g.foreign(c.RPCHeader)
	case *raft.RequestVoteRequest:
		if err := g.leftOutCandidate(c.RPCHeader); err != nil {
			g.leftOutAheadOf(c.RPCHeader, c.LastLogIndex)
			return err
		}
		return g.vote(c.RPCHeader, c.LastLogTerm, c.LastLogIndex)
	case *raft.RequestPreVoteRequest:
		if err := g.leftOutCandidate(c.RPCHeader); err != nil {
			if c.Term == recoveryProbeTerm && g.onTwin != nil {
				// Only a recovery that left this node out probes it.
				go g.onTwin(string(c.ID), raft.ServerAddress(c.Addr))
			}
			return err
		}
		if c.Term == recoveryProbeTerm {
			return nil // answered by forward, never raft's (twins.go)
		}
		return g.vote(c.RPCHeader, c.LastLogTerm, c.LastLogIndex)
	case *raft.TimeoutNowRequest:
		if g.votes == nil {
			return nil
		}
		return g.votes.mayCampaign(c.RPCHeader)
	default:
		return nil
	}
}

// vote says why this node must not grant a vote or a pre-vote to a
// candidate whose log ends at lastTerm, lastIndex (votehold.go's voteHold).
func (g *foreignGuard) vote(from raft.RPCHeader, lastTerm, lastIndex uint64) error {
	if g.votes == nil {
		return nil
	}
	return g.votes.mayVote(from, lastTerm, lastIndex)
}

// foreign says why an append or a snapshot from leader from must not reach
// raft, or nil.
func (g *foreignGuard) foreign(from raft.RPCHeader) error {
	r := g.r.Load()
	if r == nil {
		return fmt.Errorf("raftfsm: %s is starting", g.self)
	}
	if err := g.leftOutLeader(r, from); err != nil {
		return err
	}
	if !g.armed.Load() {
		return nil
	}
	f := r.GetConfiguration()
	if f.Error() != nil {
		return nil
	}
	servers := f.Configuration().Servers
	if len(servers) != 1 || servers[0].ID != g.self {
		return nil
	}
	err := fmt.Errorf("raftfsm: node %s is a one-node cluster of its own, with its own state, and takes no entries from leader %s (%s) of another cluster: "+
		"to make it a member there, remove it there (idem cluster remove --id %s) and start it with an empty data dir and --join; its data dir holds the only copy of its own cluster's records",
		g.self, from.ID, from.Addr, g.self)
	who := fmt.Sprintf("%s (%s)", from.ID, from.Addr)
	g.from.Store(&who)
	g.lastRefused.Store(mono.Now())
	if g.refused.Allow(time.Minute) {
		g.log.Error("a leader of another cluster sends this node entries; refused: this node keeps its own state", "leader-id", string(from.ID), "leader-raft-addr", string(from.Addr), "error", err)
	}
	return err
}

// leftOutLeader refuses an append or a snapshot from a leader that a
// recovery of this data dir left out, while it is not a member again (it
// rejoins with an empty data dir): its cluster was replaced by this one.
// The node stays ready: it is the recovered cluster, the sender is not.
func (g *foreignGuard) leftOutLeader(r *raft.Raft, from raft.RPCHeader) error {
	if !g.leftOutNonMember(r, from) {
		return nil
	}
	err := leftOutError(g.self, g.leftOut, from)
	if g.leftOutTold.Allow(time.Minute) {
		g.log.Warn("a member that a recovery or restore of this data dir left out leads its old cluster with the state it kept; told it to stop serving", "left-out-by", g.leftOut.by(), "leader-id", string(from.ID), "leader-raft-addr", string(from.Addr))
	}
	return err
}

// leftOutCandidate refuses a vote or a pre-vote asked by a member that a
// recovery of this data dir left out, while it is not a member again: it
// stands for election in the cluster this one replaced (leftOutLeader).
func (g *foreignGuard) leftOutCandidate(from raft.RPCHeader) error {
	if r := g.r.Load(); r == nil || !g.leftOutNonMember(r, from) {
		return nil
	}
	if g.leftOutTold.Allow(time.Minute) {
		g.log.Warn("a member that a recovery or restore of this data dir left out asked for a vote, or probed for a twin recovery; told it it was left out", "left-out-by", g.leftOut.by(), "member-id", string(from.ID), "member-raft-addr", string(from.Addr))
	}
	return leftOutError(g.self, g.leftOut, from)
}

// leftOutAheadOf says, at most once a minute, that a left-out member asking
// for a vote has a log that ends past the state this recovery started
// from: the recovery may have been made from the wrong survivor (the one
// whose log ended lower), and the member may hold acknowledged records
// this cluster lacks (an operator walk: nothing said so here).
func (g *foreignGuard) leftOutAheadOf(from raft.RPCHeader, lastLogIndex uint64) {
	if lastLogIndex <= g.leftOut.Applied || !g.leftOutAhead.Allow(time.Minute) {
		return
	}
	if g.leftOut.Via == viaRestore {
		g.log.Error("a member of the cluster this node was restored in place of has a log that ends past the backup's state: it may hold acknowledged records the backup lacks; "+
			"if this cluster has taken no writes that matter since, stop it and run idem recover on that member's data dir instead (docs/BACKUP.md)",
			"member-id", string(from.ID), "member-raft-addr", string(from.Addr), "member-last-log-index", lastLogIndex, "restored-from-index", g.leftOut.Applied)
		return
	}
	g.log.Error("a member that idem recover left out has a log that ends past the state this recovery started from: it may hold acknowledged records this cluster lacks, and the recovery may have been made from the wrong survivor (the one whose log ended highest should be); "+
		"if this cluster has taken no writes that matter since, stop it and run idem recover on that member's data dir instead (docs/BACKUP.md)",
		"member-id", string(from.ID), "member-raft-addr", string(from.Addr), "member-last-log-index", lastLogIndex, "recovered-from-index", g.leftOut.Applied)
}

// leftOutNonMember reports whether the sender of from is a member that a
// recovery of this data dir left out, and not a member again.
func (g *foreignGuard) leftOutNonMember(r *raft.Raft, from raft.RPCHeader) bool {
	return g.leftOut.leftOut(string(from.ID)) && knownNonMember(r, string(from.ID))
}

// knownNonMember reports whether id is not in r's latest configuration
// (false when the configuration cannot be read).
func knownNonMember(r *raft.Raft, id string) bool {
	f := r.GetConfiguration()
	return f.Error() == nil && !slices.ContainsFunc(f.Configuration().Servers, func(s raft.Server) bool { return s.ID == raft.ServerID(id) })
}

// foreignUnready is how long after the last refused leader of another
// cluster the node reports itself not ready (Node.ForeignLeader): that
// cluster counts this node's raft address as its member's, and its clients
// may reach this node with that member's address and get answers from
// another cluster's records. The other leader retries every heartbeat, so
// the node stays unready while it does.
const foreignUnready = 30 * time.Second

// foreignLeader is the leader refused within foreignUnready, or "".
func (g *foreignGuard) foreignLeader() string {
	if t := g.lastRefused.Load(); t == 0 || mono.Since(t) > foreignUnready {
		return ""
	}
	if w := g.from.Load(); w != nil {
		return *w
	}
	return ""
}

// settle adjusts or answers a vote request check let through, for a node
// that holds its campaign (votehold.go's campaignHold), and reports whether
// it answered rpc itself. Holding its campaign, the node's heartbeat
// timeout is a day, so raft never forgets a leader that died: it refused
// every vote and pre-vote "since we have a leader", and the survivors
// could elect nobody until the dead leader came back or this node was
// restarted (an operator walk). Once the leader has been silent for the
// heartbeat timeout raft would otherwise have, a vote this node's hold
// allows goes to raft as a leadership transfer's does (which skips only
// that check), and a pre-vote is answered here as raft answers one when it
// knows no leader.
func (g *foreignGuard) settle(rpc raft.RPC) bool {
	if g.votes == nil {
		return false
	}
	switch c := rpc.Command.(type) {
	case *raft.RequestVoteRequest:
		if g.votes.staleLeader() {
			c.LeadershipTransfer = true
		}
	case *raft.RequestPreVoteRequest:
		if g.votes.staleLeader() {
			rpc.Respond(g.votes.preVote(c), nil)
			return true
		}
	}
	return false
}
