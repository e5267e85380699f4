// Command compare runs idem's load generator (package bench) against
// idem and against the stores people use for idempotency keys instead:
// Redis (SET NX PX), PostgreSQL (INSERT ... ON CONFLICT DO NOTHING
// RETURNING on the classic idempotency-key table) and etcd (a CreateRevision==0 txn), and
// turns the results into one markdown table. It is a separate module so
// that the drivers' dependencies never enter idem's go.mod; run.sh starts
// the servers and calls it.
//
//	compare run   --system redis|postgres|etcd|idem --target ... [workload flags] --out r.json
//	compare ping  --system ... --target ... --timeout 30s
//	compare table r1.json r2.json ... > results.md
//	compare pg-expiry --target DSN --data-dir D --rows N --live M   (pg-expiry.sh starts the server)
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"os/signal"
	"slices"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/idem-store/idem/bench"
	"github.com/idem-store/idem/internal/gcfloor"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if len(os.Args) < 2 {
		usage(os.Stderr)
		os.Exit(2)
	}
	var code int
	switch os.Args[1] {
	case "run":
		code = cmdRun(ctx, os.Args[2:])
	case "ping":
		code = cmdPing(ctx, os.Args[2:])
	case "table":
		code = cmdTable(os.Args[2:], os.Stdout)
	case "pg-expiry":
		code = cmdPGExpiry(ctx, os.Args[2:])
	case "-h", "--help", "help":
		usage(os.Stdout)
	default:
		fmt.Fprintf(os.Stderr, "compare: unknown command %q\n", os.Args[1])
		usage(os.Stderr)
		code = 2
	}
	os.Exit(code)
}

func usage(w io.Writer) {
	fmt.Fprint(w, `Usage:
  compare run   --system redis|postgres|etcd|idem --target T [flags]   load one store, print and save the result
  compare ping  --system S --target T [--timeout 30s]                  wait until the store answers
  compare table RESULT.json...                                         markdown table of saved results
  compare pg-expiry --target DSN [--data-dir D] [--rows N] [--live M]   PostgreSQL expiring N rows of the classic idempotency-key table

--target: redis host:port; postgres DSN (postgres://user@host:port/db); etcd and idem
comma-separated host:port of every node. "compare run --help" lists the workload flags.
`)
}

// Result is one run as saved by "compare run" and read by "compare table".
type Result struct {
	System     string        `json:"system"`     // what ran, e.g. "Redis 7 (appendfsync always)"
	Kind       string        `json:"kind"`       // driver: redis, postgres, etcd, idem
	Durability string        `json:"durability"` // what an acknowledged claim survives
	Durable    bool          `json:"durable"`
	Nodes      int           `json:"nodes"`
	Target     string        `json:"target"`
	Report     *bench.Report `json:"report"`
	// Batch is idem's --batch: the Go client's batcher sent at most Batch
	// ops per POST /v1/batch (0: one request per claim).
	Batch int `json:"batch,omitempty"`
}

type driverOpts struct {
	system, target string
	conns          int
	retention      time.Duration
	batch          int // idem only: see Result.Batch
}

func openDriver(ctx context.Context, o driverOpts) (bench.Driver, error) {
	switch o.system {
	case "redis":
		return newRedisDriver(ctx, o)
	case "postgres":
		return newPostgresDriver(ctx, o)
	case "etcd":
		return newEtcdDriver(ctx, o)
	case "idem":
		return newIdemDriver(ctx, o)
	}
	return nil, fmt.Errorf("unknown --system %q (redis, postgres, etcd, idem)", o.system)
}

func splitList(s string) []string {
	var out []string
	for _, a := range strings.Split(s, ",") {
		if a = strings.TrimSpace(a); a != "" {
			out = append(out, a)
		}
	}
	return out
}

func cmdRun(ctx context.Context, args []string) int {
	fs := flag.NewFlagSet("compare run", flag.ContinueOnError)
	system := fs.String("system", "", "driver: redis, postgres, etcd or idem")
	target := fs.String("target", "", "redis host:port; postgres DSN; etcd/idem comma-separated host:port of the nodes")
	label := fs.String("label", "", "the table's system column (default: the driver name)")
	durability := fs.String("durability", "", "the table's durability column")
	durable := fs.Bool("durable", true, "whether an acknowledged claim survives a crash (false marks the row not durable)")
	conc := fs.Int("concurrency", 64, "concurrent clients")
	dur := fs.Duration("duration", 10*time.Second, "measured run length (after warm-up)")
	ops := fs.Int("ops", 0, "stop after this many measured operations instead of --duration")
	warm := fs.Duration("warmup", 2*time.Second, "unmeasured warm-up")
	mix := fs.String("mix", "fresh=100", "operation weights: fresh, dup, complete, lookup")
	principals := fs.Int("principals", 100, "number of principals")
	keyBytes := fs.Int("key-bytes", 32, "size of each key")
	bodyBytes := fs.Int("body-bytes", 256, "size of each stored response body (complete)")
	retention := fs.Duration("retention", 24*time.Hour, "retention of each claim (Redis PX, PostgreSQL expires_at, etcd lease TTL)")
	out := fs.String("out", "", "save the result as JSON to this file")
	hist := fs.String("hist", "", "write a latency histogram (.svg or .png)")
	quiet := fs.Bool("quiet", false, "no progress line")
	gcFloor := fs.Int64("gc-floor-bytes", 64<<20, "the load generator's Go garbage collection waits until its heap reaches this many bytes, for every system alike, as idem bench does (0: Go's pacing, GOGC)")
	batch := fs.Int("batch", 0, "idem only: send the clients' claims through the Go client's batcher, at most this many ops per POST /v1/batch (0: one request each)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	m, err := bench.ParseMix(*mix)
	if err != nil {
		fmt.Fprintf(os.Stderr, "compare run: --mix: %v\n", err)
		return 2
	}
	if *batch < 0 || (*batch > 0 && *system != "idem") {
		fmt.Fprintf(os.Stderr, "compare run: --batch %d: a positive --batch is for --system idem only\n", *batch)
		return 2
	}
	if *gcFloor < 0 {
		fmt.Fprintf(os.Stderr, "compare run: --gc-floor-bytes %d must be 0 (Go's pacing) or more\n", *gcFloor)
		return 2
	}
	defer gcfloor.Start(*gcFloor).Stop()
	d, err := openDriver(ctx, driverOpts{system: *system, target: *target, conns: *conc, retention: *retention, batch: *batch})
	if err != nil {
		fmt.Fprintf(os.Stderr, "compare run: %s at %s: %v\n", *system, *target, err)
		return 2
	}
	defer d.Close()
	name := *label
	if name == "" {
		name = *system
	}
	cfg := bench.Config{Driver: d, Concurrency: *conc, Duration: *dur, Ops: *ops, Warmup: *warm, Mix: m,
		Principals: *principals, KeyBytes: *keyBytes, BodyBytes: *bodyBytes}
	if !*quiet {
		cfg.Progress = os.Stderr
	}
	fmt.Fprintf(os.Stderr, "== %s (%s): %d clients, %s, %s after %s warm-up\n", name, *target, *conc, m, *dur, *warm)
	rep, err := bench.Run(ctx, cfg)
	if err != nil {
		fmt.Fprintf(os.Stderr, "compare run: %v\n", err)
		return 2
	}
	res := Result{System: name, Kind: *system, Durability: *durability, Durable: *durable,
		Nodes: max(1, len(splitList(*target))), Target: *target, Batch: *batch, Report: rep}
	if *system == "postgres" || *system == "redis" {
		res.Nodes = 1
	}
	printReport(os.Stdout, &res)
	if *hist != "" {
		if err := bench.WriteHistogramFile(*hist, fmt.Sprintf("%s: %d clients, %s, %.0f ops/s", name, *conc, m, rep.OpsPerSec), rep); err != nil {
			fmt.Fprintf(os.Stderr, "compare run: --hist: %v\n", err)
			return 2
		}
	}
	if *out != "" {
		b, _ := json.MarshalIndent(res, "", "  ")
		if err := os.WriteFile(*out, append(b, '\n'), 0o644); err != nil {
			fmt.Fprintf(os.Stderr, "compare run: %v\n", err)
			return 2
		}
	}
	if ctx.Err() != nil {
		fmt.Fprintf(os.Stderr, "compare run: %s: interrupted\n", name)
		return 130
	}
	if !rep.OK() {
		fmt.Fprintf(os.Stderr, "compare run: %s: CORRECTNESS CHECK FAILED: %d fresh claims lost, %d duplicates won, %d wrong answers\n",
			name, rep.LostFresh, rep.DupsWon, rep.WrongAnswer)
		return 1
	}
	return 0
}

func printReport(w io.Writer, res *Result) {
	r := res.Report
	fmt.Fprintf(w, "%s: %.0f ops/s over %.1fs (%d ops); latency ms p50 %.2f p90 %.2f p99 %.2f max %.2f\n",
		res.System, r.OpsPerSec, r.Elapsed, r.Ops, r.All.P50, r.All.P90, r.All.P99, r.All.Max)
	ops := make([]string, 0, len(r.ByOp))
	for op := range r.ByOp {
		ops = append(ops, op)
	}
	sort.Strings(ops)
	for _, op := range ops {
		l := r.ByOp[op]
		fmt.Fprintf(w, "  %-9s %9d  p50 %7.2f  p90 %7.2f  p99 %7.2f  max %8.2f\n", op, l.Count, l.P50, l.P90, l.P99, l.Max)
	}
	if len(r.Errors) > 0 {
		fmt.Fprintf(w, "  errors: %v (%d indeterminate, %d refused: nothing written)\n", r.Errors, r.Indeterminate, r.Refused)
		for _, c := range slices.Sorted(maps.Keys(r.ErrorExamples)) {
			fmt.Fprintf(w, "    e.g. %s: %s\n", c, r.ErrorExamples[c])
		}
	}
	verdict := "ok"
	if !r.OK() {
		verdict = "FAILED"
	}
	fmt.Fprintf(w, "  correctness: %s (fresh claims lost %d, duplicates won %d, wrong answers %d)\n", verdict, r.LostFresh, r.DupsWon, r.WrongAnswer)
}

func cmdPing(ctx context.Context, args []string) int {
	fs := flag.NewFlagSet("compare ping", flag.ContinueOnError)
	system := fs.String("system", "", "driver: redis, postgres, etcd or idem")
	target := fs.String("target", "", "as for run")
	timeout := fs.Duration("timeout", 30*time.Second, "give up after this long")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	var last error
	for {
		last = ping(ctx, *system, *target)
		if last == nil {
			return 0
		}
		select {
		case <-ctx.Done():
			fmt.Fprintf(os.Stderr, "compare ping: %s at %s not ready after %s: %v\n", *system, *target, *timeout, last)
			return 1
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func ping(ctx context.Context, system, target string) error {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	switch system {
	case "redis":
		return pingRedis(ctx, target)
	case "postgres":
		return pingPostgres(ctx, target)
	case "etcd":
		return pingEtcd(ctx, target)
	case "idem":
		return pingIdem(ctx, target)
	}
	return fmt.Errorf("unknown --system %q", system)
}
