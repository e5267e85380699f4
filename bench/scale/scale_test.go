package scale

import (
	"context"
	"encoding/json"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idem-store/idem/engine"
	"github.com/idem-store/idem/partition"
)

// The generator's records come in the loader's key order and cover the
// retention: the loader would refuse anything else.
func TestGeneratedRecordsAreInKeyOrder(t *testing.T) {
	now := time.Now().UnixMilli()
	g := newGen(1, 7, 200, 10, 3_600_000, 86_400_000, now, 5000)
	spans := g.liveSpans(5000)
	require.Len(t, spans, 25) // 24 h at 1 h, not aligned: 25 buckets
	var last []byte
	n := 0
	require.NoError(t, g.each(spans, func(rs []engine.Record) error {
		for _, r := range rs {
			k := engine.RecordKey(partition.Of(r.ExpiresMs, 3_600_000), engine.AppendScope(nil, r.Scope, false))
			require.Greater(t, string(k), string(last))
			last = k
			require.Greater(t, r.ExpiresMs, now)
			require.LessOrEqual(t, r.ExpiresMs, now+86_400_000)
			require.Len(t, r.Key, 36)
			require.Len(t, r.Fingerprint, 64)
			if r.Response != nil {
				require.True(t, json.Valid(r.Response.Body), "%s", r.Response.Body)
				require.InDelta(t, 200, len(r.Response.Body), 1)
			}
			n++
		}
		return nil
	}))
	require.Equal(t, 5000, n)
	require.NotEmpty(t, g.sample)
}

// A tiny scale run against a real server process: the report has every
// figure, and the correctness checks hold (claims, loaded records found
// and replayed, the expired bucket dropped with exactly its records).
func TestScaleRunTiny(t *testing.T) {
	if testing.Short() {
		t.Skip("starts idem serve processes")
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "idem")
	out, err := exec.Command("go", "build", "-o", bin, "../../cmd/idem").CombinedOutput()
	require.NoError(t, err, "%s", out)
	var progress strings.Builder
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	rep, err := Run(ctx, Config{
		Sizes: []int64{20_000}, Binary: bin, Dir: filepath.Join(dir, "work"), Principals: 50, BodyBytes: 256,
		Retention: 24 * time.Hour, BucketWidth: 2 * time.Hour, CacheBytes: 16 << 20, Seed: 3,
		Concurrency: 8, Duration: time.Second, BenchPrincipals: 10,
		DropRecords: 20_000, DropAfter: 2 * time.Second, DropLoad: 5 * time.Second, ReclaimTimeout: 2 * time.Second,
		ReadyTimeout: 30 * time.Second, SettleTimeout: time.Minute, StartSlack: 3 * time.Second, Progress: &progress,
	})
	t.Log(progress.String())
	require.NoError(t, err)
	require.True(t, rep.Correct)
	require.Len(t, rep.Sizes, 1)
	s := rep.Sizes[0]
	require.Equal(t, int64(20_000), s.Records)
	require.Equal(t, 13, s.Buckets) // 24 h of 2 h buckets, not aligned
	require.Equal(t, 50, s.Principals)
	require.Positive(t, s.Claims)
	require.Positive(t, s.P99)
	require.Equal(t, 200, s.LoadedChecked)
	require.Zero(t, s.LoadedWrong)
	require.Positive(t, s.RSSBytes)
	require.GreaterOrEqual(t, s.HWMBytes, s.RSSBytes)
	require.Positive(t, s.HeapBytes)
	require.Positive(t, s.FSMBytes)
	require.Greater(t, s.DataBytes, s.FSMBytesAfter)
	require.True(t, s.StopOK, "SIGTERM must stop the server cleanly")

	d := rep.Drop
	require.NotNil(t, d)
	require.True(t, d.Dropped)
	require.True(t, d.DroppedRecordsOK)
	require.Equal(t, int64(20_000), d.Records)
	require.InDelta(t, 2, d.DropAtSeconds, 2.5)
	require.Positive(t, d.ApplySeconds)
	require.Positive(t, d.WindowClaims)
	require.Positive(t, d.FSMBefore)

	md := Markdown(rep)
	for _, want := range []string{"| live records |", "| 20 k |", "### Dropping an expired bucket", "Correctness: ok"} {
		require.Contains(t, md, want)
	}
	b, err := json.Marshal(rep)
	require.NoError(t, err)
	for _, want := range []string{`"p99_ms"`, `"rss_bytes"`, `"hwm_bytes"`, `"fsm_bytes_per_record"`, `"apply_s"`, `"window_max_ms"`, `"fsm_bytes_after_compaction"`} {
		require.Contains(t, string(b), want)
	}
}

func BenchmarkGenerate(b *testing.B) {
	g := newGen(1, 10000, 256, 0, 7_200_000, 86_400_000, time.Now().UnixMilli(), int64(b.N))
	b.ResetTimer()
	n := 0
	g.each(g.liveSpans(int64(b.N)), func(rs []engine.Record) error { n += len(rs); return nil })
}
