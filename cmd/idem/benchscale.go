package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/idem-store/idem/bench/scale"
)

func runBenchScale(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("idem bench scale", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	self, _ := os.Executable()
	sizes := fs.String("sizes", "1M,10M,50M", "comma-separated numbers of live records to load, one run each (suffix k or M; empty for none)")
	binary := fs.String("binary", self, "the idem binary started as the server (default: this one)")
	dir := fs.String("dir", "scale-data", "work directory: a fresh data dir per run, server logs")
	keep := fs.Bool("keep", false, "keep the data dirs after each run (they take ~10 GB per 50 M records)")
	loadPrincipals := fs.Int("load-principals", 10000, "principals the loaded records are spread over")
	bodyBytes := fs.Int("body-bytes", 256, "stored response body of each loaded record (JSON with random ids)")
	inProgress := fs.Int("in-progress-pct", 0, "percent of loaded records left in progress (a lease entry each) instead of completed")
	retention := fs.Duration("retention", 24*time.Hour, "the server's --retention; loaded expiries are spread over it as if created over the past retention")
	width := fs.Duration("bucket-width", 2*time.Hour, "the server's --bucket-width")
	var cache int64
	sizeVar(fs, &cache, "cache-bytes", 64<<20, "the server's --cache-bytes (Pebble block cache), a size as that flag takes (bytes, or e.g. 64MiB)")
	seed := fs.Uint64("seed", 1, "seed of the generated records")
	conc := fs.Int("concurrency", 64, "concurrent clients of the claim workload (fresh claims, as idem bench)")
	dur := fs.Duration("duration", 10*time.Second, "measured claim run at each size (after --warmup)")
	warm := fs.Duration("warmup", 2*time.Second, "unmeasured warm-up before each claim run")
	principals := fs.Int("principals", 100, "principals of the claim workload's fresh keys")
	dropRecords := fs.String("drop-records", "10M", "records in the bucket of the drop scenario (suffix k or M; 0 skips it)")
	dropAfter := fs.Duration("drop-after", 20*time.Second, "drop scenario: how far into the claim load the bucket expires")
	dropLoad := fs.Duration("drop-load", 45*time.Second, "drop scenario: length of the claim load")
	reclaim := fs.Duration("reclaim-timeout", 5*time.Minute, "drop scenario: how long to wait for the fsm dir to shrink below half after the drop")
	ready := fs.Duration("ready-timeout", 5*time.Minute, "how long to wait for the server's /readyz")
	settle := fs.Duration("settle-timeout", 15*time.Minute, "after a load, how long to wait for Pebble's compactions to finish before serving (the run goes on after it)")
	out := fs.String("out", "", "also write the markdown table to this file")
	asJSON := fs.Bool("json", false, "print the report as JSON instead of markdown")
	quiet := fs.Bool("quiet", false, "no progress lines on stderr")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), `Usage: idem bench scale [flags]

For each size: loads that many live records straight into a fresh data dir
(the engine's bulk loader, as if created over the past retention by many
principals), starts "idem serve" on it as a child process, runs the claim
workload of idem bench against it and reports claims/s, p50/p99/max, the
server's RSS and peak RSS, its Go heap, and bytes on disk per record. Then
the drop scenario: one bucket of --drop-records records that expires
--drop-after into a claim load; reports the DropBucket apply time, claim
latency around the drop, and the fsm dir's size before, right after, and
after the compaction that follows. Exits 1 if a correctness check failed.

Flags:
`)
		printFlags(fs.Output(), fs)
	}
	if code, done := parseArgs(fs, args, "idem bench scale", stdout, stderr); done {
		return code
	}
	var ns []int64
	for _, s := range strings.Split(*sizes, ",") {
		if s = strings.TrimSpace(s); s == "" {
			continue
		}
		n, err := parseCount(s)
		if err != nil {
			fmt.Fprintf(stderr, "idem bench scale: --sizes: %v\n", err)
			return 2
		}
		ns = append(ns, n)
	}
	dn, err := parseCount(*dropRecords)
	if err != nil {
		fmt.Fprintf(stderr, "idem bench scale: --drop-records: %v\n", err)
		return 2
	}
	cfg := scale.Config{
		Sizes: ns, Binary: *binary, Dir: *dir, Keep: *keep, Principals: *loadPrincipals, BodyBytes: *bodyBytes,
		InProgressPct: *inProgress, Retention: *retention, BucketWidth: *width, CacheBytes: cache, Seed: *seed,
		Concurrency: *conc, Duration: *dur, Warmup: *warm, BenchPrincipals: *principals,
		DropRecords: dn, DropAfter: *dropAfter, DropLoad: *dropLoad, ReclaimTimeout: *reclaim, ReadyTimeout: *ready, SettleTimeout: *settle,
	}
	if err := cfg.Validate(); err != nil {
		fmt.Fprintf(stderr, "idem bench scale: %v\n", strings.ReplaceAll(err.Error(), "\n", "; "))
		return 2
	}
	if !*quiet {
		cfg.Progress = stderr
	}
	rep, err := scale.Run(ctx, cfg)
	if rep != nil {
		md := scale.Markdown(rep)
		if *out != "" {
			if werr := os.WriteFile(*out, []byte(md), 0o644); werr != nil {
				fmt.Fprintf(stderr, "idem bench scale: --out: %v\n", werr)
				return 2
			}
		}
		if *asJSON {
			enc := json.NewEncoder(stdout)
			enc.SetIndent("", "  ")
			enc.Encode(rep)
		} else {
			fmt.Fprint(stdout, md)
		}
	}
	if err != nil {
		fmt.Fprintf(stderr, "idem bench scale: %v\n", err)
		return 3
	}
	if !rep.Correct {
		fmt.Fprintln(stderr, "idem bench scale: CORRECTNESS CHECK FAILED (see the table)")
		return 1
	}
	return 0
}

// parseCount reads 20000, 20k, 10M.
func parseCount(s string) (int64, error) {
	mult := int64(1)
	switch {
	case strings.HasSuffix(s, "k"), strings.HasSuffix(s, "K"):
		mult, s = 1000, s[:len(s)-1]
	case strings.HasSuffix(s, "M"):
		mult, s = 1_000_000, s[:len(s)-1]
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("%q is not a count (e.g. 20000, 20k, 10M)", s)
	}
	return n * mult, nil
}
