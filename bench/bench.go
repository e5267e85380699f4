// Package bench is idem's load generator: concurrent clients driving a
// store through a Driver (idem's HTTP API by default; Redis, PostgreSQL
// and etcd drivers live in the separate bench/compare module) with a mix
// of fresh claims, duplicate claims that must lose, claim+complete pairs
// and lookups. It measures throughput and latency and checks correctness
// as it goes: no fresh claim may be lost and no duplicate may ever win.
package bench

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Mix weights the operations.
type Mix struct {
	Fresh    int `json:"fresh"`
	Dup      int `json:"dup"`
	Complete int `json:"complete"`
	Lookup   int `json:"lookup"`
}

// ParseMix reads "fresh=70,dup=10,complete=10,lookup=10".
func ParseMix(s string) (Mix, error) {
	var m Mix
	for _, part := range strings.Split(s, ",") {
		name, val, ok := strings.Cut(strings.TrimSpace(part), "=")
		n, err := strconv.Atoi(strings.TrimSpace(val))
		if !ok || err != nil || n < 0 {
			return m, fmt.Errorf("bench: mix entry %q is not name=weight", part)
		}
		switch strings.TrimSpace(name) {
		case "fresh":
			m.Fresh = n
		case "dup":
			m.Dup = n
		case "complete":
			m.Complete = n
		case "lookup":
			m.Lookup = n
		default:
			return m, fmt.Errorf("bench: unknown operation %q in mix (fresh, dup, complete, lookup)", name)
		}
	}
	if m.Fresh+m.Dup+m.Complete+m.Lookup == 0 {
		return m, errors.New("bench: mix has no weight")
	}
	return m, nil
}

// String is the mix in ParseMix's syntax, zero weights left out.
func (m Mix) String() string {
	var parts []string
	for _, p := range []struct {
		n string
		w int
	}{{"fresh", m.Fresh}, {"dup", m.Dup}, {"complete", m.Complete}, {"lookup", m.Lookup}} {
		if p.w > 0 {
			parts = append(parts, p.n+"="+strconv.Itoa(p.w))
		}
	}
	return strings.Join(parts, ",")
}

// Config of a run.
type Config struct {
	// Driver is the store under load. When nil, Run speaks idem's HTTP
	// API to Addrs (with AuthToken).
	Driver      Driver
	Addrs       []string
	AuthToken   string
	Endpoint    string // the scope's endpoint; "POST /bench" when empty
	Concurrency int
	Duration    time.Duration // run length after warm-up (ignored when Ops > 0)
	Ops         int           // stop after this many measured operations
	Warmup      time.Duration
	Mix         Mix
	Principals  int
	KeyBytes    int
	BodyBytes   int
	Progress    io.Writer // a progress line every second; nil for none
	// TLS, when set, makes the HTTP driver speak HTTPS with it: the
	// nodes' CA, and a client certificate where they ask for one.
	TLS *tls.Config
	// Batch, when positive, sends the clients' calls through the Go
	// client's Batcher in POST /v1/batch requests of at most Batch ops
	// (BatchDriver) instead of one request each.
	Batch int
}

// Validate reports every bad setting, naming its flag.
func (c *Config) Validate() error {
	var errs []error
	if c.Driver == nil && len(c.Addrs) == 0 {
		errs = append(errs, errors.New("--addr names no node"))
	}
	if c.Concurrency < 1 {
		errs = append(errs, errors.New("--concurrency must be at least 1"))
	}
	if c.Ops < 0 {
		// --ops -1 was taken as "not given": the run went on for --duration.
		errs = append(errs, fmt.Errorf("--ops %d must not be negative (0: run for --duration)", c.Ops))
	} else if c.Ops == 0 && c.Duration <= 0 {
		errs = append(errs, errors.New("--duration or --ops must be positive"))
	}
	if c.Warmup < 0 {
		errs = append(errs, errors.New("--warmup must not be negative"))
	}
	if c.Mix.Fresh+c.Mix.Dup+c.Mix.Complete+c.Mix.Lookup <= 0 {
		errs = append(errs, errors.New("--mix has no weight"))
	}
	if c.Principals < 1 {
		errs = append(errs, errors.New("--principals must be at least 1"))
	}
	if c.KeyBytes < 16 || c.KeyBytes > 255 {
		errs = append(errs, errors.New("--key-bytes must be 16..255"))
	}
	if c.BodyBytes < 0 || c.BodyBytes > 1<<20 {
		errs = append(errs, errors.New("--body-bytes must be 0..1048576"))
	}
	if c.Batch < 0 {
		errs = append(errs, errors.New("--batch must not be negative"))
	}
	return errors.Join(errs...)
}

// Latency summarises one operation kind.
type Latency struct {
	Count int     `json:"count"`
	P50   float64 `json:"p50_ms"`
	P90   float64 `json:"p90_ms"`
	P99   float64 `json:"p99_ms"`
	Max   float64 `json:"max_ms"`
}

// Report is the result of a run.
type Report struct {
	Concurrency   int                `json:"concurrency"`
	Mix           string             `json:"mix"`
	Elapsed       float64            `json:"elapsed_s"`
	Ops           int                `json:"ops"`
	OpsPerSec     float64            `json:"ops_per_s"`
	All           Latency            `json:"latency"`
	ByOp          map[string]Latency `json:"by_op"`
	Errors        map[string]int     `json:"errors"`
	ErrorExamples map[string]string  `json:"error_examples,omitempty"` // the first message of each code
	Indeterminate int                `json:"indeterminate"`
	Refused       int                `json:"refused"` // 507, 429, 401 and 403: declined, nothing changed
	LostFresh     int                `json:"lost_fresh_claims"`
	DupsWon       int                `json:"duplicates_won"`
	WrongAnswer   int                `json:"wrong_answers"`
	Latencies     []float64          `json:"-"` // every measured latency, ms, sorted, for histograms
}

// OK reports whether the correctness checks held.
func (r *Report) OK() bool { return r.LostFresh == 0 && r.DupsWon == 0 && r.WrongAnswer == 0 }

// ErrorCount is the number of failed measured operations.
func (r *Report) ErrorCount() int {
	n := 0
	for _, v := range r.Errors {
		n += v
	}
	return n
}

type sample struct {
	op string
	ms float64
}

type worker struct {
	id       int
	cfg      *Config
	d        Driver
	endpoint string
	// principalPrefix holds the run's id, so that a second run against
	// the same store never meets the keys of the first.
	principalPrefix string
	rng             *rand.Rand
	n               int
	owned           []owned // keys this worker claimed and may re-claim or look up
	samples         []sample
	errs            map[string]int
	examples        map[string]string
	indet           int
	refused         int
	lost            int
	dupWon          int
	wrong           int
	body            []byte

	completed *atomic.Int64
	failed    *atomic.Int64
}

// Run drives the load and returns the report. It stops at the end of the
// run, after Ops measured operations, or when ctx is done (the report
// then covers what was measured).
func Run(ctx context.Context, cfg Config) (*Report, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	d := cfg.Driver
	if d == nil && cfg.Batch > 0 {
		bd, err := NewBatchDriver(cfg.Addrs, cfg.AuthToken, cfg.Batch, cfg.TLS)
		if err != nil {
			return nil, err
		}
		defer bd.Close()
		d = bd
	}
	if d == nil {
		hd := NewHTTPDriver(cfg.Addrs, cfg.AuthToken)
		if cfg.TLS != nil {
			hd.UseTLS(cfg.TLS)
		}
		defer hd.Close()
		d = hd
	}
	endpoint := cfg.Endpoint
	if endpoint == "" {
		endpoint = "POST /bench"
	}
	body := []byte(strings.Repeat("x", cfg.BodyBytes))
	var measured, completed, failed atomic.Int64
	seed := uint64(time.Now().UnixNano())
	prefix := "bench-" + strconv.FormatUint(rand.Uint64()>>24, 36) + "-p"
	workers := make([]*worker, cfg.Concurrency)
	for i := range workers {
		workers[i] = &worker{id: i, cfg: &cfg, d: d, endpoint: endpoint, principalPrefix: prefix, rng: rand.New(rand.NewPCG(uint64(i), seed)),
			errs: map[string]int{}, body: body, completed: &completed, failed: &failed}
	}
	var measuring atomic.Bool
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	for _, w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for runCtx.Err() == nil {
				m := measuring.Load()
				if m && cfg.Ops > 0 && measured.Add(1) > int64(cfg.Ops) {
					return // the operations in flight elsewhere still finish and count
				}
				w.step(runCtx, m)
			}
		}()
	}
	if cfg.Warmup > 0 {
		select {
		case <-time.After(cfg.Warmup):
		case <-ctx.Done():
		}
	}
	measuring.Store(true)
	start := time.Now()
	var stopAt <-chan time.Time
	if cfg.Ops <= 0 {
		stopAt = time.After(cfg.Duration)
	}
	allDone := make(chan struct{})
	go func() { wg.Wait(); close(allDone) }()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
loop:
	for {
		select {
		case <-stopAt:
			cancel()
			break loop
		case <-runCtx.Done():
			break loop
		case <-allDone:
			break loop
		case <-tick.C:
			if cfg.Progress != nil {
				n := completed.Load()
				el := time.Since(start).Seconds()
				fmt.Fprintf(cfg.Progress, "\r%6.1fs %10d ops %9.0f ops/s %7d errors", el, n, float64(n)/el, failed.Load())
			}
		}
	}
	wg.Wait()
	elapsed := time.Since(start).Seconds()
	if cfg.Progress != nil {
		fmt.Fprintln(cfg.Progress)
	}
	r := report(workers, elapsed)
	r.Concurrency = cfg.Concurrency
	r.Mix = cfg.Mix.String()
	return r, nil
}

func report(ws []*worker, elapsed float64) *Report {
	r := &Report{Elapsed: elapsed, ByOp: map[string]Latency{}, Errors: map[string]int{}}
	byOp := map[string][]float64{}
	var all []float64
	for _, w := range ws {
		for _, s := range w.samples {
			byOp[s.op] = append(byOp[s.op], s.ms)
			all = append(all, s.ms)
		}
		for k, v := range w.errs {
			r.Errors[k] += v
		}
		for k, v := range w.examples {
			if _, ok := r.ErrorExamples[k]; !ok {
				if r.ErrorExamples == nil {
					r.ErrorExamples = map[string]string{}
				}
				r.ErrorExamples[k] = v
			}
		}
		r.Indeterminate += w.indet
		r.Refused += w.refused
		r.LostFresh += w.lost
		r.DupsWon += w.dupWon
		r.WrongAnswer += w.wrong
	}
	r.Ops = len(all)
	if elapsed > 0 {
		r.OpsPerSec = float64(r.Ops) / elapsed
	}
	r.All = summarize(all)
	for op, l := range byOp {
		r.ByOp[op] = summarize(l)
	}
	r.Latencies = all
	return r
}

// summarize sorts ms in place and reads its percentiles (nearest rank).
func summarize(ms []float64) Latency {
	if len(ms) == 0 {
		return Latency{}
	}
	slices.Sort(ms)
	return Latency{Count: len(ms), P50: percentile(ms, 0.50), P90: percentile(ms, 0.90), P99: percentile(ms, 0.99), Max: ms[len(ms)-1]}
}

// percentile of sorted values by nearest rank: the smallest value with at
// least p of the values at or below it.
func percentile(sorted []float64, p float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	i := int(p*float64(len(sorted))+0.999999999) - 1
	return sorted[min(len(sorted)-1, max(0, i))]
}

func (w *worker) newKey() Scope {
	w.n++
	p := w.principalPrefix + strconv.Itoa(w.rng.IntN(w.cfg.Principals))
	k := "w" + strconv.Itoa(w.id) + "-" + strconv.Itoa(w.n) + "-"
	k += strings.Repeat("k", max(0, w.cfg.KeyBytes-len(k)))
	return Scope{Principal: p, Endpoint: w.endpoint, Key: k}
}

func (w *worker) pickOp() string {
	mx := w.cfg.Mix
	x := w.rng.IntN(mx.Fresh + mx.Dup + mx.Complete + mx.Lookup)
	op := "fresh"
	switch {
	case x < mx.Fresh:
	case x < mx.Fresh+mx.Dup:
		op = "dup"
	case x < mx.Fresh+mx.Dup+mx.Complete:
		op = "complete"
	default:
		op = "lookup"
	}
	if (op == "dup" || op == "lookup") && len(w.owned) == 0 {
		op = "fresh"
	}
	return op
}

func (w *worker) step(ctx context.Context, measure bool) {
	op := w.pickOp()
	start := time.Now()
	err := w.do(ctx, op)
	ms := float64(time.Since(start).Microseconds()) / 1000
	if ctx.Err() != nil || !measure {
		return // cut off by the end of the run, or warm-up: not counted, not timed
	}
	if err == nil {
		w.samples = append(w.samples, sample{op, ms})
		w.completed.Add(1)
		return
	}
	var c *checkError
	if errors.As(err, &c) {
		switch c.kind {
		case checkLost:
			w.lost++
		case checkDupWon:
			w.dupWon++
		default:
			w.wrong++
		}
		err = c.err
	}
	code, indet := errorInfo(err)
	if indet {
		w.indet++
	}
	if refused(err) {
		w.refused++
	}
	w.errs[code]++
	if _, ok := w.examples[code]; !ok && len(w.examples) < 32 {
		if w.examples == nil {
			w.examples = map[string]string{}
		}
		w.examples[code] = strings.TrimPrefix(err.Error(), code+": ")
	}
	w.failed.Add(1)
}

type checkKind int

const (
	checkLost checkKind = iota
	checkDupWon
	checkWrong
)

// checkError is a correctness failure: a definite answer that breaks the
// rules. err names it in the error counts.
type checkError struct {
	kind checkKind
	err  error
}

func (c *checkError) Error() string { return c.err.Error() }

// do runs one operation and checks its answer: nil when the operation
// completed as it must, an indeterminate *Error (counted, never a
// correctness failure), or a *checkError.
func (w *worker) do(ctx context.Context, op string) error {
	switch op {
	case "fresh", "complete":
		k := w.newKey()
		sent := time.Now()
		res, err := w.d.Claim(ctx, k, "c1")
		if err != nil {
			if excused(err) {
				return err
			}
			return &checkError{checkLost, err} // a fresh key must always win
		}
		if res.Outcome != Won {
			if res.Outcome == Indeterminate {
				return Indeterminately("indeterminate", nil)
			}
			return &checkError{checkLost, Definitely("fresh_"+res.Outcome.String(), nil)}
		}
		o := owned{s: k}
		if res.Lease > 0 {
			// The lease began no earlier than the claim was sent.
			o.lease, o.takeable = res.Lease, sent.Add(res.Lease)
		}
		if op == "fresh" {
			w.remember(o)
			return nil
		}
		if err := w.d.Complete(ctx, k, res.Token, w.body); err != nil {
			w.remember(o) // maybe still in progress
			if excused(err) {
				return err
			}
			return &checkError{checkWrong, err}
		}
		w.remember(owned{s: k}) // completed: replayed, never taken over
		return nil
	case "dup":
		i := w.rng.IntN(len(w.owned))
		o := &w.owned[i]
		sent := time.Now()
		res, err := w.d.Claim(ctx, o.s, "dup-"+strconv.FormatUint(uint64(w.rng.Uint32()), 10))
		if err != nil {
			if excused(err) {
				return err
			}
			return &checkError{checkWrong, err}
		}
		switch res.Outcome {
		case Lost, Replay:
			return nil
		case Won:
			if !o.takeable.IsZero() && !time.Now().Before(o.takeable) {
				// An attempt left in progress past its lease is taken
				// over (attempt 2): the rule, not a duplicate. Its new
				// lease began no earlier than this claim was sent.
				o.takeable = sent.Add(o.lease)
				return nil
			}
			return &checkError{checkDupWon, Definitely("duplicate_won", nil)} // never allowed
		default:
			return Indeterminately("indeterminate", nil)
		}
	default: // lookup of a key this worker claimed: it must be there
		k := w.owned[w.rng.IntN(len(w.owned))].s
		found, err := w.d.Lookup(ctx, k)
		if err != nil {
			if excused(err) {
				return err
			}
			return &checkError{checkWrong, err}
		}
		if !found {
			return &checkError{checkWrong, Definitely("lookup_missing", nil)}
		}
		return nil
	}
}

// owned is a key a worker claimed. takeable is the earliest a takeover of
// its attempt can be right (its lease began no earlier than the claim was
// sent); zero once completed, or for a store without leases.
type owned struct {
	s        Scope
	lease    time.Duration
	takeable time.Time
}

func (w *worker) remember(k owned) {
	if len(w.owned) < 1024 {
		w.owned = append(w.owned, k)
	} else {
		w.owned[w.rng.IntN(len(w.owned))] = k
	}
}
