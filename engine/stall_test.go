package engine

import (
	"bytes"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/stretchr/testify/require"
)

// heldFlushFS holds every table Pebble creates until release is closed: a
// disk so slow that the memtables' flush cannot keep up.
type heldFlushFS struct {
	vfs.FS
	release chan struct{}
}

func (f *heldFlushFS) Create(name string, c vfs.DiskWriteCategory) (vfs.File, error) {
	if strings.HasSuffix(name, ".sst") {
		<-f.release
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
	fs := &heldFlushFS{FS: vfs.NewMem(), release: make(chan struct{})}
	var logs syncBuffer
	d, err := Open("db", Options{FS: fs, MemTableBytes: 1 << 20, FilterBytes: -1,
		Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	require.NoError(t, err)
	released := false
	release := func() {
		if !released {
			released = true
			close(fs.release)
		}
	}
	t.Cleanup(func() { release(); d.Close() })
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
	release()
	require.NoError(t, <-done)

	n, took = d.WriteStalls()
	require.GreaterOrEqual(t, n, int64(1))
	require.GreaterOrEqual(t, took, 2*stallLogAfter)
	require.Contains(t, logs.String(), "the store stalled writes")
	require.Contains(t, logs.String(), "memtable count limit reached")
}
