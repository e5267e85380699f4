package raftfsm

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	"github.com/prometheus/client_golang/prometheus"
	"go.etcd.io/bbolt"

	"github.com/idem-store/idem/engine"
	"github.com/idem-store/idem/internal/mono"
	"github.com/idem-store/idem/ttl"
)

// Node is one idem server's raft node: the FSM over Pebble, the raft log in
// bolt, snapshots on disk and the TCP transport.
type Node struct {
	capFlight capFlight     // credential caps' claims in flight (capGate)
	committed committedConf // the last membership seen committed (Status)
	// confChange makes this leader's membership changes one at a time,
	// each from reading the configuration to its commit, and each names
	// the index of the configuration it was decided on
	// (latestConfiguration): raft then refuses one decided before another
	// leader's change. It guards configScan.
	confChange sync.Mutex
	configScan configScan
	// keyring is Config.Keyring, read through Keyring(): tests swap it on
	// a running node (setKeyring) to play a node given another key file.
	keyring atomic.Pointer[Keyring]
	// startedEmpty: this process started on an empty data dir, or one
	// still joining (StartedEmpty); set at open, read only after.
	startedEmpty bool
	cfg          Config
	log          *slog.Logger
	db           *engine.DB
	fsm          *FSM
	clock        *ttl.Clock
	raft         *raft.Raft
	trans        *raft.NetworkTransport
	stream       *streamLayer
	stopTLS      func()                // stops following TLS reloads (tlsReloaded)
	stable       *raftboltdb.BoltStore // raft.db: term and vote
	logStore     *LogStore             // raft-log/ (logstore.go)
	snaps        *snapshotStore
	metrics      *Metrics
	disk         *diskGuard // disk.go: free space, ballast, storage full
	widthMs      int64
	self         NodeInfo
	lastWrite    atomic.Int64 // mono.Now() of the last proposal, for idle ticks
	// stampBack spaces the log of a stamp held within ttl.RewindAfter of
	// the applied time (stampMs).
	stampBack mono.Spacer
	// leaderlessSince is when this member last saw a leader go (zero while
	// it has one); only watchMembership's goroutine reads and writes it.
	leaderlessSince time.Time
	leaderlessLog   mono.Spacer // watchLeader's line

	barrierTerm atomic.Uint64 // term in which this leader's Barrier completed
	barrierSem  chan struct{} // one Barrier at a time; a waiter can give up
	leaderCache atomic.Pointer[leaderEntry]

	mu       sync.Mutex
	unhealty map[raft.ServerID]time.Time // when the leader last saw its heartbeat to a peer fail (observe)
	peers    peerState                   // membership.go: measured health of the members, promotions

	stop    chan struct{}
	wg      sync.WaitGroup
	closing atomic.Bool
	// member is whether the latest raft configuration includes this node.
	// A node that is not a member (removed, or not yet joined) knows no
	// leader as far as callers are concerned, so it accepts no writes.
	member atomic.Bool
	// joining is whether the data dir holds joiningFile (joining.go);
	// admission is what the file says of the node's admission.
	joining   atomic.Bool
	admission atomic.Uint64
	// removedReplaying is what idem serve learned from the cluster's
	// leader of this node while it replays toward its admission unheard:
	// removed (joining.go's MarkRemovedWhileReplaying).
	removedReplaying atomic.Pointer[removedMark]
	// removedUnheard is what idem serve learned from a leader of this
	// node while it believes it is a member and hears from no leader:
	// removed (joining.go's MarkRemovedUnheard). startedAt is when the node
	// started, the start of a silence for a node that never heard a
	// leader.
	removedUnheard atomic.Pointer[removedMark]
	startedAt      time.Time
	// told are the members' addresses as the cluster answered at the
	// join (LearnAddrs), for the leader's HTTP address while the node's
	// state records none (a snapshot on its way).
	told atomic.Pointer[[]NodeInfo]
	// supersededBy, once set, is why this node answers every request 503:
	// its cluster was recovered without it (superseded.go).
	supersededBy atomic.Pointer[string]
	// diverged: supersededBy was set by a tail cut (Node.tailCut): this
	// node is a voter of the live cluster, and hands on a leadership it
	// gets (supersededHandOff).
	diverged atomic.Bool
	// keyView is what the leader's health loop last saw of the voters'
	// encryption keys (keyuse.go's voterKeys).
	keyView atomic.Pointer[voterKeysView]
	// retView is what the leader's health loop last saw of the voters'
	// --retention while none is pinned (retentionhold.go); retHandOff and
	// retLogged space its hand-offs and refusal lines.
	retView               atomic.Pointer[retentionView]
	retHandOff, retLogged mono.Spacer
	// retAnyHandOff spaces the hand-offs of a leader that cannot read the
	// voters' --retention (their checks refuse its node token).
	retAnyHandOff mono.Spacer
	// roomView is what the leader's health loop last found of the voters'
	// disks while fewer than a quorum have room (quorumroom.go), nil
	// otherwise; roomLog spaces its line.
	roomView atomic.Pointer[VotersFullError]
	roomLog  mono.Spacer
	// kept is what this node, a non-voter, last learned from the leader of
	// being kept one (keptback.go): it is then not ready and answers no
	// stale read.
	kept keptState

	votes    voteHold     // votehold.go: the vote of a node that started empty
	campaign campaignHold // votehold.go: its candidacy, held with its vote
	guard    *foreignGuard
}

// Open starts a node. With cfg.Bootstrap and no existing state it bootstraps
// a one-node cluster.
func Open(cfg Config) (*Node, error) {
	n, err := open(cfg)
	if !errors.Is(err, errStartEmpty) {
		return n, err
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if _, err := setAside(cfg.DataDir, log); err != nil { // joining.go
		return nil, err
	}
	if cfg.Bootstrap {
		// Its state comes from the cluster it joined: a cluster of its
		// own, empty, would take claims of keys that cluster holds.
		cfg.Bootstrap = false
		log.Warn("not starting a new cluster on the emptied data dir: this node joined a cluster, and waits to be taken in again; start it with --join naming a member, or add it by hand (idem cluster join)")
	}
	return open(cfg)
}

func open(cfg Config) (*Node, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.RaftAdvertise == "" {
		cfg.RaftAdvertise = cfg.RaftAddr
	}
	_, statErr := os.Stat(cfg.DataDir)
	created := errors.Is(statErr, fs.ErrNotExist)
	if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
		return nil, fmt.Errorf("raftfsm: create data dir: %w", err)
	}
	ok := false // set once the node runs; every cleanup below checks it
	defer func() {
		// A start refused before anything was written (the disk too full
		// to open the stores, "nothing was changed") left the data dir it
		// had just made: remove it again while it is empty.
		if !ok && created {
			os.Remove(cfg.DataDir)
		}
	}()
	if rec, err := readSuperseded(cfg.DataDir); err != nil {
		return nil, err
	} else if rec != nil {
		return nil, fmt.Errorf("%w: %s", rec.err(), rec.message(cfg.DataDir)) // superseded.go
	}
	if r, err := ReadRecovering(cfg.DataDir); err != nil {
		return nil, err
	} else if r != nil {
		return nil, fmt.Errorf("%w: %s", ErrRecoverUnfinished, r.message(cfg.DataDir)) // recovering.go
	}
	leftOut, lerr := readRecoveryRecord(cfg.DataDir)
	if lerr != nil {
		return nil, lerr
	}
	tightenDataDir(cfg.DataDir, cfg.Logger)
	var reg *undoRegisterer
	if cfg.Registry != nil {
		reg = &undoRegisterer{Registerer: cfg.Registry}
		cfg.Registry = reg
	}
	n := &Node{
		startedAt:  time.Now(),
		cfg:        cfg,
		log:        cfg.Logger,
		clock:      ttl.NewClock(cfg.ClockOffset),
		widthMs:    cfg.BucketWidth.Milliseconds(),
		self:       NodeInfo{ID: cfg.NodeID, RaftAddr: cfg.RaftAdvertise, HTTPAddr: cfg.HTTPAdvertise},
		unhealty:   map[raft.ServerID]time.Time{},
		stop:       make(chan struct{}),
		barrierSem: make(chan struct{}, 1),
	}
	n.keyring.Store(cfg.Keyring)
	defer func() {
		if !ok {
			close(n.stop) // ends what waits on it (foreignGuard's forward)
			n.closeStores()
			if reg != nil {
				reg.undo()
			}
		}
	}()
	var err error
	if n.disk, err = openDiskGuard(cfg); err != nil {
		return nil, err
	}
	if n.db, err = engine.Open(filepath.Join(cfg.DataDir, "fsm"), n.disk.engineOptions(engine.Options{Logger: cfg.Logger, CacheBytes: cfg.CacheBytes}, n.stop)); err != nil {
		return nil, err
	}
	n.metrics = newMetrics(cfg.Registry)
	n.fsm = NewFSM(n.db, n.clock, cfg.Logger, n.metrics)
	n.fsm.installedPath = filepath.Join(cfg.DataDir, installedFile)
	n.fsm.skipUniqueness = cfg.InjectBug == BugSkipUniqueness
	if cfg.InjectBug != "" {
		n.log.Warn("THIS NODE RUNS WITH AN INJECTED BUG (test only)", "bug", cfg.InjectBug)
	}
	if n.stable, err = raftboltdb.New(raftboltdb.Options{
		Path:        filepath.Join(cfg.DataDir, "raft.db"),
		BoltOptions: stableOptions(),
	}); err != nil {
		if errors.Is(err, bbolt.ErrTimeout) {
			return nil, fmt.Errorf("raftfsm: data dir %s is in use by another idem process", cfg.DataDir)
		}
		if errors.Is(err, os.ErrPermission) {
			// Not a damaged raft.db: the advice below (remove the node, set
			// its data dir aside, rejoin empty) would have the operator
			// rebuild a node whose only fault is a file's owner or mode.
			return nil, fmt.Errorf("raftfsm: open %s (raft's term and vote): %w: check that the user running idem owns %s and everything in it", filepath.Join(cfg.DataDir, "raft.db"), err, cfg.DataDir)
		}
		return nil, fmt.Errorf("raftfsm: open %s (raft's term and vote): %w. Nothing was changed. "+
			"%s; "+
			"if this is the only node, move raft.db aside: a one-node cluster starts without it",
			filepath.Join(cfg.DataDir, "raft.db"), err, rejoinAdvice(cfg))
	}
	// raft.db lost (deleted or emptied) beside a kept log: checked once
	// raft has read the configuration (forgotVote).
	term, termErr := n.stable.GetUint64([]byte("CurrentTerm"))
	if err := n.refuseUnreadLog(); err != nil {
		return nil, err
	}
	if n.logStore, err = openLogStore(cfg.DataDir, n.stable, cfg.Logger); err != nil {
		return nil, logStoreError(err, cfg)
	}
	n.logStore.damagedAdvice = damagedLogAdvice(cfg)
	if n.stable, err = scrubStableStore(cfg.DataDir, n.stable, stableOptions(), cfg.Logger); err != nil {
		if n.stable == nil {
			return nil, err
		}
		// raft.db is whole and open again: the rewrite is hygiene (old
		// log bytes in free pages), not worth refusing to start for on a
		// full disk; it is tried again at the next start.
		cfg.Logger.Error("could not rewrite raft.db without the free pages of the raft log moved out of it: they still hold that log's entries; tried again at the next start", "error", err)
	}
	if n.snaps, err = newSnapshotStore(cfg.DataDir, n.db, cfg.Logger); err != nil {
		return nil, fmt.Errorf("raftfsm: open snapshot store: %w", err)
	}
	n.snaps.disk, n.snaps.stop = n.disk, n.stop
	if err := n.checkStoredID(); err != nil { // storedid.go; before anything is written
		return nil, err
	}
	if err := n.catchUpFromSnapshot(); err != nil {
		return nil, err
	}
	if err := n.checkLogEnd(); err != nil {
		return nil, err
	}
	if err := n.checkLogHead(); err != nil {
		return nil, err
	}
	if err := n.checkLogPresent(); err != nil {
		return nil, err
	}
	if err := n.dropLogBelowSnapshot(); err != nil { // after the refusals, which change nothing
		return nil, err
	}
	if err := n.checkKeys(); err != nil {
		return nil, err
	}
	existing, err := raft.HasExistingState(n.logStore, n.stable, n.snaps)
	if err != nil {
		return nil, fmt.Errorf("raftfsm: read raft state: %w", err)
	}
	if err := n.checkJoining(existing); err != nil { // joining.go
		return nil, err
	}
	if err := n.loadKept(); err != nil { // keptback.go
		return nil, err
	}
	stream, err := newStreamLayer(cfg.RaftAddr, cfg.RaftAdvertise, cfg.RaftListener, cfg.TLS, cfg.Logger)
	if err != nil {
		return nil, err
	}
	if cfg.MaxInboundRaftConns > 0 {
		stream.slots = make(chan struct{}, cfg.MaxInboundRaftConns)
	}
	cfg.RaftAdvertise = stream.Addr().String()
	n.self.RaftAddr = cfg.RaftAdvertise
	n.trans = newRaftTransport(stream, cfg.Logger)
	if cfg.TLS != nil {
		n.stream = stream
		n.stopTLS = cfg.TLS.onReload(func(old, cur *tlsMaterial) { n.tlsReloaded(stream, old, cur) })
	}
	if cfg.BeforeRaft != nil {
		if err := cfg.BeforeRaft(); err != nil {
			return nil, err
		}
	}
	rc := raft.DefaultConfig()
	rc.LocalID = raft.ServerID(cfg.NodeID)
	rc.Logger = newQuietHCLog(cfg.Logger, n.replayingQuiet)
	rc.SnapshotThreshold = cfg.SnapshotThreshold
	rc.SnapshotInterval = cfg.SnapshotInterval
	rc.TrailingLogs = cfg.TrailingLogs
	rc.BatchApplyCh = true
	rc.MaxAppendEntries = 512
	// Pebble keeps the state across restarts; raft only replays the log
	// above the snapshot and the FSM skips what it already has.
	rc.NoSnapshotRestoreOnStart = true
	// A removed node keeps running outside the configuration, so an
	// operator can add it back without restarting it (membership.go).
	rc.ShutdownOnRemove = false
	if n.voteHeld() {
		n.startedEmpty = true
		n.holdCampaign(rc) // votehold.go
	}
	if err := raft.ValidateConfig(rc); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	if !existing && n.cfg.Bootstrap { // checkJoining may have cleared it
		conf := raft.Configuration{Servers: []raft.Server{{
			ID: rc.LocalID, Address: raft.ServerAddress(cfg.RaftAdvertise), Suffrage: raft.Voter,
		}}}
		if err := raft.BootstrapCluster(rc, n.logStore, n.stable, n.snaps, n.trans, conf); err != nil {
			return nil, fmt.Errorf("raftfsm: bootstrap: %w", err)
		}
		n.log.Info("bootstrapped a new one-node cluster", "node-id", cfg.NodeID)
	}
	n.disk.seedBacklog(n.logStore, n.db.Meta().Applied)
	var started atomic.Pointer[raft.Raft] // for the log store's guard, set once raft runs
	n.disk.commitIndex = func() uint64 {
		if r := started.Load(); r != nil {
			return r.CommitIndex()
		}
		return 0
	}
	logs := guardedLogStore{n.logStore, n.disk, func() bool { r := started.Load(); return r != nil && r.State() == raft.Leader }, newLogCache()}
	n.logStore.snapHead = n.snaps.newestMeta
	n.logStore.tailCut = func(min, max uint64) { n.tailCut(started.Load(), min, max) }
	n.fsm.installed = func() {
		n.logStore.installed.Store(true)
		if r := started.Load(); r != nil {
			n.logStore.appliedBound.Store(&[2]uint64{n.db.Meta().Applied, r.CurrentTerm()})
		}
	}
	if termErr == nil {
		n.logStore.appliedBound.Store(&[2]uint64{n.db.Meta().Applied, term})
	}
	n.logStore.unverified = func(index, term uint64) { n.unverifiedEntry(started.Load(), index, term) }
	n.logStore.keepFrom = n.snaps.keepLogFrom
	n.logStore.sentHead = n.snaps.sentMeta
	n.snaps.logEnd = n.logStore.LastIndex
	running := make(chan struct{})
	trans := newForeignGuard(n.trans, rc.LocalID, &started, running, n.stop, n.log) // foreign.go
	n.guard = trans
	trans.votes = n
	trans.disk = n.disk
	trans.leftOut, trans.onLeftOut, trans.onTwin = leftOut, n.superseded, n.probedByTwin
	if existing {
		n.noteLogScan()
	}
	if n.raft, err = n.newRaft(rc, logs, trans); err != nil {
		return nil, err
	}
	if err := addressOfAnother(n.raft, rc.LocalID, cfg.RaftAdvertise); err != nil {
		// No RPC has reached raft (the guard holds them until running).
		n.raft.Shutdown().Error()
		return nil, err
	}
	if other := otherAtOwnAddress(n.raft, rc.LocalID, cfg.RaftAdvertise); other != "" {
		n.log.Warn("this node ("+cfg.NodeID+") is not in its own cluster configuration, which gives its raft address to member "+other+
			": if this data dir is "+other+"'s (node.json lost, a --node-id typo), stop and start it with --node-id "+other+"; as it is, it never votes nor leads. "+
			"A new node that took over a removed member's address and is catching up may see this once",
			"raft-addr", cfg.RaftAdvertise, "member", other)
	}
	if existing && termErr != nil {
		if err := n.forgotVote(rc.LocalID); err != nil {
			n.raft.Shutdown().Error()
			return nil, err
		}
	}
	trans.arm(n.raft)
	started.Store(n.raft)
	close(running)
	watchLeaderChanges(n.raft, n.metrics.LeaderChanges, n.log, raft.ServerID(n.self.ID), n.closing.Load)
	if cfg.Registry != nil {
		cfg.Registry.MustRegister(newStateCollector(n))
		cfg.Registry.MustRegister(newKeyCollector(n))
		if cfg.TLS != nil {
			cfg.Registry.MustRegister(TLSCollector(cfg.TLS))
		}
	}
	n.refreshMembership()
	obs := make(chan raft.Observation, 64)
	n.raft.RegisterObserver(raft.NewObserver(obs, false, nil))
	n.wg.Add(4)
	go n.observe(obs)
	go n.watchMembership()
	go n.leaderLoop()
	go n.compactDropped()
	n.wg.Add(3)
	go n.watchDisk()
	go n.watchFSM()
	go n.watchClock() // clockwatch.go
	if len(leftOut.LeftOut) > 0 {
		n.wg.Add(1)
		go n.watchTwins(leftOut, raft.ServerAddress(cfg.RaftAdvertise)) // twins.go
	}
	ok = true
	return n, nil
}

// tlsReloaded follows a reload of the certificate files. Raft keeps a
// connection for as long as it works, so without this a CA rotation would
// leave a peer holding a certificate of the old CA (a leaked key) the
// connection it had, and a renewed certificate would never reach the
// connections already open. When the CA file changed, it closes the raft
// connections, both ways, whose peer's certificate the new CAs do not
// verify; when this node's certificate changed, it closes those it
// dialled. Either way it drops the transport's
// pooled connections and ends its inbound handlers after their current
// request (CloseStreams), so both ends dial again with the new files;
// raft reconnects by itself.
func (n *Node) tlsReloaded(stream *streamLayer, old, cur *tlsMaterial) {
	trust, cert := trustChanged(old, cur), certChanged(old, cur)
	if !trust && !cert {
		return
	}
	untrusted, dialled := stream.conns.cut(cur.pool, cert)
	if untrusted > 0 {
		n.log.Warn("closed raft connections whose peer's certificate the reloaded --tls-ca-file no longer trusts", "connections", untrusted)
	}
	n.trans.CloseStreams()
	n.log.Info("raft connections will be dialled again with the reloaded certificates", "closed", dialled)
}

// catchUpFromSnapshot restores the newest snapshot when Pebble is behind it
// (its directory was lost or replaced): raft would otherwise replay only
// the log above the snapshot onto an older state.
//
// A snapshot's raft index counts no-op and barrier entries the FSM never
// sees, so it is not compared with the applied index: a marker carries the
// applied index of the state it stands for, and a full stream is restored
// only when the state it holds is newer than Pebble's.
func (n *Node) catchUpFromSnapshot() error {
	list, err := n.snaps.List()
	if err != nil || len(list) == 0 {
		return err
	}
	newest, applied := list[0], n.db.Meta().Applied
	if newest.Index <= applied {
		return nil
	}
	_, rc, err := n.snaps.FileSnapshotStore.Open(newest.ID)
	if err != nil {
		return fmt.Errorf("raftfsm: open snapshot %s: %w", newest.ID, err)
	}
	defer rc.Close()
	br := bufio.NewReaderSize(rc, 1<<20)
	stateIndex, marker, err := readMarker(br)
	if err != nil {
		return fmt.Errorf("raftfsm: snapshot %s: %w", newest.ID, err)
	}
	if marker {
		if stateIndex <= applied {
			return nil // the entries between are no-ops and barriers
		}
		return fmt.Errorf("raftfsm: the state in %s (applied index %d) is older than the state this node recorded in its own snapshot %s (applied index %d): "+
			"the fsm directory was lost, replaced or restored from an older copy, and this node cannot rebuild it from its own files. Nothing was changed. "+
			"If other members of the cluster are healthy, move this node's data dir aside (keep it: mv it to a new name) and start the node with an empty data dir and --join, so the leader sends it the state; "+
			"if this is the only node, put back the fsm directory that belongs with this raft log, or build a new data dir from a backup (idem snapshot restore)",
			filepath.Join(n.cfg.DataDir, "fsm"), applied, newest.ID, stateIndex)
	}
	restored, err := n.db.RestoreIfNewer(br)
	if err != nil {
		return startRestoreError(newest.ID, newest.Size, n.cfg, err)
	}
	if restored {
		n.log.Warn("state was behind the newest snapshot; restored it", "snapshot-index", newest.Index, "applied-before", applied, "applied-index", n.db.Meta().Applied)
		if now := n.db.Meta().Applied; now > newest.Index {
			// A leader's stream, saved before the node stopped while
			// installing it, holds the leader's state past the snapshot's
			// index: recorded as FSM.Restore records it, or checkLogPresent
			// refused the node (a membership walk: kill -9 during a join,
			// and the documented restart was refused).
			if err := writeInstalled(n.fsm.installedPath, now); err != nil {
				return fmt.Errorf("raftfsm: record the state installed from snapshot %s: %w", newest.ID, err)
			}
		}
	}
	return nil
}

// oldLogDir is where development builds of 2026-12-01 (between the batch
// entries and raft-wal) kept the raft log, in Pebble. No release reads it.
const oldLogDir = "raft-log"

// refuseUnreadLog refuses, before anything is written, a data dir whose
// raft log is in a layout this release does not read: it would start with
// an empty log beside a state applied from the lost one, with no cluster
// configuration, and never lead (review: a cluster restarted on this
// release from such a build stayed leaderless for good).
func (n *Node) refuseUnreadLog() error {
	old := filepath.Join(n.cfg.DataDir, oldLogDir)
	if _, err := os.Stat(old); err != nil {
		return nil
	}
	if _, err := os.Stat(filepath.Join(n.cfg.DataDir, logStoreDir)); err == nil {
		return nil // raft-wal is the log; raft-log is a leftover
	}
	return fmt.Errorf("raftfsm: %s holds this node's raft log in the layout of a development build (a Pebble log store), which this release does not read; nothing was changed. %s",
		old, lostLogAdvice(n.cfg))
}

// checkLogPresent refuses a node whose state was applied from a raft log
// that is gone (raft-wal deleted to free space, or replaced): raft would
// start it with an empty log and no cluster configuration, so it could
// neither lead nor vote, and a bootstrap is refused because raft.db holds
// a term. A node joining for the first time has applied nothing; a log
// compacted away left a snapshot.
//
// With a snapshot kept, the log must still reach the applied index: an
// entry is applied only once it is in the log, and a snapshot covers what
// was compacted away. A log deleted beside a snapshot older than the state
// ends raft's log at the snapshot; the node then gave the indexes above it
// to new entries that the FSM, having applied those indexes already,
// skipped: each was answered 503 until the log passed the state, and a
// member that replayed them would have applied what this node never did.
func (n *Node) checkLogPresent() error {
	applied := n.db.Meta().Applied
	if applied == 0 {
		return nil
	}
	last, err := n.logStore.LastIndex()
	if err != nil {
		return fmt.Errorf("raftfsm: read the raft log: %w", err)
	}
	end := last // raft's log ends here, or at the newest snapshot
	if end < applied {
		list, err := n.snaps.List()
		if err != nil {
			return err
		}
		if len(list) > 0 {
			end = max(end, list[0].Index)
		}
	}
	if end >= applied {
		return nil
	}
	if end > 0 && readInstalled(filepath.Join(n.cfg.DataDir, installedFile)) == applied {
		// The whole state came from a leader's snapshot, whose stream holds
		// the leader's state at a later index than the snapshot's, and the
		// node stopped before its log passed it: nothing applied came from
		// this log. Raft goes on from the snapshot and the FSM skips the
		// entries up to the state as they come. (The entries above the
		// snapshot are committed on a quorum whose logs hold them, so this
		// node cannot lead without them.)
		n.log.Info("the state was installed from the leader's snapshot past the snapshot's index; the log continues from the snapshot", "applied-index", applied, "log-end", end)
		return nil
	}
	if end > 0 {
		return fmt.Errorf("raftfsm: the state in %s was applied up to raft index %d, but the raft log in %s and its snapshots end at index %d: entries this node applied are gone from its log (the log was deleted, replaced or cut short), so it must not vote or lead from it. Nothing was changed. %s",
			filepath.Join(n.cfg.DataDir, "fsm"), applied, filepath.Join(n.cfg.DataDir, logStoreDir), end, lostLogAdvice(n.cfg))
	}
	return fmt.Errorf("raftfsm: the state in %s was applied up to raft index %d, but %s holds no raft log and there is no snapshot: the log was deleted or replaced, and without it this node has no cluster configuration. %s",
		filepath.Join(n.cfg.DataDir, "fsm"), applied, filepath.Join(n.cfg.DataDir, logStoreDir), lostLogAdvice(n.cfg))
}

// checkLogHead refuses a raft log whose head was compacted away while no
// snapshot covers it: raft reads the log from the newest snapshot's index
// up (from index 1 with none), and it panicked on the first missing entry
// ("log not found"). Raft compacts only below a snapshot it has taken, so
// this is a snapshots directory emptied, its newest snapshot deleted, or
// that snapshot's metadata damaged (raft's listing skips it) after the
// fact (an operator walk: snapshots/* deleted to free space). The state in
// Pebble is whole; idem recover writes a snapshot marker of it over the
// gap (Recover).
func (n *Node) checkLogHead() error {
	first, last, err := n.logBounds()
	if err != nil {
		return err
	}
	list, err := n.snaps.List()
	if err != nil {
		return fmt.Errorf("raftfsm: list snapshots: %w", err)
	}
	gap, newest := logHeadUncovered(first, last, list)
	if !gap {
		return nil
	}
	if applied := n.db.Meta().Applied; applied+1 < first {
		// The state is behind the lost snapshot too (see coverLogHead).
		return fmt.Errorf("raftfsm: the raft log in %s starts at index %d: the entries before it were compacted into a snapshot, and no snapshot in %s covers them (%s); "+
			"the state in %s was applied only up to index %d, so entries between are lost with that snapshot (the fsm directory was lost or replaced too), and this node cannot rebuild its state from its own files. Nothing was changed. %s",
			filepath.Join(n.cfg.DataDir, logStoreDir), first, filepath.Join(n.cfg.DataDir, "snapshots"), newest,
			filepath.Join(n.cfg.DataDir, "fsm"), applied, lostStateAdvice(n.cfg))
	}
	return fmt.Errorf("raftfsm: the raft log in %s starts at index %d: the entries before it were compacted into a snapshot, and no snapshot in %s covers them (%s): "+
		"the snapshots directory was emptied, or its newest snapshot was deleted or damaged (its meta.json unreadable). Raft cannot start from this log without it. "+
		"The state in %s (applied to index %d) is whole. Nothing was changed. "+
		"(The snapshots this node takes of its own state are a few bytes each: deleting them frees no space.) %s",
		filepath.Join(n.cfg.DataDir, logStoreDir), first, filepath.Join(n.cfg.DataDir, "snapshots"), newest,
		filepath.Join(n.cfg.DataDir, "fsm"), n.db.Meta().Applied, lostLogAdvice(n.cfg))
}

// logHeadUncovered reports whether a raft log from first to last has lost
// the snapshot that covers its compacted head: it starts above index 1 and
// the newest snapshot (list[0], as raft starts from it) is below first-1.
// It also says what the newest snapshot is, for a message.
func logHeadUncovered(first, last uint64, list []*raft.SnapshotMeta) (bool, string) {
	if last == 0 || first <= 1 {
		return false, ""
	}
	if len(list) == 0 {
		return true, "there is none"
	}
	if list[0].Index+1 >= first {
		return false, ""
	}
	return true, fmt.Sprintf("the newest, %s, is at index %d", list[0].ID, list[0].Index)
}

// installedFile, in the data dir, holds the applied index of the state the
// node last installed from a leader's snapshot (FSM.Restore), 8 bytes.
const installedFile = "installed-state"

func writeInstalled(path string, applied uint64) error {
	if err := writeSynced(path, binary.BigEndian.AppendUint64(nil, applied)); err != nil {
		return err
	}
	return syncDir(filepath.Dir(path))
}

// readInstalled is 0 when there is no record (or a damaged one).
func readInstalled(path string) uint64 {
	b, err := os.ReadFile(path)
	if err != nil || len(b) != 8 {
		return 0
	}
	return binary.BigEndian.Uint64(b)
}

// dropLogBelowSnapshot finishes what raft does once it has installed a
// leader's snapshot: raft-wal takes no gaps, so raft then removes the whole
// log (removeOldLogs). A node stopped between the two kept a log that ends
// below its newest snapshot; raft appended the entries after the snapshot
// to it, raft-wal refused each ("non-monotonic log entries"), and the node
// could store no entry again: a follower never caught up, a lone node never
// answered. Every entry of such a log is below the snapshot, whose state
// the node holds (catchUpFromSnapshot), and raft would have removed them:
// they go now, with a log line.
func (n *Node) dropLogBelowSnapshot() error {
	last, err := n.logStore.LastIndex()
	if err != nil {
		return fmt.Errorf("raftfsm: read the raft log: %w", err)
	}
	if last == 0 {
		return nil
	}
	list, err := n.snaps.List()
	if err != nil {
		return fmt.Errorf("raftfsm: list snapshots: %w", err)
	}
	if len(list) == 0 || list[0].Index <= last {
		return nil
	}
	first, err := n.logStore.FirstIndex()
	if err != nil {
		return fmt.Errorf("raftfsm: read the raft log: %w", err)
	}
	if err := n.logStore.DeleteRange(first, last); err != nil {
		return fmt.Errorf("raftfsm: remove the raft log's entries %d-%d, below snapshot %s: %w", first, last, list[0].ID, err)
	}
	n.log.Warn("the raft log ended below the newest snapshot (the node stopped while installing a snapshot from its leader, before raft removed the older log); removed the log's entries, which the snapshot covers",
		"removed-from", first, "removed-to", last, "snapshot", list[0].ID, "snapshot-index", list[0].Index)
	return nil
}

// logBounds reads the raft log's first and last index (0, 0 when empty).
func (n *Node) logBounds() (first, last uint64, err error) {
	if first, err = n.logStore.FirstIndex(); err == nil {
		last, err = n.logStore.LastIndex()
	}
	if err != nil {
		return 0, 0, fmt.Errorf("raftfsm: read the raft log: %w", err)
	}
	return first, last, nil
}

// checkLogEnd refuses a raft log whose end was lost below its first index
// (the tail of its segment file truncated or overwritten, after snapshots
// had moved the head up): raft-wal reads it as ending before it starts,
// raft failed on the missing last entry without saying more, and the
// entries between were lost, so the node must not vote or lead from it.
func (n *Node) checkLogEnd() error {
	first, last, err := n.logBounds()
	if err != nil {
		return err
	}
	if last == 0 || last >= first {
		return nil
	}
	return fmt.Errorf("raftfsm: the raft log in %s is damaged: it ends at index %d, below its first entry %d (the end of its segment file was truncated or overwritten), so entries this node stored are lost from it (its state was applied up to index %d). Nothing was changed. %s",
		filepath.Join(n.cfg.DataDir, logStoreDir), last, first, n.db.Meta().Applied, lostLogAdvice(n.cfg))
}

// forgotVote refuses a voter of a cluster of several voters whose raft.db
// holds no term (deleted, emptied or replaced) while its log or snapshots
// are kept: it forgot the vote it may have cast in the current term, so it
// could vote again in that term for another candidate, and two leaders
// could be elected in one term. A node alone votes only for itself.
func (n *Node) forgotVote(self raft.ServerID) error {
	f := n.raft.GetConfiguration()
	if f.Error() != nil {
		return nil
	}
	voter, others := false, 0
	for _, s := range f.Configuration().Servers {
		if s.Suffrage != raft.Voter {
			continue
		}
		if s.ID == self {
			voter = true
		} else {
			others++
		}
	}
	if !voter || others == 0 {
		return nil
	}
	return fmt.Errorf("raftfsm: %s holds no raft term or vote (it was deleted, emptied or replaced) while this node's raft log and state are kept, and this node is one of %d voters: "+
		"having forgotten the vote it may have cast in the current term, it could vote again in that term, and two leaders could be elected in it. Nothing was changed. "+
		"%s",
		filepath.Join(n.cfg.DataDir, "raft.db"), others+1, rejoinAdvice(n.cfg))
}

// logStoreError says what to do about a raft log that does not open: raft
// and raft-wal name only the file they failed on (a missing or damaged
// wal-meta.db read as "file exists" or "invalid database").
func logStoreError(err error, cfg Config) error {
	switch {
	case errors.Is(err, syscall.ENOSPC):
		return fmt.Errorf("%w: %s", err, segmentSpaceAdvice(cfg))
	case errors.Is(err, os.ErrPermission):
		return fmt.Errorf("%w: check that the user running idem owns %s and everything in it", err, cfg.DataDir)
	}
	var we *walOpenError
	if !errors.As(err, &we) {
		return err
	}
	return fmt.Errorf("%w: the raft log in %s cannot be read (a file of it is missing or damaged); nothing was changed. %s", err, filepath.Join(cfg.DataDir, logStoreDir), lostLogAdvice(cfg))
}

// CommandName names the idem binary in the commands messages give to paste:
// cmd/idem sets it to how it was run (./bin/idem, say), so the command
// works as printed.
var CommandName = "idem"

// ShellWord is s as one word of a command to paste into a shell: as it is
// when it holds only characters no shell treats specially, else in single
// quotes. An IPv6 address ([::1]:7071) is a glob pattern to a shell: zsh
// refuses the command ("no matches found") and bash would expand it had
// a file matched.
func ShellWord(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789@%+=:,./_-") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// lostLogAdvice is what to do with a node whose raft log cannot be read;
// it never advises deleting the data dir, which may be the only copy.
func lostLogAdvice(cfg Config) string {
	raftAddr := cfg.RaftAdvertise
	if raftAddr == "" {
		raftAddr = cfg.RaftAddr
	}
	return fmt.Sprintf("%s. "+
		"If every node is in this state, or this is the only node, make a one-node cluster of this node's state with %s recover --data-dir %s --node-id %s --peers %s=%s (it prints what it will do; add --yes to do it), then join the others with empty data dirs",
		rejoinAdvice(cfg), CommandName, ShellWord(cfg.DataDir), cfg.NodeID, cfg.NodeID, ShellWord(raftAddr))
}

// lostStateAdvice is what to do with a node whose own files cannot
// rebuild its state; it never advises deleting the data dir.
func lostStateAdvice(cfg Config) string {
	return fmt.Sprintf("%s; if this is the only node, build a new data dir from a backup (idem snapshot restore)", rejoinAdvice(cfg))
}

// rejoinAdvice is how a member whose data dir cannot be used is replaced
// while the others are healthy: removed first, as docs/MEMBERSHIP.md
// says, so the quorum never counts it while it is empty (an empty voter
// holds its vote until it has caught up: joining.go's voteHold).
func rejoinAdvice(cfg Config) string {
	return fmt.Sprintf("If other members of the cluster are healthy, remove this node from the cluster first (idem cluster remove --id %s, against a healthy member), "+
		"then move %s aside (keep it: mv it to a new name) and start this node with an empty data dir and --join, so the leader sends it the state",
		cfg.NodeID, cfg.DataDir)
}

// Close stops the node: leader duties, raft (which waits for the FSM), the
// transport, the raft log and Pebble, in that order.
func (n *Node) Close() error {
	if !n.closing.CompareAndSwap(false, true) {
		return nil
	}
	close(n.stop)
	var errs []error
	if n.raft != nil {
		if err := n.raft.Shutdown().Error(); err != nil {
			errs = append(errs, fmt.Errorf("raftfsm: raft shutdown: %w", err))
		}
	}
	n.wg.Wait()
	errs = append(errs, n.closeStores())
	return errors.Join(errs...)
}

// ErrAddressOfAnother refuses a start whose raft address the node's own
// configuration gives to another member.
var ErrAddressOfAnother = errors.New("raftfsm: this node's raft address is another member's")

// addressOfAnother refuses to run a node at a raft address that its own
// configuration gives to another member: two nodes' data dirs swapped (or
// their --node-id), so the members' messages for that member reach this
// one. Raft goes by address, so it would answer them with this node's log
// and vote as both: two votes from one state, and elections that never
// settle. A member that moved to a new address is not refused (its id is
// listed at the old one); an address it took over from a removed member
// is no one's any more. A node its configuration does not list is not
// refused (see below).
func addressOfAnother(r *raft.Raft, self raft.ServerID, addr string) error {
	f := r.GetConfiguration()
	if f.Error() != nil {
		return nil
	}
	servers := f.Configuration().Servers
	// A node its configuration does not list never campaigns, and the
	// cluster (which admitted it at this address) sends it its own
	// messages: a node catching up at a removed member's address from a
	// snapshot older than its admission is such a node, and must start.
	if !slices.ContainsFunc(servers, func(s raft.Server) bool { return s.ID == self }) {
		return nil
	}
	for _, s := range servers {
		if string(s.Address) == addr && s.ID != self {
			return fmt.Errorf("%w: started as node %s, but the cluster configuration in this data dir lists raft address %s as member %s's. "+
				"Most likely this is %s's data dir, or the data dirs were swapped: start %s's data dir with --node-id %s at %s, and each node on its own data dir at its own addresses. "+
				"Only if this data dir is %s's for certain, and %s was removed from the cluster or moved to other addresses while it was down, start it at another --raft-addr: the cluster records its new address",
				ErrAddressOfAnother, self, addr, s.ID, s.ID, s.ID, s.ID, addr, self, s.ID)
		}
	}
	return nil
}

// otherAtOwnAddress is the member that a node its configuration does not
// list finds at its own raft address, "" for none.
func otherAtOwnAddress(r *raft.Raft, self raft.ServerID, addr string) string {
	f := r.GetConfiguration()
	if f.Error() != nil {
		return ""
	}
	servers := f.Configuration().Servers
	if slices.ContainsFunc(servers, func(s raft.Server) bool { return s.ID == self }) {
		return ""
	}
	for _, s := range servers {
		if string(s.Address) == addr {
			return string(s.ID)
		}
	}
	return ""
}

func (n *Node) closeStores() error {
	var errs []error
	if n.stopTLS != nil {
		n.stopTLS()
	}
	if n.trans != nil {
		errs = append(errs, n.trans.Close())
	}
	if n.logStore != nil {
		errs = append(errs, n.logStore.Close())
	}
	if n.stable != nil {
		errs = append(errs, n.stable.Close())
	}
	if n.db != nil {
		errs = append(errs, n.db.Close())
	}
	return errors.Join(errs...)
}

// ScopeMode is the cluster's scope mode ("endpoint" or "principal") and
// whether it is pinned yet: it is fixed by the first write that names a
// scope, and a node configured otherwise must not serve or join.
func (n *Node) ScopeMode() (string, bool) {
	m := n.db.Meta().Scope
	return m.String(), m != engine.ScopeUnset
}

// BucketWidth is the cluster's bucket width and whether it is fixed yet
// (by the first command): this node's --bucket-width may differ (a node
// that joined with another flag); the state's decides.
func (n *Node) BucketWidth() (time.Duration, bool) {
	w := n.db.Meta().Width
	return time.Duration(w) * time.Millisecond, w > 0
}

// Retention is the cluster's retention of new records and whether it is
// pinned yet: the first claim fixes it (from the deciding node's
// --retention) and only SetRetention changes it, so every node gives a
// claim the same retention whichever leads.
func (n *Node) Retention() (time.Duration, bool) {
	ms := n.db.Meta().RetentionMs
	return time.Duration(ms) * time.Millisecond, ms > 0
}

// stampRetention gives a claim the cluster's retention, as this node's
// applied state holds it (Apply decides with the command's: see
// engine.Txn.Claim). Node.Claim and the batch stamp before the precheck
// peek; propose stamps again after the term's barrier, so a new leader
// whose state had not applied an earlier term's change (or the first
// claim's pin) stamps what the log holds. An entry of the leader's own
// term that changes the retention applies to the claims proposed once it
// is applied.
func (n *Node) stampRetention(a *engine.ClaimArgs) {
	a.RetentionMs = n.db.Meta().ClaimRetention(*a)
}

// SetRetention makes d the retention of every record claimed once it is
// applied (leader only). Stored records keep their expiry.
func (n *Node) SetRetention(d time.Duration) error {
	if d < time.Millisecond {
		return fmt.Errorf("raftfsm: retention %s is under a millisecond", d)
	}
	_, err := n.propose(&Command{Op: OpSetRetention, RetentionMs: d.Milliseconds()})
	if err == nil {
		n.log.Info("the cluster's retention of new records is set", "retention", d)
	}
	return err
}

// Self is this node's identity.
func (n *Node) Self() NodeInfo { return n.self }

// NowMs is cluster time as this node sees it.
func (n *Node) NowMs() int64 { return n.clock.NowMs() }

// Metrics returns the node's metrics.
func (n *Node) Metrics() *Metrics { return n.metrics }

// DB exposes the engine for read-only admin use (state hash, stats).
func (n *Node) DB() *engine.DB { return n.db }

// IsLeader reports whether this node is the leader.
func (n *Node) IsLeader() bool { return n.raft.State() == raft.Leader }

// WaitLeader waits until some node is known as leader, or the timeout.
func (n *Node) WaitLeader(timeout time.Duration) bool {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		if addr, _ := n.raft.LeaderWithID(); addr != "" {
			return true
		}
		time.Sleep(20 * time.Millisecond)
	}
	return false
}

func (n *Node) term() uint64 { return n.raft.CurrentTerm() }

// Leader returns what this node knows of the leader (zero when unknown). A
// node outside the cluster's configuration (removed: Outside) knows no
// leader. One that joined and replays the cluster's log up to its
// admission follows the leader sending it: it called itself leaderless,
// and its status called that leader unhealthy ("this node knows no leader
// to ask") while the leader caught it up. It follows that leader only
// while it hears from it: raft forgets a silent leader after its heartbeat
// timeout, which for such a node is a day (campaignHold), and a node
// removed before it caught up (a leader stops sending to a node it removes,
// which never sees its removal) forwarded writes and reads to its last
// leader, and named it in its status, for that day.
func (n *Node) Leader() (NodeInfo, bool) {
	addr, id := n.raft.LeaderWithID()
	if addr == "" || !n.member.Load() && (n.Outside() || !n.leaderHeard()) {
		return NodeInfo{}, false
	}
	if id == raft.ServerID(n.self.ID) {
		return n.self, true
	}
	info := n.storedLeader(id, addr)
	if info.HTTPAddr == "" {
		// Not recorded in this node's state (yet): a node that joined and
		// installs the leader's snapshot has no records until the install
		// ends, and waited LeaderWait on every request, then answered 503.
		info.HTTPAddr = n.toldHTTPAddr(id, addr)
	}
	return info, true
}

// storedLeader is the leader id at addr as this node's state records it.
func (n *Node) storedLeader(id raft.ServerID, addr raft.ServerAddress) NodeInfo {
	info := NodeInfo{ID: string(id), RaftAddr: string(addr)}
	// A follower asks this for every request it forwards: the stored
	// addresses are read once per leader and per change of them. The
	// generation is read first, so a change committed during the read
	// makes the entry stale rather than wrong.
	gen := n.fsm.nodesGen.Load()
	if e := n.leaderCache.Load(); e != nil && e.gen == gen && e.id == id && e.addr == addr {
		return e.info
	}
	if v, err := n.db.Named("node/" + string(id)); err == nil {
		if b, ok := v["node/"+string(id)]; ok {
			json.Unmarshal(b, &info)
		}
	}
	n.leaderCache.Store(&leaderEntry{gen: gen, id: id, addr: addr, info: info})
	return info
}

type leaderEntry struct {
	gen  uint64
	id   raft.ServerID
	addr raft.ServerAddress
	info NodeInfo
}

// propose stamps a command with cluster time and the bucket width, commits
// it through raft and returns the FSM's result.
func (n *Node) propose(c *Command) (*ApplyResult, error) {
	if n.closing.Load() {
		return nil, fmt.Errorf("%w: %w", ErrShutdown, ErrNotProposed)
	}
	if n.raft.State() != raft.Leader {
		return nil, n.notLeader()
	}
	if err := n.disk.admit(c.Op); err != nil {
		return nil, err
	}
	if err := n.votersRoom(c.Op); err != nil {
		return nil, err
	}
	// Cluster time comes from the applied log: until this leader has
	// applied everything committed before its term, its clock may not be
	// anchored (a lost fsm dir, a fresh voter) and would stamp its own
	// wall clock.
	if err := n.proposalBarrier(); err != nil {
		return nil, err
	}
	c.NowMs = n.stampMs()
	c.WidthMs = n.widthMs
	if err := n.checkProposal(c); err != nil {
		return nil, err
	}
	data, err := c.Encode()
	if err != nil {
		return nil, err
	}
	if clientWrite(c.Op) {
		release, err := n.disk.reserve(len(data))
		if err != nil {
			return nil, err
		}
		return n.applyClientEntry(data, release)
	}
	return n.applyEntry(data)
}

// stampMs is the cluster time this leader stamps an entry with: its
// clock's reading, held within ttl.RewindAfter of the time it has applied
// (ttl.Clock.StampMs). A reading further on counted time in which this
// leader stamped nothing, not even its tick (it was stopped or stalled),
// and stamped, the first entry past ttl.MaxStep was decided at the capped
// time and the next moved cluster time on by the rest at once, so the
// records and leases the first granted ran out early.
func (n *Node) stampMs() int64 {
	ms, d := n.clock.StampMs()
	if d >= time.Second && n.stampBack.Allow(time.Minute) {
		n.log.Warn("this leader stamped nothing for a while (the process was stopped or paused, or stalled: a SIGSTOP, docker pause, a VM paused, a stalled disk, or no quorum storing its entries: followers down or with full disks) and its clock counted it: it stamps at most 5 s past the time it has applied, so records and leases keep their whole time and cluster time does not count the rest", "behind-by", d.Round(time.Millisecond))
	}
	return ms
}

// firstLookMs is stampMs for a look at the state that may propose nothing
// (settled's first look), taken before the term's barrier: it neither
// moves the clock nor says this leader stamped nothing for a while. A new
// leader's first claim took stampMs there, before its barrier: where the
// log's time had stood still (no entry applied for over ttl.RewindAfter:
// a leader removed, an election) it logged that it had been "stopped or
// paused, or stalled", and its barrier then found nothing to say of
// taking the lead (a chaos soak's membership nemesis).
func (n *Node) firstLookMs() int64 { return n.clock.PeekStampMs() }

// checkProposal stamps a command about to be proposed, after the term's
// barrier, with the cluster's retention and refuses one its leader must
// not propose (retentionHold, sealBound, capBound).
func (n *Node) checkProposal(c *Command) error {
	if c.Op == OpClaim && c.Claim != nil {
		n.stampRetention(c.Claim) // again: the barrier may have applied a change
	}
	if err := n.retentionHold(c); err != nil {
		return err
	}
	if err := n.sealBound(c); err != nil {
		return err
	}
	return n.capBound(c)
}

// applyEntry proposes an encoded entry and waits for its result: the
// ApplyResult, with its Err as the error when it has one.
func (n *Node) applyEntry(data []byte) (*ApplyResult, error) {
	return n.applyEntryCtx(context.Background(), data, nil)
}

// applyClientEntry is applyEntry for client writes, whose reservation
// (diskGuard.reserve) is release, and it waits at most ApplyTimeout for
// the entry to be committed and applied: then it answers a
// CommitWaitError (an unknown outcome, 503 with Retry-After: 1). The
// entry stays in the raft log, and release is called once it is applied
// or lost, not when the wait gives up: its bytes are still in flight.
//
// The wait had no bound of its own (raft's timeout bounds only the
// enqueue): a write proposed in the second before the leader's health
// checks read that two followers of three are full (votersRoom) waited
// until space was freed on one of them, and the request, with its
// --max-inflight slot, was held that long even after its client, or the
// follower that forwarded it (after 3 s), had given up.
func (n *Node) applyClientEntry(data []byte, release func()) (*ApplyResult, error) {
	ctx, cancel := context.WithTimeout(context.Background(), n.cfg.ApplyTimeout)
	defer cancel()
	return n.applyEntryCtx(ctx, data, release)
}

// applyEntryCtx proposes data and waits for its result until ctx is done
// (a CommitWaitError then); resolved, if not nil, runs once the entry is
// applied or lost, or at once when it is not proposed.
func (n *Node) applyEntryCtx(ctx context.Context, data []byte, resolved func()) (*ApplyResult, error) {
	if err := checkEntrySize(data); err != nil {
		if resolved != nil {
			resolved()
		}
		return nil, err
	}
	n.lastWrite.Store(mono.Now())
	f := n.raft.Apply(data, n.cfg.ApplyTimeout)
	switch err := n.waitThen(ctx, f, resolved); {
	case errors.Is(err, ErrTimeout): // ctx's end, not raft's
		return nil, &CommitWaitError{Waited: n.cfg.ApplyTimeout}
	case err != nil:
		return nil, mapApplyError(err)
	}
	return applyResult(f)
}

// applyResult is the result of an applied entry's future f: the
// ApplyResult, with its Err as the error when it has one.
func applyResult(f raft.ApplyFuture) (*ApplyResult, error) {
	r, ok := f.Response().(*ApplyResult)
	if !ok || r == nil {
		return nil, ErrUnknownOutcome
	}
	return r, r.Err
}

// LogStopped is ErrLogStopped while this node's raft log takes no
// entries (a failed segment rotation sealed it), else nil.
func (n *Node) LogStopped() error {
	if n.logStore != nil && n.logStore.sealed.Load() {
		return ErrLogStopped
	}
	return nil
}

func (n *Node) notLeader() error {
	if _, ok := n.Leader(); ok {
		return ErrNotLeader
	}
	return ErrNoLeader
}

func mapRaftError(err error) error {
	switch {
	case errors.Is(err, raft.ErrNotLeader):
		return ErrNotLeader
	case errors.Is(err, raft.ErrLeadershipTransferInProgress):
		// Refused before it reached the log: retry once the new leader is known.
		return ErrNoLeader
	case errors.Is(err, raft.ErrLeadershipLost):
		return fmt.Errorf("%w: %w", ErrUnknownOutcome, err)
	case errors.Is(err, raft.ErrEnqueueTimeout):
		return fmt.Errorf("%w: %w", ErrTimeout, ErrNotProposed)
	case errors.Is(err, raft.ErrRaftShutdown):
		return ErrShutdown
	case strings.HasPrefix(err.Error(), "configuration changed since "):
		// Raft's refusal of a membership change decided on a
		// configuration another change replaced since (its prevIndex is
		// stale): refused before anything was appended, a plain error of
		// raft's. It was "outcome unknown", 503 "leadership changed while
		// the request was in flight", for a change certainly not made.
		return fmt.Errorf("%w: %w: %v", ErrNotProposed, ErrMembershipChanged, err)
	}
	return fmt.Errorf("%w: %w", ErrUnknownOutcome, err)
}

// Claim decides a claim. What the applied state already refuses (or
// replays) is answered without a log entry (precheck.go), as are the
// refusals of Complete, Release, Extend and Delete.
func (n *Node) Claim(a engine.ClaimArgs) (engine.Result, uint64, error) {
	start := time.Now()
	n.stampRetention(&a)
	term, err := n.sealClaim(&a)
	if err != nil {
		return engine.Result{}, 0, err
	}
	res, refused, release, capTerm, err := n.capGate(&a)
	defer release()
	if err != nil {
		return engine.Result{}, 0, err
	}
	if refused {
		n.metrics.Claims.WithLabelValues(res.Outcome.String()).Inc()
		return res, 0, nil
	}
	r, err := n.proposeUnlessSettled(&Command{Op: OpClaim, Claim: &a, sealTerm: term, capTerm: capTerm})
	if err != nil {
		return engine.Result{}, 0, err
	}
	observeSince(n.metrics.ClaimLatency, start)
	n.metrics.Claims.WithLabelValues(r.Outcome.String()).Inc()
	if r.Takeover {
		n.metrics.Takeovers.Inc()
	}
	res, err = n.opened("claim", r.Result, r.Outcome == engine.OutcomeReplay)
	return res, r.Index, err
}

// capGate keeps a claim's credential cap out of its entry while a member
// could not decode it (it lacks FeatureCredentialCap, or the leader has
// not heard from it this term): such a member would refuse the entry and
// fall out of step. Meanwhile the leader checks the cap itself, once its
// term's barrier has applied every claim an earlier term committed,
// against its applied state and the capped claims it let through that
// have not returned yet (capFlight). Those are counted whether or not the
// cap is in their entries, so claims proposed just before the members
// stopped listing the feature count too. What the check cannot see is a
// claim proposed in this term after the barrier by another node, which
// raft rules out, or a rollback to a release without the cap. refused is
// true with the principal_limit result the leader answers; otherwise a is
// proposed (without the cap when gated), and the caller runs release once
// the proposal has returned. term is the term the leader checked in (0:
// it did not check); the proposal is refused in any other (capBound). err
// is the barrier's failure: nothing was proposed.
func (n *Node) capGate(a *engine.ClaimArgs) (res engine.Result, refused bool, release func(), term uint64, err error) {
	release = func() {}
	if a.CredentialMaxPrincipals <= 0 {
		return engine.Result{}, false, release, 0, nil
	}
	gated := !n.membersHave(FeatureCredentialCap)
	if n.raft.State() != raft.Leader {
		// Nothing is proposed here: the leader the request goes to gates it.
		if gated {
			a.CredentialPrefixes, a.CredentialMaxPrincipals = nil, 0
		}
		return engine.Result{}, false, release, 0, nil
	}
	if gated {
		term = n.term()
		if err := n.proposalBarrier(); err != nil {
			return engine.Result{}, false, release, 0, err
		}
	}
	f := &n.capFlight
	f.mu.Lock()
	limited := false
	if gated {
		pending := make([]string, 0, len(f.n))
		for p := range f.n {
			pending = append(pending, p)
		}
		var err error
		if limited, err = n.db.CredentialLimited(*a, pending...); err != nil {
			n.log.Warn("credential cap not checked", "error", err)
		}
	}
	if !limited {
		p := a.Scope.Principal
		if f.n == nil {
			f.n = map[string]int{}
		}
		f.n[p]++
		release = func() {
			f.mu.Lock()
			defer f.mu.Unlock()
			if f.n[p]--; f.n[p] <= 0 {
				delete(f.n, p)
			}
		}
	}
	f.mu.Unlock()
	if gated {
		a.CredentialPrefixes, a.CredentialMaxPrincipals = nil, 0
	}
	if !limited {
		return engine.Result{}, false, release, term, nil
	}
	return engine.Result{Outcome: engine.OutcomePrincipalLimit, ByCredential: true, NowMs: n.clock.NowMs()}, true, release, term, nil
}

// capBound refuses to propose a claim the leader let past a credential cap
// in another term (capGate): another leader may have decided claims that
// check did not see.
func (n *Node) capBound(c *Command) error {
	if c.capTerm == 0 || c.capTerm == n.term() {
		return nil
	}
	return n.leadershipMoved("the claim's credential cap")
}

// capFlight counts, by principal, the capped claims this leader let
// through (capGate), until their proposals return: while it checks caps
// itself they count as new principals for the claims after it.
type capFlight struct {
	mu sync.Mutex
	n  map[string]int
}

// Complete stores the response of the attempt holding the token.
func (n *Node) Complete(t engine.TokenArgs, resp *engine.Response) (engine.Result, error) {
	sealed, term, err := n.sealComplete(t, resp)
	if err != nil {
		return engine.Result{}, err
	}
	r, err := n.proposeUnlessSettled(&Command{Op: OpComplete, Target: &t, Response: sealed, sealTerm: term})
	if err != nil {
		return engine.Result{}, err
	}
	n.metrics.Completes.WithLabelValues(r.Outcome.String()).Inc()
	return n.opened("complete", r.Result, r.Outcome == engine.OutcomeCompleted)
}

// Release marks the attempt holding the token failed.
func (n *Node) Release(t engine.TokenArgs) (engine.Result, error) {
	r, err := n.proposeUnlessSettled(&Command{Op: OpRelease, Target: &t})
	if err != nil {
		return engine.Result{}, err
	}
	n.metrics.Releases.WithLabelValues(r.Outcome.String()).Inc()
	return n.opened("release", r.Result, false)
}

// Extend moves the lease of the attempt holding the token.
func (n *Node) Extend(t engine.TokenArgs, leaseMs int64) (engine.Result, error) {
	r, err := n.proposeUnlessSettled(&Command{Op: OpExtend, Target: &t, LeaseMs: leaseMs})
	if err != nil {
		return engine.Result{}, err
	}
	n.metrics.Extends.WithLabelValues(r.Outcome.String()).Inc()
	return n.opened("extend", r.Result, false)
}

// Delete evicts a record.
func (n *Node) Delete(s engine.Scope, principalScope bool) (engine.Result, error) {
	r, err := n.proposeUnlessSettled(&Command{Op: OpDelete, Target: &engine.TokenArgs{Scope: s, PrincipalScope: principalScope}})
	if err != nil {
		return engine.Result{}, err
	}
	return n.opened("delete", r.Result, false)
}

// Lookup reads a record. A linearizable read is served by the leader only,
// after proving it still leads and has applied everything committed before
// the read began; a stale read uses the local replica.
func (n *Node) Lookup(ctx context.Context, s engine.Scope, principalScope, linearizable bool) (*engine.Record, bool, error) {
	if linearizable && n.cfg.InjectBug != BugLocalReads {
		if err := n.readBarrier(ctx); err != nil {
			return nil, false, err
		}
	} else if err := n.KeptBack(); err != nil {
		// Its state may lack records the others hold (keptback.go): a
		// miss here could be a key the cluster holds.
		return nil, false, err
	} else if n.Outside() {
		// Removed: its replica stopped at its removal and never moves
		// on, so a stale read here answers from a state that falls
		// further behind the cluster's for as long as it runs.
		return nil, false, &RemovedError{Node: n.self.ID}
	} else if _, removed := n.RemovedWhileReplaying(); removed {
		// Removed before it caught up: its replica is part of the
		// cluster's log, and stays so.
		return nil, false, &RemovedError{Node: n.self.ID}
	}
	// Expiry is judged at the cluster time of the applied log, not by this
	// node's clock, which runs ahead of it: every later claim is decided
	// at that time or later, so a record read as expired is expired for
	// every claim that follows the read.
	var r *engine.Record
	var ok bool
	if err := readStore(n.log, func() { r, ok = n.db.Lookup(s, principalScope, n.db.Meta().NowMs) }); err != nil {
		return nil, false, err
	}
	if !ok && n.closing.Load() {
		// A closed store finds nothing: a record the cluster holds was
		// answered 404 not_found by a stopping node (a read that
		// outlived the drain, --shutdown-timeout).
		return nil, false, ErrShutdown
	}
	if !ok {
		return nil, false, nil
	}
	r, err := n.openResult("lookup", r, true)
	return r, err == nil, err
}

// readBarrier implements linearizable reads on hashicorp/raft: a Barrier
// once per term (so entries of earlier terms are applied), the commit index
// read before VerifyLeader proves no newer leader exists, then waiting for
// the FSM to apply up to that index.
//
// The whole read is bounded by ApplyTimeout: a leader whose applies wait
// (for disk space, docs/DISK.md) never resolves its Barrier or VerifyLeader
// (raft's leader loop is then blocked on its FSM), and a read of an HTTP
// request, whose context has no deadline, hung until space came back. It
// times out with ErrTimeout (503) instead, as DISK.md says.
func (n *Node) readBarrier(ctx context.Context) error {
	if n.raft.State() != raft.Leader {
		return n.notLeader()
	}
	ctx, cancel := context.WithTimeout(ctx, n.cfg.ApplyTimeout)
	defer cancel()
	if err := n.termBarrierCtx(ctx); err != nil {
		return err
	}
	commit := n.raft.CommitIndex()
	if err := n.waitCtx(ctx, n.raft.VerifyLeader()); err != nil {
		if errors.Is(err, ErrTimeout) {
			return err
		}
		if errors.Is(err, raft.ErrNotLeader) || errors.Is(err, raft.ErrLeadershipLost) {
			return n.notLeader()
		}
		return mapRaftError(err)
	}
	for !n.fsmCaughtUp(commit) {
		select {
		case <-ctx.Done():
			return ErrTimeout
		case <-time.After(time.Millisecond):
		}
	}
	return nil
}

// wait waits for a raft future, or until the node stops. hashicorp/raft
// never resolves a future still in its apply buffer when it shuts down
// (hashicorp/raft#498), and Close waits for the node's own goroutines,
// which propose ticks, drops and promotions: without this a stop racing a
// proposal hung forever.
func (n *Node) wait(f raft.Future) error { return n.waitCtx(context.Background(), f) }

// waitCtx is wait, giving up with ErrTimeout once ctx is done.
func (n *Node) waitCtx(ctx context.Context, f raft.Future) error { return n.waitThen(ctx, f, nil) }

// waitThen is waitCtx; then, if not nil, runs once f is resolved, whether
// or not the wait gave up before.
func (n *Node) waitThen(ctx context.Context, f raft.Future, then func()) error {
	done := make(chan error, 1)
	go func() {
		err := f.Error()
		if then != nil {
			then()
		}
		done <- err
	}()
	select {
	case err := <-done:
		return err
	case <-n.stop:
		return raft.ErrRaftShutdown
	case <-ctx.Done():
		return ErrTimeout
	}
}

// termBarrier makes sure this leader has applied every entry committed
// before its term: a Barrier once per term, shared by concurrent callers.
func (n *Node) termBarrier() error {
	return n.termBarrierCtx(context.Background())
}

// termBarrierCtx is termBarrier giving up with ErrTimeout once ctx is
// done, while it waits for the Barrier or for another caller's.
func (n *Node) termBarrierCtx(ctx context.Context) error {
	term := n.term()
	if n.barrierTerm.Load() == term {
		return nil
	}
	select {
	case n.barrierSem <- struct{}{}:
	case <-ctx.Done():
		return ErrTimeout
	}
	defer func() { <-n.barrierSem }()
	if n.barrierTerm.Load() == term {
		return nil
	}
	if err := n.waitCtx(ctx, n.raft.Barrier(n.cfg.ApplyTimeout)); err != nil {
		if errors.Is(err, ErrTimeout) {
			return err
		}
		return mapRaftError(err)
	}
	// Applied, before any stamp of its own: the log's time is cluster
	// time, not what this node counted as a follower (ttl.Clock.FollowLog).
	if d := n.clock.FollowLog(); d >= time.Second {
		n.log.Info("cluster time on this node was ahead of the log's as it took the lead: it counted time the log did not (a leader restarted, or most nodes did, while this node ran on; a follower keeps that lead until it leads, up to 5 s), or no entry was applied for over 5 s (an outage of most nodes, of which it counts 5 s); it stamps the log's time, so records keep their whole retention: nothing to do", "behind-by", d.Round(time.Millisecond))
	}
	n.barrierTerm.Store(term)
	return nil
}

// proposalBarrier is termBarrier before a write: when it fails, only the
// Barrier entry was proposed, never the write, so the cause is kept as
// text and the error does not read as an unknown outcome.
func (n *Node) proposalBarrier() error {
	err := n.termBarrier()
	if err == nil || errors.Is(err, ErrNotLeader) || errors.Is(err, ErrNoLeader) {
		return err
	}
	return fmt.Errorf("%w: the term's barrier failed: %s", ErrNotProposed, err)
}

// ForeignLeader says, for a one-node cluster that refused entries from a
// leader of another cluster within the last 30 s, why it is not ready:
// that cluster counts this node's raft address as one of its members (a
// backup restored, or a store started, at a member's address), and its
// clients may reach this node and be answered from another cluster's
// records. "" otherwise.
func (n *Node) ForeignLeader() string {
	if n.guard == nil {
		return ""
	}
	l := n.guard.foreignLeader()
	if l == "" {
		return ""
	}
	return fmt.Sprintf("a leader of another cluster, %s, sends this node entries: that cluster counts this node's raft address as one of its members, and its clients may reach this node and get answers from another cluster's records. "+
		"Remove this address from that cluster (idem cluster remove there), or run this node at another --raft-addr and --http-addr; until 30 s after the last refused entry it is not ready and answers no request for records", l)
}

// Ready reports whether this node knows a leader and applies the commit
// index as of the call within readyWait.
func (n *Node) Ready() bool {
	if n.closing.Load() {
		return false
	}
	if addr, _ := n.raft.LeaderWithID(); addr == "" {
		return false
	}
	return n.waitCaughtUp(n.raft.CommitIndex())
}

// CaughtUp reports whether this replica applies every entry up to index
// within readyWait.
func (n *Node) CaughtUp(index uint64) bool { return n.waitCaughtUp(index) }

// readyWait is how long Ready and CaughtUp wait for the FSM to apply the
// index they were given. Under load a replica's applied index trails any
// commit index it is compared with: a follower learns that an entry is
// committed with the leader's next append, then stores and applies it, and
// a leader applies after it commits. Asked about the instant, a follower
// that kept within a few entries of the leader said it was behind at
// almost every check, and answered /readyz 503 for 36 s (issue 9, item 5).
// A replica that has not applied the index within readyWait is behind.
// /readyz on a follower waits twice (its own commit index, then the
// leader's), which stays under the 1 s a health check usually allows.
var readyWait = 400 * time.Millisecond

// waitCaughtUp is fsmCaughtUp(index), waiting up to readyWait for it.
func (n *Node) waitCaughtUp(index uint64) bool {
	deadline := time.Now().Add(readyWait)
	for !n.fsmCaughtUp(index) {
		if time.Now().After(deadline) || n.closing.Load() {
			return false
		}
		time.Sleep(2 * time.Millisecond)
	}
	return true
}

// fsmCaughtUp reports whether the FSM has applied every entry up to index
// that changes its state. raft's own AppliedIndex counts entries handed to
// the FSM's queue, not applied, and the FSM never sees no-op and barrier
// entries, so: either the FSM's stored index has reached index, or raft has
// handed over everything up to index and nothing between the FSM's index
// and index is a command or configuration entry.
func (n *Node) fsmCaughtUp(index uint64) bool {
	applied := n.db.Meta().Applied
	if applied >= index {
		return true
	}
	if n.raft.AppliedIndex() < index || index-applied > 64 {
		return false
	}
	for i := applied + 1; i <= index; i++ {
		var l raft.Log
		if err := n.logStore.GetLog(i, &l); err != nil {
			return false
		}
		if l.Type == raft.LogCommand || l.Type == raft.LogConfiguration {
			return false
		}
	}
	return true
}

// CorrectClock shifts this node's unanchored clock (see ttl.Clock.Correct).
func (n *Node) CorrectClock(d time.Duration) { n.clock.Correct(d) }

// WallMs is this node's own wall clock.
func (n *Node) WallMs() int64 { return n.clock.WallMs() }

// HasState reports whether this node belongs to a cluster (bootstrapped,
// joined, or restarted with state).
func (n *Node) HasState() bool {
	f := n.raft.GetConfiguration()
	return f.Error() == nil && len(f.Configuration().Servers) > 0
}

// StartedEmpty reports whether this node started with an empty data dir,
// or one still joining its cluster (it held its vote at start: voteHold).
func (n *Node) StartedEmpty() bool { return n.startedEmpty }

// IsMember reports whether the latest configuration includes this node.
func (n *Node) IsMember() bool { return n.member.Load() }

// MemberIDs lists the ids of the servers of the latest configuration this
// node knows (raft keeps it at hand: no round trip through raft's loop).
func (n *Node) MemberIDs() []string {
	f := n.raft.GetConfiguration()
	if f.Error() != nil {
		return nil
	}
	servers := f.Configuration().Servers
	ids := make([]string, len(servers))
	for i, s := range servers {
		ids[i] = string(s.ID)
	}
	return ids
}

// Registered reports whether the log holds this node's current addresses,
// so every node can forward to it.
func (n *Node) Registered() bool {
	v, err := n.db.Named("node/" + n.self.ID)
	if err != nil {
		return false
	}
	var info NodeInfo
	return json.Unmarshal(v["node/"+n.self.ID], &info) == nil && info == n.self
}

// OtherVoters is how many voters besides this node the latest
// configuration holds (0 in a one-node cluster: no one to hand over to).
func (n *Node) OtherVoters() int {
	f := n.raft.GetConfiguration()
	if f.Error() != nil {
		return 0
	}
	return len(voters(f.Configuration(), n.self.ID))
}

// recordOwnRaftAddr makes the configuration name this leader at the raft
// address it listens on now. A node restored (or recovered) with one
// --raft-addr and started with another was still recorded at the old one:
// it led alone, but the members that joined it dialled a dead address, so
// it could never hand leadership over (helper's walkthrough). A follower
// that moved is recorded by its join; a leader has no one to ask but itself.
//
// It runs at every tick, so it first asks raft's own copy of the
// configuration, which costs nothing: only a leader recorded elsewhere
// reads the log for the configuration's index (latestConfiguration reads
// back every entry appended since its last call: at every tick, with one
// claim per entry, that was 7.6% of a one-node leader's CPU).
func (n *Node) recordOwnRaftAddr() {
	// elsewhere is this node in conf, when conf records it as a voter at
	// another raft address than the one it listens on.
	elsewhere := func(conf raft.Configuration) (*raft.Server, bool) {
		s, err := server(conf, n.self.ID)
		return s, err == nil && s.Suffrage == raft.Voter && string(s.Address) != n.self.RaftAddr
	}
	if f := n.raft.GetConfiguration(); f.Error() == nil {
		if _, ok := elsewhere(f.Configuration()); !ok {
			return
		}
	}
	if !n.confChange.TryLock() {
		return // another change is under way: tried again
	}
	defer n.confChange.Unlock()
	conf, confIndex, err := n.latestConfiguration()
	if err != nil {
		return
	}
	s, ok := elsewhere(conf)
	if !ok {
		return
	}
	if err := n.raft.AddVoter(s.ID, raft.ServerAddress(n.self.RaftAddr), confIndex, n.cfg.ApplyTimeout).Error(); err != nil {
		n.log.Warn("could not record this node's new raft address in the configuration; retrying", "was", string(s.Address), "now", n.self.RaftAddr, "error", err)
		return
	}
	n.log.Info("recorded this node's new raft address in the configuration", "was", string(s.Address), "now", n.self.RaftAddr)
}

// PeerHTTPAddrs is the HTTP addresses this node's state records for the
// other members of its configuration: whom to ask when no leader is heard
// of. Records of nodes outside the configuration are left out: a node
// restored from a backup (or recovered alone) holds the addresses of the
// cluster the state came from, and asking those to let it join made it a
// member of that live cluster, its restored state replaced.
func (n *Node) PeerHTTPAddrs() []string {
	f := n.raft.GetConfiguration()
	if f.Error() != nil {
		return nil
	}
	members := map[string]bool{}
	for _, s := range f.Configuration().Servers {
		members["node/"+string(s.ID)] = true
	}
	named, err := n.db.Named("node/")
	if err != nil {
		return nil
	}
	var out []string
	for k, v := range named {
		var info NodeInfo
		if k == "node/"+n.self.ID || !members[k] || json.Unmarshal(v, &info) != nil || info.HTTPAddr == "" {
			continue
		}
		out = append(out, info.HTTPAddr)
	}
	sort.Strings(out)
	return out
}

// StateHash is a hash of this replica's whole state and the applied index
// it was taken at: replicas at the same index must hash the same.
func (n *Node) StateHash() (string, uint64, error) {
	h, _, applied, err := stateHashes(n.db, n.log)
	return h, applied, err
}

// StateHashes is StateHash with the hash releases before December 5, 2026
// answered for the same state (engine.DB.StateHashes), to compare a replica
// still on one of them.
func (n *Node) StateHashes() (hash, withGated string, applied uint64, err error) {
	return stateHashes(n.db, n.log)
}

// TransferLeadership hands leadership to another voter before this node
// stops (rolling restarts). Writes arriving meanwhile wait for the new
// leader. Unlike TransferLeadershipTo(""), it hands over to a voter that
// refuses the node token when no other can lead: one of them would be
// elected anyway, after an election timeout without a leader.
func (n *Node) TransferLeadership() error {
	return n.transferLeadership(context.Background(), "", transferStopping)
}

// TransferLeadershipTo hands leadership to the voter id ("": the voter
// raft picks, the most up to date). Naming this node, the leader, changes
// nothing. An id not in the configuration is ErrUnknownMember; a
// non-voter, ErrNotVoter.
func (n *Node) TransferLeadershipTo(id string) error {
	return n.transferLeadership(context.Background(), id, transferAsked)
}

// transferWhy is who asks for a leadership transfer.
type transferWhy int

const (
	transferAsked    transferWhy = iota // an operator (the API)
	transferStopping                    // this leader, stopping (TransferLeadership)
	transferHandOff                     // this leader's key checks (handOff), to a voter they chose
)

// transferLeadership gives up with ErrTimeout once ctx is done, and with
// raft.ErrRaftShutdown once the node stops, while it waits for raft: a
// future raft took but never answered (it shut down meanwhile, or its
// leader loop waits on a full disk's applies) held its caller for ever
// (the full-disk hand-off's loop, and with it Close).
func (n *Node) transferLeadership(ctx context.Context, id string, why transferWhy) error {
	stopping := why == transferStopping
	if n.raft.State() != raft.Leader {
		return n.notLeader()
	}
	var f raft.Future
	if id == "" {
		to, err := n.transferAvoidingRefusers()
		if err != nil && !stopping {
			return err
		}
		if to == nil {
			f = n.raft.LeadershipTransfer()
		} else {
			f = n.raft.LeadershipTransferToServer(to.ID, to.Address)
		}
	} else {
		if id == n.self.ID {
			return nil
		}
		cf := n.raft.GetConfiguration()
		if err := n.waitCtx(ctx, cf); err != nil {
			return fmt.Errorf("raftfsm: leadership transfer: %w", err)
		}
		target, err := server(cf.Configuration(), id)
		if err != nil {
			return err
		}
		if target.Suffrage != raft.Voter {
			return fmt.Errorf("%w: %s is a non-voter: only a voter can lead (the leader promotes a non-voter once it has caught up)", ErrNotVoter, id)
		}
		if reason := n.transferLacksKeys(target.ID); reason != "" {
			return fmt.Errorf("%w: %s", ErrLacksKey, reason)
		}
		if why == transferAsked {
			// The key checks' own hand-off chose its target by keys.
			if reason := n.transferFirstKeyOnFew(target.ID); reason != "" {
				return fmt.Errorf("%w: %s", ErrLacksKey, reason)
			}
		}
		if n.refusesNodes(target.ID) {
			return fmt.Errorf("%w: %s", ErrRefusesNodes, refusesNodesWhy(string(target.ID)))
		}
		if d := n.downgradedMark(target.ID); d != "" {
			// Leading, it would answer from a state that may lack writes
			// (a rollback walk: handed the leadership, such a node
			// answered a claim the others held as claimed anew).
			return fmt.Errorf("%w: %s was downgraded in place, %s", ErrRefusesNodes, id, d)
		}
		f = n.raft.LeadershipTransferToServer(target.ID, target.Address)
	}
	if err := n.waitCtx(ctx, f); err != nil {
		if errors.Is(err, raft.ErrNotLeader) {
			return n.notLeader()
		}
		if strings.Contains(err.Error(), "timeout") {
			// raft says only "leadership transfer timeout" (an operator
			// walk, 3 s after restarting the target).
			who := id
			if who == "" {
				who = "the voter raft chose"
			}
			return fmt.Errorf("raftfsm: leadership transfer: %w: %s did not take over in time; a node started moments ago may still be catching up, or waits before it stands for election: see idem cluster status, and try again in a few seconds", err, who)
		}
		return fmt.Errorf("raftfsm: leadership transfer: %w", err)
	}
	return nil
}

// downgradedMark is voter id's Member.Downgraded as this leader measured
// it this term, "" for none.
func (n *Node) downgradedMark(id raft.ServerID) string {
	n.peers.mu.Lock()
	defer n.peers.mu.Unlock()
	if h := n.peers.byID[string(id)]; h != nil && n.peers.term == n.term() {
		return h.downgraded
	}
	return ""
}

// refusesNodes reports whether this leader's last health check of voter
// id, this term, was refused for the cluster's node token.
func (n *Node) refusesNodes(id raft.ServerID) bool {
	n.peers.mu.Lock()
	defer n.peers.mu.Unlock()
	h := n.peers.byID[string(id)]
	return h != nil && n.peers.term == n.term() && h.tokenRefused
}

func refusesNodesWhy(ids ...string) string {
	who, verb, its, it := ids[0], "refuses", "its", "it"
	if len(ids) > 1 {
		who, verb, its, it = strings.Join(ids[:len(ids)-1], ", ")+" and "+ids[len(ids)-1], "refuse", "their", "them"
	}
	return fmt.Sprintf("%s %s the cluster's node token (%s --auth-file lacks the entry of the token in --node-token-file; reloaded without it?): "+
		"leading, the other nodes could not learn their readiness from %s and would answer /readyz 503 (a load balancer would send them nothing). "+
		"Add the entry to %s auth file and kill -HUP %s, then transfer again", who, verb, its, it, its, it)
}

// transferAvoidingRefusers picks the target of a transfer to no voter in
// particular when some voter refuses the cluster's node token, or was
// downgraded in place (raft would pick the most up-to-date, which may be
// one of them): a voter that is neither, healthy first, then the one that
// had applied the most at its last answer. nil: none refuses (or none of the others has answered the
// leader yet), raft picks. An error: every other voter refuses.
func (n *Node) transferAvoidingRefusers() (*raft.Server, error) {
	cf := n.raft.GetConfiguration()
	if err := cf.Error(); err != nil {
		return nil, fmt.Errorf("raftfsm: leadership transfer: %w", err)
	}
	now := time.Now()
	n.peers.mu.Lock()
	defer n.peers.mu.Unlock()
	if n.peers.term != n.term() {
		return nil, nil // no measurement of this term yet: raft's choice
	}
	var best *raft.Server
	var bestApplied uint64
	bestHealthy := false
	var refusers []string
	downgraded := false
	others := 0
	for _, srv := range cf.Configuration().Servers {
		if srv.Suffrage != raft.Voter || string(srv.ID) == n.self.ID {
			continue
		}
		others++
		h := n.peers.byID[string(srv.ID)]
		if h == nil {
			continue
		}
		if h.tokenRefused {
			refusers = append(refusers, string(srv.ID))
			continue
		}
		if h.answeredAt.IsZero() {
			continue
		}
		if h.downgraded != "" {
			// Not a target either, but raft's own pick (the most up to
			// date) may be it: choose another, as for a refuser.
			downgraded = true
			continue
		}
		ok, _ := n.judge(h, srv.ID, now)
		if best == nil || ok && !bestHealthy || ok == bestHealthy && h.applied > bestApplied {
			best, bestApplied, bestHealthy = &srv, h.applied, ok
		}
	}
	switch {
	case len(refusers) == 0 && !downgraded:
		return nil, nil
	case best != nil:
		return best, nil
	case len(refusers) == others:
		return nil, fmt.Errorf("%w: %s (or this leader's --node-token-file changed, its entry added to its own auth file only)", ErrRefusesNodes, refusesNodesWhy(refusers...))
	case downgraded:
		return nil, fmt.Errorf("%w: every other voter that answered this leader refuses the node token or was downgraded in place (see idem cluster status): leading, one downgraded would answer from a state that may lack writes", ErrRefusesNodes)
	}
	return nil, nil // the others never answered this leader: raft's choice, as before
}

// leaderLoop runs the leader's duties while this node leads: record its own
// address in the log, stamp cluster time when idle, and propose drops of
// wholly expired buckets (etcd's lessor pattern: only the leader decides
// expiry, and it decides it through the log).
func (n *Node) leaderLoop() {
	defer n.wg.Done()
	sweep := time.NewTicker(n.cfg.SweepInterval)
	defer sweep.Stop()
	tick := time.NewTicker(n.cfg.TickInterval)
	defer tick.Stop()
	announced := uint64(0)
	for {
		select {
		case <-n.stop:
			return
		case <-tick.C:
			if !n.IsLeader() {
				continue
			}
			if t := n.term(); announced != t {
				if _, err := n.propose(&Command{Op: OpSetNode, Node: &n.self}); err == nil {
					announced = t
				}
			}
			if mono.Since(n.lastWrite.Load()) >= n.cfg.TickInterval {
				n.propose(&Command{Op: OpTick})
			}
			n.recordOwnRaftAddr()
		case <-sweep.C:
			if n.IsLeader() {
				n.sweep()
			}
		}
	}
}

func (n *Node) sweep() {
	buckets, err := n.db.ExpiredBuckets(n.clock.NowMs(), 16)
	if err != nil {
		n.log.Error("sweeper: list buckets", "error", err)
		return
	}
	for _, b := range buckets {
		r, err := n.propose(&Command{Op: OpDropBucket, Bucket: uint64(b)})
		if err != nil {
			n.log.Warn("sweeper: drop bucket", "bucket", b, "error", err)
			return
		}
		if r.Outcome == engine.OutcomeDropRefused {
			n.metrics.DropsRefused.Inc()
			return
		}
		n.log.Debug("dropped expired bucket", "bucket", b, "records", r.Dropped, "bytes", r.Bytes)
	}
}

func (n *Node) compactDropped() {
	defer n.wg.Done()
	for {
		select {
		case <-n.stop:
			return
		case b := <-n.fsm.dropped:
			if err := n.db.CompactBucket(b); err != nil && !errors.Is(err, engine.ErrClosed) {
				n.log.Warn("compact dropped bucket", "bucket", b, "error", err)
			}
		}
	}
}

// Snapshot forces a raft snapshot (and log compaction), for operators and tests.
func (n *Node) Snapshot() error {
	if err := n.raft.Snapshot().Error(); err != nil {
		return fmt.Errorf("raftfsm: snapshot: %w", err)
	}
	return nil
}

// undoRegisterer registers with a caller's registry and remembers what it
// registered, so that a failed open takes its metrics back: Open opens a
// second time after setting a partial copy aside (errStartEmpty), and the
// first open's registrations made that second one panic (duplicate metrics
// collector registration), so the node never started.
type undoRegisterer struct {
	prometheus.Registerer
	done []prometheus.Collector
}

func (u *undoRegisterer) Register(c prometheus.Collector) error {
	if err := u.Registerer.Register(c); err != nil {
		return err
	}
	u.done = append(u.done, c)
	return nil
}

func (u *undoRegisterer) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		if err := u.Register(c); err != nil {
			panic(err)
		}
	}
}

func (u *undoRegisterer) undo() {
	for _, c := range u.done {
		u.Registerer.Unregister(c)
	}
	u.done = nil
}

// loudStable is raft's stable store (raft.db: the term and the vote).
// Raft panics when it cannot record either, since it must not go on
// without them; an operator walk got only a goroutine dump ("failed to
// save current term: … read-only file system") after ext4 went read-only
// under a running node. The store now says first, at ERROR, what failed
// and what to do; raft's panic follows, and the next start finds the
// term and vote as they were last recorded.
type loudStable struct {
	*raftboltdb.BoltStore
	log     *slog.Logger
	dataDir string
}

func (s loudStable) Set(key, val []byte) error {
	return s.said(key, s.BoltStore.Set(key, val))
}

func (s loudStable) SetUint64(key []byte, val uint64) error {
	return s.said(key, s.BoltStore.SetUint64(key, val))
}

func (s loudStable) said(key []byte, err error) error {
	if err == nil || s.log == nil {
		return err
	}
	why := "check the disk (dmesg, the filesystem's free space and health)"
	switch {
	case errors.Is(err, syscall.EROFS):
		why = "the data dir's filesystem is read-only (remounted so after an I/O error? see dmesg): repair it, mount it read-write and start the node again"
	case errors.Is(err, syscall.ENOSPC):
		why = "the disk is full: free space and start the node again"
	}
	s.log.Error("raft cannot record its "+string(key)+" in raft.db, and stops the node (nothing acknowledged is lost: the next start reads the state as last recorded): "+why,
		"file", filepath.Join(s.dataDir, "raft.db"), "error", err)
	if failedStableWrite(err) {
		// Raft panicked (exit status 2) only for the term: a vote it could
		// not record was logged ("failed to persist vote") and the node
		// went on, its next fsyncs of raft.db over pages the OS may have
		// dropped (a vote lost so could be given twice in a term).
		exit(1)
	}
	return err
}

// failedStableWrite reports whether err, a write of raft.db's, is one the
// node stops on at once: an I/O error (EIO, or a failed write or fsync
// for another reason than space). A read-only filesystem or a full disk
// wrote nothing: raft's own stop (its panic on the term) is left to them.
func failedStableWrite(err error) bool {
	if errors.Is(err, syscall.EROFS) || errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT) {
		return false
	}
	if _, _, ok := engine.IOStop(err); ok {
		return true
	}
	return errors.Is(err, syscall.EIO)
}

// startRestoreError is the error of a node that could not, at start,
// install the newest snapshot it holds (a leader's, received before the
// node stopped). On a full disk it names the ways out: a restart alone
// meets the same full disk, since the received snapshot still holds its
// space.
//
// The other way out is rejoinAdvice's, removal first: an empty member the
// quorum still counts is what docs/MEMBERSHIP.md has removed before it
// rejoins.
func startRestoreError(id string, size int64, cfg Config, err error) error {
	if !errors.Is(err, syscall.ENOSPC) {
		return fmt.Errorf("raftfsm: restore snapshot %s: %w", id, err)
	}
	return fmt.Errorf("raftfsm: restore snapshot %s: %w. The disk holding %s has no room to install the snapshot this node received (%d bytes; installing it needs about as much again, free). "+
		"Give that disk more room and start the node again. %s",
		id, err, cfg.DataDir, size, rejoinAdvice(cfg))
}

// logScanNote is how many raft log entries above the newest snapshot make
// a start say that raft reads them first: at ~20 µs an entry, a second.
var logScanNote uint64 = 50_000

// noteLogScan says, before raft starts, how many log entries it reads first
// when they are many. raft reads every entry above the newest snapshot for
// its configuration before the node listens: with 211,657 (a high
// --snapshot-threshold, a kill -9) a start was silent for seconds, /healthz
// refused, and a SIGTERM waited for the end of it (a crash walk).
func (n *Node) noteLogScan() {
	from, last, ok := n.logAboveSnapshot()
	if ok && last > from && last-from > logScanNote {
		n.log.Info("reading the raft log's entries above the newest snapshot before raft starts (for its configuration); the node listens once done, and entries above the state's applied index are applied after that",
			"entries", last-from, "snapshot-index", from, "log-last-index", last, "applied-index", n.db.Meta().Applied)
	}
}
