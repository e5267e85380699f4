package engine

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// loadBucket bulk-loads n completed records that all expire in one bucket.
func loadBucket(t *testing.T, db *DB, n int) Record {
	t.Helper()
	l, err := db.NewLoader(LoadOptions{Width: testWidth, NowMs: t0 + 1, RetentionMs: testRet})
	require.NoError(t, err)
	body := []byte(strings.Repeat("b", 200))
	var r Record
	for i := range n {
		r = Record{Scope: Scope{Principal: "p", Endpoint: "POST /x", Key: fmt.Sprintf("k%09d", i)},
			Fingerprint: "fp", Attempt: 1, Token: 1, State: StateCompleted, CreatedMs: t0, ExpiresMs: t0 + 1000,
			CompletedMs: t0 + 1, Response: &Response{Status: 201, Body: body}}
		require.NoError(t, l.Add(&r))
	}
	_, err = l.Finish()
	require.NoError(t, err)
	return r
}

// The compaction of a dropped bucket runs for seconds at millions of
// records. It once held the store's lock for all of it, and a commit needs
// that lock, so every apply (and every claim) waited for it: 23 s at 10 M.
// A commit started while the compaction runs must finish before it does.
func TestCommitsDoNotWaitForBucketCompaction(t *testing.T) {
	db := mustOpenDir(t, t.TempDir())
	last := loadBucket(t, db, 300_000)
	h := &harness{t: t, db: db}
	b := recordBucket(last.ExpiresMs)
	after := b.End(testWidth)
	require.Equal(t, OutcomeDropped, h.drop(after, b).Outcome)

	done := make(chan error, 1)
	go func() { done <- db.CompactBucket(b) }()
	// Wait until Pebble runs the compaction, then commit.
	for db.pdb.Metrics().Compact.NumInProgress == 0 {
		select {
		case err := <-done:
			require.NoError(t, err)
			t.Skip("the compaction ended before it could be seen running: too fast on this machine to tell")
		default:
		}
		runtime.Gosched()
	}
	require.Equal(t, OutcomeClaimed, h.claim(after, args(scope("during"))).Outcome)
	select {
	case <-done:
		t.Fatal("the commit returned only after the compaction ended: it waited for it")
	default:
	}
	require.NoError(t, <-done)
}

// Close during a long operation neither panics nor hangs: the operation
// ends with ErrClosed or completes.
func TestCloseDuringStateHash(t *testing.T) {
	db := mustOpenDir(t, t.TempDir())
	loadBucket(t, db, 100_000)
	errc := make(chan error, 1)
	go func() { _, err := db.StateHash(); errc <- err }()
	require.NoError(t, db.Close())
	if err := <-errc; err != nil {
		require.ErrorIs(t, err, ErrClosed)
	}
	_, err := db.StateHash()
	require.ErrorIs(t, err, ErrClosed)
	require.ErrorIs(t, db.CompactBucket(1), ErrClosed)
}

// A large state restores through many ingested tables (a Pebble batch
// would cap it at 4 GiB), replaces what was there, and leaves no files.
func TestRestoreThroughManyTables(t *testing.T) {
	old := restoreTableBytes
	restoreTableBytes = 64 << 10
	defer func() { restoreTableBytes = old }()

	src := mustOpenDir(t, t.TempDir())
	loadBucket(t, src, 20_000)
	want, err := src.StateHash()
	require.NoError(t, err)
	snap, err := src.Snapshot()
	require.NoError(t, err)
	var buf bytes.Buffer
	_, err = snap.WriteTo(&buf)
	require.NoError(t, err)
	require.NoError(t, snap.Close())

	dir := filepath.Join(t.TempDir(), "fsm")
	dst := &harness{t: t, db: mustOpenDir(t, dir)}
	for i := range 50 {
		dst.claim(t0+int64(i), args(scope(fmt.Sprint("junk", i))))
	}
	require.NoError(t, dst.db.Restore(bytes.NewReader(buf.Bytes())))
	got, err := dst.db.StateHash()
	require.NoError(t, err)
	require.Equal(t, want, got)
	require.Greater(t, dst.db.pdb.Metrics().Ingest.Count, uint64(0), "ingested, not batched")
	_, err = os.Stat(dir + ".restore")
	require.True(t, os.IsNotExist(err), "the restore's tables are gone")

	// Keys out of order are refused before anything changes.
	bad := append([]byte(nil), buf.Bytes()[:len(snapMagic)]...)
	for _, k := range []string{"b", "a"} {
		bad = binary.AppendUvarint(bad, uint64(len(k)))
		bad = append(bad, k...)
		bad = binary.AppendUvarint(bad, 1)
		bad = append(bad, 'v')
	}
	require.ErrorIs(t, dst.db.Restore(bytes.NewReader(bad)), ErrSnapshot)
	got, err = dst.db.StateHash()
	require.NoError(t, err)
	require.Equal(t, want, got)
}

// snapshotBytes is db's state as a snapshot stream (Snapshot.WriteTo).
func snapshotBytes(t testing.TB, db *DB) []byte {
	t.Helper()
	snap, err := db.Snapshot()
	require.NoError(t, err)
	defer snap.Close()
	var buf bytes.Buffer
	_, err = snap.WriteTo(&buf)
	require.NoError(t, err)
	return buf.Bytes()
}

// sstBytes is the bytes of the tables in a store's directory.
func sstBytes(t *testing.T, dir string) int64 {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join(dir, "*.sst"))
	require.NoError(t, err)
	var n int64
	for _, p := range paths {
		if fi, err := os.Stat(p); err == nil {
			n += fi.Size()
		}
	}
	return n
}

// A restore over a state leaves none of the old state's tables on disk.
// It hid the old keys under a range deletion and ingested the new tables
// above it, and the old tables stayed until a compaction that did not
// come: a follower that installed its leader's snapshot three times held
// three states' tables (464 MB for a 173 MB state, a disk-full walk), and
// had no room left for the next install.
func TestRestoreOverAStateFreesItsTables(t *testing.T) {
	src := mustOpenDir(t, t.TempDir())
	loadBucket(t, src, 20_000)
	stream := snapshotBytes(t, src)

	dir := filepath.Join(t.TempDir(), "fsm")
	dst := mustOpenDir(t, dir)
	require.NoError(t, dst.Restore(bytes.NewReader(stream)))
	one := sstBytes(t, dir)
	require.Positive(t, one)
	for i := range 3 {
		require.NoError(t, dst.Restore(bytes.NewReader(stream)))
		require.Eventually(t, func() bool { return sstBytes(t, dir) < one*3/2 }, 2*time.Second, 20*time.Millisecond,
			"restore %d over a state of %d bytes of tables left %d bytes of tables", i+2, one, sstBytes(t, dir))
	}
	want, err := src.StateHash()
	require.NoError(t, err)
	got, err := dst.StateHash()
	require.NoError(t, err)
	require.Equal(t, want, got)
}
