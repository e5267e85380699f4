package raftfsm

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// Recover records whom it left out; a second recover of the same data dir
// (its configuration now the survivor alone) must not forget them, and a
// recover that names a member again takes it off the list (the file goes
// with the last).
func TestRecordRecoveryKeepsWhomEveryRecoveryLeftOut(t *testing.T) {
	dir := t.TempDir()
	n1 := []Peer{{ID: "n1"}}
	require.NoError(t, recordRecovery(dir, "n1", []string{"n1", "n2", "n3"}, n1, 40))
	rec, err := readRecoveryRecord(dir)
	require.NoError(t, err)
	require.Equal(t, []string{"n2", "n3"}, rec.LeftOut)
	require.Equal(t, uint64(40), rec.Applied)

	require.NoError(t, recordRecovery(dir, "n1", []string{"n1"}, n1, 41))
	rec, err = readRecoveryRecord(dir)
	require.NoError(t, err)
	require.Equal(t, []string{"n2", "n3"}, rec.LeftOut, "the second recover forgot them")

	require.NoError(t, recordRecovery(dir, "n1", []string{"n1"}, []Peer{{ID: "n1"}, {ID: "n3"}}, 42))
	rec, err = readRecoveryRecord(dir)
	require.NoError(t, err)
	require.Equal(t, []string{"n2"}, rec.LeftOut)

	require.NoError(t, recordRecovery(dir, "n1", []string{"n1", "n3"}, []Peer{{ID: "n1"}, {ID: "n2"}, {ID: "n3"}}, 43))
	_, err = os.Stat(filepath.Join(dir, recoveredFile))
	require.ErrorIs(t, err, os.ErrNotExist, "no one left out: no file")

	require.NoError(t, os.WriteFile(filepath.Join(dir, recoveredFile), []byte("{"), 0o600))
	_, err = readRecoveryRecord(dir)
	require.ErrorContains(t, err, "is damaged")
}
