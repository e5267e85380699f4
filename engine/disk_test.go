package engine

import (
	"os"
	"path/filepath"
	"runtime"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
)

// A ballast must hold real blocks: a sparse file gives nothing back when
// it is removed.
func TestBallastReservesBlocksAndGoes(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ballast")
	const size = 8 << 20
	require.NoError(t, CreateBallast(path, size))
	got, err := BallastSize(path)
	require.NoError(t, err)
	require.EqualValues(t, size, got)
	if runtime.GOOS == "linux" {
		fi, err := os.Stat(path)
		require.NoError(t, err)
		st := fi.Sys().(*syscall.Stat_t)
		require.GreaterOrEqual(t, st.Blocks*512, int64(size), "the ballast is sparse")
	}
	_, err = os.Stat(path + ".tmp")
	require.ErrorIs(t, err, os.ErrNotExist)

	require.NoError(t, RemoveBallast(path))
	got, err = BallastSize(path)
	require.NoError(t, err)
	require.Zero(t, got)
	require.NoError(t, RemoveBallast(path), "removing a missing ballast is no error")

	free, err := DiskFree(filepath.Dir(path))
	require.NoError(t, err)
	require.Positive(t, free)
}
