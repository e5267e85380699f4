package raftfsm

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	wal "github.com/hashicorp/raft-wal"
	"github.com/hashicorp/raft-wal/metadb"
	"github.com/hashicorp/raft-wal/segment"
	waltypes "github.com/hashicorp/raft-wal/types"

	"github.com/idem-store/idem/engine"
	"github.com/idem-store/idem/internal/mono"
)

// The raft log lives in <data-dir>/raft-wal, in hashicorp/raft-wal (Consul's
// log store): preallocated segment files, one fsync per StoreLogs, where
// raft-boltdb paid two fdatasyncs per append (data pages, then the meta
// page). raft.db stays the stable store (term, vote). Measured against bolt
// and a log store on Pebble: docs/DESIGN.md, "Raft log store".
const (
	logStoreDir = "raft-wal"
	// logStoreTmp is where a log moved out of raft.db is built; renamed
	// to logStoreDir once whole.
	logStoreTmp = "raft-wal.tmp"
	// movedMarker, a file in logStoreDir, says the directory holds the
	// node's log. It holds the range copied from raft.db (first, last; 0
	// and 0 for none), so a later start can tell raft.db's leftovers from
	// entries written there after the move.
	movedMarker = "moved-from-raft.db"
)

// LogStore is raft's LogStore: raft-wal, and its metadata store, which
// raft-wal's Close leaves open. The log is behind a lock so that a log
// stopped by a failed segment rotation can be reopened under raft
// (reopenSealed).
type LogStore struct {
	mu   sync.RWMutex
	w    *wal.WAL
	meta *metadb.BoltMetaDB
	// broken is why the log is closed (a reopen that failed); nil while
	// it is open or after Close.
	broken error
	closed bool // by Close: never reopened
	path   string
	log    *slog.Logger

	// sealed: a rotation failed (rotateWatch) or an append found the
	// segment sealed, and neither an append nor a reopen has gone through
	// since. A reopen that failed (broken) leaves it set.
	sealed atomic.Bool
	// reopenTry spaces reopens; stuck: the last reopen did not cure the
	// log (they are then spaced by stuckRetry); stuckLog, the line that
	// says so.
	reopenTry, stuckLog mono.Spacer
	stuck               atomic.Bool
	// headCut is the last head truncation refused while sealed (min,
	// max; 0,0: none), made after the reopen: raft does not ask again for
	// the whole-log removal that follows a snapshot install.
	headMu  sync.Mutex
	headCut [2]uint64

	// damagedAdvice is what to do with a node whose log holds a damaged
	// entry (set by the node, which knows its flags); damagedLog spaces
	// the line that says so.
	damagedAdvice string
	damagedLog    mono.Spacer
	// starting: raft is reading the log as it starts, and a damaged entry
	// is refused by the start (newRaft) with its own advice, not logged.
	starting atomic.Bool

	// snapHead is the metadata of the newest snapshot in the node's
	// snapshot store, false for none (set by the node;
	// guardedLogStore.snapshotHead); nil: none known.
	snapHead func() (*raft.SnapshotMeta, bool)
	// keepFrom is the lowest index whose entries a snapshot being sent
	// needs kept (set by the node: snapshotStore.keepLogFrom); nil: none.
	keepFrom func() (uint64, bool)
	// sentHead is the metadata of a snapshot at an index being sent (set
	// by the node: snapshotStore.sentMeta); nil: none.
	sentHead func(index uint64) (*raft.SnapshotMeta, bool)
	// tailCut is told of a conflicting tail raft deletes, from min to the
	// log's end (set by the node: Node.tailCut); nil: nobody.
	tailCut func(min, max uint64)
	// installed: the FSM has just taken a leader's snapshot, and raft
	// drops the whole log next (removeOldLogs), until the next StoreLogs.
	installed atomic.Bool
	// appliedBound is the state's applied index A and a term T no entry
	// it applied up to A was written in a later one: the node's raft term
	// when it opened, or when it installed a leader's snapshot (set by
	// the node). An entry stored at or below A, of a term past T, is not
	// the one the state applied: the leader holds another history
	// (unverified tells the node). nil: not known.
	appliedBound atomic.Pointer[[2]uint64]
	unverified   func(index, term uint64)
	// wholeCut is a deletion of the whole log that was no install's
	// (guardedLogStore.DeleteRange), min and max, until the next
	// StoreLogs tells whether it was a conflict.
	wholeCut atomic.Pointer[[2]uint64]
}

// errLogSealed refuses a truncation of a log stopped by a failed segment
// rotation until it takes entries again.
var errLogSealed = errors.New("raftfsm: the raft log is stopped (its next segment file could not be made): no truncation until the disk has room and it takes entries again")

// errLogClosed is a log closed by Close.
var errLogClosed = errors.New("raftfsm: raft log closed")

// wal returns the open log, or why there is none; the caller holds mu.
func (s *LogStore) wal() (*wal.WAL, error) {
	switch {
	case s.w != nil:
		return s.w, nil
	case s.broken != nil:
		return nil, s.broken
	}
	return nil, errLogClosed
}

// Close closes the log and its metadata.
func (s *LogStore) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	if s.w == nil {
		s.broken = nil
		return nil
	}
	err := s.closeLocked()
	s.broken = nil
	if err != nil {
		return fmt.Errorf("raftfsm: close raft log: %w", err)
	}
	return nil
}

func (s *LogStore) closeLocked() error {
	err := s.w.Close()
	if merr := s.meta.Close(); err == nil {
		err = merr
	}
	s.w, s.meta = nil, nil
	return err
}

// FirstIndex is the index of the log's first entry, 0 when empty.
func (s *LogStore) FirstIndex() (uint64, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	w, err := s.wal()
	if err != nil {
		return 0, err
	}
	return w.FirstIndex()
}

// LastIndex is the index of the log's last entry, 0 when empty.
func (s *LogStore) LastIndex() (uint64, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	w, err := s.wal()
	if err != nil {
		return 0, err
	}
	return w.LastIndex()
}

// GetLog reads the entry at index; raft.ErrLogNotFound outside the
// log's bounds. raft-wal alone still returns an entry a head truncation
// removed while its segment is the tail, which raft's contract forbids.
func (s *LogStore) GetLog(index uint64, l *raft.Log) error {
	return s.getLog(index, l, true)
}

// getLog is GetLog; loud, it logs a damaged entry at ERROR with the way
// out (a start, newRaft, refuses with it instead).
func (s *LogStore) getLog(index uint64, l *raft.Log, loud bool) error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	w, err := s.wal()
	if err != nil {
		return err
	}
	first, err := w.FirstIndex()
	if err != nil {
		return err
	}
	if index < first || first == 0 {
		return raft.ErrLogNotFound
	}
	if err := w.GetLog(index, l); err != nil {
		return err
	}
	if err := openEntry(l); err != nil {
		if loud && !s.starting.Load() && s.damagedLog.Allow(time.Minute) {
			s.log.Error(fmt.Sprintf("the raft log in %s is damaged (%v): this node neither applies nor sends that entry, and cannot go on from its log. %s",
				s.path, err, s.damagedAdvice), "index", index)
		}
		return fmt.Errorf("%w (in %s)", err, s.path)
	}
	return nil
}

// StoreLog appends one entry.
func (s *LogStore) StoreLog(l *raft.Log) error { return s.StoreLogs([]*raft.Log{l}) }

// StoreLogs appends entries, with one fsync.
func (s *LogStore) StoreLogs(logs []*raft.Log) error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	w, err := s.wal()
	if err != nil {
		return err
	}
	err = w.StoreLogs(sealEntries(logs))
	switch {
	case err == nil:
		s.sealed.Store(false)
	case errors.Is(err, waltypes.ErrSealed):
		s.sealed.Store(true)
	}
	return err
}

// DeleteRange removes a head or a tail of the log.
func (s *LogStore) DeleteRange(min, max uint64) error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	w, err := s.wal()
	if err != nil {
		return err
	}
	return w.DeleteRange(min, max)
}

// IsMonotonic tells raft the log never has gaps (raft-wal's contract): it
// removes the whole log after installing a snapshot.
func (s *LogStore) IsMonotonic() bool { return true }

// reopenSealed closes the log and opens it again from its files. raft-wal
// seals its tail segment before it creates the next one; when that
// creation fails (no space for the preallocated file) it keeps the sealed
// segment as its tail and fails every append after ("segment is sealed"),
// whatever space comes back, until it is opened again. Opening recovers
// as after a crash at that point: the metadata names the next segment,
// which is made then. The caller has checked that there is room for it.
// Nothing stored is lost: an append to a sealed segment writes nothing.
func (s *LogStore) reopenSealed() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return errLogClosed
	}
	if s.w != nil {
		if err := s.closeLocked(); err != nil {
			s.log.Warn("closing the sealed raft log before reopening it", "error", err)
		}
	}
	removeUnwrittenSegments(s.path)
	if err := s.open(); err != nil {
		s.broken = fmt.Errorf("raftfsm: the raft log was closed to reopen it after a failed segment rotation, and reopening failed (tried again at a later append): %w", err)
		return s.broken
	}
	s.broken = nil
	s.sealed.Store(false) // its view is its files' now: an append tells
	return nil
}

// removeUnwrittenSegments removes the segment files whose header was never
// written: the one a failed rotation created and could not preallocate,
// empty (tmpfs) or partly allocated and all zeros (ext4). Opened as the
// tail, it would be used without its space; missing, it is created and
// preallocated. It holds no entry: a segment's header is written and
// synced with its first entries.
func removeUnwrittenSegments(dir string) {
	segs, err := filepath.Glob(filepath.Join(dir, "*.wal"))
	if err != nil {
		return
	}
	for _, name := range segs {
		f, err := os.Open(name)
		if err != nil {
			continue
		}
		head := make([]byte, 32)
		n, _ := io.ReadFull(f, head)
		f.Close()
		if !slices.ContainsFunc(head[:n], func(b byte) bool { return b != 0 }) {
			os.Remove(name)
		}
	}
}

// walVFS, set only by tests, is the filesystem raft-wal's segment files
// go through (a disk that fails a write or an fsync); nil: the OS's.
var walVFS waltypes.VFS

func openWAL(path string, log *slog.Logger) (*LogStore, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &LogStore{path: path, log: log}
	if err := s.open(); err != nil {
		return nil, err
	}
	return s, nil
}

// open opens the log in s.path; the caller holds mu, or s is new.
func (s *LogStore) open() error {
	if err := lostMeta(s.path); err != nil {
		return &walOpenError{path: s.path, err: err}
	}
	damaged, torn := tailState(s.path)
	if damaged != "" {
		return &walOpenError{path: s.path, err: errors.New(damaged)}
	}
	if torn != "" {
		s.log.Warn("raft log: "+torn, "dir", s.path)
	}
	meta := &metadb.BoltMetaDB{}
	logger := rotateWatch{newHCLog(s.log), &s.sealed, s.stopOnIOError}
	var w *wal.WAL
	var err error
	if walVFS != nil {
		w, err = wal.Open(s.path, wal.WithMetaStore(meta), wal.WithLogger(logger), wal.WithSegmentFiler(segment.NewFiler(s.path, walVFS)))
	} else {
		w, err = wal.Open(s.path, wal.WithMetaStore(meta), wal.WithLogger(logger))
	}
	if err != nil {
		meta.Close()
		return &walOpenError{path: s.path, err: err}
	}
	s.w, s.meta = w, meta
	return nil
}

// lostMeta refuses a log whose wal-meta.db is missing or empty beside its
// segments (deleted or emptied by hand, or by a filesystem repair). Empty,
// bbolt would make it a new database, and raft-wal then panicked on its
// missing bucket, having rewritten the file. Missing, raft-wal wrote a new
// one naming a fresh first segment and failed on the old file ("file
// exists"); the next open then read that file as the whole log, whatever
// segments came after it. With no segment it is a log that was never
// written: raft-wal makes it anew.
func lostMeta(dir string) error {
	st, err := os.Stat(filepath.Join(dir, "wal-meta.db"))
	if err == nil && st.Size() > 0 {
		return nil // raft-wal says what it finds
	}
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil
	}
	segs, _ := filepath.Glob(filepath.Join(dir, "*.wal"))
	if len(segs) == 0 {
		return nil
	}
	what := "is empty"
	if err != nil {
		what = "is missing"
	}
	return fmt.Errorf("wal-meta.db %s while %d segment files are there: the file that says which segments hold the log, and where it ends, is lost", what, len(segs))
}

// rotateWatch is raft-wal's logger; its "rotate error" (a rotation, run in
// the background after the append that filled a segment, that could not
// make the next one) marks the log sealed at once: the appends that would
// find it so may never reach raft-wal (a follower's are refused on a full
// disk before it), and a truncation meanwhile must not go through.
//
// A rotation that failed for an I/O error (EIO: making the segment file,
// or writing or syncing raft-wal's metadata) stops the node, as a failed
// append does (stopOnFailedWrite): sealed, it was met as a full disk,
// reopened every few seconds with messages about space that freeing
// space could never cure.
type rotateWatch struct {
	hclog.Logger
	sealed *atomic.Bool
	stop   func(error)
}

func (r rotateWatch) Error(msg string, args ...any) {
	rotate := msg == "rotate error"
	if rotate {
		r.sealed.Store(true)
	}
	r.Logger.Error(msg, args...)
	if !rotate {
		return
	}
	for _, a := range args {
		if err, ok := a.(error); ok {
			if _, _, failedSync := engine.FailedSync(err); failedSync || errors.Is(err, syscall.EIO) {
				r.stop(err) // an fsync's ENOSPC too: FailedSync
				return
			}
		}
	}
}

// segmentSize is the size of each raft log segment file: raft-wal
// preallocates it whole when it creates the file.
var segmentSize = uint64(wal.DefaultSegmentSize)

// segmentSpaceAdvice says what the raft log needed when it could not
// create a segment file for lack of space. It said "64 MiB each: free that
// much" to an operator whose 64 MiB disk had nearly all of it free: a
// disk that small can never hold a node. The need is two segments (the
// next is made before the full one can go), --min-free-disk and its
// ballast (M/4), and the records besides.
func segmentSpaceAdvice(cfg Config) string {
	const what = "the raft log could not create a segment file: it preallocates each one whole, %s"
	// Writes stop under appendFloor, which may be more than M (a small M).
	minDisk := segmentSize + max(segmentSize+cfg.MinFreeDisk, appendFloor(cfg.MinFreeDisk)) + cfg.MinFreeDisk/4
	free, total, err := engine.DiskSize(cfg.DataDir)
	switch {
	case err != nil:
		return fmt.Sprintf(what+"; a node's disk needs room for two of them, --min-free-disk (%s) and its ballast, and the records besides, at least %s in all (docs/DISK.md)",
			sizeText(segmentSize), sizeText(cfg.MinFreeDisk), sizeText(minDisk))
	case total < minDisk:
		return fmt.Sprintf(what+", and the disk holding %s is too small for a node: it is %s in all (%s free), and a node needs room for two raft log segments (%s: the next is made before the full one is removed), --min-free-disk (%s) and its ballast (a quarter of it), so more than %s, and its records besides. "+
			"Give the data dir a larger disk (docs/DISK.md); freeing space on this one cannot be enough",
			sizeText(segmentSize), cfg.DataDir, sizeText(total), sizeText(free), sizeText(2*segmentSize), sizeText(cfg.MinFreeDisk), sizeText(minDisk))
	case free < segmentSize:
		return fmt.Sprintf(what+", and the disk holding %s has %s free: free at least %s more on it (docs/DISK.md), then start the node again",
			sizeText(segmentSize), cfg.DataDir, sizeText(free), sizeText(segmentSize-free))
	}
	return fmt.Sprintf(what+", and the disk holding %s had less than that free when it tried (%s free now: something else is writing to it?); make sure %s stays free on it (docs/DISK.md), then start the node again",
		sizeText(segmentSize), cfg.DataDir, sizeText(free), sizeText(segmentSize))
}

// sizeText writes a size in MiB, to a tenth where it is not whole.
func sizeText(n uint64) string {
	if n%(1<<20) == 0 {
		return fmt.Sprintf("%d MiB", n>>20)
	}
	return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
}

// walOpenError is raft-wal refusing to open the log (logStoreError).
type walOpenError struct {
	path string
	err  error
}

func (e *walOpenError) Error() string {
	return fmt.Sprintf("raftfsm: open raft log %s: %v", e.path, e.err)
}

func (e *walOpenError) Unwrap() error { return e.err }

// migrateChunk is how many entries one StoreLogs of the move carries.
var migrateChunk = 4096

// migrateHook is called at each step of the move; a test makes it fail
// there to stop the move as a crash would.
var migrateHook = func(step string) error { return nil }

// openLogStore opens the raft log in dir/raft-wal, creating it the first
// time, and moving into it the log older versions kept in raft.db. The
// steps, each safe to crash in:
//
//  1. Build the log in raft-wal.tmp (removed first: a crash may have left
//     one): copy raft.db's entries, write the marker, sync, and rename the
//     directory to raft-wal, syncing the data dir. raft.db is only read, so
//     until the rename it holds the log, whole.
//  2. Delete the entries from raft.db. A crash before or during it leaves
//     them there; the next start finds raft-wal, checks that each entry left
//     in raft.db is the copy's twin (index, term, type, data) and deletes
//     them. One that differs was written to raft.db after the move (an
//     older idem run on this data dir): the node refuses to start rather
//     than pick one of two logs, and changes nothing.
func openLogStore(dir string, stable *raftboltdb.BoltStore, log *slog.Logger) (*LogStore, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	path := filepath.Join(dir, logStoreDir)
	moved, err := readMovedMarker(path)
	if err != nil {
		return nil, err
	}
	if moved == nil {
		if err := buildLogStore(dir, stable, log); err != nil {
			return nil, err
		}
		if err := migrateHook("renamed"); err != nil {
			return nil, err
		}
		if moved, err = readMovedMarker(path); err != nil {
			return nil, err
		}
		if moved == nil {
			return nil, fmt.Errorf("raftfsm: %s has no %s after it was built", path, movedMarker)
		}
	}
	s, err := openWAL(path, log)
	if err != nil {
		return nil, err
	}
	if err := dropBoltLog(s, stable, log); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// readMovedMarker returns raft-wal's marker, nil when the directory does not
// exist. A directory without a marker is refused: nothing of idem makes
// one.
func readMovedMarker(path string) ([]byte, error) {
	b, err := os.ReadFile(filepath.Join(path, movedMarker))
	if err == nil {
		if len(b) != 16 {
			return nil, fmt.Errorf("raftfsm: %s is damaged (%d bytes); nothing was changed%s", filepath.Join(path, movedMarker), len(b), lostMarkerAdvice(path))
		}
		return b, nil
	}
	if !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("raftfsm: read %s: %w", movedMarker, err)
	}
	if _, serr := os.Stat(path); !errors.Is(serr, os.ErrNotExist) {
		return nil, fmt.Errorf("raftfsm: %s exists without %s: it is not a raft log idem made, or it lost that file; nothing was changed%s", path, movedMarker, lostMarkerAdvice(path))
	}
	return nil, nil
}

// lostMarkerAdvice is how to put back the marker of a raft log idem made
// (it holds wal-meta.db and segments) that lost it: deleted with other
// small files, or emptied by a crash. The marker records the range of an
// older log moved out of raft.db; zeros say none, which only skips the
// one rewrite of raft.db without that log's pages (scrubStableStore).
// The node refused with no way out. "" for a directory that holds no
// raft-wal log.
func lostMarkerAdvice(path string) string {
	segs, _ := filepath.Glob(filepath.Join(path, "*.wal"))
	if _, err := os.Stat(filepath.Join(path, "wal-meta.db")); err != nil || len(segs) == 0 {
		return ""
	}
	return fmt.Sprintf(". %s holds a raft log (wal-meta.db and %d segment files): if it is this node's, put the marker back with head -c 16 /dev/zero > %s and start the node again",
		path, len(segs), filepath.Join(path, movedMarker))
}

// buildLogStore is step 1 of openLogStore.
func buildLogStore(dir string, stable *raftboltdb.BoltStore, log *slog.Logger) error {
	start := time.Now()
	tmp := filepath.Join(dir, logStoreTmp)
	if err := os.RemoveAll(tmp); err != nil {
		return fmt.Errorf("raftfsm: remove an unfinished raft log: %w", err)
	}
	if err := os.Mkdir(tmp, 0o700); err != nil {
		return fmt.Errorf("raftfsm: create raft log: %w", err)
	}
	first, last, err := copyBoltLog(tmp, stable, log)
	if err != nil {
		return err
	}
	if err := migrateHook("copied"); err != nil {
		return err
	}
	var mark [16]byte
	binary.BigEndian.PutUint64(mark[:8], first)
	binary.BigEndian.PutUint64(mark[8:], last)
	if err := writeSynced(filepath.Join(tmp, movedMarker), mark[:]); err != nil {
		return err
	}
	if err := syncDir(tmp); err != nil {
		return err
	}
	if err := os.Rename(tmp, filepath.Join(dir, logStoreDir)); err != nil {
		return fmt.Errorf("raftfsm: create raft log: %w", err)
	}
	if err := syncDir(dir); err != nil {
		return err
	}
	if last > 0 {
		log.Info("moved the raft log out of raft.db", "first-index", first, "last-index", last, "to", logStoreDir, "took", time.Since(start).Round(time.Millisecond))
	}
	return nil
}

// copyBoltLog copies raft.db's log into a new raft-wal in path and returns
// the range it copied. raft-wal takes no gaps; raft-boltdb's log can have
// one below a snapshot a follower installed (raft kept its older entries),
// and everything below such a gap is covered by that snapshot, so the
// copy is the contiguous run that ends at the last entry.
func copyBoltLog(path string, stable *raftboltdb.BoltStore, log *slog.Logger) (first, last uint64, err error) {
	boltFirst, err := stable.FirstIndex()
	if err != nil {
		return 0, 0, fmt.Errorf("raftfsm: read raft.db log: %w", err)
	}
	last, err = stable.LastIndex()
	if err != nil {
		return 0, 0, fmt.Errorf("raftfsm: read raft.db log: %w", err)
	}
	s, err := openWAL(path, log)
	if err != nil {
		return 0, 0, err
	}
	defer s.Close()
	if last == 0 {
		return 0, 0, nil
	}
	first = boltFirst
	for i := last; i > boltFirst; i-- {
		var l raft.Log
		if err := stable.GetLog(i-1, &l); errors.Is(err, raft.ErrLogNotFound) {
			first = i
			break
		} else if err != nil {
			return 0, 0, fmt.Errorf("raftfsm: move raft log: read raft.db entry %d: %w", i-1, err)
		}
	}
	if first > boltFirst {
		log.Warn("raft.db's log has a gap below a snapshot; moving the entries above it", "dropped-from", boltFirst, "dropped-to", first-1)
	}
	batch := make([]*raft.Log, 0, migrateChunk)
	for i := first; i <= last; i++ {
		l := new(raft.Log)
		if err := stable.GetLog(i, l); err != nil {
			return 0, 0, fmt.Errorf("raftfsm: move raft log: read raft.db entry %d: %w", i, err)
		}
		batch = append(batch, l)
		if len(batch) == cap(batch) || i == last {
			if err := s.StoreLogs(batch); err != nil {
				return 0, 0, fmt.Errorf("raftfsm: move raft log: %w", err)
			}
			batch = batch[:0]
			if err := migrateHook("chunk"); err != nil {
				return 0, 0, err
			}
		}
	}
	return first, last, nil
}

// dropBoltLog is step 2 of openLogStore: raft.db's entries go once each is
// found to be the twin of the moved one.
func dropBoltLog(s *LogStore, stable *raftboltdb.BoltStore, log *slog.Logger) error {
	first, err := stable.FirstIndex()
	if err != nil {
		return fmt.Errorf("raftfsm: read raft.db log: %w", err)
	}
	last, err := stable.LastIndex()
	if err != nil {
		return fmt.Errorf("raftfsm: read raft.db log: %w", err)
	}
	if last == 0 {
		return nil
	}
	movedFirst, err := s.FirstIndex()
	if err != nil {
		return fmt.Errorf("raftfsm: read raft log: %w", err)
	}
	for i := first; i <= last; i++ {
		var old, cur raft.Log
		if err := stable.GetLog(i, &old); errors.Is(err, raft.ErrLogNotFound) {
			continue
		} else if err != nil {
			return fmt.Errorf("raftfsm: read raft.db entry %d: %w", i, err)
		}
		if i < movedFirst {
			continue // below a gap the move left behind (copyBoltLog)
		}
		err := s.GetLog(i, &cur)
		if err != nil && !errors.Is(err, raft.ErrLogNotFound) {
			return fmt.Errorf("raftfsm: read raft log entry %d: %w", i, err)
		}
		if err != nil || old.Term != cur.Term || old.Type != cur.Type || !bytes.Equal(old.Data, cur.Data) || !bytes.Equal(old.Extensions, cur.Extensions) {
			return fmt.Errorf("raftfsm: raft.db holds raft log entry %d (term %d), which %s does not hold as it is: "+
				"raft.db was written by an older idem after this data dir's log moved to %s, and this node cannot tell which log is right. Nothing was changed. "+
				"If other members of the cluster are healthy, remove this node from the cluster first (idem cluster remove --id with its node id, against a healthy member), then move this node's data dir aside (keep it: mv it to a new name) and start the node with an empty data dir and --join",
				i, old.Term, logStoreDir, logStoreDir)
		}
	}
	if err := migrateHook("drop"); err != nil {
		return err
	}
	if err := stable.DeleteRange(first, last); err != nil {
		return fmt.Errorf("raftfsm: delete the moved raft log from raft.db: %w", err)
	}
	log.Info("deleted the moved raft log from raft.db", "first-index", first, "last-index", last)
	return nil
}

// openLogStoreReadOnly opens dir's raft log to read it: raft-wal once the
// move is done (opening it writes no entry), else raft.db's log, where a
// data dir of an older version keeps it, changing nothing.
func openLogStoreReadOnly(dir string, stable *raftboltdb.BoltStore, log *slog.Logger) (raft.LogStore, func() error, error) {
	path := filepath.Join(dir, logStoreDir)
	moved, err := readMovedMarker(path)
	if err != nil {
		return nil, nil, err
	}
	if moved == nil {
		return stable, func() error { return nil }, nil
	}
	s, err := openWAL(path, log)
	if err != nil {
		return nil, nil, err
	}
	return s, s.Close, nil
}

func writeSynced(path string, b []byte) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		return fmt.Errorf("raftfsm: %w", err) // "open path: …"
	}
	_, err = f.Write(b)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("raftfsm: %w", err) // the error names path
	}
	return nil
}

// replaceSynced writes b to dir/name through a synced temporary file
// renamed into place, then syncs dir: a crash leaves the old file or the
// new one, never part of either.
func replaceSynced(dir, name string, b []byte) error {
	tmp := filepath.Join(dir, name+".tmp")
	if err := writeSynced(tmp, b); err != nil {
		return err
	}
	if err := os.Rename(tmp, filepath.Join(dir, name)); err != nil {
		return fmt.Errorf("raftfsm: %w", err)
	}
	return syncDir(dir)
}

// removeSynced removes dir/name, if there, and syncs dir.
func removeSynced(dir, name string) error {
	if err := os.Remove(filepath.Join(dir, name)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("raftfsm: remove %s: %w", filepath.Join(dir, name), err)
	}
	return syncDir(dir)
}

func syncDir(path string) error {
	d, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("raftfsm: sync %s: %w", path, err)
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("raftfsm: sync %s: %w", path, err)
	}
	return nil
}

// errLogDiskFull refuses a follower's append while its disk is full.
var errLogDiskFull = errors.New("raftfsm: disk full: this follower's raft log takes no entries until space is freed")

// guardedLogStore refuses a follower's appends while the disk guard says
// the data dir's disk is full (under --min-free-disk, disk.go). raft-wal
// writes into preallocated segments, so it would go on taking entries on a
// full disk (bolt could not grow and failed), and their applies would then
// wait for space inside Pebble holding the state's lock, so reads of
// applied data would hang. Refusing the append is what a slow follower
// does: it falls behind and catches up once space is back; an entry is
// acknowledged only once stored, so nothing acknowledged is at stake. The
// leader's appends go on: on a full disk it still proposes what frees
// space (bucket drops) and refuses client writes before they reach the log.
type guardedLogStore struct {
	*LogStore
	g        *diskGuard
	isLeader func() bool
	recent   *logCache
}

func (s guardedLogStore) StoreLogs(logs []*raft.Log) error {
	// The entries replacing a tail raft just deleted are taken whatever
	// the room: raft deletes a conflicting tail before it stores them, and
	// if that StoreLogs fails it keeps its idea of the log's end past the
	// deleted entries, and every later append fails on the first of them
	// ("failed to get log entry") until the node restarts.
	if len(logs) > 0 {
		s.LogStore.installed.Store(false)
		if c := s.LogStore.wholeCut.Swap(nil); c != nil && c[0] == logs[0].Index {
			s.cut(c[0], c[1]) // raft stores the leader's entries where the deleted log began
		}
	}
	s.checkApplied(logs)
	replacing := len(logs) > 0 && s.g.tailCut.Swap(0) == logs[0].Index
	if s.g.minFree != 0 && !s.isLeader() && !replacing {
		if err := s.g.admitAppend(logs); err != nil {
			return err
		}
	}
	var err error
	if s.LogStore.sealed.Load() {
		// Sealed by a failed rotation (rotateWatch), maybe with a refused
		// truncation to make first: reopen before appending.
		err = s.cureSealed(logs, waltypes.ErrSealed)
	} else if err = s.LogStore.StoreLogs(logs); errors.Is(err, waltypes.ErrSealed) {
		err = s.cureSealed(logs, err)
	}
	if err != nil {
		// A segment file's write that failed for another reason than
		// a full disk, or its fsync that failed for any (a sealed or
		// closed log wrote nothing and is no such error).
		if _, _, ok := engine.IOStop(err); ok {
			s.stopOnFailedWrite(err)
		}
		return err // as it is: a leader's ENOSPC is answered 507 (mapApplyError)
	}
	if s.g.minFree != 0 {
		s.g.stored(logs)
	}
	s.recent.put(logs)
	return nil
}

// takenWhileFull reports whether a follower whose disk is full still
// takes logs: raft's own entries (a new leader's first entry of its term,
// configurations, barriers) and the commands a full leader still admits
// (diskGuard.admit: ticks, bucket drops, membership), which are small, and
// drops free space. Refusing them too, a cluster whose followers were all
// full could commit nothing a new leader proposed: after a restart of
// such a cluster, or any election, its leader never committed the first
// entry of its term, every linearizable read on every node was answered
// 503 "no leader is available", and no bucket drop could free space.
// A batch with any client write is refused whole.
func takenWhileFull(logs []*raft.Log) bool {
	size := 0
	for _, l := range logs {
		size += len(l.Data)
		if size > takenWhileFullBytes {
			return false
		}
		if l.Type != raft.LogCommand {
			continue
		}
		switch commandOp(l.Data) {
		case OpDropBucket, OpTick, OpSetNode, OpRemoveNode, OpSetSecret, OpSetRetention, OpKeyCheck:
		default:
			return false
		}
	}
	return true
}

// takenWhileFullBytes bounds what one batch taken on a full disk holds:
// those commands are a few hundred bytes each.
const takenWhileFullBytes = 64 << 10

// commandOp is the op of a command's log bytes without decoding the rest
// (a complete carries its whole response); 0 when it cannot tell.
func commandOp(b []byte) Op {
	if len(b) > 0 && b[0] == '{' {
		if c, err := decodeJSON(b); err == nil {
			return c.Op
		}
		return 0
	}
	if len(b) < 2 || (b[0] != codecV1 && b[0] != codecV2) {
		return 0
	}
	return Op(b[1])
}

// cureSealed answers an append to a sealed log (err): with room for the
// next segment above the storage-full threshold, it reopens the log
// (reopenRoom), makes a head truncation refused meanwhile and appends
// again; without, it says so and returns err.
func (s guardedLogStore) cureSealed(logs []*raft.Log, err error) error {
	if ok, rerr := s.reopenRoom(); !ok {
		if rerr != nil {
			return rerr
		}
		return err
	}
	if err = s.LogStore.cutPendingHead(); err == nil {
		err = s.LogStore.StoreLogs(logs)
	}
	s.reopenDone(err)
	return err
}

// reopenDone says how the first write after a reopen went.
func (s guardedLogStore) reopenDone(err error) {
	switch {
	case err == nil:
		s.LogStore.stuck.Store(false)
		s.g.log.Warn("reopened the raft log, which a failed segment rotation had stopped: it works again", "data-dir", s.g.dir)
	case errors.Is(err, waltypes.ErrSealed):
		s.LogStore.stuck.Store(true)
		if s.LogStore.stuckLog.Allow(diskRemind) {
			// raft-wal sealed the segment but could not record it (the disk
			// filled during the rotation's metadata write): its open never
			// rotates a sealed tail, so no reopen or restart cures this.
			s.g.log.Error("the raft log still refuses entries after it was reopened: its last segment is sealed but its metadata does not say so (the disk filled during a segment rotation), which neither a reopen nor a restart mends. "+
				"This node's reads go on; to take writes again, in a cluster: stop it, move its data dir aside (do not delete it) and start it with an empty one and --join a member; "+
				"one node alone: save a backup (idem snapshot save), stop it and restore the backup into a new data dir (docs/BACKUP.md)", "data-dir", s.g.dir)
		}
	}
}

// reopenRoom reopens a log stopped by a failed rotation once the disk has
// room for its next segment above the storage-full threshold, at most
// every reopenEvery (stuckRetry after a reopen that did not cure it);
// false (and why, if a reopen failed) when it did not.
func (s guardedLogStore) reopenRoom() (bool, error) {
	if s.g.read() == nil && s.g.free.Load() < segmentSize+s.g.fullBelow {
		s.g.logSealed()
		return false, nil
	}
	every := reopenEvery
	if s.LogStore.stuck.Load() {
		every = stuckRetry
	}
	if !s.LogStore.reopenTry.Allow(every) {
		return false, nil
	}
	if err := s.LogStore.reopenSealed(); err != nil {
		s.g.logSealed()
		s.g.log.Warn("reopening the raft log failed", "error", err, "data-dir", s.g.dir)
		return false, err
	}
	return true, nil
}

// reopenEvery spaces reopens of a sealed log: each closes and opens every
// segment on raft's main loop. stuckRetry spaces them once one did not
// cure it.
const (
	reopenEvery = 5 * time.Second
	stuckRetry  = 5 * time.Minute
)

// awaitRotation waits for a rotation raft-wal runs in the background after
// the append that filled a segment: its outcome decides whether the log
// is sealed. A truncation of an index past the end waits for it, then does
// nothing.
func (s *LogStore) awaitRotation() {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if w, err := s.wal(); err == nil {
		w.DeleteRange(math.MaxUint64, math.MaxUint64)
	}
}

// refuseHead remembers a head truncation (min at or below the first
// index) refused while sealed; cutPendingHead makes it after the reopen.
func (s *LogStore) refuseHead(min, max uint64) {
	first, err := s.FirstIndex()
	if err != nil || min > first {
		return // a tail truncation: raft asks again
	}
	s.headMu.Lock()
	defer s.headMu.Unlock()
	s.headCut = [2]uint64{min, max}
}

func (s *LogStore) cutPendingHead() error {
	s.headMu.Lock()
	defer s.headMu.Unlock()
	if s.headCut == [2]uint64{} {
		return nil
	}
	if err := s.DeleteRange(s.headCut[0], s.headCut[1]); err != nil {
		return err
	}
	s.headCut = [2]uint64{}
	return nil
}

// GetLog answers from the entries just stored when it can: the leader
// reads each one back to replicate it and a follower to apply it, and
// raft-wal decodes it from its segment each time (a tenth of a
// follower's CPU under load).
//
// The newest snapshot's own index, when the log starts right after it (a
// follower that installed the leader's snapshot and then appended), is
// answered with the snapshot's term (snapshotHead).
func (s guardedLogStore) GetLog(index uint64, l *raft.Log) error {
	if s.recent.get(index, l) {
		// Still in the log: a head truncation may have removed it.
		if first, err := s.LogStore.FirstIndex(); err == nil && first != 0 && index >= first {
			return nil
		}
	}
	err := s.LogStore.GetLog(index, l)
	if errors.Is(err, raft.ErrLogNotFound) && s.snapshotHead(index, l) {
		return nil
	}
	if err != nil && !s.LogStore.starting.Load() && failedLogRead(err) {
		// At the start newRaft refuses an unreadable log with its advice.
		s.LogStore.stopOnReadError(index, err)
	}
	return err
}

// failedLogRead reports whether err, a GetLog's, is a read of a segment
// file that the disk failed (EIO).
func failedLogRead(err error) bool {
	var pe *os.PathError
	return errors.As(err, &pe) && pe.Op == "read" || errors.Is(err, syscall.EIO)
}

// stopOnReadError stops the node when its disk failed a read of its raft
// log outside the start. A leader logged "raft: failed to get log" every
// 10 s and went on leading, and the member it could not send the entries
// to stayed behind for as long as it led (its snapshot is sent only for
// entries the log no longer holds); a follower's apply of the entry
// panicked inside raft (exit status 2, no advice). Stopped, the leader
// hands the cluster to a member that can catch the other up.
func (s *LogStore) stopOnReadError(index uint64, err error) {
	s.log.Error(fmt.Sprintf("the raft log in %s could not be read at entry %d (%v): this node stops, as it can neither send its entries to a member catching up nor apply them. "+
		"Nothing it acknowledged is lost (a quorum's logs hold each). Check the disk and the filesystem (dmesg, SMART); on a disk that still fails, move the data dir to a sound one, or rebuild the node from a member (--join with an empty data dir) or, alone, from a backup (docs/DISK.md)", s.path, index, err))
	exit(1)
}

// snapshotHead fills l with the entry at index when index is the newest
// snapshot's and the log goes on from the entry after it: the snapshot
// holds that entry, committed, so its index and term are known.
//
// A follower checks the leader's previous entry by reading it from its log
// unless it is the log's last (hashicorp/raft's appendEntries), and after
// installing a snapshot at S its log starts at S+1: a follower stopped
// once it had appended entries above S but before the leader heard that
// it had (a kill -9, a lost answer) was asked, at its restart, to match S,
// found no entry there and refused. The leader then stepped back one
// entry per round trip, each refused too, to the head of its own log
// (10240 entries, minutes of "failed to get previous log" at WARN) and
// sent the whole state again; on the follower raft then kept its old idea
// of where its log ended, the same refusal followed, and the node never
// caught up (a walk: a 3 M-record node killed just after its install
// looped, re-sent 900 MB every few minutes). Raft compares only the term.
//
// The entry is made up (a no-op), so it must never be sent as the log's
// entry. A leader reads the entries it sends only after the one before
// them (setPreviousLog), which is below this log and not found, so the
// follower is sent the snapshot instead, except for entry 1: a follower
// asked from index 1 has no entry before it, and a leader whose snapshot
// is at 1 and whose log goes on from 2 (a node bootstrapped with
// --trailing-logs 1 and --snapshot-threshold 1 snapshots at 1 before its
// first command, the first second it leads) sent the made-up no-op to a
// joining node in place of the cluster's first configuration: two logs
// held different entries at the same index and term (a review). Entry 1
// is that configuration (raft's BootstrapCluster), which the snapshot at
// 1 holds whole: it is answered as it was written, or not at all.
func (s guardedLogStore) snapshotHead(index uint64, l *raft.Log) bool {
	if s.LogStore.snapHead == nil {
		return false
	}
	first, err := s.LogStore.FirstIndex()
	if err != nil || first != index+1 {
		return false
	}
	meta, ok := s.LogStore.snapHead()
	if (!ok || meta.Index != index) && s.LogStore.sentHead != nil {
		// Not the newest: a snapshot being sent, whose follower goes on
		// from it (snapshotStore.sentMeta).
		meta, ok = s.LogStore.sentHead(index)
	}
	if !ok || meta.Index != index {
		return false
	}
	if index == 1 {
		if meta.ConfigurationIndex != 1 {
			return false
		}
		*l = raft.Log{Index: 1, Term: meta.Term, Type: raft.LogConfiguration, Data: raft.EncodeConfiguration(meta.Configuration)}
		return true
	}
	*l = raft.Log{Index: index, Term: meta.Term, Type: raft.LogNoop}
	return true
}

// afterInstallDrop is called once raft has removed the whole log after an
// install, before its next store; a test kills the process there.
var afterInstallDrop = func() {}

// DeleteRange refuses to truncate a sealed log it cannot reopen first:
// raft-wal would write its metadata again from the in-memory view of the
// failed rotation, which still has the sealed segment as its open tail,
// and the reopen would then find a sealed tail it never rotates. Raft
// logs the failed compaction and tries again at its next snapshot.
func (s guardedLogStore) DeleteRange(min, max uint64) error {
	s.LogStore.awaitRotation()
	if s.LogStore.sealed.Load() {
		ok, err := s.reopenRoom()
		if ok {
			err = s.LogStore.cutPendingHead()
			s.reopenDone(err)
		}
		if !ok || err != nil {
			if err == nil {
				err = errLogSealed
			}
			s.LogStore.refuseHead(min, max)
			return err
		}
	}
	if max = s.compactTo(min, max); max < min {
		return nil
	}
	s.recent.clear()
	first, ferr := s.LogStore.FirstIndex()
	last, lerr := s.LogStore.LastIndex()
	if err := s.LogStore.DeleteRange(min, max); err != nil {
		if failedLogWrite(err) {
			var pe *os.PathError
			if !errors.As(err, &pe) { // bolt's bare errno names no file
				err = fmt.Errorf("truncation, writing %s: %w", metaFile, err)
			}
			s.LogStore.stopOnIOError(err)
		}
		return err
	}
	// Only a range that reaches the log's end may be a conflicting tail
	// raft replaces: a compaction keeps TrailingLogs entries. A range
	// that starts past the log's end removed nothing (raft-wal's no-op):
	// the snapshot goroutine's compaction, whose first index was read
	// before an installed snapshot emptied the log, is no cut.
	if ferr != nil || lerr != nil || last == 0 || min > last || max < last {
		return nil
	}
	switch {
	case min > first:
		s.cut(min, max)
	case s.LogStore.installed.Swap(false):
		// Raft dropping the whole log after the FSM took a leader's
		// snapshot (removeOldLogs): the state is the leader's now.
		afterInstallDrop()
	default:
		// The whole log, and no install: a conflict at its first entry,
		// or at the snapshot's own index just below it (snapshotHead
		// answers for it, and raft-wal takes a range from below its head
		// as a head truncation). After an install the log starts right
		// after the snapshot, and a leader of another history whose
		// entry there has the snapshot's term is matched at it: its
		// entries from the next index conflict with the log's first (a
		// review: such a node served the other history's state). Raft
		// stores the leader's entries from min at once; a compaction
		// racing a cut (its end read before the tail went) is followed
		// by no entry at its first index (StoreLogs).
		s.LogStore.wholeCut.Store(&[2]uint64{min, max})
	}
	return nil
}

// checkApplied tells the node of an entry a follower is asked to store at
// an index its state applied, of a term later than any of the entries the
// state applied. Raft compares only the entries its log holds: after an
// install whose state is past the snapshot's index (the leader's state
// as of the send), the log is empty up to that state, and a node stopped
// then and started again at a member's addresses, after idem recover made
// a survivor that lacked those entries the cluster, took the recovered
// cluster's entries there (its prior entry, the snapshot's, has the same
// term in both histories) and skipped them as applied: a state the
// cluster never had, and no cut to tell it (a review of the tail-cut
// check). Committed entries never change, and a node's term is never
// below that of an entry it holds: the cluster's own entries there have
// terms at most T. A leader appends past its state, and is not checked.
func (s guardedLogStore) checkApplied(logs []*raft.Log) {
	b := s.LogStore.appliedBound.Load()
	if b == nil || len(logs) == 0 || logs[0].Index > b[0] || s.LogStore.unverified == nil || s.isLeader() {
		return
	}
	for _, l := range logs {
		if l.Index > b[0] {
			return
		}
		if l.Term > b[1] {
			s.LogStore.unverified(l.Index, l.Term)
			return
		}
	}
}

// cut is a conflicting tail deleted from min: the entries replacing it
// are taken whatever the room (StoreLogs), the disk guard forgets the
// batches it counted there, and the node learns of it (Node.tailCut).
func (s guardedLogStore) cut(min, max uint64) {
	if s.g != nil {
		s.g.tailCut.Store(min)
		s.g.forgetFrom(min)
	}
	if f := s.LogStore.tailCut; f != nil {
		f(min, max)
	}
}

// compactTo is the end of a truncation from min to max once the entries a
// snapshot being sent needs are kept: from its index on (keepLogFrom), as
// long as the disk has room for them. Only a compaction is cut short;
// removing the whole log (after an install) or its tail (a follower's
// conflicting entries) reaches the last entry and goes as asked.
func (s guardedLogStore) compactTo(min, max uint64) uint64 {
	if s.LogStore.keepFrom == nil {
		return max
	}
	keep, ok := s.LogStore.keepFrom()
	if !ok || max < keep {
		return max
	}
	if last, err := s.LogStore.LastIndex(); err != nil || max >= last {
		return max
	}
	if s.g != nil {
		if short, _ := s.g.short(); short {
			return max // the space the compaction frees comes first
		}
	}
	s.LogStore.log.Info("raft log compaction stops below a snapshot being sent, whose follower goes on from it", "compact-to", max, "kept-from", keep, "first-index", min)
	return keep - 1
}

func (s guardedLogStore) StoreLog(l *raft.Log) error { return s.StoreLogs([]*raft.Log{l}) }

// logCache holds the entries stored last, by index modulo its slots, up
// to a bound on their bytes (an entry may be a whole batch request).
// Storing then caching is not atomic with clear: that is safe because raft
// stores and deletes a tail from one goroutine (its main loop); the other
// caller of DeleteRange, the snapshot's compaction, deletes only the head,
// which GetLog's first-index check covers.
type logCache struct {
	mu    sync.Mutex
	slots [logCacheSlots]*raft.Log
	bytes int
}

const (
	logCacheSlots = 256
	logCacheBytes = 16 << 20
)

func newLogCache() *logCache { return &logCache{} }

func (c *logCache) put(logs []*raft.Log) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, l := range logs {
		i := l.Index % logCacheSlots
		if old := c.slots[i]; old != nil {
			c.bytes -= logBytes(old)
			c.slots[i] = nil
		}
		if n := logBytes(l); c.bytes+n <= logCacheBytes {
			// A copy: a leader's entry lives in its apply future, and
			// holding that would hold the FSM's answer too (a replay
			// carries a stored response), outside the bound.
			e := *l
			c.slots[i] = &e
			c.bytes += n
		}
	}
}

// logBytes is what an entry holds in memory, as far as the bound counts.
func logBytes(l *raft.Log) int { return cap(l.Data) + cap(l.Extensions) }

func (c *logCache) get(index uint64, out *raft.Log) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if l := c.slots[index%logCacheSlots]; l != nil && l.Index == index {
		*out = *l
		return true
	}
	return false
}

// clear empties the cache: raft deletes a range to drop a conflicting tail
// (entries of the same index follow from another term) or a compacted head.
func (c *logCache) clear() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.slots = [logCacheSlots]*raft.Log{}
	c.bytes = 0
}

// exit ends the process when the raft log fails a write (tests replace it).
var exit = os.Exit

// stopOnFailedWrite stops the node after its raft log failed a write or an
// fsync. raft would carry on: a leader steps down and is elected again, a
// follower refuses the append and is sent it again, and raft-wal, having
// rolled its tail back, writes the next entries over the same place and
// fsyncs them. But after a failed fsync the OS may have dropped the pages
// it could not write and report the next fsync as done (PostgreSQL's
// "fsyncgate"; etcd stops on a failed WAL fsync too): the node would then
// acknowledge entries its disk may not hold. It stops, as a kill -9 would:
// nothing it acknowledged is at stake, and at its next start raft-wal
// reads the log back from what the disk holds.
func (s guardedLogStore) stopOnFailedWrite(err error) { stopOnIOError(s.g.log, s.path, err) }

// stopOnIOError is stopOnFailedWrite for a rotation that failed (rotateWatch).
func (s *LogStore) stopOnIOError(err error) { stopOnIOError(s.log, s.path, err) }

// failedLogWrite reports whether err, a truncation's, is a failed write
// or fsync of the raft log: of a segment file (IOStop), or of the
// metadata that lists them (wal-meta.db), whose bolt returns a failed
// fdatasync as a bare errno. A truncation whose metadata write failed
// was logged by raft ("failed to take snapshot") and the node went on,
// its next metadata writes fsynced over pages the OS may have dropped.
// metaFile is raft-wal's metadata file, in its directory.
const metaFile = "wal-meta.db"

func failedLogWrite(err error) bool {
	if _, _, ok := engine.IOStop(err); ok {
		return true
	}
	return errors.Is(err, syscall.EIO)
}

func stopOnIOError(log *slog.Logger, path string, err error) {
	log.Error(fmt.Sprintf("the raft log in %s could not be written (%v): this node stops, as it can no longer tell what its disk holds (after a failed write or fsync the OS may report later ones done though the data never reached the disk). "+
		"Nothing it acknowledged is lost. %s, and restart the machine before starting the node again: its page cache may still hold writes the disk does not, which the node would read back as stored; on a disk that still fails, move the data dir to a sound one, or rebuild the node from a member (--join with an empty data dir) or, alone, from a backup (docs/DISK.md)", path, err, engine.CheckAdvice(err)))
	exit(1)
}
