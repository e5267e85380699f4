package engine

import (
	"bytes"
	"log/slog"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/stretchr/testify/require"
)

// fullUnder is the OS filesystem on which every write to a file whose path
// holds part fails with ENOSPC: a disk that a restore's tables fill.
type fullUnder struct {
	vfs.FS
	part string
}

func (f fullUnder) Create(name string, c vfs.DiskWriteCategory) (vfs.File, error) {
	file, err := f.FS.Create(name, c)
	if err != nil || !strings.Contains(name, f.part) {
		return file, err
	}
	return enospcFile{file}, nil
}

type enospcFile struct{ vfs.File }

func (enospcFile) Write([]byte) (int, error) { return 0, syscall.ENOSPC }

// A restore's temporary tables are what fills the disk when a follower
// installs a snapshot larger than its free space (--min-free-disk 0). Written
// through the store's filesystem, which waits for space on ENOSPC, the
// restore waited for ever for space its own tables held: the node's FSM hung
// in the install (and again at every start, restoring the saved snapshot).
// Written through Options.TableFS, the restore fails and gives it back.
func TestRestoreOnAFullDiskFailsRatherThanWaits(t *testing.T) {
	src := mustOpenDir(t, t.TempDir())
	loadBucket(t, src, 2_000)
	stream := snapshotBytes(t, src)

	base := fullUnder{FS: vfs.Default, part: ".restore"}
	var waited atomic.Int32
	dir := filepath.Join(t.TempDir(), "fsm")
	db, err := Open(dir, Options{
		FS:         vfs.OnDiskFull(base, func() { waited.Add(1) }), // as DiskFullFS: idem's onFull waits for space
		TableFS:    base,
		CacheBytes: 1 << 20,
		Logger:     slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn})),
	})
	require.NoError(t, err)
	defer db.Close()
	loadBucket(t, db, 10) // a state of its own, which the failed restore must keep
	applied := db.Meta().Applied
	before, err := db.Stats()
	require.NoError(t, err)
	require.Equal(t, int64(10), before.Records)
	hash, err := db.StateHash()
	require.NoError(t, err)

	err = db.Restore(bytes.NewReader(stream))
	require.ErrorIs(t, err, syscall.ENOSPC)
	require.Zero(t, waited.Load(), "the restore's table writes waited for space (they hold it themselves)")
	require.Equal(t, applied, db.Meta().Applied, "a failed restore changes nothing")
	after, err := db.StateHash()
	require.NoError(t, err)
	require.Equal(t, hash, after, "a failed restore changes nothing")
	st, err := db.Stats()
	require.NoError(t, err)
	require.Equal(t, before.Records, st.Records, "a failed restore changes nothing")
}
