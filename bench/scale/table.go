package scale

import (
	"fmt"
	"strings"
)

func mib(b int64) string {
	if b < 0 {
		return "n/a"
	}
	return fmt.Sprintf("%.0f", float64(b)/(1<<20))
}

func count(n int64) string {
	switch {
	case n >= 1_000_000 && n%100_000 == 0:
		return fmt.Sprintf("%g M", float64(n)/1e6)
	case n >= 1000 && n%1000 == 0:
		return fmt.Sprintf("%d k", n/1000)
	}
	return fmt.Sprint(n)
}

// Markdown renders the report as markdown tables.
func Markdown(r *Report) string {
	var b strings.Builder
	c := r.Config
	fmt.Fprintf(&b, "## idem bench scale — %s\n\n", r.Started.Format("2006-01-02 15:04 UTC"))
	fmt.Fprintf(&b, "Machine: %s. Loaded records: completed (%d%% in progress), %d principals, 5 endpoints, 36-byte keys, "+
		"64-hex fingerprints, %d-byte JSON bodies, expiries spread over %s; bucket width %s; server cache %s MiB. "+
		"Claims: %d clients, fresh claims, %s after %s warm-up.\n\n",
		r.Machine, c.InProgressPct, c.Principals, c.BodyBytes, c.Retention, c.BucketWidth, mib(c.CacheBytes),
		c.Concurrency, c.Duration, c.Warmup)
	if len(r.Sizes) > 0 {
		b.WriteString("| live records | load s | load rec/s | settle s | filters s | claims/s | p50 ms | p99 ms | max ms | errors | RSS MiB | VmHWM MiB | Go heap MiB | fsm MiB | data dir MiB | B/record | load avg |\n")
		b.WriteString("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|\n")
		for _, s := range r.Sizes {
			fmt.Fprintf(&b, "| %s | %.1f | %.0f | %.1f | %.1f | %.0f | %.2f | %.2f | %.2f | %d | %s | %s | %s | %s | %s | %.0f | %s |\n",
				count(s.Records), s.LoadSeconds, s.LoadPerSec, s.SettleSeconds, s.FilterSeconds, s.ClaimsPerSec, s.P50, s.P99, s.Max, s.Errors,
				mib(s.RSSBytes), mib(s.HWMBytes), mib(s.HeapBytes), mib(s.FSMBytes), mib(s.DataBytes), s.BytesPerRec, s.LoadAvgBefore)
		}
		if r.P99Ratio > 0 {
			fmt.Fprintf(&b, "\nClaim p99 at the largest size / at the smallest: **%.2f×** (target ≤ 1.5×).\n", r.P99Ratio)
		}
		b.WriteString("\nB/record: the fsm dir (Pebble) after the load and its compactions (settle s), divided by the records. RSS and VmHWM: /proc/PID/status of the server after the claim run; Go heap: go_memstats_heap_inuse_bytes. filters s: server start until its probe filters were built from the loaded store (idem_probe_filter_ready); claims were measured after it.\n")
	}
	if d := r.Drop; d != nil {
		b.WriteString("\n### Dropping an expired bucket under claim load\n\n")
		b.WriteString("| records in bucket | load s | dropped at s | apply s | claims/s | p50 ms | p99 ms | max ms | ±2 s claims | ±2 s p99 ms | ±2 s max ms | ±2 s over 50 ms | fsm before MiB | right after MiB | after compaction MiB | reclaimed in s |\n")
		b.WriteString("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
		if !d.Dropped {
			fmt.Fprintf(&b, "| %s | %.1f | not dropped during the run | | %.0f | %.2f | %.2f | %.2f | | | | | | | | |\n",
				count(d.Records), d.LoadSeconds, d.ClaimsPerSec, d.P50, d.P99, d.Max)
		} else {
			re := fmt.Sprintf("%.1f", d.ReclaimSeconds)
			if !d.Reclaimed {
				re = "not within the timeout"
			}
			fmt.Fprintf(&b, "| %s | %.1f | %.1f | %.3f | %.0f | %.2f | %.2f | %.2f | %d | %.2f | %.2f | %d | %s | %s | %s | %s |\n",
				count(d.Records), d.LoadSeconds, d.DropAtSeconds, d.ApplySeconds, d.ClaimsPerSec, d.P50, d.P99, d.Max,
				d.WindowClaims, d.WindowP99, d.WindowMax, d.Over50ms, mib(d.FSMBefore), mib(d.FSMAfterDrop), mib(d.FSMAfterCompact), re)
		}
		fmt.Fprintf(&b, "\napply s: idem_bucket_drop_apply_seconds (Apply's DropBucket: per-principal quota subtraction and one range deletion). "+
			"±2 s: claims in flight from 2 s before the last /metrics read that did not see the drop to 2 s after the first that did (reads every 200 ms; a read waits while the store's lock is held, so the window widens with a stall). fsm before: the largest size seen before the drop. "+
			"Reclaimed: the fsm dir smaller than before the drop by half of what the loaded bucket took (%s MiB), polled every 200 ms. "+
			"Load average before: %s. Records dropped as counted by the server match: %v.\n", mib(d.FSMLoaded), d.LoadAvgBefore, d.DroppedRecordsOK)
	}
	verdict := "ok"
	if !r.Correct {
		verdict = "FAILED"
	}
	fmt.Fprintf(&b, "\nCorrectness: %s (idem bench's checks at every size; sampled loaded records found and replayed through the API; the drop removed exactly the loaded records).\n", verdict)
	return b.String()
}
