package engine

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/stretchr/testify/require"
)

// Pebble's OPTIONS file (the options of the store's last run, rewritten at
// every open) is damaged. Open failed with Pebble's bare "invalid key=value
// syntax", naming neither the file nor that it holds no data and may be
// moved aside. It now names both.
func TestDamagedOptionsFileIsNamed(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "fsm")
	db, err := Open(dir, Options{CacheBytes: 1 << 20})
	require.NoError(t, err)
	require.NoError(t, db.Close())
	opts, err := filepath.Glob(filepath.Join(dir, "OPTIONS-*"))
	require.NoError(t, err)
	require.NotEmpty(t, opts)
	newest := opts[len(opts)-1]
	require.NoError(t, os.WriteFile(newest, []byte("garbage\n"), 0o600))

	_, err = Open(dir, Options{CacheBytes: 1 << 20})
	require.Error(t, err)
	require.ErrorContains(t, err, newest)
	require.ErrorContains(t, err, "move it aside")

	require.NoError(t, os.Rename(newest, newest+".bad"))
	db = mustOpenFS(t, vfs.Default, dir)
	require.NotNil(t, db)
}

// A damaged MANIFEST: Pebble's "malformed manifest file" named the file but
// not what to do. The refusal now says it.
func TestDamagedManifestSaysWhatToDo(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "fsm")
	db, err := Open(dir, Options{CacheBytes: 1 << 20})
	require.NoError(t, err)
	require.NoError(t, db.Close())
	m, err := filepath.Glob(filepath.Join(dir, "MANIFEST-*"))
	require.NoError(t, err)
	require.NotEmpty(t, m)
	require.NoError(t, os.Truncate(m[len(m)-1], 20))

	_, err = Open(dir, Options{CacheBytes: 1 << 20})
	require.Error(t, err)
	require.ErrorContains(t, err, "empty data dir and --join")
	require.ErrorContains(t, err, "idem snapshot restore")
}
