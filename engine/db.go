package engine

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/bloom"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/idem-store/idem/internal/mono"
	"github.com/idem-store/idem/partition"
)

// Options configure a DB.
type Options struct {
	// FS is the filesystem; nil means the OS (vfs.Default). Tests pass vfs.NewMem().
	FS vfs.FS
	// CacheBytes is the block cache size; 0 means 64 MiB.
	CacheBytes int64
	// MemTableBytes is the size of Pebble's memtable; 0 means
	// DefaultMemTableBytes.
	MemTableBytes int64
	// Logger receives Pebble's events at debug level.
	Logger *slog.Logger
	// FilterBytes is the size of each bucket's in-memory probe filter
	// (see probeFilter); 0 means DefaultFilterBytes, negative disables the
	// filters (every claim then probes every bucket of its span in Pebble).
	FilterBytes int
	// TableFS is the filesystem a restore writes its temporary tables
	// through; nil means FS. When FS waits for space on a full disk
	// (DiskFullFS), give the plain one: those tables are what fills the
	// disk, so a restore that meets ENOSPC must fail and give their space
	// back, not wait for space they hold.
	TableFS vfs.FS
	// Offline words the stop on a failed write or fsync of a store file
	// for an offline command (a restore, a recover) instead of a running
	// node: what the command says of itself and of its data dir, such as
	// "the restore failed: nothing was restored into DIR". The process
	// still exits 1 (Pebble cannot go on past the failure), but the
	// operator is not told that a node stops and its next start replays
	// its log. Empty: a running node's wording.
	Offline string
}

// DefaultMemTableBytes is the memtable size of a serving node: 4 MiB,
// Pebble's own default. A smaller memtable is faster: every claim inserts
// about four keys at random places in it, an insert costs a cache miss
// per skiplist level, and the FSM applied 64-claim batches of random keys
// a quarter faster in 4 MiB than in 32 MiB (BenchmarkApplyClaims); at
// 10 M records claims were 13-90% faster (four runs) and a bucket drop
// applied in a quarter of the time (its compaction then needs
// l0StopWrites). 32 MiB was kept while a stop on a full disk could hang:
// a node restarted there replays its log into the memtable, a 4 MiB one
// flushes, and its applies wait for space. A stop now gives up on them
// after idem serve's --full-disk-stop-timeout, exiting 1, which loses
// nothing acknowledged.
const DefaultMemTableBytes = 4 << 20

// l0CompactionThreshold is how many level-0 sublevels start a compaction
// into the base level (Pebble's default is 4). A claim's record key is
// random within its bucket, so every flush overlaps the whole of the base
// level's current bucket, and each level-0 compaction rewrites all of it:
// at 4 sublevels compactions took 21% of a node's CPU 8 s into a run of
// fresh claims and 40% after 30 s. At 16 the base level is rewritten a
// quarter as often: a fresh claim cost 25-35% less server CPU (45-54 us
// against 69-70, `idem bench --batch 256`, 64 clients, intervals 8-32 s
// of one run, interleaved) and the node did 10-40% more claims per
// second; a mix of completes, duplicates and lookups (which read level 0)
// was unchanged. At 48 (2026-12-07) a fresh claim cost another 15% less
// server CPU over 40 s runs (42.8 us against 50.2, five interleaved pairs
// of `idem bench --batch 256`, 64 clients) for 10% more claims per second,
// and `idem bench scale` at 1 M records did 14,287 claims/s, p99 11.8 ms,
// against 10,451, 14.3 ms; the mix was unchanged again (bloom filters keep
// a read from opening the sublevels that lack its key).
const l0CompactionThreshold = 48

// l0StopWrites is how many level-0 sublevels stop every write (Pebble's
// L0StopWritesThreshold; its default is 12). It stays 80 sublevels above
// l0CompactionThreshold: a bucket drop's compaction holds the only
// compaction slot for ~15-20 s under load while the 4 MiB memtables' flushes
// pile up in level 0, ~4 a second at 25k claims/s, 60-80 in all.
const l0StopWrites = 128

// Meta is the FSM metadata stored beside the data, always written in the same
// batch as the data it describes.
type Meta struct {
	Applied        uint64          // last applied raft index
	NowMs          int64           // cluster time of the last applied command
	Width          partition.Width // bucket width, fixed at the first command
	MaxRetentionMs int64           // longest retention a record was created with or the cluster was set to; never goes down
	Scope          ScopeMode       // how scopes are encoded, fixed by the first write naming one
	// RetentionMs is the cluster's retention of new records: pinned by the
	// first claim (from the retention its command carries, the deciding
	// node's --retention) and changed only by a command of its own
	// (raftfsm OpSetRetention), so it is the same whichever node leads.
	// 0 until then.
	RetentionMs int64
	// Gated are the kinds of log entries an earlier release cannot apply
	// (it skips them) that this state has applied: bits the caller names
	// (raftfsm's gated kinds), set by Apply (Txn.MarkGated) and never
	// cleared, so a leader knows which members would lack writes. 0 when
	// none was applied, or in a state an earlier release wrote (its
	// release records none).
	Gated uint64
}

// ClaimRetention is the retention a leader whose applied state this is
// stamps into a claim's command (raftfsm): the pinned one, or before the
// first claim the one a carries (the node's --retention), which that
// claim then pins. Apply decides with the command's.
func (m Meta) ClaimRetention(a ClaimArgs) int64 {
	if m.RetentionMs > 0 {
		return m.RetentionMs
	}
	return a.RetentionMs
}

// ScopeMode is how a scope is encoded, and so what is unique: with the
// endpoint (serve --scope endpoint) or without it (--scope principal).
// Records written in one mode are invisible to the other, so a cluster
// pins its mode once and keeps it.
type ScopeMode uint8

// Scope modes. ScopeUnset is a store that has not written a scope yet.
const (
	ScopeUnset ScopeMode = iota
	ScopeEndpoint
	ScopePrincipal
)

// ScopeModeOf is the mode of a PrincipalScope flag.
func ScopeModeOf(principal bool) ScopeMode {
	if principal {
		return ScopePrincipal
	}
	return ScopeEndpoint
}

// String is the mode's --scope name ("" when unset).
func (m ScopeMode) String() string {
	switch m {
	case ScopeEndpoint:
		return "endpoint"
	case ScopePrincipal:
		return "principal"
	}
	return ""
}

// DB is the Pebble store of idem.
type DB struct {
	pdb *pebble.DB
	// closePebble closes pdb, then releases the store's lock (Open took
	// it before Pebble opened, and Pebble keeps a lock it was given).
	closePebble func() error
	dir         string
	fs          vfs.FS
	// tableFS is Options.TableFS (fs when nil).
	tableFS vfs.FS
	opts    *pebble.Options // for writing tables to ingest (Restore)

	mu     sync.RWMutex
	meta   Meta
	closed bool
	filter *probeFilter // nil when disabled
	// principals is how many principals hold stored keys: derived from
	// the state (counted at open and restore, kept by each commit), so
	// every replica at the same applied index has the same count.
	principals principalStats
	// prefixes counts live principals under the prefixes of credential
	// caps (credcap.go), for those asked for since open, restore or load.
	prefixes map[string]int64

	// counters keeps the committed values of bookkeeping keys (bucket
	// stats, quota counters) between Txns: a raft batch touches each
	// principal's two counters once, and reading them from Pebble (the
	// memtable's skiplist, then the tables) was a tenth of a node's CPU
	// under load. It is a cache of what Pebble holds, filled and updated
	// by Commit, emptied by anything that writes those keys any other
	// way (a bucket drop, a restore, a load) and when it grows past
	// maxCounterBytes, so memory stays bounded whatever the principals.
	counters     map[string]cached
	counterBytes int

	stalls *writeStalls // Pebble's write stalls, counted (stall.go)

	// Long reads and compactions must not hold mu: a commit waits for mu,
	// and every apply with it (a 10 M-record bucket's compaction held it
	// for 23 s). They register in users instead; Close waits for them
	// after cancelling ctx.
	users  sync.WaitGroup
	ctx    context.Context
	cancel context.CancelFunc
}

// Open opens (creating if needed) the store in dir.
func Open(dir string, o Options) (*DB, error) {
	if o.FS == nil {
		o.FS = vfs.Default
	}
	if o.CacheBytes == 0 {
		o.CacheBytes = 64 << 20
	}
	if o.MemTableBytes == 0 {
		o.MemTableBytes = DefaultMemTableBytes
	}
	cache := pebble.NewCache(o.CacheBytes)
	defer cache.Unref()
	stalls := &writeStalls{log: o.Logger}
	listener := &pebble.EventListener{DataCorruption: corruptionStop(o.Logger), BackgroundError: backgroundErrors(o.Logger, o.Offline)}
	stalls.listen(listener)
	logger := pebbleLogger{l: o.Logger, stopped: new(atomic.Bool), opened: new(atomic.Bool), offline: o.Offline}
	po := &pebble.Options{
		// ioFailure needs a failed fsync's *os.PathError; a failed WAL
		// file stops the process before Pebble's fatal panic does.
		FS:                 syncErrFS{FS: o.FS, stopper: &logger},
		Cache:              cache,
		FormatMajorVersion: pebble.FormatNewest,
		Logger:             logger,
		MemTableSize:       uint64(o.MemTableBytes),
		EventListener:      listener,
		// Level 0 may hold as many bytes of flushes as it did with 32 MiB
		// memtables (12 x 32 MiB) before Pebble stops every write: a
		// dropped bucket's compaction (CompactBucket) runs for ~15 s under
		// load, the 4 MiB memtables' flushes piled up in level 0 behind
		// it, and at Pebble's default of 12 every write stopped for
		// 1.3-1.5 s. A second compaction slot did not help (the stall
		// came all the same) and took a fifth of the claims meanwhile.
		// Reads pay a bloom filter check per level-0 sublevel.
		L0StopWritesThreshold: l0StopWrites,
		L0CompactionThreshold: l0CompactionThreshold,
	}
	po.Levels[0].FilterPolicy = bloom.FilterPolicy(10)
	po.EnsureDefaults()
	for i := range po.Levels {
		po.Levels[i].FilterPolicy = bloom.FilterPolicy(10)
	}
	lost, err := lostMarkers(o.FS, dir)
	if err != nil {
		return nil, err
	}
	if len(lost) > 0 {
		// Without the manifest marker Pebble would take dir for a new
		// store and lose every table; without the format marker it
		// refuses, saying only that the store is not pristine.
		return nil, fmt.Errorf("engine: %s holds a Pebble store (its MANIFEST and tables) but not its marker files, empty files whose names say which MANIFEST is current and the store's format "+
			"(deleted with other empty files, or lost by the filesystem); opened so, it would be a new, empty store. Nothing was changed. "+
			"If only the markers were lost, put them back: %s, and start the node again",
			dir, strings.Join(lost, "; "))
	}
	if err := checkOptionsFile(o.FS, dir, po); err != nil {
		return nil, err
	}
	if err := checkManifest(o.FS, dir); err != nil {
		return nil, err
	}
	// The store's lock first: what follows removes files beside the
	// store, which are another process's while it holds the store (a
	// second start on a data dir in use, whose holder the OS did not
	// name: serve's Holder check lets those through).
	if err := o.FS.MkdirAll(dir, 0o755); err != nil {
		return nil, openError(dir, err)
	}
	lock, err := pebble.LockDirectory(dir, o.FS)
	if err != nil {
		return nil, openError(dir, err)
	}
	po.Lock = lock
	// Tables of a restore that was stopped before it finished (kill -9
	// while a follower installed its leader's snapshot) are garbage: a
	// restore starts by removing them. Removed before Pebble opens, they
	// give back the space they hold; on a disk they filled, Pebble's own
	// writes at Open waited for that space for ever and the node never
	// started. Only under the lock: while another process holds the
	// store, they may be the tables of its restore in progress.
	if err := o.FS.RemoveAll(dir + ".restore"); err != nil && o.Logger != nil {
		o.Logger.Warn("engine: could not remove the tables of an unfinished restore", "path", dir+".restore", "error", err)
	}
	pdb, err := pebble.Open(dir, po)
	if err != nil {
		lock.Close()
		return nil, openError(dir, err)
	}
	logger.opened.Store(true)
	// Pebble does not release a lock it was given: every Close of pdb
	// below is closePebble.
	closePebble := func() error { return errors.Join(pdb.Close(), lock.Close()) }
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.TableFS == nil {
		o.TableFS = o.FS
	}
	d := &DB{pdb: pdb, closePebble: closePebble, dir: dir, fs: o.FS, tableFS: o.TableFS, opts: po, filter: newProbeFilter(o.FilterBytes, o.Logger), stalls: stalls}
	d.ctx, d.cancel = context.WithCancel(context.Background())
	if d.meta, err = d.readMeta(); err != nil {
		closePebble()
		return nil, err
	}
	if d.principals, err = d.countPrincipals(); err != nil {
		closePebble()
		return nil, err
	}
	if !d.filter.load(o.FS, d.filterPath(), d.meta.Applied) {
		if err := d.rebuildFilter(); err != nil {
			closePebble()
			return nil, err
		}
	}
	return d, nil
}

// filterPath is where a clean Close saves the probe filters, beside the
// Pebble directory.
func (d *DB) filterPath() string { return d.dir + ".filters" }

// rebuildFilter starts building the probe filters from the state as it is
// now. Callers make sure no write is committed before it returns: Open,
// and Restore under d.mu.
func (d *DB) rebuildFilter() error {
	if d.filter == nil {
		return nil
	}
	// The old filters describe another state: if no iterator can be had,
	// the answers stay "maybe" rather than trusting them.
	d.filter.invalidate()
	lo, hi := partition.AllRange()
	it, err := newFilterIter(d.pdb, &pebble.IterOptions{LowerBound: lo, UpperBound: hi})
	if err != nil {
		return fmt.Errorf("engine: filter iter: %w", err)
	}
	d.filter.rebuild(it)
	return nil
}

// newFilterIter is pdb.NewIter; a variable so tests can make it fail.
var newFilterIter = (*pebble.DB).NewIter

// Close closes the store after syncing it.
func (d *DB) Close() error {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return nil
	}
	d.closed = true // from here on nobody starts using pdb
	d.mu.Unlock()
	d.cancel()
	d.users.Wait()
	d.filter.halt()
	// Pebble's Close writes and syncs its WAL and returns what fails. A
	// LogData(Sync) here instead made a full disk fatal: Pebble panics
	// when a commit cannot write its WAL, so a node stopped on a full
	// disk exited with a panic. Writes that did not reach the files are
	// above the stored applied index, and the raft log replays them.
	if err := d.closePebble(); err != nil {
		return fmt.Errorf("engine: close: %w", err)
	}
	// Every write is in and synced: the filters describe exactly this
	// state. Failing to save them only costs the next start a build.
	if err := d.filter.save(d.fs, d.filterPath(), d.meta.Applied); err != nil {
		d.filter.log.Warn("probe filters not saved; the next start builds them", "error", err)
	}
	return nil
}

// use registers a long operation on pdb that runs without holding mu; it
// returns false when the store is closed. The caller calls d.users.Done.
func (d *DB) use() bool {
	d.mu.RLock()
	defer d.mu.RUnlock()
	if d.closed {
		return false
	}
	d.users.Add(1)
	return true
}

// Sync makes every committed write durable.
func (d *DB) Sync() error {
	d.mu.RLock()
	defer d.mu.RUnlock()
	if d.closed {
		return ErrClosed // Pebble panics when used after Close
	}
	return d.sync()
}

// sync is Sync for callers that hold d.mu.
func (d *DB) sync() error {
	defer d.stopOnIOPanic()
	if err := d.pdb.LogData(nil, pebble.Sync); err != nil {
		return fmt.Errorf("engine: sync: %w", err)
	}
	return nil
}

// Meta returns the metadata as of the last commit.
func (d *DB) Meta() Meta {
	d.mu.RLock()
	defer d.mu.RUnlock()
	return d.meta
}

func (d *DB) readMeta() (Meta, error) {
	var m Meta
	var err error
	get := func(k []byte) uint64 {
		v, c, e := d.pdb.Get(k)
		if errors.Is(e, pebble.ErrNotFound) {
			return 0
		}
		if e != nil {
			err = e
			return 0
		}
		defer c.Close()
		if len(v) != 8 {
			err = fmt.Errorf("%w: meta %s", ErrCorrupt, k)
			return 0
		}
		return binary.BigEndian.Uint64(v)
	}
	m.Applied = get(keyApplied)
	m.NowMs = int64(get(keyNow))
	m.Width = partition.Width(get(keyWidth))
	m.MaxRetentionMs = int64(get(keyMaxRet))
	m.Scope = ScopeMode(get(keyScope))
	m.RetentionMs = int64(get(keyRetention))
	m.Gated = get(keyGated)
	if s := get(keySchema); err == nil && s != 0 && s != schemaVesion {
		return m, fmt.Errorf("engine: schema version %d, this binary reads %d", s, schemaVesion)
	}
	if err != nil {
		return m, fmt.Errorf("engine: read meta: %w", err)
	}
	return m, nil
}

func u64(v uint64) []byte { return binary.BigEndian.AppendUint64(nil, v) }

// backgroundErrors logs Pebble's background errors (a failed flush or
// compaction, which Pebble retries) at most once every 10 s, with how many
// there were since. Pebble retries a failed flush at once: with the
// process out of file descriptors it failed and logged 220,000 times in
// 30 s (33 MB of log).
//
// A failed write or fsync of a store file (EIO: a flush's or a compaction's
// sstable) stops the process as a failed WAL write does (ioStop): Pebble
// retried it at once for ever, so on a disk that kept failing the node's
// writes stalled and it hung instead of stopping.
func backgroundErrors(l *slog.Logger, offline string) func(error) {
	var last atomic.Int64 // mono.Now() of the last line; 0: none yet
	var since atomic.Int64
	var stopped atomic.Bool
	return func(err error) {
		if path, ioErr, ok := FailedWrite(err); ok {
			if !stopped.Swap(true) { // once: exit returns only in tests
				pebbleLogger{l: l, offline: offline}.ioStop(path, ioErr, err.Error())
			}
			return
		}
		n := since.Add(1)
		t := last.Load()
		if l == nil || (t != 0 && mono.Since(t) < 10*time.Second) || !last.CompareAndSwap(t, mono.Now()) {
			return
		}
		since.Add(-n)
		l.Error("pebble: background error (retried; logged at most once every 10s)", "error", err, "errors", n)
	}
}

type pebbleLogger struct {
	l *slog.Logger
	// stopped: ioStop ran (once per store: a failed WAL file stops it
	// from syncErrFS, then Pebble's panic or fatal error would again).
	stopped *atomic.Bool
	// opened: pebble.Open returned the store (syncErrFS stops on a
	// failed WAL file only then; Open returns one as its error).
	opened *atomic.Bool
	// offline: Options.Offline.
	offline string
}

func (p pebbleLogger) Infof(format string, args ...any) {
	if p.l != nil {
		p.l.Debug("pebble: " + fmt.Sprintf(format, args...))
	}
}

func (p pebbleLogger) Errorf(format string, args ...any) {
	if p.l != nil {
		p.l.Error("pebble: " + fmt.Sprintf(format, args...))
	}
}

func (p pebbleLogger) Fatalf(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	if path, err, ok := ioFailure(args); ok {
		p.ioStop(path, err, msg)
		panic("pebble: " + msg) // ioStop returns only in tests
	}
	if p.l != nil {
		p.l.Error("pebble: fatal: " + msg)
	}
	panic("pebble: " + msg)
}

// ioStop stops the process after a write or fsync of a store file failed
// (EIO and the like): the commit pipeline is broken and Pebble cannot go
// on. Pebble panics there (or calls Fatalf, which panicked): that stopped
// the node only from a goroutine of its own; from a request's (a backup's
// sync) net/http recovered it and the node went on.
func (p pebbleLogger) ioStop(path string, err error, what string) {
	if p.stopped != nil && p.stopped.Swap(true) {
		return // exit returns only in tests
	}
	l := p.l
	if l == nil {
		l = slog.Default()
	}
	if noRoomForNextWAL(err) {
		// The failed creation wrote nothing and the full WAL's closing
		// fsync went through (it comes first): what the disk holds is
		// not in doubt, only its room. Told to restart the machine, as
		// after a failed write, an operator of a full disk was sent the
		// wrong way.
		if p.offline != "" {
			l.Error(fmt.Sprintf("%s: the store could not make its next WAL file %s (%v): the disk is full. Free space on its filesystem (df), then run it again", p.offline, path, err), "pebble", what)
		} else {
			l.Error(fmt.Sprintf("the store could not make its next WAL file %s (%v): the disk is full, and the store cannot go on without one, so this node stops. "+
				"Nothing it acknowledged is lost: the raft log holds what the store had not made durable, and the next start replays it. "+
				"Free space on the data dir's filesystem (df; the volume's own pool if thin-provisioned, or the quota), then start the node again; a start with too little free space is refused and says how much it needs (docs/DISK.md)", path, err),
				"pebble", what)
		}
		exit(1)
		return
	}
	if p.offline != "" {
		l.Error(fmt.Sprintf("%s: the disk failed a write of %s (%v). %s, then run it again", p.offline, path, err, CheckAdvice(err)), "pebble", what)
		exit(1)
		return
	}
	l.Error(fmt.Sprintf("the store could not write %s (%v): this node stops, as it can no longer tell what its disk holds (after a failed write or fsync the OS may report later ones done though the data never reached the disk). "+
		"Nothing it acknowledged is lost: the raft log holds what the store had not made durable, and the next start replays it. "+
		"%s, and restart the machine before starting the node again: its page cache may still hold writes the disk does not, which the node would read back as stored; on a disk that still fails, move the data dir to a sound one, or rebuild the node from a member (--join with an empty data dir) or, alone, from a backup (docs/DISK.md)", path, err, CheckAdvice(err)),
		"pebble", what)
	exit(1)
}

// CheckAdvice is what to check after a write or an fsync failed with err
// (FailedWrite, FailedSync): the disk, or, for an fsync refused for lack
// of space, the space.
func CheckAdvice(err error) string {
	var pe *os.PathError
	if errors.As(err, &pe) && pe.Op == "open" && (errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT)) {
		// The next WAL file could not be made (syncErrFS).
		return "Its next WAL file could not be made for lack of space: free space on the data dir's filesystem (df), check dmesg"
	}
	if errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT) {
		// Only an fsync's: a write refused so is the disk-full guard's.
		return "Its fsync failed for lack of space (a copy-on-write filesystem, a thin-provisioned volume or a quota filling as the data was written back), which leaves what was written as uncertain as an I/O error does: free space on the data dir's filesystem (df; the volume's own pool if thin-provisioned), check dmesg"
	}
	return "Check the disk and the filesystem (dmesg, SMART)"
}

// stopOnIOPanic, deferred around a Pebble commit, stops the process as
// ioStop does when the commit panicked on a failed write of the WAL
// (Pebble's commitWrite panics with the writer's error); any other panic
// goes on.
func (d *DB) stopOnIOPanic() {
	r := recover()
	if r == nil {
		return
	}
	if e, ok := r.(error); ok {
		path, err, ok := IOStop(e)
		if p, isPebble := d.opts.Logger.(pebbleLogger); ok && isPebble {
			p.ioStop(path, err, e.Error())
		}
	}
	panic(r)
}

// ioFailure finds, among a Pebble fatal error's args, a failed write or
// fsync of a file the node stops on (IOStop): a fatal fsync is a WAL's or
// a MANIFEST's, and Pebble cannot go on.
func ioFailure(args []any) (path string, err error, ok bool) {
	for _, a := range args {
		if e, isErr := a.(error); isErr {
			if path, err, ok := IOStop(e); ok {
				return path, err, true
			}
		}
	}
	return "", nil, false
}

// IOStop reports whether err is a failure the node stops on, with the file
// and the cause: a write that failed for another reason than a full disk
// (FailedWrite), or an fsync that failed for any (FailedSync).
func IOStop(err error) (path string, cause error, ok bool) {
	if path, cause, ok = FailedWrite(err); !ok {
		path, cause, ok = FailedSync(err)
	}
	return path, cause, ok
}

// FailedWrite reports whether err is a file's write or fsync that failed
// for another reason than a full disk (EIO and the like), with the file
// and the cause: the node's store (ioStop) and its raft log stop on one.
// ENOSPC is the disk-full machinery's (DiskFullFS; docs/DISK.md); EDQUOT,
// a full quota (a ZFS dataset's, whose copy-on-write meets it inside
// preallocated files), refused the write as ENOSPC does and is no failing
// disk; a file closed under the write (a shutdown) wrote nothing.
func FailedWrite(err error) (path string, cause error, ok bool) {
	var pe *os.PathError
	if !errors.As(err, &pe) || errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT) || errors.Is(err, os.ErrClosed) {
		return "", nil, false
	}
	if pe.Op == "write" || syncOp(pe.Op) {
		return pe.Path, pe.Err, true
	}
	return "", nil, false
}

// FailedSync reports whether err is a file's fsync that failed, whatever
// the cause, with the file and the cause. A full disk (ENOSPC, EDQUOT) is
// no exception here, unlike a write's (FailedWrite): a write refused for
// lack of space wrote nothing, but an fsync that fails so (a
// copy-on-write filesystem, a thin-provisioned volume or a quota filling
// as the data is written back) leaves what was written as uncertain as an
// I/O error does, and a later fsync may report done pages the OS dropped.
func FailedSync(err error) (path string, cause error, ok bool) {
	var pe *os.PathError
	if !errors.As(err, &pe) || errors.Is(err, os.ErrClosed) || !syncOp(pe.Op) {
		return "", nil, false
	}
	return pe.Path, pe.Err, true
}

// syncOp says whether op, a *os.PathError's, is an fsync (syncErrFS names
// Pebble's own).
func syncOp(op string) bool {
	switch op {
	case "sync", "fsync", "fdatasync", "sync_file_range":
		return true
	}
	return false
}

// lostMarkers returns the commands that put back the marker files of a
// store in dir (a MANIFEST, with tables or a WAL) that lost them: the
// manifest marker naming the newest MANIFEST, the format marker naming the
// format this release writes (a store is moved to it at open). None when
// dir holds no store or its markers.
func lostMarkers(fs vfs.FS, dir string) ([]string, error) {
	names, err := fs.List(dir)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, nil
		}
		return nil, fmt.Errorf("engine: list %s: %w", dir, err)
	}
	var manifest string
	data, manifestMarker, formatMarker := false, false, false
	for _, n := range names {
		switch {
		case strings.HasPrefix(n, "marker.manifest."):
			manifestMarker = true
		case strings.HasPrefix(n, "marker.format-version."):
			formatMarker = true
		case strings.HasPrefix(n, "MANIFEST-"):
			manifest = max(manifest, n) // fixed-width numbers
		case strings.HasSuffix(n, ".sst") || strings.HasSuffix(n, ".log"):
			data = true
		}
	}
	if !data || manifest == "" {
		return nil, nil
	}
	var lost []string
	if !manifestMarker {
		lost = append(lost, "touch "+filepath.Join(dir, "marker.manifest.000001."+manifest))
	}
	if !formatMarker {
		lost = append(lost, fmt.Sprintf("touch %s", filepath.Join(dir, fmt.Sprintf("marker.format-version.000001.%03d", pebble.FormatNewest))))
	}
	return lost, nil
}

// exit ends the process when the store finds a damaged file.
var exit = os.Exit

// corruptionStop is what a damaged file of the store does: Pebble's default
// is a panic (a goroutine dump, often a second panic inside it) whose only
// hint is the path. It logs which file is damaged and what to do, and stops
// the process, as the panic did: a node must not serve from a store it
// cannot read.
func corruptionStop(l *slog.Logger) func(pebble.DataCorruptionInfo) {
	return func(info pebble.DataCorruptionInfo) {
		if l == nil {
			l = slog.Default()
		}
		l.Error(fmt.Sprintf("the store's file %s is damaged (%v): this node stops, as it cannot trust its state. %s",
			info.Path, info.Details, damagedAdvice))
		exit(1)
	}
}

// checkOptionsFile reads the newest OPTIONS file in dir as pebble.Open
// does, and names it when it does not parse: Pebble's error says only
// "invalid key=value syntax". The file records the options of the last
// run and is written again at every open; it holds no data.
func checkOptionsFile(fs vfs.FS, dir string, po *pebble.Options) error {
	names, err := fs.List(dir)
	if err != nil {
		return nil // pebble.Open says what is wrong with dir
	}
	newest := ""
	for _, n := range names {
		if strings.HasPrefix(n, "OPTIONS-") && !strings.Contains(n, ".") {
			newest = max(newest, n) // fixed-width numbers
		}
	}
	if newest == "" {
		return nil
	}
	path := fs.PathJoin(dir, newest)
	f, err := fs.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	b, err := io.ReadAll(f)
	if err != nil {
		return nil
	}
	if err := po.CheckCompatibility(dir, string(b)); err != nil && !strings.Contains(err.Error(), " name from ") {
		return fmt.Errorf("engine: %s, Pebble's record of the options of the store's last run, does not parse (%v): it was damaged. Nothing was changed. "+
			"It holds no data and is written again at every start: move it aside (mv %s %s.bad) and start the node again", path, err, path, path)
	}
	return nil
}
