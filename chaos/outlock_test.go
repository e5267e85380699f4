package chaos

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
)

// Two runs given one --out: the second cleared the first's data dirs under
// its running nodes. A run holds --out; another is refused before it
// clears anything, naming the run that holds it.
func TestRunRefusesAnOutDirAnotherRunHolds(t *testing.T) {
	out := t.TempDir()
	kept := filepath.Join(out, "data", "n1-disk", "raft.db")
	require.NoError(t, os.MkdirAll(filepath.Dir(kept), 0o755))
	require.NoError(t, os.WriteFile(kept, []byte("the first run's"), 0o644))

	// The holder: a run in another process holds the lock file so.
	holder, err := os.OpenFile(filepath.Join(out, ".chaos.lock"), os.O_RDWR|os.O_CREATE, 0o644)
	require.NoError(t, err)
	require.NoError(t, syscall.Flock(int(holder.Fd()), syscall.LOCK_EX|syscall.LOCK_NB))
	_, err = holder.WriteString(strconv.Itoa(os.Getpid()) + "\n")
	require.NoError(t, err)
	_, err = Run(context.Background(), Config{Out: out})
	require.ErrorIs(t, err, ErrHarness)
	require.ErrorContains(t, err, "is in use by another idem chaos run (pid "+strconv.Itoa(os.Getpid())+")")
	require.FileExists(t, kept, "the refused run cleared the holder's data")

}
