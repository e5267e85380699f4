package raftfsm

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"

	"github.com/idem-store/idem/engine"
	"github.com/idem-store/idem/internal/mono"
	"github.com/idem-store/idem/partition"
	"github.com/idem-store/idem/ttl"
)

// FSM applies committed commands to the engine. See the package comment for
// the contract it keeps.
type FSM struct {
	db      *engine.DB
	clock   *ttl.Clock
	log     *slog.Logger
	metrics *Metrics
	// dropped receives buckets this replica removed, for compaction.
	dropped chan partition.Bucket
	// rewound spaces the log of the clock going back to the log's time.
	rewound mono.Spacer
	// stamp is the newest stamp of the batch being applied (advance), for
	// the clock (observe); raft applies one batch at a time.
	stamp int64
	// skipUniqueness is the injected bug of Config.InjectBug.
	skipUniqueness bool
	// keys counts sealed values per bucket and key id (keyuse.go).
	keys keyUse
	// nodesGen moves after every committed change of the stored node
	// addresses (SetNode, RemoveNode, Restore), so readers can cache them.
	nodesGen atomic.Uint64
	// secret (secret.go) is the fencing-token key once it is known, and
	// secretTxn the Txn that set it, so a second proposal applied in the
	// same batch is seen as coming second.
	secret    atomic.Pointer[ClusterSecret]
	secretTxn *engine.Txn
	secretMu  sync.Mutex // one proposal at a time from this node
	// busy is the call raft is in now, for the watchdog (fsmwatch.go).
	busy fsmBusy
	// installedPath, when set, is where Restore records the applied index
	// of the state it installed from a leader (checkLogPresent).
	installedPath string
	// installed, when set, is called once Restore has taken a leader's
	// snapshot: raft drops the whole log next (LogStore.installed).
	installed func()
}

var (
	_ raft.FSM         = (*FSM)(nil)
	_ raft.BatchingFSM = (*FSM)(nil)
)

// NewFSM returns an FSM over db. clock is anchored to the cluster time of
// every applied batch. metrics may be nil.
func NewFSM(db *engine.DB, clock *ttl.Clock, log *slog.Logger, m *Metrics) *FSM {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	clock.Observe(db.Meta().NowMs)
	f := &FSM{db: db, clock: clock, log: log, metrics: m, dropped: make(chan partition.Bucket, 64)}
	if err := f.keys.load(db); err != nil {
		log.Error("read encryption key use", "error", err)
	}
	return f
}

// applyHook, when set (tests only), runs before each batch is applied: a
// slow FSM opens the window between a leader's election and its FSM
// catching up. It is given the FSM, so a test can slow one node only.
// Atomic: the FSM goroutines of running nodes read it while a test sets it.
var applyHook atomic.Pointer[func(*FSM, []*raft.Log)]

// Apply applies one entry.
func (f *FSM) Apply(l *raft.Log) any { return f.ApplyBatch([]*raft.Log{l})[0] }

// ApplyBatch applies a batch of entries as one Pebble batch: one commit, with
// the applied index, per raft batch.
func (f *FSM) ApplyBatch(logs []*raft.Log) []any {
	if len(logs) > 0 {
		defer f.busy.begin("apply", logs[0].Index, logs[len(logs)-1].Index)()
	}
	if h := applyHook.Load(); h != nil {
		(*h)(f, logs)
	}
	defer stopOnFailedRead(f.log)
	out := make([]any, len(logs))
	f.stamp = 0
	txn := f.db.Begin()
	applied := txn.Meta().Applied
	var last uint64
	nodes := false
	for i, l := range logs {
		last = l.Index
		if l.Index <= applied || l.Type != raft.LogCommand {
			continue // replayed after a restart, or not ours
		}
		r := f.apply(txn, l)
		out[i] = r
		nodes = nodes || r.nodes
	}
	if last <= applied {
		txn.Abort()
		return out
	}
	if err := txn.Commit(last); err != nil {
		// Losing an applied batch would make this replica diverge.
		panic(fmt.Errorf("raftfsm: commit index %d: %w", last, err))
	}
	if nodes {
		f.nodesGen.Add(1)
	}
	f.metrics.batch(len(logs))
	f.observe(txn.Meta().NowMs, f.stamp)
	return out
}

// observe anchors the node's clock at the applied cluster time, and says
// when that moved it back (ttl.Clock.Observe): this node had counted time
// the log never did, most often an outage of most of the cluster that it
// stayed up through.
// stampMs is the newest stamp applied with it (0 for none).
func (f *FSM) observe(ms, stampMs int64) {
	if d := f.clock.ObserveEntry(ms, stampMs); d > 0 && f.rewound.Allow(time.Minute) {
		f.log.Warn("cluster time on this node was ahead of the log's (it counted time the cluster did not, such as an outage of most nodes it stayed up through): it follows the log's", "behind-by", d.Round(time.Millisecond))
	}
}

func (f *FSM) apply(txn *engine.Txn, l *raft.Log) *ApplyResult {
	if isBatchEntry(l.Data) {
		return f.applyBatch(txn, l)
	}
	c, err := DecodeCommand(l.Data)
	if err != nil {
		return &ApplyResult{Index: l.Index, Err: err}
	}
	return f.applyOp(txn, c, l.Index, f.advance(txn, c.NowMs, c.WidthMs))
}

// advance moves cluster time to an entry's stamp and fixes the bucket
// width with the first entry that carries one; it returns the time the
// entry is decided at.
func (f *FSM) advance(txn *engine.Txn, nowMs, widthMs int64) int64 {
	f.stamp = max(f.stamp, nowMs)
	now := txn.Advance(ttl.Step(txn.Meta().NowMs, nowMs))
	if widthMs > 0 {
		txn.EnsureWidth(partition.Width(widthMs))
	}
	return now
}

// applyOp applies one command decided at now; index is its entry's raft
// index (the fencing token of a claim it makes).
func (f *FSM) applyOp(txn *engine.Txn, c *Command, index uint64, now int64) *ApplyResult {
	res := &ApplyResult{Index: index}
	missing := func(what string) *ApplyResult {
		res.Err = fmt.Errorf("%w: op %d without %s", ErrBadCommand, c.Op, what)
		return res
	}
	switch c.Op {
	case OpClaim:
		if c.Claim == nil || txn.Meta().Width == 0 {
			return missing("claim")
		}
		if f.skipUniqueness {
			txn.Delete(c.Claim.Scope, c.Claim.PrincipalScope, now) // INJECTED BUG
		}
		if c.Claim.CredentialMaxPrincipals != 0 {
			// A release without FeatureCredentialCap refuses this entry
			// (or op) and skips it: from now on the state says so.
			txn.MarkGated(gatedCredentialCap)
		}
		res.Result = txn.Claim(*c.Claim, index, now)
	case OpComplete:
		if c.Target == nil || c.Response == nil {
			return missing("target")
		}
		res.Result = txn.Complete(*c.Target, c.Response, now)
	case OpRelease:
		if c.Target == nil {
			return missing("target")
		}
		res.Result = txn.Release(*c.Target, now)
	case OpExtend:
		if c.Target == nil {
			return missing("target")
		}
		res.Result = txn.Extend(*c.Target, c.LeaseMs, now)
	case OpDelete:
		if c.Target == nil {
			return missing("target")
		}
		res.Result = txn.Delete(c.Target.Scope, c.Target.PrincipalScope, now)
	case OpDropBucket:
		start := time.Now() // for the metric only: nothing decided here reads it
		res.Result = txn.DropBucket(partition.Bucket(c.Bucket), now)
		if res.Outcome == engine.OutcomeDropped {
			f.metrics.dropped(res.Dropped, time.Since(start))
			select {
			case f.dropped <- partition.Bucket(c.Bucket):
			default:
			}
		}
	case OpTick:
		res.NowMs = now
	case OpSetNode:
		if c.Node == nil || c.Node.ID == "" {
			return missing("node")
		}
		b, _ := json.Marshal(c.Node)
		txn.SetNamed("node/"+c.Node.ID, b)
		res.nodes = true
	case OpRemoveNode:
		if c.Node == nil || c.Node.ID == "" {
			return missing("node")
		}
		txn.DeleteNamed("node/" + c.Node.ID)
		res.nodes = true
	case OpSetSecret:
		if len(c.Secret) != secretBytes {
			return missing("a secret of 32 bytes")
		}
		f.applySecret(txn, index, c.Secret)
	case OpSetRetention:
		if c.RetentionMs <= 0 {
			return missing("a positive retention")
		}
		txn.SetRetention(c.RetentionMs)
	case OpKeyCheck:
		if c.KeyCheck == nil || !keyIDPattern.MatchString(c.KeyCheck.ID) || len(c.KeyCheck.Check) != keyCheckSize {
			return missing("a key id and a check value of 16 bytes")
		}
		f.keys.setCheck(txn, c.KeyCheck.ID, c.KeyCheck.Check)
	}
	f.keys.track(txn, c, res)
	return res
}

// Snapshot returns at once: a Pebble snapshot, streamed later by Persist.
func (f *FSM) Snapshot() (raft.FSMSnapshot, error) {
	defer f.busy.begin("snapshot", 0, 0)()
	s, err := f.db.Snapshot()
	if err != nil {
		return nil, fmt.Errorf("raftfsm: snapshot: %w", err)
	}
	return &fsmSnapshot{s: s, log: f.log}, nil
}

// Restore replaces the state with a snapshot stream from the leader,
// atomically: raft calls it only to install one (NoSnapshotRestoreOnStart).
//
// A stream whose state is not newer than this node's is refused, this
// node's state and log left as they are. Raft, once the FSM has taken a
// snapshot, drops the node's whole log (raft-wal takes no gaps) and goes
// back to the snapshot's index, while its idea of the log's end stays
// where it was: the next entries were stored after a gap, and the node
// panicked on the first missing one ("log not found") and could not
// restart (a membership walk: a replication of the leader's that began
// before the node was removed and added back sent it the old snapshot
// again, seconds after it had caught up). A snapshot older than what a
// node applied is never needed: everything in it is in the node's state.
func (f *FSM) Restore(rc io.ReadCloser) error {
	defer f.busy.begin("restore", 0, 0)()
	defer rc.Close()
	if err := beforeRestore(); err != nil {
		return err
	}
	had := f.db.Meta().Applied
	br := bufio.NewReaderSize(rc, 1<<20)
	if state, marker, err := readMarker(br); err != nil {
		return fmt.Errorf("raftfsm: restore: %w", err)
	} else if marker {
		// Stored in place of a leader's snapshot whose state this node
		// already held (snapshotStore.holds): nothing to restore.
		if state > had {
			return fmt.Errorf("raftfsm: restore: the snapshot is a marker of a state (applied index %d) newer than this node's (applied index %d)", state, had)
		}
		f.log.Info("installed the leader's snapshot as the state this node already holds", "applied-index", had)
		if f.installed != nil {
			f.installed()
		}
		if f.installedPath != "" {
			if err := writeInstalled(f.installedPath, had); err != nil {
				f.log.Warn("could not record the state installed from the leader", "error", err)
			}
		}
		return nil
	}
	restored, err := f.db.RestoreIfNewer(br)
	if err != nil {
		return fmt.Errorf("raftfsm: restore: %w", err)
	}
	if !restored && had > 0 {
		f.log.Warn("refused a snapshot from the leader whose state is not newer than this node's (a replication that began before this node was last added sends it): kept this node's state and log", "applied-index", had)
		return fmt.Errorf("raftfsm: refusing a snapshot whose state is not newer than this node's (applied index %d): installed, raft would drop entries this node still needs", had)
	}
	f.nodesGen.Add(1)
	if err := f.keys.load(f.db); err != nil {
		return err
	}
	f.secret.Store(nil) // read again from the restored state
	f.observe(f.db.Meta().NowMs, 0)
	f.log.Info("restored snapshot", "applied-index", f.db.Meta().Applied)
	if f.installed != nil {
		f.installed()
	}
	if f.installedPath != "" {
		if err := writeInstalled(f.installedPath, f.db.Meta().Applied); err != nil {
			// Only a stop before the log passes this state is refused then.
			f.log.Warn("could not record the state installed from the leader", "error", err)
		}
	}
	afterRestore()
	return nil
}

// afterRestore is called once a snapshot from a leader is installed; a
// test stops the node there.
var afterRestore = func() {}

// beforeRestore is called when a leader's snapshot, saved in the snapshot
// store, is about to be installed; a test fails the install there, as a
// node killed while installing it.
var beforeRestore = func() error { return nil }

type fsmSnapshot struct {
	s   *engine.Snapshot
	log *slog.Logger
}

func (s *fsmSnapshot) Persist(sink raft.SnapshotSink) error {
	if _, ok := sink.(*markerSink); ok {
		// Pebble holds this state durably (engine.Snapshot synced it):
		// raft only needs to know it may truncate its log.
		if err := writeMarker(sink, s.s.Meta().Applied); err != nil {
			sink.Cancel()
			return fmt.Errorf("raftfsm: persist snapshot: %w", err)
		}
		s.log.Debug("snapshot marker persisted", "applied-index", s.s.Meta().Applied)
		return sink.Close()
	}
	n, err := s.s.WriteTo(sink)
	if err != nil {
		sink.Cancel()
		return fmt.Errorf("raftfsm: persist snapshot: %w", err)
	}
	s.log.Info("snapshot persisted", "bytes", n, "applied-index", s.s.Meta().Applied)
	return sink.Close()
}

func (s *fsmSnapshot) Release() { s.s.Close() }
