package raftfsm

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	"go.etcd.io/bbolt"

	"github.com/idem-store/idem/engine"
	"github.com/idem-store/idem/ttl"
)

// Peer is a member of a raft configuration.
type Peer struct {
	ID       string `json:"id"`
	RaftAddr string `json:"raft_addr"`
	Suffrage string `json:"suffrage,omitempty"`
}

// OfflineState is what a stopped node's data dir holds, as Recover needs
// to know it.
type OfflineState struct {
	// Configuration is the latest raft configuration in the data dir
	// (committed or not).
	Configuration []Peer
	// LastIndex and LastTerm are the raft log's end (or the newest
	// snapshot's, when the log is empty).
	LastIndex, LastTerm uint64
	// Applied is the state's applied index as stored; entries of the log
	// above it are applied at start (or by Recover).
	Applied     uint64
	CurrentTerm uint64
	// HTTPAddrs is the HTTP address the state records (node/<id>) for each
	// member of Configuration (and of RecordedMembers) that has one, by
	// id, with the node records of the log's entries above Applied applied
	// over it (a node killed soon after its members joined may have them
	// only in its log).
	HTTPAddrs map[string]string
	// LogHeadLost is the raft log's first index when the entries before it
	// were compacted into a snapshot that is gone (snapshots/ emptied, its
	// newest snapshot deleted or damaged), 0 otherwise: the configuration
	// those entries and that snapshot held is unknown, and Recover writes a
	// snapshot marker of the state just below this index (coverLogHead).
	LogHeadLost uint64
	// RecordedMembers, when LogHeadLost is set, are the members the state
	// records (node/<id>) that Configuration does not list: the lost
	// snapshot held the configuration, so they may be members still.
	RecordedMembers []Peer
	// LogUnreadable says why the raft log cannot be read (its wal-meta.db
	// missing, emptied or damaged, a segment lost), "" when it can. The
	// state in Pebble is whole up to Applied; what the log held above it is
	// lost with it. Recover sets the log aside (raft-wal.unreadable-*) and
	// starts a new one at the state's index.
	LogUnreadable string
	// SupersededBy names the member that told this data dir's node it was
	// left out of a recovery or restore ("id (raft address)"), when the
	// data dir holds superseded.json; "" otherwise. Open refuses such a
	// data dir until the file is deleted, recovered or not.
	SupersededBy string
	// KeptBackBy and KeptBack are the leader and the reason KeptFile
	// records, when the data dir holds it ("" otherwise): when this node
	// last heard, the leader kept it a non-voter, often because its state
	// lacks records the others hold. Recover makes it a voter, and Open
	// then removes the file: a cluster recovered from it would lack them.
	KeptBackBy, KeptBack string
	// Unfinished is the recovery of this data dir that began and did not
	// finish (recovering.json), nil when there is none: Open refuses the
	// data dir until a recover finishes.
	Unfinished *Recovering
	// UnfinishedMembers are the members Unfinished lists as the members
	// before it (Recovering.Before) that neither Configuration nor
	// RecordedMembers lists, with the raft address its marker records, or
	// else the state's (node/<id>); their HTTP addresses are in HTTPAddrs
	// likewise. A recover stopped after it rewrote the configuration left
	// only the new one in the data dir, and the run again that finishes
	// it must check them as the first run checked the old configuration:
	// they may be a live cluster still.
	UnfinishedMembers []Peer
}

// offline is a stopped node's stores, opened without starting raft:
// stable is raft.db (term, vote), logs the raft log (logstore.go).
type offline struct {
	dir       string
	log       *slog.Logger
	db        *engine.DB
	stable    *raftboltdb.BoltStore
	logs      raft.LogStore
	closeLogs func() error
	snaps     *snapshotStore
	// unreadable is why the raft log did not open (a walOpenError); logs
	// is then an empty stand-in until setAsideLog replaces the log.
	unreadable error
}

func openOffline(dir string, log *slog.Logger) (*offline, error) {
	return openOfflineMode(dir, OfflineOptions{Logger: log}, true)
}

// OfflineOptions are how an offline command (idem recover) opens a
// stopped node's data dir.
type OfflineOptions struct {
	// Logger receives the stores' warnings and the stop on a failed write
	// of the state store's files; nil: slog's default logger gets the
	// stop, and nothing else is logged.
	Logger *slog.Logger
	// Stop is the state store's engine.Options.Offline: how the stop on a
	// failed write of its files words the command's failure. Empty: a
	// running node's words.
	Stop string
}

// openOfflineMode opens dir's stores; with write false it changes nothing
// (an older version's log is read where it is, not moved).
func openOfflineMode(dir string, oo OfflineOptions, write bool) (*offline, error) {
	log := oo.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	o := &offline{dir: dir, log: log}
	raftPath := filepath.Join(dir, "raft.db")
	if !exists(raftPath) || !exists(filepath.Join(dir, "fsm")) {
		return nil, fmt.Errorf("raftfsm: %s holds no node's state (no raft.db and fsm directory): is the data dir right?", dir)
	}
	// The raft log first: it is locked by a running node, and says so
	// clearly (Pebble's lock would say "resource temporarily unavailable").
	var err error
	o.stable, err = raftboltdb.New(raftboltdb.Options{Path: raftPath, BoltOptions: stableOptions()})
	if err != nil {
		if errors.Is(err, bbolt.ErrTimeout) {
			who := ""
			if held, pid := engine.Holder(filepath.Join(dir, "fsm")); held && pid > 0 {
				who = fmt.Sprintf(" (pid %d)", pid)
			}
			return nil, fmt.Errorf("raftfsm: data dir %s is in use by another idem process%s: stop the node first", dir, who)
		}
		return nil, fmt.Errorf("raftfsm: open raft log: %w", err)
	}
	// A data dir of an older version has its log in raft.db: it moves
	// here as at a node's start (crash-safe, see migrateFromBolt), so the
	// recovery reads and writes the one log the node will use.
	if write {
		var s *LogStore
		s, err = openLogStore(dir, o.stable, log)
		o.logs, o.closeLogs = s, func() error {
			if s == nil {
				return nil
			}
			return s.Close()
		}
	} else {
		o.logs, o.closeLogs, err = openLogStoreReadOnly(dir, o.stable, log)
	}
	// A log that opens but whose entries do not all read (a damaged
	// entry, a sealed segment damaged or cut short) is unreadable too:
	// recover applies them all, and failed on the first it could not read.
	if err == nil {
		if ls, ok := o.logs.(*LogStore); ok {
			if last, lerr := ls.LastIndex(); lerr == nil {
				if i, rerr := unreadableEntry(ls, 0, last); rerr != nil {
					o.closeLogs()
					err = &walOpenError{path: ls.path, err: fmt.Errorf("entry %d cannot be read: %w", i, rerr)}
				}
			}
		}
	}
	// Not for want of permission or space: those logs are whole, and the
	// user or the disk is what to fix.
	if we := (*walOpenError)(nil); errors.As(err, &we) && !errors.Is(err, os.ErrPermission) && !errors.Is(err, syscall.ENOSPC) {
		// Unreadable: the state in Pebble is still whole. Read as an
		// empty log; Recover sets the files aside and starts a new one.
		o.unreadable, err = err, nil
		o.logs, o.closeLogs = raft.NewInmemStore(), func() error { return nil }
	}
	if err != nil {
		o.stable.Close()
		return nil, err
	}
	// oo.Logger, not log: with none, the stop on a failed write goes to
	// slog's default logger, where a discarding one made it exit 1 silently.
	if o.db, err = engine.Open(filepath.Join(dir, "fsm"), engine.Options{Logger: oo.Logger, Offline: oo.Stop}); err != nil {
		o.closeLogs()
		o.stable.Close()
		return nil, err
	}
	if o.snaps, err = newSnapshotStore(dir, o.db, log); err != nil {
		o.close()
		return nil, fmt.Errorf("raftfsm: open snapshot store: %w", err)
	}
	return o, nil
}

func (o *offline) close() error {
	return errors.Join(o.closeLogs(), o.stable.Close(), o.db.Close())
}

// state reads the latest configuration and the log's end.
func (o *offline) state() (OfflineState, []*raft.SnapshotMeta, error) {
	var st OfflineState
	st.Applied = o.db.Meta().Applied
	if rec, err := readSuperseded(o.dir); err == nil && rec != nil {
		st.SupersededBy = rec.by()
	}
	st.KeptBackBy, st.KeptBack = readKept(o.dir)
	if r, err := ReadRecovering(o.dir); err == nil {
		st.Unfinished = r
	} else {
		st.Unfinished = &Recovering{} // unreadable: Open refuses it all the same
	}
	term, err := o.stable.GetUint64([]byte("CurrentTerm"))
	if err == nil {
		st.CurrentTerm = term
	}
	list, err := o.snaps.List()
	if err != nil {
		return st, nil, fmt.Errorf("raftfsm: list snapshots: %w", err)
	}
	var conf raft.Configuration
	var from uint64
	if len(list) > 0 {
		conf, from = list[0].Configuration, list[0].Index
		st.LastIndex, st.LastTerm = list[0].Index, list[0].Term
	}
	last, err := o.logs.LastIndex()
	if err != nil {
		return st, nil, fmt.Errorf("raftfsm: read raft log: %w", err)
	}
	first, err := o.logs.FirstIndex()
	if err != nil {
		return st, nil, fmt.Errorf("raftfsm: read raft log: %w", err)
	}
	named, err := o.db.Named("node/")
	if err != nil {
		return st, nil, fmt.Errorf("raftfsm: read the members' addresses: %w", err)
	}
	httpAddrs := map[string]string{} // by id, as the state records them
	raftAddrs := map[string]string{}
	for k, v := range named {
		var info NodeInfo
		if json.Unmarshal(v, &info) == nil {
			id := strings.TrimPrefix(k, "node/")
			httpAddrs[id], raftAddrs[id] = info.HTTPAddr, info.RaftAddr
		}
	}
	if gap, _ := logHeadUncovered(first, last, list); gap {
		st.LogHeadLost = first
	}
	if o.unreadable != nil {
		st.LogUnreadable = o.unreadable.Error()
	}
	for i := max(from+1, first); i <= last && i > 0; i++ {
		var l raft.Log
		if err := o.logs.GetLog(i, &l); err != nil {
			return st, nil, fmt.Errorf("raftfsm: read raft log entry %d: %w", i, err)
		}
		switch {
		case l.Type == raft.LogConfiguration:
			conf = raft.DecodeConfiguration(l.Data)
		case l.Type == raft.LogCommand && l.Index > st.Applied && !isBatchEntry(l.Data):
			// As the FSM will apply it (node commands are never batched).
			if c, err := DecodeCommand(l.Data); err == nil && c.Node != nil && c.Node.ID != "" {
				switch c.Op {
				case OpSetNode:
					httpAddrs[c.Node.ID], raftAddrs[c.Node.ID] = c.Node.HTTPAddr, c.Node.RaftAddr
				case OpRemoveNode:
					delete(httpAddrs, c.Node.ID)
					delete(raftAddrs, c.Node.ID)
				}
			}
		}
		st.LastIndex, st.LastTerm = l.Index, l.Term
	}
	for _, s := range conf.Servers {
		st.Configuration = append(st.Configuration, Peer{ID: string(s.ID), RaftAddr: string(s.Address), Suffrage: s.Suffrage.String()})
	}
	sort.Slice(st.Configuration, func(i, j int) bool { return st.Configuration[i].ID < st.Configuration[j].ID })
	if st.LogHeadLost > 0 || st.LogUnreadable != "" {
		// The configuration read is what the log's remaining entries hold,
		// if any: the members the state records may be more.
		for id, addr := range raftAddrs {
			if !slices.ContainsFunc(st.Configuration, func(p Peer) bool { return p.ID == id }) {
				st.RecordedMembers = append(st.RecordedMembers, Peer{ID: id, RaftAddr: addr})
			}
		}
		sort.Slice(st.RecordedMembers, func(i, j int) bool { return st.RecordedMembers[i].ID < st.RecordedMembers[j].ID })
	}
	if u := st.Unfinished; u != nil {
		listed := func(id string) bool {
			same := func(p Peer) bool { return p.ID == id }
			return slices.ContainsFunc(st.Configuration, same) || slices.ContainsFunc(st.RecordedMembers, same) || slices.ContainsFunc(st.UnfinishedMembers, same)
		}
		for _, id := range u.Before {
			if id == "" || listed(id) {
				continue
			}
			raftAddr, httpAddr := raftAddrs[id], httpAddrs[id]
			for _, a := range u.BeforeAddrs {
				if a.ID == id {
					if a.RaftAddr != "" {
						raftAddr = a.RaftAddr
					}
					if a.HTTPAddr != "" {
						httpAddr = a.HTTPAddr
					}
				}
			}
			st.UnfinishedMembers = append(st.UnfinishedMembers, Peer{ID: id, RaftAddr: raftAddr})
			httpAddrs[id] = httpAddr
		}
		sort.Slice(st.UnfinishedMembers, func(i, j int) bool { return st.UnfinishedMembers[i].ID < st.UnfinishedMembers[j].ID })
	}
	for _, p := range st.Members() {
		if a := httpAddrs[p.ID]; a != "" {
			if st.HTTPAddrs == nil {
				st.HTTPAddrs = map[string]string{}
			}
			st.HTTPAddrs[p.ID] = a
		}
	}
	return st, list, nil
}

// Members are every member st knows of: Configuration, RecordedMembers and
// UnfinishedMembers, in that order. idem recover checks them all before it
// changes anything.
func (st OfflineState) Members() []Peer {
	return slices.Concat(st.Configuration, st.RecordedMembers, st.UnfinishedMembers)
}

// ReadOfflineState reads a stopped node's data dir without changing it.
func ReadOfflineState(dir string) (OfflineState, error) {
	return ReadOfflineStateWith(dir, OfflineOptions{})
}

// ReadOfflineStateWith is ReadOfflineState opening the stores with o.
func ReadOfflineStateWith(dir string, oo OfflineOptions) (OfflineState, error) {
	o, err := openOfflineMode(dir, oo, false)
	if err != nil {
		return OfflineState{}, err
	}
	defer o.close()
	st, _, err := o.state()
	return st, err
}

// Recover rewrites the raft configuration of a stopped node to peers, for
// a cluster that lost its quorum for good (the peers.json of Consul), with
// raft's RecoverCluster: every entry of the node's log, committed or not,
// is applied to the state, a snapshot carrying the new configuration is
// taken, and the log is compacted. The state is never deleted or replaced:
// it only moves forward by the entries of its own log. Every node named in
// peers must be recovered with the same peers before any is started.
//
// It returns the state before the change.
func Recover(dir, nodeID string, peers []Peer, log *slog.Logger) (OfflineState, error) {
	return RecoverWith(dir, nodeID, peers, OfflineOptions{Logger: log})
}

// RecoverWith is Recover opening the stores with oo.
func RecoverWith(dir, nodeID string, peers []Peer, oo OfflineOptions) (OfflineState, error) {
	log := oo.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	conf := raft.Configuration{}
	self := false
	for _, p := range peers {
		conf.Servers = append(conf.Servers, raft.Server{ID: raft.ServerID(p.ID), Address: raft.ServerAddress(p.RaftAddr), Suffrage: raft.Voter})
		self = self || p.ID == nodeID
	}
	if !self {
		return OfflineState{}, fmt.Errorf("%w: the new configuration must include this node (%s)", ErrConfig, nodeID)
	}
	o, err := openOfflineMode(dir, oo, true)
	if err != nil {
		return OfflineState{}, err
	}
	defer o.close()
	st, list, err := o.state()
	if err != nil {
		return st, err
	}
	if len(list) > 0 {
		if err := o.checkNewest(list[0]); err != nil {
			return st, err
		}
	}
	if err := o.checkLogHead(st); err != nil { // before anything is changed
		return st, err
	}
	// The members before the change, for the record of those it leaves
	// out: a recover stopped after it rewrote the configuration and run
	// again reads only the new configuration here, so the members the
	// stopped run saw are kept in its recoveringFile.
	// With their addresses: a run again probes them (idem recover).
	var before []string
	var addrs []MemberAddrs
	for _, p := range st.Members() { // UnfinishedMembers: those an earlier run saw
		before = append(before, p.ID)
		addrs = append(addrs, MemberAddrs{ID: p.ID, RaftAddr: p.RaftAddr, HTTPAddr: st.HTTPAddrs[p.ID]})
	}
	if err := markRecovering(dir, nodeID, peers, before, addrs); err != nil { // recovering.go
		return st, err
	}
	if err := recoverHook("marked"); err != nil {
		return st, err
	}
	if o.unreadable != nil {
		if err := o.setAsideLog(); err != nil {
			return st, err
		}
	}
	// The state can be past the log's end: a follower that installed a
	// leader's snapshot (state J above its index I) and stopped before it
	// received the entries above I. The old cluster committed those
	// entries; the recovered cluster's log must not reuse their indexes,
	// or the FSM would skip its new entries there as already applied. So
	// the log is extended with no-ops up to J: RecoverCluster's snapshot
	// then sits at J or above.
	// A log that ends below the newest snapshot holds nothing the snapshot
	// does not (raft drops such entries when it installs one), and its end
	// may have been lost below its head (checkLogEnd): it is emptied, or
	// the entries above the snapshot could not be appended.
	if last, err := o.logs.LastIndex(); err != nil {
		return st, fmt.Errorf("raftfsm: read raft log: %w", err)
	} else if last > 0 && last < st.LastIndex {
		if err := o.logs.DeleteRange(1, st.LastIndex); err != nil {
			return st, fmt.Errorf("raftfsm: recover: drop the raft log below the snapshot at %d: %w", st.LastIndex, err)
		}
		log.Info("dropped the raft log's entries, all below the newest snapshot", "log-ended-at", last, "snapshot-index", st.LastIndex)
	}
	if st.Applied > st.LastIndex {
		pad := make([]*raft.Log, 0, st.Applied-st.LastIndex)
		for i := st.LastIndex + 1; i <= st.Applied; i++ {
			pad = append(pad, &raft.Log{Index: i, Term: max(st.LastTerm, 1), Type: raft.LogNoop, AppendedAt: time.Now()})
		}
		if err := o.logs.StoreLogs(pad); err != nil {
			return st, fmt.Errorf("raftfsm: recover: extend raft log to the state's index %d: %w", st.Applied, err)
		}
		log.Info("extended the raft log with no-ops to the state's applied index", "from", st.LastIndex+1, "to", st.Applied)
	}
	rc := raft.DefaultConfig()
	rc.LocalID = raft.ServerID(nodeID)
	rc.Logger = newHCLog(log)
	_, trans := raft.NewInmemTransport(raft.ServerAddress(peers[0].RaftAddr))
	defer trans.Close()
	fsm := &recoverFSM{FSM: NewFSM(o.db, ttl.NewClock(0), log, nil), db: o.db}
	defer fsm.release()
	// The configuration is the operator's now: a joining file left by a
	// node that stopped right after catching up must not make the next
	// start set this state aside (joining.go). Removed first: a recover
	// stopped between the two (killed, a power cut) left the file beside a
	// configuration of this node alone, and the next start set the only
	// copy aside.
	if err := removeJoining(dir); err != nil {
		return st, err
	}
	if st.LogHeadLost > 0 { // after removeJoining: the marker carries the new configuration
		if err := o.coverLogHead(st, conf, trans); err != nil {
			return st, err
		}
	}
	if err := raft.RecoverCluster(rc, fsm, o.logs, o.stable, recoverSnaps{o.snaps}, trans, conf); err != nil {
		return st, fmt.Errorf("raftfsm: recover: %w", err)
	}
	if err := recoverHook("rewritten"); err != nil {
		return st, err
	}
	if err := o.jumpTerm(); err != nil {
		return st, err
	}
	// The members left out must not serve their older state if they come
	// back with their data dirs: this node tells them so (superseded.go).
	if err := recordRecovery(dir, nodeID, before, peers, o.db.Meta().Applied, ""); err != nil {
		return st, fmt.Errorf("raftfsm: recover: the configuration was rewritten, but the members it leaves out could not be recorded (run idem recover again): %w", err)
	}
	if err := unmarkRecovering(dir); err != nil {
		return st, fmt.Errorf("raftfsm: recover: the configuration was rewritten, but %s could not be removed (run idem recover again): %w", recoveringFile, err)
	}
	log.Info("raft configuration rewritten", "dir", dir, "peers", fmt.Sprint(peers), "applied-index", o.db.Meta().Applied)
	return st, nil
}

// recoverTermJump is the least a recover raises the node's raft term by.
const recoverTermJump = 1 << 20

// jumpTerm raises the node's raft term far above any the members a
// recovery leaves out may reach on their own. Those members may go on
// (as a quorum of the old configuration) and write entries at the indexes
// the recovered cluster writes its own at. When the terms there were the
// same (the old members' elections and the recovered node's counted from
// about the same term), raft's log matching took one history for the
// other: a left-out member's old data dir started again at the addresses
// of a node that joined the recovered cluster was taken in with its
// tail, and served a state that lacked the cluster's acknowledged claims
// (its state hash differed; half the runs of a walk). With the recovered
// cluster's entries at terms no old member reaches, raft finds the
// conflict and the node learns it holds another history (Node.tailCut).
// The jump is random, so two recoveries of one cluster do not meet.
func (o *offline) jumpTerm() error {
	term, err := o.stable.GetUint64([]byte("CurrentTerm"))
	if err != nil && !errors.Is(err, raftboltdb.ErrKeyNotFound) {
		return fmt.Errorf("raftfsm: recover: read the raft term: %w", err)
	}
	term += recoverTermJump + rand.Uint64N(recoverTermJump)
	if err := o.stable.SetUint64([]byte("CurrentTerm"), term); err != nil {
		return fmt.Errorf("raftfsm: recover: raise the raft term: %w", err)
	}
	return nil
}

// checkNewest refuses a data dir whose state is older than the state its
// newest snapshot marker stands for: its own files cannot rebuild it.
func (o *offline) checkNewest(newest *raft.SnapshotMeta) error {
	_, rc, err := o.snaps.FileSnapshotStore.Open(newest.ID)
	if err != nil {
		return fmt.Errorf("raftfsm: open snapshot %s: %w", newest.ID, err)
	}
	defer rc.Close()
	stateIndex, marker, err := readMarker(bufio.NewReader(rc))
	if err != nil {
		return fmt.Errorf("raftfsm: snapshot %s: %w", newest.ID, err)
	}
	if applied := o.db.Meta().Applied; marker && stateIndex > applied {
		return fmt.Errorf("raftfsm: the state in %s (applied index %d) is older than the state this node recorded in its snapshot %s (applied index %d): "+
			"its fsm directory was lost or replaced, and it cannot be recovered from its own files. Nothing was changed. Recover another survivor, or restore a backup (idem snapshot restore)",
			filepath.Join(o.dir, "fsm"), applied, newest.ID, stateIndex)
	}
	return nil
}

// checkLogHead refuses to cover a raft log's lost head (coverLogHead)
// with a state that does not reach it. Pebble holds the state at least up
// to the lost snapshot's (it is synced before a snapshot is taken, and
// raft compacts only below one), and the entries between that state and
// the snapshot's index were no-ops and barriers, which the FSM never sees.
// So a state applied below the log's first index less one was lost or
// replaced as well, as checkNewest refuses a state older than its marker.
func (o *offline) checkLogHead(st OfflineState) error {
	first := st.LogHeadLost
	if first > 0 && st.Applied+1 < first {
		return fmt.Errorf("raftfsm: the raft log in %s starts at index %d and the snapshot that covered the entries before it is gone, but the state in %s was applied only up to index %d: "+
			"entries between are lost with that snapshot (the fsm directory was lost or replaced too), and this node cannot be recovered from its own files. Nothing was changed. "+
			"Recover another survivor, or build a new data dir from a backup (idem snapshot restore)",
			filepath.Join(o.dir, logStoreDir), first, filepath.Join(o.dir, "fsm"), st.Applied)
	}
	return nil
}

// coverLogHead writes a snapshot marker of the state at the index just
// below the raft log's first entry, whose covering snapshot is gone
// (st.LogHeadLost; checkLogHead passed): RecoverCluster, like raft at
// start, reads the log from the newest snapshot up, and failed on the
// first compacted entry ("failed to get log at index 1").
//
// The marker's term is that of the log's first entry (terms never fall
// along the log, so the entry below had it or an older one); it is
// RecoverCluster's starting point, followed by the snapshot it takes at
// the log's end.
func (o *offline) coverLogHead(st OfflineState, conf raft.Configuration, trans raft.Transport) error {
	first := st.LogHeadLost
	var l raft.Log
	if err := o.logs.GetLog(first, &l); err != nil {
		return fmt.Errorf("raftfsm: recover: read raft log entry %d: %w", first, err)
	}
	sink, err := o.snaps.Create(raft.SnapshotVersionMax, first-1, max(l.Term, 1), conf, first-1, trans)
	if err != nil {
		return fmt.Errorf("raftfsm: recover: create a snapshot below the raft log's first entry: %w", err)
	}
	if err := writeMarker(sink, st.Applied); err != nil {
		sink.Cancel()
		return fmt.Errorf("raftfsm: recover: write a snapshot below the raft log's first entry: %w", err)
	}
	if err := sink.Close(); err != nil {
		return fmt.Errorf("raftfsm: recover: write a snapshot below the raft log's first entry: %w", err)
	}
	o.log.Warn("no snapshot covered the raft log's compacted head (the snapshots directory was emptied, or its newest snapshot deleted or damaged); wrote a snapshot marker of the state below the log's first entry",
		"log-first-index", first, "snapshot-index", first-1, "applied-index", st.Applied)
	return nil
}

// recoverFSM is the node's FSM as RecoverCluster needs it. Pebble already
// holds the state: restoring a snapshot means checking that the state is
// at least as new as it (a marker), or installing a full stream only when
// it is newer. The snapshot RecoverCluster takes is released by release.
type recoverFSM struct {
	*FSM
	db    *engine.DB
	snaps []raft.FSMSnapshot
}

func (f *recoverFSM) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	br := bufio.NewReaderSize(rc, 1<<20)
	stateIndex, marker, err := readMarker(br)
	if err != nil {
		return err
	}
	if marker {
		if stateIndex > f.db.Meta().Applied {
			return errNoData
		}
		return nil
	}
	_, err = f.db.RestoreIfNewer(br)
	return err
}

func (f *recoverFSM) Snapshot() (raft.FSMSnapshot, error) {
	s, err := f.FSM.Snapshot()
	if err == nil {
		f.snaps = append(f.snaps, s)
	}
	return s, err
}

func (f *recoverFSM) release() {
	for _, s := range f.snaps {
		s.Release()
	}
}

// recoverSnaps hands RecoverCluster the newest snapshot only, as stored:
// a marker is not expanded into a copy of the whole state.
type recoverSnaps struct{ *snapshotStore }

func (s recoverSnaps) List() ([]*raft.SnapshotMeta, error) {
	list, err := s.snapshotStore.List()
	if len(list) > 1 {
		list = list[:1]
	}
	return list, err
}

func (s recoverSnaps) Open(id string) (*raft.SnapshotMeta, io.ReadCloser, error) {
	return s.FileSnapshotStore.Open(id)
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// setAsideLog moves an unreadable raft log (o.unreadable) to
// raft-wal.unreadable-<unix seconds>, kept for a post-mortem, and opens a
// new, empty one in its place: Recover then extends it with no-ops to the
// state's applied index, as for any log that ends below the state. The
// entries the old log held above that index are lost with it, which the
// dry run says.
func (o *offline) setAsideLog() error {
	path := filepath.Join(o.dir, logStoreDir)
	aside := fmt.Sprintf("%s.unreadable-%d", path, time.Now().Unix())
	if err := os.Rename(path, aside); err != nil {
		return fmt.Errorf("raftfsm: recover: set the unreadable raft log aside: %w", err)
	}
	if err := syncDir(o.dir); err != nil {
		return err
	}
	s, err := openLogStore(o.dir, o.stable, o.log)
	if err != nil {
		return fmt.Errorf("raftfsm: recover: start a new raft log: %w", err)
	}
	o.logs, o.closeLogs, o.unreadable = s, s.Close, nil
	o.log.Warn("set the unreadable raft log aside and started a new one at the state's applied index; what the old log held above it is lost",
		"set-aside", aside, "applied-index", o.db.Meta().Applied)
	return nil
}
