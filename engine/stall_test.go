package engine

import (
	"bytes"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/stretchr/testify/require"

	"github.com/idem-store/idem/partition"
)

// gate holds what waits on it until it is opened, once.
type gate struct {
	ch   chan struct{}
	once sync.Once
}

func newGate() *gate  { return &gate{ch: make(chan struct{})} }
func (g *gate) wait() { <-g.ch }
func (g *gate) open() { g.once.Do(func() { close(g.ch) }) }

// heldFlushFS holds every table Pebble creates until release opens: a
// disk so slow that the memtables' flush cannot keep up.
type heldFlushFS struct {
	vfs.FS
	release *gate
}

func (f *heldFlushFS) Create(name string, c vfs.DiskWriteCategory) (vfs.File, error) {
	if strings.HasSuffix(name, ".sst") {
		f.release.wait()
	}
	return f.FS.Create(name, c)
}

// syncBuffer is a log sink written from Pebble's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// A write stall is counted, timed and logged with its reason: with its
// flush held, the memtables fill, Pebble stops every commit, and the
// store says so (idem_store_write_stalls_total) instead of leaving claims
// slow for no visible reason.
func TestWriteStallIsCountedTimedAndLogged(t *testing.T) {
	fs := &heldFlushFS{FS: vfs.NewMem(), release: newGate()}
	var logs syncBuffer
	d, err := Open("db", Options{FS: fs, MemTableBytes: 1 << 20, FilterBytes: -1,
		Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	require.NoError(t, err)
	t.Cleanup(func() { fs.release.open(); d.Close() })
	n, took := d.WriteStalls()
	require.Zero(t, n)
	require.Zero(t, took)

	// Write until a commit blocks: two 1 MiB memtables waiting for their
	// flush stop writes.
	done := make(chan error, 1)
	go func() {
		v := bytes.Repeat([]byte("x"), 64<<10)
		for i := 0; i < 256; i++ {
			if err := d.pdb.Set([]byte(fmt.Sprint("k", i)), v, pebble.NoSync); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	deadline := time.Now().Add(10 * time.Second)
	for n, _ := d.WriteStalls(); n == 0; n, _ = d.WriteStalls() {
		select {
		case err := <-done:
			t.Fatalf("256 writes of 64 KiB ended (%v) without a stall, with every flush held", err)
		default:
		}
		require.True(t, time.Now().Before(deadline), "no write stall within 10 s with every flush held")
		time.Sleep(5 * time.Millisecond)
	}
	time.Sleep(2 * stallLogAfter)
	select {
	case err := <-done:
		t.Fatalf("the writes ended (%v) during a stall", err)
	default:
	}
	fs.release.open()
	require.NoError(t, <-done)

	n, took = d.WriteStalls()
	require.GreaterOrEqual(t, n, int64(1))
	require.GreaterOrEqual(t, took, 2*stallLogAfter)
	require.Contains(t, logs.String(), "the store stalled writes")
	require.Contains(t, logs.String(), "memtable count limit reached")
}

// heldCompactionFS holds the first compaction output created once armed:
// a long compaction, such as a dropped bucket's, that keeps its slot.
type heldCompactionFS struct {
	vfs.FS
	armed   atomic.Bool
	held    chan struct{} // closed when the create is held
	release *gate
}

func (f *heldCompactionFS) Create(name string, c vfs.DiskWriteCategory) (vfs.File, error) {
	if c == "pebble-compaction" && f.armed.CompareAndSwap(true, false) {
		close(f.held)
		f.release.wait()
	}
	return f.FS.Create(name, c)
}

// Writes go on while a dropped bucket's compaction runs: the flushes of
// small memtables pile up in level 0 behind it, and at Pebble's default
// L0StopWritesThreshold (12) every write stopped (1.3-1.5 s in a 10 M-record
// drop under load; here, for as long as the compaction is held).
func TestWritesGoOnDuringABucketCompaction(t *testing.T) {
	fs := &heldCompactionFS{FS: vfs.NewMem(), held: make(chan struct{}), release: newGate()}
	var logs syncBuffer
	d, err := Open("db", Options{FS: fs, MemTableBytes: 1 << 20, FilterBytes: -1,
		Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	require.NoError(t, err)
	t.Cleanup(func() { fs.release.open(); d.Close() })

	// A bucket's worth of data in the tables, and nothing compacting.
	const b = partition.Bucket(7)
	start, _ := partition.Range(b)
	v := bytes.Repeat([]byte("v"), 4<<10)
	for i := 0; i < 2048; i++ {
		require.NoError(t, d.pdb.Set(fmt.Appendf(bytes.Clone(start), "r/%06d", i), v, pebble.NoSync))
	}
	require.NoError(t, d.pdb.Flush())
	require.Eventually(t, func() bool { return d.pdb.Metrics().Compact.NumInProgress == 0 }, 10*time.Second, 5*time.Millisecond)

	// The bucket's compaction starts and keeps its slot.
	fs.armed.Store(true)
	compacted := make(chan error, 1)
	go func() { compacted <- d.CompactBucket(b) }()
	select {
	case <-fs.held:
	case err := <-compacted:
		t.Fatalf("the bucket's compaction ended (%v) without writing a table", err)
	case <-time.After(10 * time.Second):
		t.Fatal("the bucket's compaction wrote no table within 10 s")
	}

	// Meanwhile 48 MiB of writes elsewhere: 48 flushes into level 0.
	wrote := make(chan error, 1)
	go func() {
		w := bytes.Repeat([]byte("w"), 64<<10)
		for i := 0; i < 768; i++ {
			if err := d.pdb.Set(fmt.Appendf(nil, "z/%08x", (i*2654435761)%(1<<32)), w, pebble.NoSync); err != nil {
				wrote <- err
				return
			}
		}
		wrote <- nil
	}()
	select {
	case err := <-wrote:
		require.NoError(t, err)
	case <-time.After(30 * time.Second):
		n, took := d.WriteStalls()
		// Let the compaction go so the writes, and Close, can end.
		fs.release.open()
		<-wrote
		<-compacted
		t.Fatalf("48 MiB of writes did not finish in 30 s while a bucket's compaction ran (%d stalls, %v): %s", n, took, logs.String())
	}
	require.NotContains(t, logs.String(), "L0 file count limit exceeded")
	fs.release.open()
	require.NoError(t, <-compacted)
}

// failingTablesFS refuses to create tables while failing is set, as a
// process out of file descriptors does, and counts the refusals.
type failingTablesFS struct {
	vfs.FS
	failing atomic.Bool
	refused atomic.Int64
}

func (f *failingTablesFS) Create(name string, c vfs.DiskWriteCategory) (vfs.File, error) {
	if strings.HasSuffix(name, ".sst") && f.failing.Load() {
		f.refused.Add(1)
		return nil, fmt.Errorf("open %s: too many open files", name)
	}
	return f.FS.Create(name, c)
}

// Pebble retries a failed flush at once, and logged each failure: a node
// out of file descriptors logged 220,000 lines (33 MB) in 30 s. Its
// background errors are now logged at most once every 10 s, with a count,
// and the flush still goes through once tables can be made again.
func TestFailingFlushesAreLoggedSpaced(t *testing.T) {
	fs := &failingTablesFS{FS: vfs.NewMem()}
	var logs syncBuffer
	d, err := Open("db", Options{FS: fs, MemTableBytes: 1 << 20, FilterBytes: -1,
		Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	require.NoError(t, err)
	t.Cleanup(func() { d.Close() })

	fs.failing.Store(true)
	v := bytes.Repeat([]byte("x"), 64<<10)
	for i := range 32 { // 2 MiB: more than a memtable, so a flush is due
		require.NoError(t, d.pdb.Set([]byte(fmt.Sprint("k", i)), v, pebble.NoSync))
	}
	flushed := make(chan error, 1)
	go func() { flushed <- d.pdb.Flush() }()
	// Pebble retries the flush at once: 50 refusals come within
	// milliseconds (the bound only ends a run where they never do).
	require.Eventually(t, func() bool { return fs.refused.Load() >= 50 }, time.Minute, time.Millisecond, "the flush was not retried")
	fs.failing.Store(false)
	require.NoError(t, <-flushed)
	require.Equal(t, 1, strings.Count(logs.String(), "background error"), "%d refused creates:\n%.2000s", fs.refused.Load(), logs.String())
	got, closer, err := d.pdb.Get([]byte("k31"))
	require.NoError(t, err)
	require.Equal(t, v, got)
	closer.Close()
}
