package raftfsm

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/stretchr/testify/require"

	"github.com/idem-store/idem/engine"
)

// fillFSM applies n fresh claims (completed, with a 256-byte response for
// every fourth) in raft batches of 512.
func fillFSM(tb testing.TB, f *FSM, n int) {
	now := time.Now().UnixMilli()
	body := bytes.Repeat([]byte("x"), 256)
	batch := make([]*raft.Log, 0, 512)
	for i := 1; i <= n; i++ {
		s := engine.Scope{Principal: "cus_" + strconv.Itoa(i%5000), Endpoint: "POST /payments", Key: fmt.Sprintf("key-%09d", i)}
		c := &Command{Op: OpClaim, NowMs: now, WidthMs: 2 * 3600_000, Claim: &engine.ClaimArgs{
			Scope: s, Fingerprint: "9f86d081884c7d65", LeaseMs: 30000, RetentionMs: 86_400_000}}
		if i%4 == 0 {
			c = &Command{Op: OpComplete, NowMs: now, Target: &engine.TokenArgs{Scope: engine.Scope{
				Principal: "cus_" + strconv.Itoa((i-1)%5000), Endpoint: "POST /payments", Key: fmt.Sprintf("key-%09d", i-1)}, Token: uint64(i - 1)},
				Response: &engine.Response{Status: 201, ContentType: "application/json", Body: body}}
		}
		data, err := c.Encode()
		require.NoError(tb, err)
		batch = append(batch, &raft.Log{Index: uint64(i), Type: raft.LogCommand, Data: data})
		if len(batch) == cap(batch) || i == n {
			f.ApplyBatch(batch)
			batch = batch[:0]
		}
	}
}

type fileSink struct{ *os.File }

func (s fileSink) ID() string    { return "bench" }
func (s fileSink) Cancel() error { return s.File.Close() }

// TestSnapshotSize measures snapshot size and time at IDEM_SNAPSHOT_RECORDS
// records (e.g. 1000000); skipped unless set, since loading takes minutes.
func TestSnapshotSize(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv("IDEM_SNAPSHOT_RECORDS"))
	if n == 0 {
		t.Skip("set IDEM_SNAPSHOT_RECORDS=1000000 to measure")
	}
	f, db := mustFSM(t, t.TempDir())
	defer db.Close()
	start := time.Now()
	fillFSM(t, f, n)
	t.Logf("loaded %d log entries in %s", n, time.Since(start))

	start = time.Now()
	snap, err := f.Snapshot()
	require.NoError(t, err)
	took := time.Since(start)
	out, err := os.Create(t.TempDir() + "/snap")
	require.NoError(t, err)
	start = time.Now()
	require.NoError(t, snap.Persist(fileSink{out}))
	persist := time.Since(start)
	snap.Release()
	st, err := os.Stat(out.Name())
	require.NoError(t, err)
	t.Logf("Snapshot() returned in %s; Persist wrote %d bytes (%.1f MiB, %.0f B/entry) in %s",
		took, st.Size(), float64(st.Size())/(1<<20), float64(st.Size())/float64(n), persist)

	dst, dstDB := mustFSM(t, t.TempDir())
	defer dstDB.Close()
	in, err := os.Open(out.Name())
	require.NoError(t, err)
	start = time.Now()
	require.NoError(t, dst.Restore(io.NopCloser(in)))
	t.Logf("Restore took %s", time.Since(start))
	require.Equal(t, stateHash(t, db), stateHash(t, dstDB))
}
