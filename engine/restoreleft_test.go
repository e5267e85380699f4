package engine

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// A follower killed while it installed its leader's snapshot leaves the
// restore's tables in DIR.restore. On a disk they had filled (--min-free-disk
// 0 and a snapshot larger than half the disk), Pebble's writes at the next
// Open waited for space for ever, held by those very tables: the node
// never started. Open removes them before Pebble opens.
func TestOpenRemovesTablesOfAnUnfinishedRestore(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "fsm")
	db := mustOpenDir(t, dir)
	require.NoError(t, db.Close())

	left := dir + ".restore"
	require.NoError(t, os.MkdirAll(left, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(left, "000000.sst"), make([]byte, 1<<20), 0o644))

	db = mustOpenDir(t, dir)
	defer db.Close()
	_, err := os.Stat(left)
	require.True(t, os.IsNotExist(err), "the tables of the unfinished restore are still there: %v", err)
}

// Open removes DIR.restore only once it holds the store: while another
// process holds it, those are the tables of its restore in progress, and
// removed between its table writes and its ingest they would fail the
// restore after its range deletion, leaving that node's store empty. A
// second Open of a store in use must fail and leave them be.
func TestOpenOfAStoreInUseLeavesItsRestoreTables(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "fsm")
	db := mustOpenDir(t, dir)
	defer db.Close()

	table := filepath.Join(dir+".restore", "000000.sst")
	require.NoError(t, os.MkdirAll(filepath.Dir(table), 0o755))
	require.NoError(t, os.WriteFile(table, []byte("a table being written"), 0o644))

	_, err := Open(dir, Options{CacheBytes: 1 << 20})
	require.Error(t, err, "a second Open of a store in use")
	_, err = os.Stat(table)
	require.NoError(t, err, "the second Open removed the first's restore tables")
}
