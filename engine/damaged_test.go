package engine

import (
	"os"
	"path/filepath"
	"strings"
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

// Files the MANIFEST lists, gone or cut short (an operator walk): Pebble's
// bare "could not open manifest file", "unknown to the objstorage provider:
// file does not exist" and "object size mismatch" named the file but not
// what to do. Each refusal now says it, as for a damaged MANIFEST.
func TestMissingOrShortStoreFilesSayWhatToDo(t *testing.T) {
	build := func(t *testing.T) (string, string) {
		dir := filepath.Join(t.TempDir(), "fsm")
		db, err := Open(dir, Options{CacheBytes: 1 << 20})
		require.NoError(t, err)
		tx := db.Begin()
		tx.EnsureWidth(testWidth)
		now := tx.Advance(t0)
		for i := range 200 {
			require.Equal(t, OutcomeClaimed, tx.Claim(args(scope("k"+string(rune('a'+i%26))+string(rune('a'+i/26)))), uint64(10+i), now).Outcome)
		}
		require.NoError(t, tx.Commit(300))
		require.NoError(t, db.pdb.Flush())
		require.NoError(t, db.Close())
		ssts, err := filepath.Glob(filepath.Join(dir, "*.sst"))
		require.NoError(t, err)
		require.NotEmpty(t, ssts)
		return dir, ssts[0]
	}
	damage := map[string]func(t *testing.T, dir, sst string){
		"manifest removed": func(t *testing.T, dir, _ string) {
			m, err := filepath.Glob(filepath.Join(dir, "MANIFEST-*"))
			require.NoError(t, err)
			require.NotEmpty(t, m)
			require.NoError(t, os.Remove(m[len(m)-1]))
		},
		"table removed":   func(t *testing.T, _, sst string) { require.NoError(t, os.Remove(sst)) },
		"table cut short": func(t *testing.T, _, sst string) { require.NoError(t, os.Truncate(sst, 100)) },
	}
	for name, f := range damage {
		t.Run(name, func(t *testing.T) {
			dir, sst := build(t)
			f(t, dir, sst)
			_, err := Open(dir, Options{CacheBytes: 1 << 20})
			require.Error(t, err)
			require.ErrorContains(t, err, "Nothing was changed")
			require.ErrorContains(t, err, "empty data dir and --join")
			require.ErrorContains(t, err, "idem snapshot restore")
		})
	}
}

// storeWithTable builds a store holding 200 claims in a table, closed; it
// returns its directory and the scopes claimed.
func storeWithTable(t *testing.T) (string, []Scope) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "fsm")
	db, err := Open(dir, Options{CacheBytes: 1 << 20})
	require.NoError(t, err)
	tx := db.Begin()
	tx.EnsureWidth(testWidth)
	now := tx.Advance(t0)
	var scopes []Scope
	for i := range 200 {
		s := scope("k" + string(rune('a'+i%26)) + string(rune('a'+i/26)))
		require.Equal(t, OutcomeClaimed, tx.Claim(args(s), uint64(10+i), now).Outcome)
		scopes = append(scopes, s)
	}
	require.NoError(t, tx.Commit(300))
	require.NoError(t, db.pdb.Flush())
	require.NoError(t, db.Close())
	return dir, scopes
}

// currentManifest is the MANIFEST dir's marker names.
func currentManifest(t *testing.T, dir string) string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(dir, "marker.manifest.*"))
	require.NoError(t, err)
	require.Len(t, m, 1)
	name := filepath.Base(m[0])
	return filepath.Join(dir, name[strings.Index(name, "MANIFEST-"):])
}

// A bit flips in the MANIFEST's edit that added the store's table (a
// durability walk). Pebble read the edit as a torn end, opened the store
// without the table, deleted the table, and the node served 404 for the
// records it had acknowledged. It is refused now, the table kept; a
// manifest whose last append was cut short by a crash still opens.
func TestFlippedBitInTheManifestIsRefused(t *testing.T) {
	dir, _ := storeWithTable(t)
	manifest := currentManifest(t, dir)
	b, err := os.ReadFile(manifest)
	require.NoError(t, err)
	b[len(b)-5] ^= 0x10
	require.NoError(t, os.WriteFile(manifest, b, 0o600))
	ssts, err := filepath.Glob(filepath.Join(dir, "*.sst"))
	require.NoError(t, err)
	require.NotEmpty(t, ssts)

	db, err := Open(dir, Options{CacheBytes: 1 << 20})
	if err == nil {
		_, ok := db.Lookup(scope("ka"), false, db.Meta().NowMs)
		db.Close()
		require.Fail(t, "a store with a damaged MANIFEST must not open", "its first record found: %v", ok)
	}
	require.ErrorContains(t, err, manifest)
	require.ErrorContains(t, err, "is damaged")
	require.ErrorContains(t, err, "Nothing was changed")
	require.ErrorContains(t, err, "empty data dir and --join")
	for _, s := range ssts {
		require.FileExists(t, s, "the tables are kept")
	}
	after, err := os.ReadFile(manifest)
	require.NoError(t, err)
	require.Equal(t, b, after)

	// A crash while Pebble appended its next edit: a chunk cut short.
	dir, scopes := storeWithTable(t)
	manifest = currentManifest(t, dir)
	f, err := os.OpenFile(manifest, os.O_WRONLY|os.O_APPEND, 0)
	require.NoError(t, err)
	_, err = f.Write([]byte{0xde, 0xad, 0xbe, 0xef, 0xf4, 0x01, 1, 'p', 'a', 'r', 't'})
	require.NoError(t, err)
	require.NoError(t, f.Close())
	db, err = Open(dir, Options{CacheBytes: 1 << 20})
	require.NoError(t, err, "a torn last edit is a crash's, not damage")
	defer db.Close()
	for _, s := range scopes {
		_, ok := db.Lookup(s, false, db.Meta().NowMs)
		require.True(t, ok, "%v", s)
	}
}
