package raftfsm

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
)

// logStoreDir is the raft log's directory in a data dir: a Pebble instance
// of its own, apart from the state's (fsm/), so a lost or restored state
// never touches the log and the log's syncs never wait for the state.
const logStoreDir = "raft-log"

// Keys of the log store. Entries are 'l' + the index big-endian, so
// Pebble's order is the log's order; 'm' keys are the store's own.
var (
	logKeyPrefix = []byte("l")
	logKeyEnd    = []byte("m") // just past every 'l' key
	// migratedKey says the store holds the raft log: its value is the
	// range (first, last) copied from raft.db, both 0 when there was none.
	// It is written in the same synced batch as the last copied entries,
	// so its presence means the copy is whole.
	migratedKey = []byte("m/migrated-from-bolt")
)

// LogStore is raft's LogStore on Pebble: each StoreLogs is one batch
// committed with one WAL sync, where raft-boltdb's StoreLogs pays two
// fdatasyncs per append (its data pages, then its meta page). Truncation is
// one range deletion. The stable store (term, vote) stays in raft.db.
type LogStore struct {
	db *pebble.DB
	// mu orders writers and guards first and last, which are kept in
	// memory because raft asks for them on every append and heartbeat.
	mu          sync.RWMutex
	first, last uint64
}

// errLogStoreClosed answers every call after Close.
var errLogStoreClosed = errors.New("raftfsm: raft log store is closed")

func logKey(index uint64) []byte {
	k := make([]byte, 9)
	k[0] = logKeyPrefix[0]
	binary.BigEndian.PutUint64(k[1:], index)
	return k
}

// openLogStore opens (creating if needed) the raft log in dir/raft-log and,
// the first time, moves the log out of stable (raft.db, where idem kept it
// before) into it. See migrateFromBolt for why a crash at any point loses
// nothing.
func openLogStore(dir string, stable *raftboltdb.BoltStore, log *slog.Logger) (*LogStore, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s, err := openPebbleLog(filepath.Join(dir, logStoreDir), log)
	if err != nil {
		return nil, err
	}
	if err := s.migrateFromBolt(stable, log); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

func openPebbleLog(path string, log *slog.Logger) (*LogStore, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	cache := pebble.NewCache(8 << 20)
	defer cache.Unref()
	po := &pebble.Options{
		Cache:              cache,
		FormatMajorVersion: pebble.FormatNewest,
		Logger:             logStoreLogger{log},
		// Entries live for a few snapshot intervals: most are deleted by
		// compaction of the log before their memtable is flushed.
		MemTableSize: 32 << 20,
	}
	db, err := pebble.Open(path, po)
	if err != nil {
		return nil, fmt.Errorf("raftfsm: open raft log %s: %w", path, err)
	}
	s := &LogStore{db: db}
	if err := s.loadBounds(); err != nil {
		db.Close()
		return nil, err
	}
	return s, nil
}

// loadBounds reads the first and last index from Pebble.
func (s *LogStore) loadBounds() error {
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: logKeyPrefix, UpperBound: logKeyEnd})
	if err != nil {
		return fmt.Errorf("raftfsm: read raft log bounds: %w", err)
	}
	defer it.Close()
	s.first, s.last = 0, 0
	if it.First() {
		s.first = binary.BigEndian.Uint64(it.Key()[1:])
		if !it.Last() {
			return fmt.Errorf("raftfsm: read raft log bounds: %w", it.Error())
		}
		s.last = binary.BigEndian.Uint64(it.Key()[1:])
	}
	if err := it.Error(); err != nil {
		return fmt.Errorf("raftfsm: read raft log bounds: %w", err)
	}
	return nil
}

// FirstIndex is the first index stored, 0 when the log is empty.
func (s *LogStore) FirstIndex() (uint64, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.db == nil {
		return 0, errLogStoreClosed
	}
	return s.first, nil
}

// LastIndex is the last index stored, 0 when the log is empty.
func (s *LogStore) LastIndex() (uint64, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.db == nil {
		return 0, errLogStoreClosed
	}
	return s.last, nil
}

// GetLog reads the entry at index; raft.ErrLogNotFound when there is none.
func (s *LogStore) GetLog(index uint64, l *raft.Log) error {
	s.mu.RLock()
	db := s.db
	s.mu.RUnlock()
	if db == nil {
		return errLogStoreClosed
	}
	v, closer, err := db.Get(logKey(index))
	if errors.Is(err, pebble.ErrNotFound) {
		return raft.ErrLogNotFound
	}
	if err != nil {
		return fmt.Errorf("raftfsm: read raft log entry %d: %w", index, err)
	}
	defer closer.Close()
	if err := decodeLog(v, l); err != nil {
		return fmt.Errorf("raftfsm: raft log entry %d: %w", index, err)
	}
	if l.Index != index {
		return fmt.Errorf("raftfsm: raft log entry %d holds index %d", index, l.Index)
	}
	return nil
}

// StoreLog stores one entry.
func (s *LogStore) StoreLog(l *raft.Log) error { return s.StoreLogs([]*raft.Log{l}) }

// StoreLogs stores entries in one Pebble batch, committed with one sync:
// when it returns, they survive a crash of the process or the machine.
func (s *LogStore) StoreLogs(logs []*raft.Log) error {
	if len(logs) == 0 {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.db == nil {
		return errLogStoreClosed
	}
	b := s.db.NewBatch()
	defer b.Close()
	var buf []byte
	lo, hi := logs[0].Index, logs[0].Index
	for _, l := range logs {
		buf = encodeLog(buf[:0], l)
		if err := b.Set(logKey(l.Index), buf, nil); err != nil {
			return fmt.Errorf("raftfsm: store raft log entry %d: %w", l.Index, err)
		}
		lo, hi = min(lo, l.Index), max(hi, l.Index)
	}
	if err := b.Commit(pebble.Sync); err != nil {
		return fmt.Errorf("raftfsm: store raft log entries %d-%d: %w", lo, hi, err)
	}
	if s.first == 0 || lo < s.first {
		s.first = lo
	}
	s.last = max(s.last, hi)
	return nil
}

// DeleteRange deletes the entries from lo to hi, both included, with one
// range deletion. raft uses it for compaction (a prefix) and for a
// follower's conflicting suffix (synced, so a restart cannot bring back
// entries the leader replaced).
func (s *LogStore) DeleteRange(lo, hi uint64) error {
	if lo > hi {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.db == nil {
		return errLogStoreClosed
	}
	end := logKeyEnd
	if hi < ^uint64(0) {
		end = logKey(hi + 1)
	}
	if err := s.db.DeleteRange(logKey(lo), end, pebble.Sync); err != nil {
		return fmt.Errorf("raftfsm: delete raft log entries %d-%d: %w", lo, hi, err)
	}
	// Read the new ends rather than compute them: raft allows gaps (after
	// a snapshot install), so hi+1 need not be an entry. It seeks past the
	// range deletion, once per compaction or truncation.
	return s.loadBounds()
}

// Close closes Pebble; later calls fail.
func (s *LogStore) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.db == nil {
		return nil
	}
	err := s.db.Close()
	s.db = nil
	if err != nil {
		return fmt.Errorf("raftfsm: close raft log: %w", err)
	}
	return nil
}

// migrateFromBolt moves the raft log that older versions kept in raft.db
// (bucket "logs") into this store, once. The steps, each safe to crash in:
//
//  1. Unless the migrated marker is present: delete whatever this store
//     holds (a copy a crash interrupted), copy every entry of raft.db,
//     and write the marker in the last batch, synced. raft.db is only read,
//     so a crash before the marker leaves the old log whole and the next
//     start copies it again.
//  2. Delete the entries from raft.db. A crash in it or before it leaves
//     them there; the next start finds the marker, checks that each entry
//     left in raft.db is the same as the copy (index, term, type, data) and
//     deletes them. An entry that differs was written to raft.db after the
//     migration (an older idem run on this data dir): the node refuses to
//     start rather than pick one of two logs.
func (s *LogStore) migrateFromBolt(stable *raftboltdb.BoltStore, log *slog.Logger) error {
	boltFirst, err := stable.FirstIndex()
	if err != nil {
		return fmt.Errorf("raftfsm: read raft.db log: %w", err)
	}
	boltLast, err := stable.LastIndex()
	if err != nil {
		return fmt.Errorf("raftfsm: read raft.db log: %w", err)
	}
	_, closer, err := s.db.Get(migratedKey)
	switch {
	case err == nil:
		closer.Close()
		if boltLast == 0 {
			return nil
		}
		return s.dropBoltLog(stable, boltFirst, boltLast, log)
	case !errors.Is(err, pebble.ErrNotFound):
		return fmt.Errorf("raftfsm: read raft log marker: %w", err)
	}
	// No lock: nothing else has the store yet.
	start := time.Now()
	b := s.db.NewBatch()
	defer func() { b.Close() }()
	// A copy a crash interrupted: start again from nothing.
	if err := b.DeleteRange(logKeyPrefix, logKeyEnd, nil); err != nil {
		return fmt.Errorf("raftfsm: migrate raft log: %w", err)
	}
	var buf []byte
	copied := 0
	for i := boltFirst; boltLast > 0 && i <= boltLast; i++ {
		var l raft.Log
		if err := stable.GetLog(i, &l); err != nil {
			if errors.Is(err, raft.ErrLogNotFound) {
				continue // raft allows gaps; bolt's bounds are its first and last keys
			}
			return fmt.Errorf("raftfsm: migrate raft log: read raft.db entry %d: %w", i, err)
		}
		buf = encodeLog(buf[:0], &l)
		if err := b.Set(logKey(i), buf, nil); err != nil {
			return fmt.Errorf("raftfsm: migrate raft log: %w", err)
		}
		copied++
		// Unsynced chunks keep the batch small; the marker's synced
		// commit below makes them durable with it (one WAL, in order).
		if b.Len() > migrateChunkBytes {
			if err := b.Commit(pebble.NoSync); err != nil {
				return fmt.Errorf("raftfsm: migrate raft log: %w", err)
			}
			b.Close()
			b = s.db.NewBatch()
			if err := migrateHook("chunk"); err != nil {
				return err
			}
		}
	}
	var mark [16]byte
	binary.BigEndian.PutUint64(mark[:8], boltFirst)
	binary.BigEndian.PutUint64(mark[8:], boltLast)
	if err := b.Set(migratedKey, mark[:], nil); err != nil {
		return fmt.Errorf("raftfsm: migrate raft log: %w", err)
	}
	if err := b.Commit(pebble.Sync); err != nil {
		return fmt.Errorf("raftfsm: migrate raft log: %w", err)
	}
	if err := s.loadBounds(); err != nil {
		return err
	}
	if copied > 0 {
		log.Info("moved the raft log out of raft.db", "entries", copied, "first-index", boltFirst, "last-index", boltLast, "to", logStoreDir, "took", time.Since(start).Round(time.Millisecond))
	}
	if boltLast == 0 {
		return nil
	}
	if err := migrateHook("marked"); err != nil {
		return err
	}
	return s.dropBoltLog(stable, boltFirst, boltLast, log)
}

// dropBoltLog deletes raft.db's entries once they are in this store, after
// checking that each is the copy's twin.
func (s *LogStore) dropBoltLog(stable *raftboltdb.BoltStore, first, last uint64, log *slog.Logger) error {
	for i := first; i <= last; i++ {
		var old, cur raft.Log
		if err := stable.GetLog(i, &old); err != nil {
			if errors.Is(err, raft.ErrLogNotFound) {
				continue
			}
			return fmt.Errorf("raftfsm: read raft.db entry %d: %w", i, err)
		}
		err := s.GetLog(i, &cur)
		if err != nil && !errors.Is(err, raft.ErrLogNotFound) {
			return err
		}
		if err != nil || old.Term != cur.Term || old.Type != cur.Type || !bytes.Equal(old.Data, cur.Data) || !bytes.Equal(old.Extensions, cur.Extensions) {
			return fmt.Errorf("raftfsm: raft.db holds raft log entry %d (term %d), which %s does not hold as it is: "+
				"raft.db was written by an older idem after this data dir's log moved to %s, and this node cannot tell which log is right. Nothing was changed. "+
				"If other members of the cluster are healthy, move this node's data dir aside (keep it: mv it to a new name) and start the node with an empty data dir and --join",
				i, old.Term, logStoreDir, logStoreDir)
		}
	}
	if err := stable.DeleteRange(first, last); err != nil {
		return fmt.Errorf("raftfsm: delete the moved raft log from raft.db: %w", err)
	}
	log.Info("deleted the moved raft log from raft.db", "first-index", first, "last-index", last)
	return nil
}

// migrateChunkBytes bounds a batch of the copy; tests lower it.
var migrateChunkBytes = 16 << 20

// migrateHook is called at each step of the migration; a test makes it fail
// there to stop the migration as a crash would.
var migrateHook = func(step string) error { return nil }

// The entry codec: a version byte, then index, term, type, data,
// extensions and AppendedAt (unix nanoseconds; zero time is 0). Written and
// read only by this store, so it needs none of msgpack's generality.
const logCodecV1 = 1

func encodeLog(buf []byte, l *raft.Log) []byte {
	buf = append(buf, logCodecV1)
	buf = binary.AppendUvarint(buf, l.Index)
	buf = binary.AppendUvarint(buf, l.Term)
	buf = append(buf, byte(l.Type))
	buf = binary.AppendUvarint(buf, uint64(len(l.Data)))
	buf = append(buf, l.Data...)
	buf = binary.AppendUvarint(buf, uint64(len(l.Extensions)))
	buf = append(buf, l.Extensions...)
	var at int64
	if !l.AppendedAt.IsZero() {
		at = l.AppendedAt.UnixNano()
	}
	return binary.AppendVarint(buf, at)
}

var errLogCodec = errors.New("malformed entry")

// decodeLog fills l from v, copying: v belongs to Pebble.
func decodeLog(v []byte, l *raft.Log) error {
	if len(v) == 0 || v[0] != logCodecV1 {
		return fmt.Errorf("%w: unknown version", errLogCodec)
	}
	v = v[1:]
	uv := func() (uint64, bool) {
		x, n := binary.Uvarint(v)
		if n <= 0 {
			return 0, false
		}
		v = v[n:]
		return x, true
	}
	bs := func() ([]byte, bool) {
		n, ok := uv()
		if !ok || n > uint64(len(v)) {
			return nil, false
		}
		var out []byte
		if n > 0 {
			out = bytes.Clone(v[:n])
		}
		v = v[n:]
		return out, true
	}
	var ok bool
	if l.Index, ok = uv(); !ok {
		return errLogCodec
	}
	if l.Term, ok = uv(); !ok || len(v) == 0 {
		return errLogCodec
	}
	l.Type = raft.LogType(v[0])
	v = v[1:]
	if l.Data, ok = bs(); !ok {
		return errLogCodec
	}
	if l.Extensions, ok = bs(); !ok {
		return errLogCodec
	}
	at, n := binary.Varint(v)
	if n <= 0 || n != len(v) {
		return errLogCodec
	}
	l.AppendedAt = time.Time{}
	if at != 0 {
		l.AppendedAt = time.Unix(0, at)
	}
	return nil
}

// logStoreLogger sends Pebble's messages to the node's log.
type logStoreLogger struct{ l *slog.Logger }

func (p logStoreLogger) Infof(format string, args ...any) {
	p.l.Debug("raft log pebble: " + fmt.Sprintf(format, args...))
}

func (p logStoreLogger) Errorf(format string, args ...any) {
	p.l.Error("raft log pebble: " + fmt.Sprintf(format, args...))
}

func (p logStoreLogger) Fatalf(format string, args ...any) {
	msg := "raft log pebble: " + fmt.Sprintf(format, args...)
	p.l.Error(msg)
	panic(msg)
}

// openLogStoreReadOnly opens dir's raft log to read it and change nothing:
// the store in raft-log once it holds the log (its migration done), else
// raft.db's log, where a data dir of an older version keeps it.
func openLogStoreReadOnly(dir string, stable *raftboltdb.BoltStore, log *slog.Logger) (raft.LogStore, func() error, error) {
	path := filepath.Join(dir, logStoreDir)
	if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
		return stable, func() error { return nil }, nil
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	cache := pebble.NewCache(8 << 20)
	defer cache.Unref()
	db, err := pebble.Open(path, &pebble.Options{Cache: cache, ReadOnly: true, Logger: logStoreLogger{log}})
	if err != nil {
		return nil, nil, fmt.Errorf("raftfsm: open raft log %s: %w", path, err)
	}
	_, closer, err := db.Get(migratedKey)
	if errors.Is(err, pebble.ErrNotFound) {
		db.Close()
		return stable, func() error { return nil }, nil
	}
	if err != nil {
		db.Close()
		return nil, nil, fmt.Errorf("raftfsm: read raft log marker: %w", err)
	}
	closer.Close()
	s := &LogStore{db: db}
	if err := s.loadBounds(); err != nil {
		db.Close()
		return nil, nil, err
	}
	return s, s.Close, nil
}
