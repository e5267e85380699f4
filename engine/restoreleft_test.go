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
