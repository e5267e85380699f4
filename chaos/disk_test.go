package chaos

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// The disk nemesis's filesystems: each node's own, filled to each level
// and given back, then unmounted and removed. Real mounts: root, mkfs.ext4
// and loop devices, else skipped (the nemesis is refused there too).
func TestDisksFillEachLevelAndGiveItBack(t *testing.T) {
	if why := diskUnusable(); why != "" {
		t.Skip("the disk nemesis cannot run here: " + why)
	}
	dir := t.TempDir()
	n := &Node{ID: "n1"}
	d, err := SetupDisks([]*Node{n}, dir)
	require.NoError(t, err)
	t.Cleanup(func() { d.Teardown(false) })
	mnt := filepath.Join(dir, "n1-disk")
	require.Equal(t, filepath.Join(mnt, "data"), n.DataDir)
	require.True(t, mounted(t, mnt))
	empty, err := d.free(n)
	require.NoError(t, err)
	require.Greater(t, empty, uint64(DiskImageSize*9/10), "an empty 1 GiB ext4 without reserved blocks")

	for _, lv := range diskLevels {
		free, err := d.fill(n, lv.leave)
		require.NoError(t, err, lv.name)
		require.LessOrEqual(t, free, lv.leave, lv.name)
		if lv.leave > 0 {
			require.Greater(t, free, lv.leave-(1<<20), "%s: filled to within 1 MiB of the level", lv.name)
		} else {
			require.Less(t, free, uint64(1<<20), lv.name)
			require.Error(t, os.WriteFile(filepath.Join(mnt, "more"), make([]byte, 1<<20), 0o644), "no room for a MiB more")
			os.Remove(filepath.Join(mnt, "more"))
		}
		require.NoError(t, d.drain(n))
		back, err := d.free(n)
		require.NoError(t, err)
		require.Greater(t, back, empty-(1<<20), "%s: the space is given back", lv.name)
	}

	require.NoError(t, d.Teardown(false))
	require.False(t, mounted(t, mnt))
	require.NoDirExists(t, mnt)
	require.NoFileExists(t, filepath.Join(dir, "n1.ext4"))
}

func mounted(t *testing.T, dir string) bool {
	b, err := os.ReadFile("/proc/mounts")
	require.NoError(t, err)
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) > 1 && f[1] == dir {
			return true
		}
	}
	return false
}
