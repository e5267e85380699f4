package main

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/idem-store/idem/api"
	"github.com/idem-store/idem/bench"
	"github.com/idem-store/idem/client"
	"github.com/idem-store/idem/internal/gcfloor"
)

func init() {
	extraCommands["bench"] = command{Run: runBench, Summary: "load-test running nodes over HTTP, check correctness, draw a latency histogram"}
}

func runBench(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 && args[0] == "scale" {
		return runBenchScale(ctx, args[1:], stdout, stderr)
	}
	fs := flag.NewFlagSet("idem bench", flag.ContinueOnError)
	fs.SetOutput(io.Discard) // errors and help are printed below, once
	addrs := fs.String("addr", envOr("IDEM_ADDR", "127.0.0.1:7070"), "comma-separated HTTP addresses of the nodes to load (requests go to the leader once an answer names it, the Idem-Leader header; to a node picked at random until then; env IDEM_ADDR)")
	conc := fs.Int("concurrency", 64, "concurrent clients")
	dur := fs.Duration("duration", 10*time.Second, "measured run length (after warm-up)")
	ops := fs.Int("ops", 0, "stop after this many measured operations instead of --duration")
	warm := fs.Duration("warmup", 2*time.Second, "unmeasured warm-up before the run")
	mix := fs.String("mix", "fresh=100", "operation weights: fresh (new claim, must win), dup (re-claim of an owned key, must lose), complete (claim then complete), lookup")
	principals := fs.Int("principals", 100, "number of principals the keys are spread over")
	keyBytes := fs.Int("key-bytes", 32, "size of each key")
	bodyBytes := fs.Int("body-bytes", 256, "size of each stored response body (complete)")
	token := authTokenFlag(fs, "bearer token when the nodes use --auth-file (env IDEM_AUTH_TOKEN)")
	tlsFlags := addClientTLSFlags(fs, "addr")
	asJSON := fs.Bool("json", false, "print the report as JSON")
	hist := fs.String("hist", "", "write a latency histogram picture (log-scale latency axis) to this file: .svg or .png")
	quiet := fs.Bool("quiet", false, "no progress line")
	cpuProfile := fs.String("cpuprofile", "", "write the load generator's own CPU profile (go tool pprof) to this file: where the client side of the run spends its time")
	var gcFloor int64
	sizeVar(fs, &gcFloor, "gc-floor-bytes", 64<<20, "the load generator's Go garbage collection waits until its heap reaches this many bytes, a size as idem serve's flag of the same name (bytes, or e.g. 64MiB; 0: Go's pacing, GOGC)")
	batch := fs.Int("batch", 0, "coalesce the clients' calls into POST /v1/batch requests of at most this many ops, with the Go client's batcher (0: one request per call; at most 9708, what its requests of 512 KiB hold)")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), "Usage: idem bench [flags]\n       idem bench scale [flags]   (scale benchmark: see idem bench scale --help)\n\nDrives concurrent clients against running nodes, then prints ops/s,\nlatency percentiles (p50/p90/p99/max), errors by code and a correctness\ncheck; --hist draws the latency histogram. Exits 1\nif a fresh claim was lost or a duplicate won.\n\nFlags:\n")
		printFlags(fs.Output(), fs)
	}
	if code, done := parseArgs(fs, args, "idem bench", stdout, stderr); done {
		return code
	}
	if err := batchFlagProblem(*batch); err != nil {
		fmt.Fprintf(stderr, "idem bench: %v\n", err)
		return 2
	}
	if err := authTokenProblem(fs, stderr, "idem bench"); err != nil {
		fmt.Fprintf(stderr, "idem bench: %v\n", err)
		return 2
	}
	if h := strings.ToLower(*hist); h != "" && !strings.HasSuffix(h, ".svg") && !strings.HasSuffix(h, ".png") {
		fmt.Fprintf(stderr, "idem bench: --hist %q must end in .svg or .png\n", *hist)
		return 2
	}
	if *hist != "" {
		// Checked before the run: a missing directory was found only after
		// the whole run, and its histogram lost.
		if dir := filepath.Dir(*hist); dir != "" {
			if st, err := os.Stat(dir); err != nil || !st.IsDir() {
				fmt.Fprintf(stderr, "idem bench: --hist %s: the directory %s does not exist or is not a directory\n", *hist, dir)
				return 2
			}
		}
	}
	// Checked as the client commands check --addr: ":" or a port out of
	// range ran the whole load, every operation a transport error.
	a, err := addrFlag(fs, *addrs)
	if err != nil {
		fmt.Fprintf(stderr, "idem bench: %v\n", err)
		return 2
	}
	*addrs = a
	defer gcfloor.Start(gcFloor).Stop()
	m, err := bench.ParseMix(*mix)
	if err != nil {
		fmt.Fprintf(stderr, "idem bench: --mix: %v\n", strings.TrimPrefix(err.Error(), "bench: "))
		return 2
	}
	tlsCfg, err := tlsFlags.config()
	if err != nil {
		fmt.Fprintf(stderr, "idem bench: %v\n", err)
		return 2
	}
	if tlsCfg == nil && strings.Contains(*addrs, "https://") {
		tlsCfg = &tls.Config{} // https:// without --ca-file: the system's CAs
	}
	cfg := bench.Config{
		Addrs: splitAddrs(*addrs), Concurrency: *conc, Duration: *dur, Ops: *ops, Warmup: *warm, Mix: m,
		Principals: *principals, KeyBytes: *keyBytes, BodyBytes: *bodyBytes, AuthToken: token(), TLS: tlsCfg,
		Batch: *batch,
	}
	if !*quiet {
		cfg.Progress = stderr
	}
	// Checked before anything is asked or written: a bad flag was found
	// only after the nodes' /healthz (a node down said that instead) and
	// after --cpuprofile had truncated its file.
	if err := cfg.Validate(); err != nil {
		fmt.Fprintf(stderr, "idem bench: %v\n", strings.ReplaceAll(err.Error(), "\n", "\nidem bench: "))
		return 2
	}
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			fmt.Fprintf(stderr, "idem bench: --cpuprofile: %v\n", err)
			return 2
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			fmt.Fprintf(stderr, "idem bench: --cpuprofile: %v\n", err)
			return 2
		}
		defer pprof.StopCPUProfile()
	}
	if err := benchPreflight(ctx, stderr, cfg.Addrs, tlsCfg); err != nil {
		fmt.Fprintf(stderr, "idem bench: %v\n", strings.ReplaceAll(err.Error(), "\n", "\nidem bench: "))
		return 1
	}
	rep, err := bench.Run(ctx, cfg)
	if err != nil {
		fmt.Fprintf(stderr, "idem bench: %v\n", strings.ReplaceAll(err.Error(), "\n", "; "))
		return 2
	}
	if *hist != "" {
		title := fmt.Sprintf("idem bench: %s, %d clients, %s, %.0f ops/s", strings.Join(cfg.Addrs, ","), cfg.Concurrency, m, rep.OpsPerSec)
		if err := bench.WriteHistogramFile(*hist, title, rep); err != nil {
			fmt.Fprintf(stderr, "idem bench: --hist: %v\n", err)
			return 2
		}
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		enc.Encode(rep)
	} else {
		printReport(stdout, &cfg, rep)
	}
	if !rep.OK() {
		fmt.Fprintf(stderr, "idem bench: CORRECTNESS CHECK FAILED: %d fresh claims lost, %d duplicates won, %d wrong answers\n",
			rep.LostFresh, rep.DupsWon, rep.WrongAnswer)
		return 1
	}
	if rep.Ops == 0 && rep.ErrorCount() > 0 {
		// Nothing was measured: a run that reached no node (a client
		// certificate missing, the wrong address) is no result.
		code := slices.Sorted(maps.Keys(rep.Errors))[0]
		msg := rep.ErrorExamples[code]
		if hint := clientCertHint(msg); hint != "" {
			msg += "; " + hint
		}
		fmt.Fprintf(stderr, "idem bench: every operation failed (%d), nothing was measured: %s: %s\n",
			rep.ErrorCount(), code, msg)
		return 1
	}
	return 0
}

// benchPreflight asks each node's /healthz (all at once) before the load
// starts. With no node at --addr, a run spent its whole duration on about
// 430,000 "connection refused" errors, printed "correctness: ok" and only
// then said nothing was measured (a README walk). It refuses the run when
// no node answers; nodes that do not answer beside others that do are
// named on stderr, and the run goes on (the driver leaves a node it cannot
// reach, so a degraded cluster can be measured).
func benchPreflight(ctx context.Context, stderr io.Writer, addrs []string, tlsCfg *tls.Config) error {
	errs := make([]error, len(addrs))
	var wg sync.WaitGroup
	for i, a := range addrs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var opts []client.Option
			if tlsCfg != nil {
				opts = append(opts, client.WithTLS(tlsCfg))
			}
			c, err := client.New(a, opts...)
			if err == nil {
				hctx, cancel := context.WithTimeout(ctx, 5*time.Second)
				err = c.Healthz(hctx)
				cancel()
			}
			if err != nil {
				msg := err.Error()
				advice := "start a node there (idem serve), or give the nodes' HTTP addresses (their --http-addr, default " + client.DefaultAddr + ")"
				if hint := clientCertHint(msg); hint != "" {
					advice = hint
				}
				errs[i] = fmt.Errorf("--addr %s: the node's /healthz failed (%s): %s", a, msg, advice)
			}
		}()
	}
	wg.Wait()
	var failed []error
	for _, err := range errs {
		if err != nil {
			failed = append(failed, err)
		}
	}
	if len(failed) == len(addrs) {
		return fmt.Errorf("%w; nothing was run", errors.Join(failed...))
	}
	for _, err := range failed {
		fmt.Fprintf(stderr, "idem bench: %v; the run goes on with the nodes that answered\n", err)
	}
	return nil
}

func printReport(w io.Writer, cfg *bench.Config, r *bench.Report) {
	batched := ""
	if cfg.Batch > 0 {
		batched = fmt.Sprintf(", batches of up to %d ops", cfg.Batch)
	}
	fmt.Fprintf(w, "nodes %s, %d clients%s, mix %s, %.1fs\n", strings.Join(cfg.Addrs, ","), cfg.Concurrency, batched, r.Mix, r.Elapsed)
	fmt.Fprintf(w, "%-10s %9s %10s %8s %8s %8s %8s\n", "op", "count", "ops/s", "p50 ms", "p90 ms", "p99 ms", "max ms")
	line := func(name string, l bench.Latency) {
		fmt.Fprintf(w, "%-10s %9d %10.0f %8.2f %8.2f %8.2f %8.2f\n", name, l.Count, float64(l.Count)/r.Elapsed, l.P50, l.P90, l.P99, l.Max)
	}
	ops := make([]string, 0, len(r.ByOp))
	for op := range r.ByOp {
		ops = append(ops, op)
	}
	sort.Strings(ops)
	for _, op := range ops {
		line(op, r.ByOp[op])
	}
	line("all", r.All)
	if len(r.Errors) == 0 {
		fmt.Fprintln(w, "errors: none")
	} else {
		fmt.Fprintf(w, "errors: %v (%d indeterminate, %d refused: nothing written)\n", r.Errors, r.Indeterminate, r.Refused)
		codes := make([]string, 0, len(r.ErrorExamples))
		for c := range r.ErrorExamples {
			codes = append(codes, c)
		}
		sort.Strings(codes)
		for _, c := range codes {
			fmt.Fprintf(w, "  e.g. %s: %s\n", c, r.ErrorExamples[c])
		}
	}
	verdict := "ok"
	if !r.OK() {
		verdict = "FAILED"
	} else if r.Ops == 0 {
		verdict = "not checked, nothing was measured"
	}
	fmt.Fprintf(w, "correctness: %s (fresh claims lost %d, duplicates won %d, wrong answers %d)\n", verdict, r.LostFresh, r.DupsWon, r.WrongAnswer)
}

func splitAddrs(s string) []string {
	var out []string
	for _, a := range strings.Split(s, ",") {
		if a = memberHTTPAddr(a); a != "" {
			out = append(out, a)
		}
	}
	return out
}

// memberHTTPAddr is a member's HTTP address as --join and idem cluster
// join's --node-http-addr take it: host:port, or http://host:port (the
// prefix is dropped: a member's address is recorded as host:port).
func memberHTTPAddr(a string) string {
	return strings.TrimPrefix(strings.TrimSpace(a), "http://")
}

// envOr is $name when it is set, empty too, else def: as serve's
// variables, one set is its flag's value, and an empty IDEM_ADDR is
// refused naming it (addrFlag). It fell back to def, sending the command
// to 127.0.0.1:7070 when a script's IDEM_ADDR=$NODE had lost its value.
func envOr(name, def string) string {
	if v, ok := os.LookupEnv(name); ok {
		return v
	}
	return def
}

// batchFlagProblem checks a --batch of idem bench or idem chaos. The
// batcher cuts its requests at DefaultBatchMaxBytes: a batch of more ops
// than that holds of the smallest kind is never sent, so a larger --batch
// is a mistake (--batch 1000000000 once asked for gigabytes of queue
// before the first request).
func batchFlagProblem(batch int) error {
	if most := api.MaxBatchOpsFor(client.DefaultBatchMaxBytes); batch > most {
		return fmt.Errorf("--batch %d is more than the maximum, %d: the Go client's batcher sends at most 512 KiB a request, which holds no more ops (a node's --max-batch-ops takes at most as many as its --max-request-bytes holds)", batch, most)
	}
	return nil
}
