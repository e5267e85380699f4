package raftfsm

import (
	"bytes"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/stretchr/testify/require"
)

// Recover records whom it left out; a second recover of the same data dir
// (its configuration now the survivor alone) must not forget them, and a
// recover that names a member again takes it off the list (the file goes
// with the last).
func TestRecordRecoveryKeepsWhomEveryRecoveryLeftOut(t *testing.T) {
	dir := t.TempDir()
	n1 := []Peer{{ID: "n1"}}
	require.NoError(t, recordRecovery(dir, "n1", []string{"n1", "n2", "n3"}, n1, 40, ""))
	rec, err := readRecoveryRecord(dir)
	require.NoError(t, err)
	require.Equal(t, []string{"n2", "n3"}, rec.LeftOut)
	require.Equal(t, uint64(40), rec.Applied)

	require.NoError(t, recordRecovery(dir, "n1", []string{"n1"}, n1, 41, ""))
	rec, err = readRecoveryRecord(dir)
	require.NoError(t, err)
	require.Equal(t, []string{"n2", "n3"}, rec.LeftOut, "the second recover forgot them")

	require.NoError(t, recordRecovery(dir, "n1", []string{"n1"}, []Peer{{ID: "n1"}, {ID: "n3"}}, 42, ""))
	rec, err = readRecoveryRecord(dir)
	require.NoError(t, err)
	require.Equal(t, []string{"n2"}, rec.LeftOut)

	require.NoError(t, recordRecovery(dir, "n1", []string{"n1", "n3"}, []Peer{{ID: "n1"}, {ID: "n2"}, {ID: "n3"}}, 43, ""))
	_, err = os.Stat(filepath.Join(dir, recoveredFile))
	require.ErrorIs(t, err, os.ErrNotExist, "no one left out: no file")

	require.NoError(t, os.WriteFile(filepath.Join(dir, recoveredFile), []byte("{"), 0o600))
	_, err = readRecoveryRecord(dir)
	require.ErrorContains(t, err, "is damaged")
}

// Bug (an operator walk): idem recover on a data dir restored in a member's
// place rewrote recovered.json with its own applied index (the restored
// one, far above the backup's) and "idem recover": a left-out member whose
// log held claims acknowledged after the backup was then told its records
// were older than the recovered cluster's, and the restored node never
// logged it as ahead. The restore's cut-off and name must stay.
func TestRecoverAfterRestoreInPlaceKeepsTheBackupsIndex(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, RecordRestoreInPlace(dir, "n1", []string{"n2", "n3"}, 18))
	require.NoError(t, recordRecovery(dir, "n1", []string{"n1"}, []Peer{{ID: "n1"}}, RestoredIndex(18, time.Now()), ""))
	rec, err := readRecoveryRecord(dir)
	require.NoError(t, err)
	require.Equal(t, []string{"n2", "n3"}, rec.LeftOut)
	require.Equal(t, uint64(18), rec.Applied)
	require.Equal(t, viaRestore, rec.Via)

	detail := markerDetail(leftOutError("n1", rec, raft.RPCHeader{ID: []byte("n2")}))
	msg := supersededRecord{From: "n1", Detail: detail, Applied: 29, RecoveredFrom: recoveredFromIndex(detail)}.message("/data/n2")
	require.Contains(t, msg, "is ahead of the state that recovery started from (index 18)")
	require.Contains(t, msg, "idem snapshot restore")

	// A later recover that leaves out a member anew, at a lower index,
	// takes that one.
	require.NoError(t, recordRecovery(dir, "n1", []string{"n1", "n4"}, []Peer{{ID: "n1"}}, 10, ""))
	rec, err = readRecoveryRecord(dir)
	require.NoError(t, err)
	require.Equal(t, []string{"n2", "n3", "n4"}, rec.LeftOut)
	require.Equal(t, uint64(10), rec.Applied)
}

// Bug (an operator walk): recovering the survivor whose log ended lower
// (n1 at 1877, while n2 held acknowledged records up to 1910), n2 was told
// its data dir "holds an older state" and to start with an empty one,
// which throws away the only copy of those records. A node ahead of the
// state the recovery started from is told so, and not to delete it.
func TestSupersededNodeAheadOfTheRecoveryIsToldToKeepItsData(t *testing.T) {
	detail := markerDetail(leftOutError("n1", recoveryRecord{Applied: 1877}, raft.RPCHeader{ID: []byte("n2")}))
	require.Equal(t, uint64(1877), recoveredFromIndex(detail))
	require.NotContains(t, detail, "older")

	ahead := supersededRecord{From: "n1", Detail: detail, Applied: 1910, RecoveredFrom: recoveredFromIndex(detail)}
	msg := ahead.message("/data/n2")
	require.Contains(t, msg, "(index 1910) is ahead of the state that recovery started from (index 1877)")
	require.Contains(t, msg, "Do not delete this data dir")
	require.Contains(t, msg, "run idem recover on this data dir instead (its log ends highest) and delete /data/n2/superseded.json;")
	require.NotContains(t, msg, "older than")
	// It said "Only if that recovery was the choice to keep ... delete
	// superseded.json to serve this data dir again": the one choice under
	// which serving this data dir beside the recovered cluster claims keys
	// twice (an operator walk of a restore in place).
	require.NotContains(t, msg, "recovery was the choice to keep")
	require.Contains(t, msg, "Only if this data dir is the copy to keep and n1 is stopped for good")
	require.NotContains(t, msg, "made from a survivor", "a restore starts from a backup, not a survivor")

	behind := ahead
	behind.Applied = 1800
	require.Contains(t, behind.message("/data/n2"), "The records here are older than the recovered cluster's")
	require.Zero(t, recoveredFromIndex("no index here"))
}

// The recovered node, asked for a vote by a left-out member whose log
// ends past the state the recovery started from, says the recovery may
// have been made from the wrong survivor (it said nothing, an operator
// walk); a member behind it is no news.
func TestRecoveredNodeSaysALeftOutMemberIsAhead(t *testing.T) {
	var logs bytes.Buffer
	g := &foreignGuard{leftOut: recoveryRecord{Applied: 1877}, log: slog.New(slog.NewTextHandler(&logs, nil))}
	g.leftOutAheadOf(raft.RPCHeader{ID: []byte("n2"), Addr: []byte("127.0.0.2:7071")}, 1800)
	require.Empty(t, logs.String())
	g.leftOutAheadOf(raft.RPCHeader{ID: []byte("n2"), Addr: []byte("127.0.0.2:7071")}, 1910)
	require.Contains(t, logs.String(), "ends past the state this recovery started from")
	require.Contains(t, logs.String(), "member-last-log-index=1910 recovered-from-index=1877")
}
