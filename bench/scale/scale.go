// Package scale is the scale benchmark behind `idem bench scale`: it loads
// millions of live records straight into a fresh data dir with the engine's
// bulk loader, starts a real `idem serve` process on it, runs the claim
// workload of `idem bench` (package bench) against it and reports claim
// latency, memory (RSS, peak RSS, Go heap) and bytes on disk per record at
// each size. Its drop scenario loads one time bucket of millions of records
// that expires while claims run, and reports the apply time of the
// DropBucket, the claim latency around it and the disk space before, right
// after and after the compaction that follows.
//
// It imports engine (the loader), partition, bench and client, never the
// server packages: the server under test is a child process.
package scale

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/idem-store/idem/bench"
	"github.com/idem-store/idem/client"
	"github.com/idem-store/idem/engine"
	"github.com/idem-store/idem/partition"
)

// Config of a scale run.
type Config struct {
	Sizes         []int64       // live records to load, one run each
	Binary        string        // the idem binary to start as the server
	Dir           string        // work directory; each run uses a fresh subdirectory
	Keep          bool          // keep the data dirs (they are removed after each run otherwise)
	Principals    int           // principals the loaded records are spread over
	BodyBytes     int           // stored response body of a loaded record
	InProgressPct int           // percent of loaded records left in progress (with a lease entry)
	Retention     time.Duration // the server's --retention; loaded records span it
	BucketWidth   time.Duration // the server's --bucket-width
	CacheBytes    int64         // the server's --cache-bytes (also used while loading)
	Seed          uint64

	// The claim workload: the same as idem bench's (fresh claims).
	Concurrency     int
	Duration        time.Duration
	Warmup          time.Duration
	BenchPrincipals int

	// The drop scenario; DropRecords 0 skips it.
	DropRecords    int64
	DropAfter      time.Duration // when, into the claim load, the bucket expires
	DropLoad       time.Duration // length of the claim load of the drop scenario
	ReclaimTimeout time.Duration // how long to wait for the space to come back

	ReadyTimeout time.Duration // for /readyz after start
	// SettleTimeout bounds the wait for Pebble's compactions after a load;
	// the run goes on when it passes.
	SettleTimeout time.Duration
	// StartSlack is how long the drop scenario allows the server to start
	// before cluster time must be DropAfter short of the bucket's end;
	// 0 means 10 s.
	StartSlack time.Duration
	Progress   io.Writer // progress lines; nil for none
}

// Validate reports every bad setting, naming its flag.
func (c *Config) Validate() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if len(c.Sizes) == 0 && c.DropRecords == 0 {
		bad("--sizes is empty and --drop-records is 0: nothing to run")
	}
	for _, n := range c.Sizes {
		if n < 1 {
			bad("--sizes: %d is not a positive number of records", n)
		}
	}
	if c.Binary == "" {
		bad("--binary is empty")
	}
	if c.Dir == "" {
		bad("--dir is empty")
	}
	if c.Principals < 1 {
		bad("--load-principals must be at least 1")
	}
	if c.BodyBytes < 64 || c.BodyBytes > 65536 {
		bad("--body-bytes must be 64..65536")
	}
	if c.InProgressPct < 0 || c.InProgressPct > 100 {
		bad("--in-progress-pct must be 0..100")
	}
	if c.Retention < time.Minute {
		bad("--retention must be at least 1m")
	}
	if c.BucketWidth < time.Millisecond || c.BucketWidth > c.Retention {
		bad("--bucket-width must be at least 1ms and at most --retention")
	}
	if c.CacheBytes < 1<<20 {
		bad("--cache-bytes must be at least 1 MiB")
	}
	if c.Concurrency < 1 {
		bad("--concurrency must be at least 1")
	}
	if c.Duration <= 0 {
		bad("--duration must be positive")
	}
	if c.Warmup < 0 {
		bad("--warmup must not be negative")
	}
	if c.BenchPrincipals < 1 {
		bad("--principals must be at least 1")
	}
	if c.DropRecords < 0 {
		bad("--drop-records must not be negative")
	}
	if c.DropRecords > 0 {
		if c.DropAfter < 2*time.Second {
			bad("--drop-after must be at least 2s")
		}
		if c.DropLoad < c.DropAfter+3*time.Second {
			bad("--drop-load must be at least --drop-after + 3s")
		}
		if c.ReclaimTimeout <= 0 {
			bad("--reclaim-timeout must be positive")
		}
	}
	if c.ReadyTimeout <= 0 {
		bad("--ready-timeout must be positive")
	}
	if c.SettleTimeout <= 0 {
		bad("--settle-timeout must be positive")
	}
	return errors.Join(errs...)
}

// SizeResult is the run at one size.
type SizeResult struct {
	Records       int64   `json:"records"`
	Buckets       int     `json:"buckets"`
	Principals    int     `json:"principals"`
	LoadSeconds   float64 `json:"load_s"`
	LoadPerSec    float64 `json:"load_records_per_s"`
	SettleSeconds float64 `json:"settle_s"`       // waiting for Pebble's compactions after the load
	LoadAvgBefore string  `json:"loadavg_before"` // /proc/loadavg before the claim run
	StartSeconds  float64 `json:"start_s"`        // server start to /readyz 200
	FilterSeconds float64 `json:"filter_s"`       // server start to idem_probe_filter_ready 1 (claims run after it)
	Claims        int     `json:"claims"`
	ClaimsPerSec  float64 `json:"claims_per_s"`
	P50           float64 `json:"p50_ms"`
	P90           float64 `json:"p90_ms"`
	P99           float64 `json:"p99_ms"`
	Max           float64 `json:"max_ms"`
	Errors        int     `json:"errors"`
	LoadedChecked int     `json:"loaded_checked"` // loaded records looked up and re-claimed through the API
	LoadedWrong   int     `json:"loaded_wrong"`
	BenchOK       bool    `json:"bench_ok"`
	RSSBytes      int64   `json:"rss_bytes"`
	HWMBytes      int64   `json:"hwm_bytes"`
	HeapBytes     int64   `json:"heap_inuse_bytes"` // go_memstats_heap_inuse_bytes, -1 if not exposed
	FSMBytes      int64   `json:"fsm_bytes"`        // fsm dir after the load, before serving
	FSMBytesAfter int64   `json:"fsm_bytes_after"`  // fsm dir after the claim run
	DataBytes     int64   `json:"data_bytes"`       // whole data dir after the claim run
	BytesPerRec   float64 `json:"fsm_bytes_per_record"`
	StopOK        bool    `json:"stop_ok"` // SIGTERM ended the server cleanly
}

// DropResult is the drop scenario.
type DropResult struct {
	Records          int64   `json:"records"`
	LoadSeconds      float64 `json:"load_s"`
	LoadPerSec       float64 `json:"load_records_per_s"`
	SettleSeconds    float64 `json:"settle_s"`
	LoadAvgBefore    string  `json:"loadavg_before"`
	Dropped          bool    `json:"dropped"`
	DropAtSeconds    float64 `json:"drop_at_s"` // into the claim load, when the drop was first seen
	ApplySeconds     float64 `json:"apply_s"`   // idem_bucket_drop_apply_seconds
	Claims           int     `json:"claims"`
	ClaimsPerSec     float64 `json:"claims_per_s"`
	P50              float64 `json:"p50_ms"`
	P99              float64 `json:"p99_ms"`
	Max              float64 `json:"max_ms"`
	Errors           int     `json:"errors"`
	BenchOK          bool    `json:"bench_ok"`
	WindowClaims     int     `json:"window_claims"` // claims overlapping drop ±2 s
	WindowP99        float64 `json:"window_p99_ms"`
	WindowMax        float64 `json:"window_max_ms"`
	Over50ms         int     `json:"window_claims_over_50ms"`
	FSMLoaded        int64   `json:"fsm_bytes_loaded"` // the fsm dir after the load, before serving
	FSMBefore        int64   `json:"fsm_bytes_before"` // the largest size seen before the drop
	FSMAfterDrop     int64   `json:"fsm_bytes_after_drop"`
	FSMAfterCompact  int64   `json:"fsm_bytes_after_compaction"`
	ReclaimSeconds   float64 `json:"reclaim_s"` // drop until the fsm dir gave back half of FSMLoaded
	Reclaimed        bool    `json:"reclaimed"`
	RSSBytes         int64   `json:"rss_bytes"`
	HWMBytes         int64   `json:"hwm_bytes"`
	DroppedRecordsOK bool    `json:"dropped_records_ok"` // idem_records_dropped_total == Records
}

// Report is a whole run.
type Report struct {
	Started    time.Time    `json:"started"`
	Machine    string       `json:"machine"`
	Config     ReportConfig `json:"config"`
	Sizes      []SizeResult `json:"sizes"`
	Drop       *DropResult  `json:"drop,omitempty"`
	Correct    bool         `json:"correct"` // every bench check and loaded-record check held
	P99Ratio   float64      `json:"p99_ratio_largest_to_smallest,omitempty"`
	ElapsedSec float64      `json:"elapsed_s"`
}

// ReportConfig is the part of Config worth printing.
type ReportConfig struct {
	Principals    int    `json:"load_principals"`
	BodyBytes     int    `json:"body_bytes"`
	InProgressPct int    `json:"in_progress_pct"`
	Retention     string `json:"retention"`
	BucketWidth   string `json:"bucket_width"`
	CacheBytes    int64  `json:"cache_bytes"`
	Concurrency   int    `json:"concurrency"`
	Duration      string `json:"duration"`
	Warmup        string `json:"warmup"`
}

func (c *Config) progress(format string, args ...any) {
	if c.Progress != nil {
		fmt.Fprintf(c.Progress, "scale: %s "+format+"\n", append([]any{time.Now().Format("15:04:05.0")}, args...)...)
	}
}

// Run runs every size, then the drop scenario.
func Run(ctx context.Context, c Config) (*Report, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	start := time.Now()
	rep := &Report{Started: start.UTC(), Machine: machine(), Correct: true, Config: ReportConfig{
		Principals: c.Principals, BodyBytes: c.BodyBytes, InProgressPct: c.InProgressPct,
		Retention: c.Retention.String(), BucketWidth: c.BucketWidth.String(), CacheBytes: c.CacheBytes,
		Concurrency: c.Concurrency, Duration: c.Duration.String(), Warmup: c.Warmup.String(),
	}}
	if err := os.MkdirAll(c.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("--dir: %w", err)
	}
	for _, n := range c.Sizes {
		r, err := runSize(ctx, &c, n)
		if err != nil {
			return rep, fmt.Errorf("%d records: %w", n, err)
		}
		rep.Sizes = append(rep.Sizes, *r)
		rep.Correct = rep.Correct && r.BenchOK && r.LoadedWrong == 0 && r.LoadedChecked > 0
	}
	if len(rep.Sizes) > 1 && rep.Sizes[0].P99 > 0 {
		rep.P99Ratio = rep.Sizes[len(rep.Sizes)-1].P99 / rep.Sizes[0].P99
	}
	if c.DropRecords > 0 {
		d, err := runDrop(ctx, &c)
		if err != nil {
			return rep, fmt.Errorf("drop: %w", err)
		}
		rep.Drop = d
		rep.Correct = rep.Correct && d.BenchOK && d.Dropped && d.DroppedRecordsOK
	}
	rep.ElapsedSec = time.Since(start).Seconds()
	return rep, nil
}

func machine() string {
	host, _ := os.Hostname()
	cpus := 0
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, l := range splitLines(string(b)) {
			if len(l) > 9 && l[:9] == "processor" {
				cpus++
			}
		}
	}
	mem := ""
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		if ls := splitLines(string(b)); len(ls) > 0 {
			mem = ls[0]
		}
	}
	return fmt.Sprintf("%s, %d CPUs, %s", host, cpus, mem)
}

func splitLines(s string) []string {
	var out []string
	for len(s) > 0 {
		i := 0
		for i < len(s) && s[i] != '\n' {
			i++
		}
		out = append(out, s[:i])
		if i < len(s) {
			i++
		}
		s = s[i:]
	}
	return out
}

// load writes the records of spans into dataDir/fsm with the bulk loader.
func load(ctx context.Context, c *Config, g *gen, spans []span, dataDir string, nowMs int64) (st engine.LoadStats, loaded, settled time.Duration, err error) {
	start := time.Now()
	db, err := engine.Open(filepath.Join(dataDir, "fsm"), engine.Options{CacheBytes: c.CacheBytes})
	if err != nil {
		return st, 0, 0, err
	}
	l, err := db.NewLoader(engine.LoadOptions{Width: partition.Width(c.BucketWidth.Milliseconds()),
		NowMs: nowMs, RetentionMs: c.Retention.Milliseconds()})
	if err != nil {
		db.Close()
		return st, 0, 0, err
	}
	// Generate on one goroutine, load on another.
	batches := make(chan []engine.Record, 4)
	free := make(chan []engine.Record, 6)
	genErr := make(chan error, 1)
	stop := make(chan struct{})
	go func() {
		defer close(batches)
		genErr <- g.each(spans, func(rs []engine.Record) error {
			var b []engine.Record
			select {
			case b = <-free:
			default:
			}
			b = append(b[:0], rs...)
			select {
			case batches <- b:
				return nil
			case <-stop:
				return errors.New("stopped")
			}
		})
	}()
	var total int64
	for _, s := range spans {
		total += s.n
	}
	var n int64
	next := time.Now().Add(5 * time.Second)
	var loadErr error
	for b := range batches {
		if loadErr = ctx.Err(); loadErr != nil {
			close(stop)
			for range batches {
			}
			break
		}
		for i := range b {
			if loadErr = l.Add(&b[i]); loadErr != nil {
				break
			}
		}
		if loadErr != nil {
			close(stop)
			for range batches {
			}
			break
		}
		n += int64(len(b))
		select {
		case free <- b:
		default:
		}
		if time.Now().After(next) {
			el := time.Since(start).Seconds()
			c.progress("loaded %d of %d records (%.0f/s)", n, total, float64(n)/el)
			next = time.Now().Add(5 * time.Second)
		}
	}
	if err := <-genErr; loadErr == nil && err != nil {
		loadErr = err
	}
	if loadErr != nil {
		db.Close()
		return st, 0, 0, loadErr
	}
	st, err = l.Finish()
	if err != nil {
		db.Close()
		return st, 0, 0, err
	}
	loaded = time.Since(start)
	c.progress("loaded %d records in %.1fs; waiting for Pebble's compactions to settle", st.Records, loaded.Seconds())
	sctx, cancel := context.WithTimeout(ctx, c.SettleTimeout)
	defer cancel()
	if err := db.Settle(sctx); err != nil && (ctx.Err() != nil || !errors.Is(err, context.DeadlineExceeded)) {
		db.Close()
		return st, 0, 0, err
	}
	settled = time.Since(start) - loaded
	if err := db.Close(); err != nil {
		return st, 0, 0, err
	}
	return st, loaded, settled, nil
}

// waitFilter waits until the server has built its probe filters from the
// loaded store: until then every claim probes every bucket in Pebble, a
// start-up cost measured apart from the steady state (filter_s).
func waitFilter(ctx context.Context, c *Config, srv *server) error {
	deadline := time.Now().Add(c.ReadyTimeout)
	for {
		m, err := srv.metrics(ctx)
		if err == nil && m["idem_probe_filter_ready"] == 1 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the server's probe filters were not built within %s (idem_probe_filter_ready)", c.ReadyTimeout)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func runSize(ctx context.Context, c *Config, n int64) (*SizeResult, error) {
	dataDir := filepath.Join(c.Dir, fmt.Sprintf("size-%d", n))
	if err := os.RemoveAll(dataDir); err != nil {
		return nil, err
	}
	if !c.Keep {
		defer os.RemoveAll(dataDir)
	}
	nowMs := time.Now().UnixMilli()
	g := newGen(c.Seed+uint64(n), c.Principals, c.BodyBytes, c.InProgressPct,
		c.BucketWidth.Milliseconds(), c.Retention.Milliseconds(), nowMs, n)
	spans := g.liveSpans(n)
	c.progress("%d records: loading into %s", n, dataDir)
	st, took, settled, err := load(ctx, c, g, spans, dataDir, nowMs)
	if err != nil {
		return nil, fmt.Errorf("load: %w", err)
	}
	r := &SizeResult{Records: st.Records, Buckets: st.Buckets, Principals: st.Principals,
		LoadSeconds: took.Seconds(), LoadPerSec: float64(st.Records) / took.Seconds(), SettleSeconds: settled.Seconds(), HeapBytes: -1}
	c.progress("%d records: loaded in %.1fs (%.0f/s)", n, r.LoadSeconds, r.LoadPerSec)
	if r.FSMBytes, err = diskUsage(filepath.Join(dataDir, "fsm")); err != nil {
		return nil, err
	}
	r.BytesPerRec = float64(r.FSMBytes) / float64(st.Records)

	t0 := time.Now()
	srv, err := startServer(ctx, c, dataDir, filepath.Join(c.Dir, fmt.Sprintf("size-%d.log", n)))
	if err != nil {
		return nil, err
	}
	r.StartSeconds = time.Since(t0).Seconds()
	stopped := false
	defer func() {
		if !stopped {
			srv.stop()
		}
	}()
	r.LoadedChecked, r.LoadedWrong = checkLoaded(ctx, srv.addr, g.sample)
	if err := waitFilter(ctx, c, srv); err != nil {
		return nil, err
	}
	r.FilterSeconds = time.Since(t0).Seconds()
	r.LoadAvgBefore = loadAvg()
	c.progress("%d records: server ready in %.1fs, probe filters built in %.1fs; %d loaded records checked (%d wrong); load average %s; claims for %s",
		n, r.StartSeconds, r.FilterSeconds, r.LoadedChecked, r.LoadedWrong, r.LoadAvgBefore, c.Duration)
	br, err := bench.Run(ctx, bench.Config{Addrs: []string{srv.addr}, Concurrency: c.Concurrency,
		Duration: c.Duration, Warmup: c.Warmup, Mix: bench.Mix{Fresh: 1}, Principals: c.BenchPrincipals,
		KeyBytes: 32, BodyBytes: 256})
	if err != nil {
		return nil, err
	}
	r.Claims, r.ClaimsPerSec = br.All.Count, br.OpsPerSec
	r.P50, r.P90, r.P99, r.Max = br.All.P50, br.All.P90, br.All.P99, br.All.Max
	r.Errors, r.BenchOK = br.ErrorCount(), br.OK()
	if m, err := srv.metrics(ctx); err == nil {
		if v, ok := m["go_memstats_heap_inuse_bytes"]; ok {
			r.HeapBytes = int64(v)
		}
	}
	if r.RSSBytes, r.HWMBytes, err = procMem(srv.pid()); err != nil {
		return nil, err
	}
	stopped = true
	r.StopOK = srv.stop() == nil
	c.progress("%d records: server stopped", n)
	if r.FSMBytesAfter, err = diskUsage(filepath.Join(dataDir, "fsm")); err != nil {
		return nil, err
	}
	if r.DataBytes, err = diskUsage(dataDir); err != nil {
		return nil, err
	}
	c.progress("%d records: %.0f claims/s, p50 %.2f ms, p99 %.2f ms, max %.2f ms; RSS %d MiB (peak %d MiB), heap %d MiB; %.0f B/record",
		n, r.ClaimsPerSec, r.P50, r.P99, r.Max, r.RSSBytes>>20, r.HWMBytes>>20, r.HeapBytes>>20, r.BytesPerRec)
	return r, nil
}

// checkLoaded looks up sampled loaded records through the API and claims
// each again with its fingerprint: every one must be found, and the claim
// must replay its stored response (or be in progress).
func checkLoaded(ctx context.Context, addr string, sample []engine.Record) (checked, wrong int) {
	cl, err := client.New(addr)
	if err != nil {
		return 0, len(sample)
	}
	for _, r := range sample {
		checked++
		rec, err := cl.Get(ctx, r.Principal, r.Endpoint, r.Key, "")
		if err != nil || rec == nil {
			wrong++
			continue
		}
		res, err := cl.Claim(ctx, client.ClaimRequest{Principal: r.Principal, Endpoint: r.Endpoint, Key: r.Key,
			Fingerprint: r.Fingerprint, ClaimID: "scale-check"})
		switch r.State {
		case engine.StateCompleted:
			if err != nil || res.Outcome != client.OutcomeReplay || res.Record.Response == nil ||
				string(res.Record.Response.Body) != string(r.Response.Body) {
				wrong++
			}
		default:
			var p *client.Problem
			if !errors.As(err, &p) || p.Status != 409 {
				wrong++
			}
		}
	}
	return checked, wrong
}

// timedDriver records when each successful claim started and how long it
// took, to find the latency around the drop.
type timedDriver struct {
	bench.Driver
	t0 time.Time
	mu sync.Mutex
	at []timedClaim
}

type timedClaim struct {
	start, end time.Duration // since t0
}

func (d *timedDriver) Claim(ctx context.Context, s bench.Scope, id string) (bench.ClaimResult, error) {
	st := time.Now()
	r, err := d.Driver.Claim(ctx, s, id)
	if err == nil {
		en := time.Now()
		d.mu.Lock()
		d.at = append(d.at, timedClaim{st.Sub(d.t0), en.Sub(d.t0)})
		d.mu.Unlock()
	}
	return r, err
}

// poll is one look at the server during the drop scenario.
type poll struct {
	at      time.Duration // since the claim load started
	dropped float64       // idem_buckets_dropped_total
	fsm     int64
}

func runDrop(ctx context.Context, c *Config) (*DropResult, error) {
	dataDir := filepath.Join(c.Dir, "drop")
	if err := os.RemoveAll(dataDir); err != nil {
		return nil, err
	}
	if !c.Keep {
		defer os.RemoveAll(dataDir)
	}
	w := partition.Width(c.BucketWidth.Milliseconds())
	// The bucket of records expiring around now; cluster time starts a
	// little before its end and crosses it during the claim load.
	b := partition.Of(time.Now().UnixMilli(), w)
	slack := c.StartSlack
	if slack <= 0 {
		slack = 10 * time.Second
	}
	lead := c.DropAfter + slack
	nowMs := b.End(w) - lead.Milliseconds()
	g := newGen(c.Seed+7, c.Principals, c.BodyBytes, c.InProgressPct,
		c.BucketWidth.Milliseconds(), c.Retention.Milliseconds(), nowMs, c.DropRecords)
	spans := []span{{b: b, lo: b.Start(w), hi: b.End(w), n: c.DropRecords}}
	c.progress("drop: loading %d records into bucket %d (expires at %s)", c.DropRecords, b,
		time.UnixMilli(b.End(w)).UTC().Format(time.RFC3339))
	st, took, settled, err := load(ctx, c, g, spans, dataDir, nowMs)
	if err != nil {
		return nil, fmt.Errorf("load: %w", err)
	}
	d := &DropResult{Records: st.Records, LoadSeconds: took.Seconds(), LoadPerSec: float64(st.Records) / took.Seconds(), SettleSeconds: settled.Seconds()}
	if d.FSMLoaded, err = diskUsage(filepath.Join(dataDir, "fsm")); err != nil {
		return nil, err
	}
	c.progress("drop: loaded in %.1fs (%.0f/s), %d MiB", d.LoadSeconds, d.LoadPerSec, d.FSMLoaded>>20)
	srv, err := startServer(ctx, c, dataDir, filepath.Join(c.Dir, "drop.log"))
	if err != nil {
		return nil, err
	}
	defer srv.stop()
	if err := waitFilter(ctx, c, srv); err != nil {
		return nil, err
	}
	m, err := srv.metrics(ctx)
	if err != nil {
		return nil, err
	}
	// Cluster time is anchored at the loaded time and advances with the
	// server's monotonic clock: wait until the bucket ends DropAfter from now.
	clusterMs := int64(m["idem_cluster_time_seconds"] * 1000)
	if wait := time.Duration(b.End(w)-clusterMs)*time.Millisecond - c.DropAfter; wait > 0 {
		c.progress("drop: waiting %s so that the bucket expires %s into the claim load", wait.Round(time.Millisecond), c.DropAfter)
		select {
		case <-time.After(wait):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	d.LoadAvgBefore = loadAvg()
	hd := bench.NewHTTPDriver([]string{srv.addr}, "")
	defer hd.Close()
	td := &timedDriver{Driver: hd}
	var (
		pmu   sync.Mutex
		polls []poll
	)
	snapshot := func() []poll {
		pmu.Lock()
		defer pmu.Unlock()
		return slices.Clone(polls)
	}
	pollCtx, stopPolls := context.WithCancel(ctx)
	pollDone := make(chan struct{})
	td.t0 = time.Now()
	go func() {
		defer close(pollDone)
		t := time.NewTicker(200 * time.Millisecond)
		defer t.Stop()
		for {
			// at is when the counter was read: a scrape can wait behind
			// the FSM (it takes the store's lock), so its start says little.
			p := poll{dropped: -1}
			if m, err := srv.metrics(pollCtx); err == nil {
				p.dropped = m["idem_buckets_dropped_total"]
			}
			p.at = time.Since(td.t0)
			p.fsm, _ = diskUsage(filepath.Join(dataDir, "fsm"))
			pmu.Lock()
			polls = append(polls, p)
			pmu.Unlock()
			select {
			case <-pollCtx.Done():
				return
			case <-t.C:
			}
		}
	}()
	c.progress("drop: claims for %s, load average %s", c.DropLoad, d.LoadAvgBefore)
	br, err := bench.Run(ctx, bench.Config{Driver: td, Concurrency: c.Concurrency, Duration: c.DropLoad,
		Mix: bench.Mix{Fresh: 1}, Principals: c.BenchPrincipals, KeyBytes: 32, BodyBytes: 256})
	loadEnd := time.Since(td.t0)
	if err != nil {
		stopPolls()
		<-pollDone
		return nil, err
	}
	d.Claims, d.ClaimsPerSec = br.All.Count, br.OpsPerSec
	d.P50, d.P99, d.Max = br.All.P50, br.All.P99, br.All.Max
	d.Errors, d.BenchOK = br.ErrorCount(), br.OK()

	// Wait for the space to come back: the fsm dir smaller than its
	// largest size before the drop by at least half of what the loaded
	// bucket took.
	peak := func(ps []poll, i int) (pk int64) {
		for _, p := range ps[:i] {
			pk = max(pk, p.fsm)
		}
		return pk
	}
	back := func(peak int64, now poll) bool { return now.fsm <= peak-d.FSMLoaded/2 }
	deadline := time.Now().Add(c.ReclaimTimeout)
	for {
		time.Sleep(time.Second)
		if time.Now().After(deadline) || ctx.Err() != nil {
			break
		}
		if ps := snapshot(); firstDrop(ps) > 0 && back(peak(ps, firstDrop(ps)), ps[len(ps)-1]) {
			break
		}
	}
	stopPolls()
	<-pollDone
	i := firstDrop(polls)
	if i == 0 {
		return nil, errors.New("the bucket was dropped before the claim load started (the server took longer than the start allowance to be ready)")
	}
	if i < 0 {
		c.progress("drop: the bucket was not dropped within the run")
		return d, nil
	}
	d.Dropped = true
	before, after := polls[i-1], polls[i]
	d.DropAtSeconds = after.at.Seconds()
	d.FSMBefore, d.FSMAfterDrop = peak(polls, i), after.fsm
	last := polls[len(polls)-1]
	d.FSMAfterCompact = last.fsm
	for _, p := range polls[i:] {
		if back(d.FSMBefore, p) {
			d.Reclaimed, d.ReclaimSeconds = true, (p.at - before.at).Seconds()
			break
		}
	}
	if m, err := srv.metrics(ctx); err == nil {
		if n := m["idem_bucket_drop_apply_seconds_count"]; n > 0 {
			d.ApplySeconds = m["idem_bucket_drop_apply_seconds_sum"] / n
		}
		d.DroppedRecordsOK = int64(m["idem_records_dropped_total"]) == d.Records
	}
	// Claims in flight at any time within 2 s of the drop (between the
	// last poll before it and the first after).
	lo, hi := before.at-2*time.Second, after.at+2*time.Second
	td.mu.Lock()
	var win []float64
	for _, s := range td.at {
		if s.end >= lo && s.start <= hi && s.end <= loadEnd {
			ms := float64((s.end - s.start).Microseconds()) / 1000
			win = append(win, ms)
			if ms > 50 {
				d.Over50ms++
			}
		}
	}
	td.mu.Unlock()
	slices.Sort(win)
	d.WindowClaims = len(win)
	if len(win) > 0 {
		d.WindowMax = win[len(win)-1]
		d.WindowP99 = win[min(len(win)-1, max(0, int(0.99*float64(len(win))+0.999999)-1))]
	}
	d.RSSBytes, d.HWMBytes, _ = procMem(srv.pid())
	c.progress("drop: dropped %.1fs into the load, apply %.3fs; claims p99 %.2f ms, max %.2f ms; within ±2s: max %.2f ms (%d over 50 ms); fsm %d -> %d -> %d MiB (reclaimed in %.1fs)",
		d.DropAtSeconds, d.ApplySeconds, d.P99, d.Max, d.WindowMax, d.Over50ms,
		d.FSMBefore>>20, d.FSMAfterDrop>>20, d.FSMAfterCompact>>20, d.ReclaimSeconds)
	return d, nil
}

// firstDrop is the index of the first poll that saw the bucket dropped.
func firstDrop(ps []poll) int {
	for i, p := range ps {
		if p.dropped > 0 {
			return i
		}
	}
	return -1
}
