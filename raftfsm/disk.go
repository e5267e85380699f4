package raftfsm

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/hashicorp/raft"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/idem-store/idem/engine"
	"github.com/idem-store/idem/internal/mono"
)

// ErrStorageFull means the leader's disk has less free space than
// Config.MinFreeDisk: the write was refused before it was proposed, so
// nothing changed. Reads still work, and writes are accepted again by
// themselves once space is freed.
var ErrStorageFull = errors.New("raftfsm: storage full")

// ErrLogStopped means this node's raft log takes no entries: its next
// segment file could not be made (the disk filled; a raft log reopens by
// itself once there is room). A node so stopped cannot lead, so while no
// other leader is known its writes are refused for storage, not for an
// election that cannot end: a one-node store with its guard off
// (--min-free-disk 0) answered 503 "no leader" forever.
var ErrLogStopped = fmt.Errorf("%w: this node's raft log is stopped", ErrStorageFull)

// ErrStorageNearlyFull means the leader's disk is above the threshold but
// applying the write, with those in flight (about twice their bytes),
// would take it under: refused before it was proposed, nothing changed.
// The API says so: a client told the disk "is below its minimum free
// space" read a df that said otherwise.
var ErrStorageNearlyFull = fmt.Errorf("%w: no room to apply the write", ErrStorageFull)

// ErrDiskTooSmall means the leader's data dir is on a disk too small for
// it ever to take writes (its current raft log segment, the next one, the
// threshold and the ballast do not fit): freeing space on it cannot help.
// The 507 said that writes are taken again once space is freed.
var ErrDiskTooSmall = fmt.Errorf("%w: the data dir's disk is too small", ErrStorageFull)

// BallastFile is the name of the ballast in the data dir: space reserved
// at start that the node gives back when its disk fills, so it can still
// apply expiry, flush Pebble and restart. An operator may delete it to make
// room; the node creates it again once there is space for it.
const BallastFile = "ballast"

// How often the free space is read: writes are refused at most this late.
const diskRefresh = time.Second

// A proposal's or an append's check of room reads the free space again
// unless the last read is younger than roomyFor and left at least
// roomyMargin above what the check needs (readUnlessRoomy): near the
// threshold every check reads, as a second of writes can take hundreds
// of megabytes; far from it a statfs per proposal, one per claim sent
// alone, was 4% of a node's CPU under load. 256 MiB in 50 ms is 5 GB/s,
// faster than any disk fills.
const (
	roomyFor    = 50 * time.Millisecond
	roomyMargin = 256 << 20
)

// How often a state that lasts (storage full, applies waiting for space) is
// logged again: a line per request or per retry would flood the log.
const diskRemind = time.Minute

// diskGuard keeps a full disk from crashing the node or losing anything.
// Below MinFreeDisk (M) the leader refuses client writes with
// ErrStorageFull, while ticks, bucket drops and membership, which are small
// or free space, still go through. The ballast (M/4) is removed when free
// space falls under the floor (M/8) or a Pebble write fails with ENOSPC.
// Under the floor with no ballast left, applies wait for space before they
// start, outside the engine's locks, so reads of applied data go on; a
// Pebble write that still meets ENOSPC waits inside Pebble's filesystem
// rather than failing, since a failed Pebble write is fatal and returning a
// different result would let replicas diverge.
type diskGuard struct {
	dir     string
	ballast string
	minFree uint64 // 0: no guard, no ballast
	// fullBelow is where writes stop: minFree, or room for the raft log's
	// next segment file if that is more (appendFloor).
	fullBelow   uint64
	ballastSize int64
	floor       uint64
	log         *slog.Logger

	free atomic.Uint64
	// readAt is when free was last read (mono.Now; 0: never).
	readAt atomic.Int64
	full   atomic.Bool
	// held is the raft batch an apply holds back for space (gatedFSM),
	// first and last index; 0 when none.
	heldFirst, heldLast atomic.Uint64

	// soleVoter says whether this node is the only voter of its raft
	// configuration; nil until Open has the node's raft. The storage-full
	// line of a one-node store speaks of no leader nor follower.
	soleVoter atomic.Pointer[func() bool]
	// lowUnsaid: the disk was found full before soleVoter was set (Open
	// reads it before the raft configuration): the next settle says it.
	lowUnsaid bool

	mu          sync.Mutex // ballast changes and state transitions
	waiting     bool       // applies or Pebble writes wait for space
	cleared     bool       // a leftover ballast was removed (guard off)
	lastRemind  time.Time
	lastWaitLog time.Time
	sealedLog   mono.Spacer // logSealed's line
	snapLog     mono.Spacer // logSnapshotRefused's line
	// snapRefusedAt (mono.Now, 0: none since the last install) and
	// snapRefusedBytes: the last snapshot from the leader refused for lack
	// of room, and how much of it had been received (fullStatus).
	snapRefusedAt, snapRefusedBytes atomic.Int64
	expandLog                       mono.Spacer // logExpandRefused's line
	// tooSmall is the disk size the node needs when its data dir's disk
	// is smaller (openDiskGuard), 0 otherwise: the node is storage-full
	// for good, whatever is freed.
	tooSmall uint64
	// expandRefusedAt (mono.Now, 0: none since the last snapshot written
	// out) is when this node last sent a follower no snapshot for lack of
	// room on its own disk (expandRefused).
	expandRefusedAt atomic.Int64

	// applied is the last raft index gatedFSM applied, and backlog the
	// batches this node's raft log stored past it (admitAppend): what its
	// applies have yet to write.
	applied      atomic.Uint64
	backlogMu    sync.Mutex
	backlog      []storedBatch
	backlogBytes uint64
	// appendRefusedAt (mono.Now, 0: none since an append went through),
	// appendRefusedNeed and appendRefusedBacklog: the last append refused
	// because applying it would take the disk under fullBelow
	// (fullStatus).
	appendRefusedAt                         atomic.Int64
	appendRefusedNeed, appendRefusedBacklog atomic.Uint64
	appendLog                               mono.Spacer // admitAppend's line
	// refusals counts the appends admitAppend refused (appendpace.go).
	refusals atomic.Uint64
	// tailCut is the first index of the tail raft last deleted from this
	// node's log (a conflict with a new leader's entries), until the next
	// StoreLogs: the batch replacing it is taken whatever the room
	// (guardedLogStore.StoreLogs). 0: none.
	tailCut atomic.Uint64
	// commitIndex is raft's commit index on this node (nil: every stored
	// batch is counted): unapplied counts only what it will apply without
	// taking another append.
	commitIndex func() uint64

	// proposing is the bytes of client writes this leader admitted
	// (reserve) whose proposals have not returned yet: what their
	// applies have yet to write.
	proposing   atomic.Uint64
	proposalLog mono.Spacer // reserve's line
}

// storedBatch is a batch of raft entries stored and not yet applied: its
// last index and the bytes of its entries.
type storedBatch struct{ last, bytes uint64 }

// logSnapshotRefused says, once a minute, why a snapshot from the leader
// was refused: raft's own line does not say, and the node may not be in
// the storage-full state (the snapshot is larger than the room above it).
// It is recorded for fullStatus too: such a node can be above the
// threshold, and its status said only that it had applied nothing.
func (g *diskGuard) logSnapshotRefused(err error, received uint64) {
	g.snapRefusedBytes.Store(int64(received))
	g.snapRefusedAt.Store(mono.Now())
	if g.snapLog.Allow(diskRemind) {
		g.log.Warn("refused a snapshot from the leader for lack of disk space: this node stays behind until there is room for it", "error", err, "data-dir", g.dir)
	}
}

// logExpandRefused says, once a minute, why this node sent a follower no
// snapshot: writing its state out for the follower would have taken its
// own disk under the storage-full threshold, where the raft log could not
// start its next segment. Raft's own line names only the error.
func (g *diskGuard) logExpandRefused(err error) {
	g.expandRefusedAt.Store(mono.Now())
	if g.expandLog.Allow(diskRemind) {
		g.log.Warn("sent no snapshot to a follower that needs one, for lack of disk space on this node: the follower stays behind until there is room to write the state out for it", "error", err, "data-dir", g.dir)
	}
}

// logSealed says, once a minute, that the raft log could not start its
// next segment file and takes no entry until there is room for one:
// raft-wal keeps failing every append after such a rotation ("segment is
// sealed"), whatever space comes back, until it is opened again, which
// the next append does once the disk has room (guardedLogStore.cureSealed).
// appendFloor keeps the disk from getting there through this node's own
// writes; another process can still fill it.
func (g *diskGuard) logSealed() {
	if g.sealedLog.Allow(diskRemind) {
		g.log.Error("the raft log could not make its next segment file (the disk filled; see the raft log's rotate error): "+
			"this node takes no raft entries until the disk has room for one more segment (needs-bytes, with the storage-full threshold), and then reopens the log by itself. Free space on the disk: nothing acknowledged is lost",
			"data-dir", g.dir, "free-bytes", g.free.Load(), "needs-bytes", segmentSize+g.fullBelow)
	}
}

// openDiskGuard reads the free space of cfg.DataDir before the stores open.
// When the disk is nearly full it removes the ballast so they can; when
// even that leaves less than the floor it refuses to start rather than hang
// in Pebble's open with the HTTP port bound and silent.
func openDiskGuard(cfg Config) (*diskGuard, error) {
	g := &diskGuard{
		dir:         cfg.DataDir,
		ballast:     filepath.Join(cfg.DataDir, BallastFile),
		minFree:     cfg.MinFreeDisk,
		fullBelow:   appendFloor(cfg.MinFreeDisk),
		ballastSize: int64(cfg.MinFreeDisk / 4),
		floor:       cfg.MinFreeDisk / 8,
		log:         cfg.Logger,
	}
	if cfg.Registry != nil {
		cfg.Registry.MustRegister(
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{
				Name: "idem_disk_free_bytes", Help: "Bytes free on the filesystem of the data dir (as df shows available), read every second.",
			}, func() float64 { return float64(g.free.Load()) }),
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{
				Name: "idem_storage_full_below_bytes", Help: "Free bytes under which the node is full (idem_storage_full): --min-free-disk, or 96 MiB if that is more; 0 when --min-free-disk is 0 (nothing stops writes).",
			}, func() float64 { return float64(g.fullBelow) }),
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{
				Name: "idem_storage_full", Help: "1 while free space is below --min-free-disk (never less than 96 MiB, room for the raft log's next segment) and the leader refuses writes with 507 storage_full.",
			}, func() float64 {
				if g.full.Load() {
					return 1
				}
				return 0
			}))
	}
	if err := g.read(); err != nil {
		return nil, err
	}
	if g.minFree == 0 {
		// The guard off, Pebble's writes wait for offFloor (engineFS):
		// under it, a restart hung in Pebble's open, its HTTP port not
		// yet bound, with a line saying that applied data could still be
		// read.
		if g.free.Load() < offFloor {
			g.mu.Lock()
			g.releaseLocked("so the node can start") // a ballast left from before
			g.mu.Unlock()
			if err := g.read(); err != nil {
				return nil, err
			}
			if free := g.free.Load(); free < offFloor {
				return nil, fmt.Errorf("raftfsm: the disk holding %s has %d bytes free, less than the %d bytes the node's store needs to open (--min-free-disk is 0: its writes would wait for that much, and the node would not serve meanwhile); nothing was changed: free some space on that disk and start the node again",
					g.dir, free, uint64(offFloor))
			}
		}
		return g, nil
	}
	if _, total, err := engine.DiskSize(g.dir); err == nil {
		// Writes stop under fullBelow, which holds the raft log's next
		// segment; with the current one and the ballast, a smaller disk
		// is storage-full for good, whatever is freed on it.
		if need := segmentSize + g.fullBelow + uint64(g.ballastSize); total < need {
			g.tooSmall = need
			g.log.Warn("the data dir's disk is too small for this node to take writes: they stop while free space is under "+sizeText(g.fullBelow)+
				" (--min-free-disk, never less than room for the raft log's next segment), and the log's current segment and the ballast take "+
				sizeText(segmentSize+uint64(g.ballastSize))+" more; give the data dir a disk larger than "+sizeText(need)+" and its records (docs/DISK.md)",
				"data-dir", g.dir, "disk-bytes", total, "min-free-disk", g.minFree)
		}
	}
	// Nothing else is changed before the stores are open: until then
	// another process may hold this data dir.
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.free.Load() < g.floor {
		g.releaseLocked("so the node can start")
		if err := g.read(); err != nil {
			return nil, err
		}
		if free := g.free.Load(); free < g.floor {
			return nil, fmt.Errorf("raftfsm: the disk holding %s has %d bytes free, less than the %d bytes (an eighth of --min-free-disk, %d) the node needs to open its stores safely, and no ballast is left to remove; nothing was changed: free some space on that disk and start the node again",
				g.dir, free, g.floor, g.minFree)
		}
	}
	g.settleStateLocked()
	return g, nil
}

// appendFloor is the free space under which writes stop (the storage-full
// state) for --min-free-disk minFree: minFree, but never less than a raft
// log segment and some slack. raft-wal preallocates its next segment whole
// when the current one fills; if the disk has no room for it, that log
// takes no entry again until the node restarts (every append then fails
// with "segment is sealed": a walk with --min-free-disk 32MiB left a node
// out of the cluster with 449 MB free). The slack, half a segment, is what
// the raft log and Pebble may write between two reads of the free space (a
// second) before the segment they fill is rotated. 0 leaves the guard off.
func appendFloor(minFree uint64) uint64 {
	if minFree == 0 {
		return 0
	}
	return max(minFree, segmentRoom())
}

// segmentRoom is a raft log segment and half of one, the least free space
// writes stop under (96 MiB by default).
func segmentRoom() uint64 { return segmentSize + segmentSize/2 }

// read refreshes the cached free space.
func (g *diskGuard) read() error {
	free, err := engine.DiskFree(g.dir)
	if err != nil {
		return fmt.Errorf("raftfsm: %w", err)
	}
	g.free.Store(free)
	g.readAt.Store(mono.Now())
	return nil
}

// readUnlessRoomy reads the free space again, unless the last read is
// recent and far above need (roomyFor, roomyMargin); on error free keeps
// the last value read.
func (g *diskGuard) readUnlessRoomy(need uint64) {
	if mono.Since(g.readAt.Load()) < roomyFor && g.free.Load() >= need+roomyMargin {
		return
	}
	g.read()
}

// refresh reads the free space and acts on it: release or re-create the
// ballast, refuse or accept writes again, logging each change once.
func (g *diskGuard) refresh() {
	if err := g.read(); err != nil {
		g.log.Warn("cannot read free disk space", "data-dir", g.dir, "error", err)
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.minFree == 0 {
		if !g.cleared {
			// The guard is off: a ballast left from an earlier run goes.
			g.cleared = true
			if size, _ := engine.BallastSize(g.ballast); size > 0 && engine.RemoveBallast(g.ballast) == nil {
				g.log.Info("removed the ballast: --min-free-disk is 0", "path", g.ballast)
			}
		}
		return
	}
	if g.free.Load() < g.floor {
		if g.releaseLocked("to keep room for expiry and Pebble's flushes") {
			g.read()
		}
	}
	g.settleLocked()
}

// settleLocked sets the storage-full state from the cached free space and
// re-creates the ballast when there is room for it above the minimum.
func (g *diskGuard) settleLocked() {
	full, free := g.settleStateLocked(), g.free.Load()
	size, err := engine.BallastSize(g.ballast)
	if err != nil || full || size == g.ballastSize {
		return
	}
	if size != 0 {
		// --min-free-disk changed: make one of the new size.
		if err := engine.RemoveBallast(g.ballast); err != nil {
			g.log.Warn("ballast of the wrong size cannot be removed", "path", g.ballast, "error", err)
			return
		}
		g.read()
		free = g.free.Load()
	}
	if free < g.fullBelow+uint64(g.ballastSize) {
		return
	}
	if err := engine.CreateBallast(g.ballast, g.ballastSize); err != nil {
		g.log.Warn("no ballast: it could not be created", "path", g.ballast, "error", err)
		return
	}
	g.log.Info("ballast in place: it is removed to make room if the disk fills", "path", g.ballast, "bytes", g.ballastSize)
	g.read()
}

// settleStateLocked sets the storage-full state from the cached free
// space, logging a change once and a lasting shortage once a minute.
//
// The line of a one-node store speaks of no leader nor follower: it said
// "while this node leads" and that "a follower's writes go to the leader",
// to an operator with one node. Until the node has its raft configuration
// (Open reads the disk first), the line waits for the next settle.
func (g *diskGuard) settleStateLocked() bool {
	free := g.free.Load()
	full := free < g.fullBelow
	sole := g.soleVoter.Load()
	switch was := g.full.Swap(full); {
	case full && (!was || g.lowUnsaid):
		if sole == nil {
			g.lowUnsaid = true
			break
		}
		g.lowUnsaid = false
		msg := "disk space low: while this node leads, writes are refused with 507 storage_full until space is freed; as a follower it takes no client writes from the leader meanwhile (it falls behind, and the leader refuses writes while fewer than a quorum of voters have room); reads still work"
		if (*sole)() {
			msg = "disk space low: writes are refused with 507 storage_full until space is freed; reads still work"
		}
		if g.tooSmall != 0 {
			msg = strings.Replace(msg, "until space is freed", "for good: the data dir's disk is too small, and freeing space on it cannot help; give it a disk larger than "+sizeText(g.tooSmall)+" and its records", 1)
		}
		g.log.Error(msg, "free-bytes", free, "min-free-disk", g.minFree, "full-below", g.fullBelow, "data-dir", g.dir)
		g.lastRemind = time.Now()
	case full && !g.lowUnsaid && time.Since(g.lastRemind) >= diskRemind:
		msg := "disk space still low: while this node leads, writes are refused with 507 storage_full"
		if sole != nil && (*sole)() {
			msg = "disk space still low: writes are refused with 507 storage_full"
		}
		g.log.Error(msg, "free-bytes", free, "min-free-disk", g.minFree, "full-below", g.fullBelow, "data-dir", g.dir)
		g.lastRemind = time.Now()
	case !full && was:
		if g.lowUnsaid { // never said low
			g.lowUnsaid = false
			break
		}
		g.log.Info("disk space recovered: writes are accepted again", "free-bytes", free, "min-free-disk", g.minFree)
	}
	return full
}

// releaseLocked removes the ballast if there is one and reports whether it
// did.
func (g *diskGuard) releaseLocked(why string) bool {
	size, err := engine.BallastSize(g.ballast)
	if err != nil || size == 0 {
		return false
	}
	// Read here, before the removal: proposals, appends and waits read the
	// free space again without g.mu, and the cached value, read after the
	// removal, could be what it gave back (and, after a Pebble write that
	// failed, be a second old).
	before, err := engine.DiskFree(g.dir)
	if err != nil {
		before = g.free.Load()
	}
	if err := engine.RemoveBallast(g.ballast); err != nil {
		g.log.Error("disk nearly full and the ballast cannot be removed", "path", g.ballast, "error", err)
		return false
	}
	g.log.Warn("disk nearly full: removed the ballast "+why, "ballast-bytes", size, "free-bytes-before", before, "data-dir", g.dir)
	return true
}

// admit refuses the client writes while the disk is below the minimum.
func (g *diskGuard) admit(op Op) error {
	if !g.full.Load() {
		return nil
	}
	if clientWrite(op) {
		if g.tooSmall != 0 {
			return fmt.Errorf("%w: %d bytes free on the leader's disk, under the %d writes need, and the disk is smaller than the %d a node needs", ErrDiskTooSmall, g.free.Load(), g.fullBelow, g.tooSmall)
		}
		return fmt.Errorf("%w: %d bytes free on the leader's disk, under the %d writes need (--min-free-disk, and room for the raft log's next segment)", ErrStorageFull, g.free.Load(), g.fullBelow)
	}
	return nil
}

// clientWrite reports whether op is a client's write, which a leader
// refuses for lack of disk space (admit, reserve); the others are small or
// free space.
func clientWrite(op Op) bool {
	switch op {
	case OpClaim, OpComplete, OpRelease, OpExtend, OpDelete:
		return true
	}
	return false
}

// waitForSpace holds an apply while the disk is under the floor with no
// ballast left. It delays the state, never changes it, so every replica
// still applies the same entries to the same result. It waits through a
// shutdown too: returning without applying would tell raft the entries
// were applied, and a snapshot could then drop them from the raft log.
// Node.CloseBounded gives up on it instead, and the process exits as kill
// -9 would, which loses nothing (the entries stay in the raft log).
func (g *diskGuard) waitForSpace(what string, stop <-chan struct{}) {
	if g.minFree == 0 {
		return
	}
	g.waitForFloor(what, stop, g.floor)
}

// offFloor is the free space a Pebble write that met ENOSPC waits for
// with the guard off (--min-free-disk 0): room for the write retried and
// a memtable's flush.
const offFloor = 16 << 20

// waitForFloor holds the caller until the disk has floor bytes free
// (waitForSpace).
func (g *diskGuard) waitForFloor(what string, stop <-chan struct{}, floor uint64) {
	if g.free.Load() >= floor {
		return
	}
	stopping := false
	for {
		g.refresh()
		free := g.free.Load()
		if free >= floor {
			g.mu.Lock()
			if g.waiting {
				g.waiting = false
				g.log.Info("disk space is back: "+what+" go on", "free-bytes", free)
			}
			g.mu.Unlock()
			return
		}
		g.mu.Lock()
		if !g.waiting || time.Since(g.lastWaitLog) >= diskRemind {
			g.log.Error("disk full: "+what+" wait for free space; applied data can still be read and nothing is lost",
				"free-bytes", free, "needed-bytes", floor, "data-dir", g.dir)
			g.waiting, g.lastWaitLog = true, time.Now()
		}
		g.mu.Unlock()
		select {
		case <-stop:
			if !stopping {
				stopping = true
				g.log.Error("stopping waits for free disk space: committed raft entries are applied first. If no space comes, the node stops without them after a grace period; that loses nothing: they are in the raft log and are applied at the next start",
					"data-dir", g.dir)
			}
			time.Sleep(diskRefresh)
		case <-time.After(diskRefresh):
		}
	}
}

// engineOptions gives the engine a filesystem on which a write that meets
// ENOSPC first removes the ballast, or else waits for space, and is then
// retried.
func (g *diskGuard) engineOptions(o engine.Options, stop <-chan struct{}) engine.Options {
	o = g.engineFS(o, stop)
	if pebbleFS != nil {
		o.FS = pebbleFS(o.FS)
	}
	return o
}

// pebbleFS, set only by tests, wraps the store's filesystem (a disk that
// fails a write or an fsync).
var pebbleFS func(vfs.FS) vfs.FS

func (g *diskGuard) engineFS(o engine.Options, stop <-chan struct{}) engine.Options {
	if g.minFree == 0 {
		// The guard is off, not the store's safety: Pebble panicked on
		// the write, and a node restarted on the full disk panicked again.
		o.TableFS = vfs.Default
		o.FS = engine.DiskFullFS(func() {
			time.Sleep(diskRefresh) // a write that keeps failing cannot spin
			g.read()                // waitForFloor starts from the cached value
			g.waitForFloor("Pebble writes (--min-free-disk is 0)", stop, offFloor)
		})
		return o
	}
	o.TableFS = vfs.Default // a restore's tables: fail on ENOSPC (engine.Options.TableFS)
	o.FS = engine.DiskFullFS(func() {
		g.mu.Lock()
		released := g.releaseLocked("after a write failed for lack of space")
		g.mu.Unlock()
		if released {
			g.read()
			return
		}
		// The retry happens once: wait at least a moment, so a flush
		// that keeps failing cannot spin.
		time.Sleep(diskRefresh)
		g.waitForSpace("Pebble writes", stop)
	})
	return o
}

// mapApplyError is mapRaftError for a proposal, which may also fail
// because the leader could not write it to its own raft log for lack of
// space: bolt stores a batch in one transaction and raft sends followers
// only what the leader stored, so the command was certainly not applied.
func mapApplyError(err error) error {
	if errors.Is(err, syscall.ENOSPC) {
		return fmt.Errorf("%w: the leader could not write its raft log: %w", ErrStorageFull, err)
	}
	return mapRaftError(err)
}

// gatedFSM is the FSM as raft sees it: each batch waits for disk space
// before it starts.
type gatedFSM struct {
	*FSM
	g    *diskGuard
	stop <-chan struct{}
}

func (f gatedFSM) Apply(l *raft.Log) any {
	f.hold(l.Index, l.Index)
	r := f.FSM.Apply(l)
	f.g.applied.Store(l.Index)
	return r
}

func (f gatedFSM) ApplyBatch(logs []*raft.Log) []any {
	if len(logs) == 0 {
		return f.FSM.ApplyBatch(logs)
	}
	f.hold(logs[0].Index, logs[len(logs)-1].Index)
	r := f.FSM.ApplyBatch(logs)
	f.g.applied.Store(logs[len(logs)-1].Index)
	return r
}

// Restore is the FSM's: an installed snapshot replaces what the raft log
// held, so nothing stored before it is left to apply.
func (f gatedFSM) Restore(rc io.ReadCloser) error {
	err := f.FSM.Restore(rc)
	if err == nil {
		f.g.clearBacklog()
	}
	return err
}

// hold waits for space before a batch starts, saying which one waits
// (CloseBounded reports it).
func (f gatedFSM) hold(first, last uint64) {
	if f.g.free.Load() >= f.g.floor {
		return
	}
	f.g.heldFirst.Store(first)
	f.g.heldLast.Store(last)
	f.g.waitForSpace("raft log applies", f.stop)
	f.g.heldFirst.Store(0)
	f.g.heldLast.Store(0)
}

// gate wraps the FSM for raft.
func (g *diskGuard) gate(f *FSM, stop <-chan struct{}) raft.FSM {
	if g.minFree == 0 {
		return f
	}
	return gatedFSM{FSM: f, g: g, stop: stop}
}

// short reports whether the disk is under the minimum free space, or an
// apply or a Pebble write waits for space, with the free space read again
// (the watcher stops with the node). With the guard off, only a Pebble
// write held for space (engineOptions) is short.
func (g *diskGuard) short() (bool, uint64) {
	g.read() // on error, the last value read
	g.mu.Lock()
	waiting := g.waiting
	g.mu.Unlock()
	free := g.free.Load()
	if g.minFree == 0 {
		return waiting, free // only a Pebble write held for space
	}
	// The minimum itself, not fullBelow: the raft log's next segment has
	// no bearing on whether a close is stuck waiting for space.
	return waiting || free < g.minFree, free
}

// applyCost is what applying a raft entry writes, in bytes of the entry:
// Pebble's WAL and then the table its memtable is flushed to, each about
// the entry's size (a response body of random bytes does not compress),
// before compactions rewrite it.
const applyCost = 2

// errLogNoRoomToApply refuses a follower's append while applying it, with
// the entries it stored and has not applied yet, would take its disk under
// the storage-full threshold.
var errLogNoRoomToApply = errors.New("raftfsm: disk nearly full: this follower takes no more raft entries until it has applied those it holds, or space is freed: applying them writes about twice their bytes")

// admitAppend decides a follower's append (guardedLogStore.StoreLogs).
// Under the storage-full threshold it takes only what takenWhileFull
// allows. Above it, it also refuses an append that applying would take
// under the threshold, counting the entries stored and not yet applied:
// the entries cost little in the raft log's preallocated segment, but
// about twice again once applied (applyCost). A follower catching up
// used to take appends while its disk was above the threshold, at
// whatever rate the leader sent them (the free space is read once a
// second), and applying them then ran its disk to 0 bytes free (a
// disk-full walk on real processes). The free space is read again here
// (readUnlessRoomy): a second of catch-up is hundreds of megabytes. Raft's own entries and
// the small commands a full leader proposes are never refused here:
// elections, heartbeats and expiry go on.
func (g *diskGuard) admitAppend(logs []*raft.Log) error {
	taken := takenWhileFull(logs)
	if taken {
		return nil
	}
	if g.full.Load() {
		// Read again: a refusal's answer goes back as soon as the disk
		// has room (holdRefusal, appendpace.go), and the leader's next
		// try is taken then, not at the watcher's next read, up to a
		// second later.
		if g.read(); g.free.Load() < g.fullBelow {
			g.refusals.Add(1)
			return errLogDiskFull
		}
	}
	size := entryBytes(logs)
	backlog := g.unapplied()
	need := g.fullBelow + applyCost*(backlog+size)
	g.readUnlessRoomy(need)
	if free := g.free.Load(); free < need {
		g.appendRefusedNeed.Store(need)
		g.appendRefusedBacklog.Store(backlog)
		g.appendRefusedAt.Store(mono.Now())
		if g.appendLog.Allow(diskRemind) {
			msg := "disk nearly full: this follower takes no more raft entries from the leader until it has applied those it holds (applying an entry writes about twice its bytes) or space is freed, so that its disk stays above the storage-full threshold; it goes on by itself"
			if backlog == 0 {
				// The leader sends the same entries again: only freed
				// space ends it (it counts as full, quorumroom.go).
				msg = "disk nearly full: this follower takes no more raft entries from the leader until space is freed: it has applied all it holds, and applying the entries it is sent (about twice their bytes) would take its disk under the storage-full threshold"
			}
			g.log.Warn(msg, "free-bytes", free, "needs-bytes", need, "unapplied-bytes", backlog, "batch-bytes", size, "full-below", g.fullBelow, "data-dir", g.dir)
		}
		g.refusals.Add(1)
		return errLogNoRoomToApply
	}
	g.appendRefusedAt.Store(0)
	return nil
}

// reserve admits a leader's proposal of client writes, size bytes of
// entry, once admit has let them through: the free space is read again
// (readUnlessRoomy) and the proposal goes on only while the disk stays at
// least the storage-full threshold plus twice the bytes of it and of the
// proposals admitted before it that have not returned (applyCost). The caller calls
// the release it returns once its proposal has returned. A leader used to
// be held only by admit, on the free space read once a second: 32 clients
// completing 2 MiB responses in batches took a leader's disk from 264 MB
// to 76 MB free within a second (its threshold 96 MiB) and then to 0, its
// applies waiting for space with every read answered 503, until its disk
// grew (a disk-full walk on real processes). Only client writes are
// reserved: ticks, bucket drops and membership are small or free space.
func (g *diskGuard) reserve(size int) (release func(), err error) {
	if g.minFree == 0 {
		return func() {}, nil
	}
	n := uint64(size)
	proposing := g.proposing.Add(n)
	release = func() { g.proposing.Add(-n) }
	need := g.fullBelow + applyCost*proposing
	g.readUnlessRoomy(need)
	if free := g.free.Load(); free < need {
		release()
		if g.proposalLog.Allow(diskRemind) {
			g.log.Warn("disk nearly full: this leader refuses client writes with 507 storage_full that applying, with the writes it is applying, would take its disk under the storage-full threshold (applying an entry writes about twice its bytes); it takes them again as its applies finish",
				"free-bytes", free, "needs-bytes", need, "proposing-bytes", proposing-n, "entry-bytes", n, "full-below", g.fullBelow, "data-dir", g.dir)
		}
		return nil, fmt.Errorf("%w: %d bytes free on the leader's disk, under the %d applying this write and those in flight needs (twice their bytes above --min-free-disk, and room for the raft log's next segment)", ErrStorageNearlyFull, free, need)
	}
	return release, nil
}

// stored records a batch the raft log stored, until it is applied. Its
// last index is that of its last command or configuration, the last entry
// raft hands the FSM (gatedFSM sets applied): a no-op or a barrier is
// applied without it, and a batch ending in one was counted until a later
// command was applied, which a follower refusing appends never got.
func (g *diskGuard) stored(logs []*raft.Log) {
	var last uint64
	for _, l := range logs {
		if l.Type == raft.LogCommand || l.Type == raft.LogConfiguration {
			last = l.Index
		}
	}
	if last == 0 {
		return // nothing the FSM applies
	}
	size := entryBytes(logs)
	g.backlogMu.Lock()
	defer g.backlogMu.Unlock()
	g.pruneLocked()
	g.backlog = append(g.backlog, storedBatch{last, size})
	g.backlogBytes += size
}

// entryBytes is the bytes of the entries' data and extensions.
func entryBytes(logs []*raft.Log) uint64 {
	var n uint64
	for _, l := range logs {
		n += uint64(len(l.Data) + len(l.Extensions))
	}
	return n
}

// unapplied is the bytes of the stored batches not applied yet that this
// node knows are committed. A batch is counted until its last entry is
// applied, or until raft deletes it as a conflicting tail (forgetFrom). A
// batch past the commit index is not counted: a follower
// learns that index only from an append the leader sends after it, and
// raft drops it when that append's StoreLogs fails, so counting them
// refused the very append that let it apply them, and it stayed behind
// while every append brought new entries.
func (g *diskGuard) unapplied() uint64 {
	commit := uint64(math.MaxUint64)
	if g.commitIndex != nil {
		commit = g.commitIndex()
	}
	g.backlogMu.Lock()
	defer g.backlogMu.Unlock()
	g.pruneLocked()
	if commit == math.MaxUint64 {
		return g.backlogBytes
	}
	var n uint64
	for _, b := range g.backlog {
		if b.last <= commit {
			n += b.bytes
		}
	}
	return n
}

// pruneLocked forgets every batch applied, not only those before the
// first that is not: a tail replaced after a conflict has a higher last
// index than the batches stored after it, and kept them counted once
// applied.
func (g *diskGuard) pruneLocked() {
	applied := g.applied.Load()
	g.dropLocked(func(b storedBatch) bool { return b.last <= applied })
}

// dropLocked forgets the stored batches gone says are, and their bytes.
func (g *diskGuard) dropLocked(gone func(storedBatch) bool) {
	kept := g.backlog[:0]
	for _, b := range g.backlog {
		if gone(b) {
			g.backlogBytes -= b.bytes
		} else {
			kept = append(kept, b)
		}
	}
	clear(g.backlog[len(kept):])
	g.backlog = kept
}

// forgetFrom forgets the stored batches that end at index from or past
// it: raft deleted the log's tail from there (a new leader's entries
// conflict with it), and they will never be applied. They were counted
// until the FSM applied an entry at or past their last index, and when
// the new leader's entries at those indexes were its no-op and barrier,
// which raft never hands the FSM, a nearly full follower counted them as
// committed and unapplied for good and refused every client write after
// them, the only entries that could move its applied index past them. A
// batch that began before from is forgotten whole: its entries kept are
// no longer counted, at most one append's, which is less room kept, never
// a follower held back for good.
func (g *diskGuard) forgetFrom(from uint64) {
	g.backlogMu.Lock()
	defer g.backlogMu.Unlock()
	g.dropLocked(func(b storedBatch) bool { return b.last >= from })
}

// seedBacklog counts the entries the raft log holds past applied, the
// store's applied index at start: a follower stopped while it caught up
// holds them, and its applies write them again (admitAppend).
func (g *diskGuard) seedBacklog(log raft.LogStore, applied uint64) {
	if g.minFree == 0 {
		return
	}
	last, err := log.LastIndex()
	if err != nil || last <= applied {
		return
	}
	first, err := log.FirstIndex()
	if err != nil {
		return
	}
	g.applied.Store(applied)
	var batch []*raft.Log
	for i := max(first, applied+1); i <= last; i++ {
		var l raft.Log
		if log.GetLog(i, &l) != nil {
			continue
		}
		if batch = append(batch, &l); len(batch) == 512 {
			g.stored(batch)
			batch = batch[:0]
		}
	}
	if len(batch) > 0 {
		g.stored(batch)
	}
}

// clearBacklog forgets the stored batches: a snapshot replaced them.
func (g *diskGuard) clearBacklog() {
	g.backlogMu.Lock()
	defer g.backlogMu.Unlock()
	g.backlog, g.backlogBytes = nil, 0
}

// snapRefusedFor is how long a refused snapshot from the leader is named
// in the node's status: raft sends it again every few seconds while the
// follower stays behind, and an install that went through clears it.
const snapRefusedFor = time.Minute

// expandRefused is why a follower falls behind while this leader sends it
// no snapshot for lack of room on its own disk (logExpandRefused, within
// snapRefusedFor), "" otherwise. Only the leader's log said so: its
// status named the follower as "falling behind: had applied 0" and the
// follower's /readyz as not having applied the commit index, while its
// own disk had room.
func (g *diskGuard) expandRefused() string {
	if g == nil {
		return ""
	}
	at := g.expandRefusedAt.Load()
	if at == 0 || mono.Since(at) >= snapRefusedFor {
		return ""
	}
	return fmt.Sprintf("the leader sends it no snapshot, for lack of disk space on the leader: writing its state out for a follower would take the leader's data dir %s "+
		"(%d bytes free) under %d plus a margin (docs/DISK.md); free space on the leader's disk and it sends the snapshot by itself", g.dir, g.free.Load(), g.fullBelow)
}

// expandSent forgets a refused expansion: one went through.
func (g *diskGuard) expandSent() {
	if g != nil {
		g.expandRefusedAt.Store(0)
	}
}

// snapshotInstalled forgets a refused snapshot: one went through.
func (g *diskGuard) snapshotInstalled() { g.snapRefusedAt.Store(0) }

// fullStatus is Status.DiskFull: nil while the disk is above the
// storage-full threshold, nothing waits for space and no snapshot from
// the leader was refused for lack of room within snapRefusedFor.
func (g *diskGuard) fullStatus() *DiskFull {
	g.mu.Lock()
	waiting := g.waiting
	g.mu.Unlock()
	var refused uint64
	if at := g.snapRefusedAt.Load(); at != 0 && mono.Since(at) < snapRefusedFor {
		refused = uint64(max(g.snapRefusedBytes.Load(), 1))
	}
	var appendNeed, appendBacklog uint64
	if at := g.appendRefusedAt.Load(); at != 0 && mono.Since(at) < snapRefusedFor {
		appendNeed, appendBacklog = g.appendRefusedNeed.Load(), g.appendRefusedBacklog.Load()
	}
	if !g.full.Load() && !waiting && refused == 0 && appendNeed == 0 {
		return nil
	}
	return &DiskFull{DataDir: g.dir, FreeBytes: g.free.Load(), FullBelowBytes: g.fullBelow, ApplyWaits: waiting, SnapshotRefusedAfterBytes: refused,
		AppendsRefusedNeedBytes: appendNeed, UnappliedBytes: appendBacklog}
}

// DiskFull is Status.DiskFull of this node, nil while its disk has room.
func (n *Node) DiskFull() *DiskFull { return n.disk.fullStatus() }

// ErrCloseAbandoned is returned by CloseBounded when it stopped waiting for
// a close held up by a full disk. The process must exit then.
var ErrCloseAbandoned = errors.New("raftfsm: close abandoned")

// CloseBounded is Close, except on a disk short of space: if the close has
// not finished after grace and the disk is under Config.MinFreeDisk (or an
// apply waits for space), it logs at WARN what it leaves and why that is
// safe, and returns an error wrapping ErrCloseAbandoned, with the close
// still running. An apply held back for space, or a Pebble commit stalled
// behind a flush that cannot write, holds raft's Shutdown, and so Close,
// until space returns.
//
// The caller must then end the process, which releases the stores' locks;
// the data dir is left as kill -9 leaves it, and nothing acknowledged is
// lost: an apply commits its Pebble batch whole, with the applied index in
// it, so what is not in Pebble is above the stored applied index and is
// applied from the raft log at the next start. The raft log keeps those
// entries, as no snapshot can be taken past an apply that never returned.
//
// On a disk with room, or with the guard off, it waits for Close however
// long it takes, as Close does.
func (n *Node) CloseBounded(grace time.Duration) error {
	start := time.Now()
	done := make(chan error, 1)
	go func() { done <- n.Close() }()
	timer := time.NewTimer(grace)
	defer timer.Stop()
	select {
	case err := <-done:
		return err
	case <-timer.C:
	}
	tick := time.NewTicker(diskRefresh)
	defer tick.Stop()
	for {
		select {
		case err := <-done:
			return err
		default:
		}
		if short, free := n.disk.short(); short {
			return n.abandonClose(time.Since(start), free)
		}
		select {
		case err := <-done:
			return err
		case <-tick.C:
		}
	}
}

// abandonClose says what a close given up on leaves, and why nothing is
// lost.
func (n *Node) abandonClose(waited time.Duration, free uint64) error {
	attrs := []any{"waited", waited.Round(time.Second).String(), "free-bytes", free, "min-free-disk", n.disk.minFree, "data-dir", n.cfg.DataDir}
	if n.raft != nil {
		attrs = append(attrs, "raft-commit-index", n.raft.CommitIndex(), "raft-last-log-index", n.raft.LastIndex())
	}
	if first := n.disk.heldFirst.Load(); first != 0 {
		attrs = append(attrs, "held-first-index", first, "held-last-index", n.disk.heldLast.Load())
	} else if b := &n.fsm.busy; b.since.Load() != 0 {
		attrs = append(attrs, "fsm-call", *b.what.Load(), "fsm-first-index", b.first.Load(), "fsm-last-index", b.last.Load())
	}
	n.log.Warn("stopping without waiting longer for disk space: committed raft entries the store has not applied are left unapplied, and the store is not closed. "+
		"Nothing acknowledged is lost: those entries are in the raft log and are applied at the next start, as after kill -9, and an apply commits to the store whole or not at all. "+
		"Free some space on the data dir's disk before starting the node again", attrs...)
	under := fmt.Sprintf("under the minimum %d", n.disk.minFree)
	if n.disk.minFree == 0 {
		under = fmt.Sprintf("a Pebble write waits for %d, --min-free-disk being 0", offFloor)
	}
	return fmt.Errorf("%w: the disk holding %s has %d bytes free (%s) and closing the node still waited after %s; "+
		"the entries not applied are in the raft log and are applied at the next start",
		ErrCloseAbandoned, n.cfg.DataDir, free, under, waited.Round(time.Second))
}

// watchDisk keeps the free space current while the node runs, and hands
// the leadership on from a leader whose disk is full (fullHandOff).
func (n *Node) watchDisk() {
	defer n.wg.Done()
	sole := func() bool {
		f := n.raft.GetConfiguration()
		if f.Error() != nil {
			return false
		}
		vs := voters(f.Configuration(), "")
		return len(vs) == 1 && string(vs[0].ID) == n.self.ID
	}
	n.disk.soleVoter.Store(&sole)
	n.disk.refresh() // the stores are open: the ballast is this node's to make
	var h fullHandOff
	var sh supersededHandOff
	t := time.NewTicker(diskRefresh)
	defer t.Stop()
	for {
		select {
		case <-n.stop:
			return
		case now := <-t.C:
			n.disk.refresh()
			h.step(n, now)
			sh.step(n, now)
		}
	}
}

// How long a leader's disk stays full before it hands the leadership on
// (a moment's dip, a file written and removed, moves nothing), and how
// long it waits between two tries.
var (
	fullHandOffAfter = 3 * time.Second
	fullHandOffEvery = 30 * time.Second
	// fullHandOffWait bounds one try: raft's own transfer times out
	// within an election timeout.
	fullHandOffWait = 10 * time.Second
)

// fullHandOff is a full leader's hand-off to a voter whose disk has room.
// Only the leader's disk decides 507, and a leader whose applies wait for
// space cannot serve a linearizable read: a full leader kept the whole
// cluster refusing writes and reads (503 "no leader is available") while
// both followers had room, until an operator ran idem cluster
// transfer-leadership (a disk-full walk). A voter the leader judges
// healthy and caught up, whose own status does not say its disk is full,
// takes over; with none, the leader stays and says so once a minute.
type fullHandOff struct {
	since, tried time.Time
	noneLog      mono.Spacer
}

func (h *fullHandOff) step(n *Node, now time.Time) {
	if !n.disk.full.Load() || n.raft.State() != raft.Leader {
		h.since = time.Time{}
		return
	}
	if h.since.IsZero() {
		h.since = now
	}
	if now.Sub(h.since) < fullHandOffAfter || now.Sub(h.tried) < fullHandOffEvery {
		return
	}
	h.tried = now
	if !n.hasOtherVoter() {
		// A one-node store: no voter to hand it to, and nothing to say
		// of one ("disk space low" says what to do).
		return
	}
	// Bounded: this loop also keeps the free space current, and Close
	// waits for it.
	ctx, cancel := context.WithTimeout(context.Background(), fullHandOffWait)
	defer cancel()
	id := n.roomyVoter(ctx, now)
	if id == "" {
		if h.noneLog.Allow(diskRemind) {
			n.log.Warn("this leader's disk is full and no other voter is healthy, caught up and with room on its disk: it keeps the leadership, and writes are refused 507 storage_full until space is freed", "data-dir", n.disk.dir, "free-bytes", n.disk.free.Load())
		}
		return
	}
	if err := n.transferLeadership(ctx, id, transferAsked); err != nil {
		n.log.Warn("this leader's disk is full and handing the leadership to a voter with room failed; it tries again", "to", id, "error", err, "data-dir", n.disk.dir)
		return
	}
	n.log.Warn("this leader's disk is full: handed the leadership to a voter with room on its disk, so the cluster takes writes and linearizable reads again; this node falls behind until space is freed on its disk", "to", id, "data-dir", n.disk.dir, "free-bytes", n.disk.free.Load())
}

// supersededHandOff hands the leadership on from a leader whose state
// diverged (Node.tailCut). Such a node is still a voter of the live
// cluster, its log the cluster's: elected (its leader stopped, or handed
// it the leadership), it answered every write 503, which every follower
// forwarded to it, so the whole cluster refused writes for good, and it
// would have sent followers that needed a snapshot its own state, which
// lacks records the cluster acknowledged. It tries raft's choice of
// voter every supersededHandOffEvery while it leads. A node left out of a
// recovery is not one: it leads the old cluster, whose other members
// would only hand it back.
type supersededHandOff struct{ tried time.Time }

const supersededHandOffEvery = 5 * time.Second

func (h *supersededHandOff) step(n *Node, now time.Time) {
	if !n.diverged.Load() || n.raft.State() != raft.Leader || now.Sub(h.tried) < supersededHandOffEvery {
		return
	}
	h.tried = now
	if !n.hasOtherVoter() {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), fullHandOffWait)
	defer cancel()
	if err := n.transferLeadership(ctx, "", transferStopping); err != nil {
		n.log.Warn("this node answers every request 503 (superseded.json) and leads: handing the leadership on failed; it tries again", "error", err)
		return
	}
	n.log.Warn("this node answers every request 503 (superseded.json) and was elected: handed the leadership on, so the cluster takes writes again")
}

// hasOtherVoter says whether the configuration holds a voter besides this
// node (true when it cannot be read: the hand-off then looks for one).
func (n *Node) hasOtherVoter() bool {
	f := n.raft.GetConfiguration()
	return f.Error() != nil || len(voters(f.Configuration(), n.self.ID)) > 0
}

// roomyVoter is a voter other than this leader that it judges healthy and
// caught up and whose status does not say its disk is full ("": none).
func (n *Node) roomyVoter(ctx context.Context, now time.Time) string {
	f := n.raft.GetConfiguration()
	if n.waitCtx(ctx, f) != nil {
		return ""
	}
	term := n.term()
	n.peers.mu.Lock()
	defer n.peers.mu.Unlock()
	if n.peers.term != term {
		return ""
	}
	best, bestLag := "", uint64(0)
	for _, s := range f.Configuration().Servers {
		if s.Suffrage != raft.Voter || string(s.ID) == n.self.ID {
			continue
		}
		h := n.peers.byID[string(s.ID)]
		if h == nil || h.diskFull != nil || !h.caughtUp {
			continue
		}
		if ok, _ := n.judge(h, s.ID, now); !ok {
			continue
		}
		if best == "" || h.lag < bestLag {
			best, bestLag = string(s.ID), h.lag
		}
	}
	return best
}

// DefaultMinFreeDisk is the default Config.MinFreeDisk: 256 MiB. Under it
// the node still needs room for what frees space or keeps it alive: one
// memtable flush (4 MiB of memtable by default, its WAL beside it), the compaction
// after a bucket drop, bolt growing its file. The ballast (64 MiB) covers a
// flush and a restart when something else fills the disk; the floor
// (32 MiB) is where applies start to wait.
const DefaultMinFreeDisk = 256 << 20
