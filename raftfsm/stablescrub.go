package raftfsm

import (
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	"go.etcd.io/bbolt"
)

// stableScrubTmp is where scrubStableStore builds the new raft.db.
const stableScrubTmp = "raft.db.scrub"

// stableScrubbed, a key of raft.db's stable store (raft reads only its own
// keys there), says raft.db was rewritten after the log moved out of it.
var stableScrubbed = []byte("IdemMovedLogScrubbed")

// scrubStableStore rewrites raft.db without its free pages, once, when
// this data dir's raft log was moved out of it (the moved marker's range is
// not empty), and returns the store to use from then on.
//
// Deleting the moved entries (dropBoltLog) frees bolt's pages but does not
// clear them: raft.db kept every byte of the old log, the responses and
// correlation ids stored before encryption at rest was turned on in
// plaintext and those sealed under keys retired since, for the life of the
// data dir, since term and vote updates reuse only a page or two of them.
// bbolt's Compact copies the live keys (term, vote) into a new file, which
// replaces raft.db with a synced rename, so a crash leaves either file
// whole; then stableScrubbed is set (a crash before it only rewrites the
// file again). Checked at every start, it also cleans a data dir moved by
// a build before this one.
func scrubStableStore(dir string, stable *raftboltdb.BoltStore, opts *bbolt.Options, log *slog.Logger) (*raftboltdb.BoltStore, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	tmp := filepath.Join(dir, stableScrubTmp)
	if err := os.Remove(tmp); err != nil && !errors.Is(err, os.ErrNotExist) {
		return stable, fmt.Errorf("raftfsm: remove an unfinished %s: %w", stableScrubTmp, err)
	}
	mark, err := readMovedMarker(filepath.Join(dir, logStoreDir))
	if err != nil || mark == nil || binary.BigEndian.Uint64(mark[8:]) == 0 {
		return stable, err // no log was ever moved out of raft.db
	}
	if v, err := stable.Get(stableScrubbed); err == nil && len(v) > 0 {
		return stable, nil
	}
	st := stable.Stats()
	path := filepath.Join(dir, "raft.db")
	if err := stable.Close(); err != nil {
		return nil, fmt.Errorf("raftfsm: close raft.db to rewrite it: %w", err)
	}
	reopen := func() (*raftboltdb.BoltStore, error) {
		s, err := raftboltdb.New(raftboltdb.Options{Path: path, BoltOptions: opts})
		if err != nil {
			return nil, fmt.Errorf("raftfsm: open %s (raft's term and vote): %w", path, err)
		}
		return s, nil
	}
	fail := func(err error) (*raftboltdb.BoltStore, error) {
		os.Remove(tmp)
		s, rerr := reopen()
		if rerr != nil {
			return nil, errors.Join(err, rerr)
		}
		return s, err
	}
	src, err := bbolt.Open(path, 0o600, opts)
	if err != nil {
		return fail(fmt.Errorf("raftfsm: open %s to rewrite it: %w", path, err))
	}
	dst, err := bbolt.Open(tmp, 0o600, opts)
	if err != nil {
		src.Close()
		return fail(fmt.Errorf("raftfsm: rewrite raft.db: %w", err))
	}
	err = bbolt.Compact(dst, src, 0)
	err = errors.Join(err, dst.Sync(), dst.Close(), src.Close())
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err == nil {
		err = syncDir(dir)
	}
	if err != nil {
		return fail(fmt.Errorf("raftfsm: rewrite raft.db without the raft log moved out of it: %w", err))
	}
	log.Info("rewrote raft.db without the free pages left by the raft log moved out of it (they held its entries)",
		"free-pages", st.FreePageN+st.PendingPageN)
	s, err := reopen()
	if err != nil {
		return nil, err
	}
	if err := s.Set(stableScrubbed, []byte{1}); err != nil {
		return s, fmt.Errorf("raftfsm: record in raft.db that it was rewritten: %w", err)
	}
	return s, nil
}

// stableOptions are the bolt options raft.db is opened with.
func stableOptions() *bbolt.Options { return &bbolt.Options{Timeout: 2 * time.Second} }
