// Package bench is idem's load generator: concurrent clients speaking the
// HTTP API with a mix of fresh claims, duplicate claims that must lose,
// claim+complete pairs and lookups. It measures throughput and latency and
// checks correctness as it goes: no fresh claim may be lost and no
// duplicate may ever win.
package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Mix weights the operations.
type Mix struct {
	Fresh, Dup, Complete, Lookup int
}

// ParseMix reads "fresh=70,dup=10,complete=10,lookup=10".
func ParseMix(s string) (Mix, error) {
	var m Mix
	for _, part := range strings.Split(s, ",") {
		name, val, ok := strings.Cut(strings.TrimSpace(part), "=")
		n, err := strconv.Atoi(val)
		if !ok || err != nil || n < 0 {
			return m, fmt.Errorf("bench: mix entry %q is not name=weight", part)
		}
		switch name {
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

// Config of a run.
type Config struct {
	Addrs       []string
	Concurrency int
	Duration    time.Duration // run length after warm-up (ignored when Ops > 0)
	Ops         int           // stop after this many measured operations
	Warmup      time.Duration
	Mix         Mix
	Principals  int
	KeyBytes    int
	BodyBytes   int
	AuthToken   string
	Progress    io.Writer // a progress line every second; nil for none
}

// Validate reports every bad setting, naming its flag.
func (c *Config) Validate() error {
	var errs []error
	if len(c.Addrs) == 0 {
		errs = append(errs, errors.New("--addr names no node"))
	}
	if c.Concurrency < 1 {
		errs = append(errs, errors.New("--concurrency must be at least 1"))
	}
	if c.Ops <= 0 && c.Duration <= 0 {
		errs = append(errs, errors.New("--duration or --ops must be positive"))
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
	Elapsed     float64            `json:"elapsed_s"`
	Ops         int                `json:"ops"`
	OpsPerSec   float64            `json:"ops_per_s"`
	All         Latency            `json:"latency"`
	ByOp        map[string]Latency `json:"by_op"`
	Errors      map[string]int     `json:"errors"`
	LostFresh   int                `json:"lost_fresh_claims"`
	DupsWon     int                `json:"duplicates_won"`
	WrongAnswer int                `json:"wrong_answers"`
	Latencies   []float64          `json:"-"` // every measured latency, ms, for histograms
}

// OK reports whether the correctness checks held.
func (r *Report) OK() bool { return r.LostFresh == 0 && r.DupsWon == 0 && r.WrongAnswer == 0 }

type sample struct {
	op string
	ms float64
}

type worker struct {
	id      int
	cfg     *Config
	client  *http.Client
	rng     *rand.Rand
	n       int
	owned   []ownedKey // keys this worker claimed and may re-claim or look up
	samples []sample
	errs    map[string]int
	lost    int
	dupWon  int
	wrong   int
	body    string

	completed *atomic.Int64
	ctx       context.Context
}

type ownedKey struct {
	principal, key string
}

// Run drives the load and returns the report.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	tr := &http.Transport{
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:        cfg.Concurrency * 2,
		MaxIdleConnsPerHost: cfg.Concurrency * 2,
	}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: 30 * time.Second}
	body := strings.Repeat("x", cfg.BodyBytes)
	var measured atomic.Int64
	var completed atomic.Int64 // measured operations that finished, for progress
	workers := make([]*worker, cfg.Concurrency)
	for i := range workers {
		workers[i] = &worker{id: i, cfg: &cfg, client: client, rng: rand.New(rand.NewPCG(uint64(i), uint64(time.Now().UnixNano()))),
			errs: map[string]int{}, body: encodeBody(body), completed: &completed}
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
					cancel()
					return
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
		case <-tick.C:
			if cfg.Progress != nil {
				n := completed.Load()
				el := time.Since(start).Seconds()
				fmt.Fprintf(cfg.Progress, "\r%6.1fs %10d ops %9.0f ops/s", el, n, float64(n)/el)
			}
		}
	}
	wg.Wait()
	elapsed := time.Since(start).Seconds()
	if cfg.Progress != nil {
		fmt.Fprintln(cfg.Progress)
	}
	return report(workers, elapsed), nil
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

func summarize(ms []float64) Latency {
	if len(ms) == 0 {
		return Latency{}
	}
	slices.Sort(ms)
	q := func(p float64) float64 { return ms[min(len(ms)-1, int(p*float64(len(ms))))] }
	return Latency{Count: len(ms), P50: q(0.50), P90: q(0.90), P99: q(0.99), Max: ms[len(ms)-1]}
}

func encodeBody(s string) string {
	b, _ := json.Marshal([]byte(s))
	return string(b) // a JSON string holding base64
}

func (w *worker) addr() string { return w.cfg.Addrs[w.rng.IntN(len(w.cfg.Addrs))] }

func (w *worker) newKey() ownedKey {
	w.n++
	p := fmt.Sprintf("bench-p%d", w.rng.IntN(w.cfg.Principals))
	k := fmt.Sprintf("w%d-%d-", w.id, w.n)
	k += strings.Repeat("k", max(0, w.cfg.KeyBytes-len(k)))
	return ownedKey{p, k}
}

func (w *worker) step(ctx context.Context, measure bool) {
	w.ctx = ctx
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
	start := time.Now()
	errs := w.errs
	if !measure {
		w.errs = map[string]int{} // warm-up errors are not reported
	}
	ok := w.do(ctx, op)
	w.errs = errs
	if ctx.Err() != nil || !measure {
		return // cut off by the end of the run: not an error, not timed
	}
	if ok {
		w.samples = append(w.samples, sample{op, float64(time.Since(start).Microseconds()) / 1000})
		w.completed.Add(1)
	}
}

// do runs one operation and checks its answer. It returns whether the
// operation completed (errors are counted by code, not timed).
func (w *worker) do(ctx context.Context, op string) bool {
	switch op {
	case "fresh", "complete":
		k := w.newKey()
		status, body, code := w.claim(ctx, k, "c1")
		if status != 201 {
			if !indeterminate(status) && ctx.Err() == nil {
				w.lost++ // a fresh key must always win
			}
			w.countErr(status, code)
			return false
		}
		w.remember(k)
		if op == "fresh" {
			return true
		}
		var c struct{ Token string }
		json.Unmarshal(body, &c)
		req := fmt.Sprintf(`{"principal":%q,"endpoint":"POST /bench","key":%q,"token":%q,"response":{"status":201,"content_type":"application/json","body":%s}}`,
			k.principal, k.key, c.Token, w.body)
		status, _, code = w.post(ctx, "/v1/complete", req)
		if status != 200 {
			if !indeterminate(status) && ctx.Err() == nil {
				w.wrong++
			}
			w.countErr(status, code)
			return false
		}
		return true
	case "dup":
		k := w.owned[w.rng.IntN(len(w.owned))]
		status, _, code := w.claim(ctx, k, fmt.Sprintf("dup-%d", w.rng.Uint32()))
		switch {
		case status == 409 || status == 200:
			return true
		case status == 201:
			w.dupWon++ // another attempt of an owned key won: never allowed
		case !indeterminate(status) && ctx.Err() == nil:
			w.wrong++
		}
		w.countErr(status, code)
		return false
	default: // lookup
		k := w.owned[w.rng.IntN(len(w.owned))]
		q := url.Values{"principal": {k.principal}, "endpoint": {"POST /bench"}, "key": {k.key}}
		status, _, code := w.do1(ctx, http.MethodGet, "/v1/records?"+q.Encode(), "")
		if status == 200 {
			return true
		}
		if !indeterminate(status) && ctx.Err() == nil {
			w.wrong++
		}
		w.countErr(status, code)
		return false
	}
}

func (w *worker) cancelled() bool { return w.ctx != nil && w.ctx.Err() != nil }

func (w *worker) remember(k ownedKey) {
	if len(w.owned) < 1024 {
		w.owned = append(w.owned, k)
	} else {
		w.owned[w.rng.IntN(len(w.owned))] = k
	}
}

// indeterminate answers say nothing about correctness: the request may or
// may not have been decided.
func indeterminate(status int) bool { return status == 0 || status == 503 }

func (w *worker) countErr(status int, code string) {
	if status == 0 && code == "" && w.cancelled() {
		return
	}
	if code == "" {
		code = strconv.Itoa(status)
		if status == 0 {
			code = "transport"
		}
	}
	w.errs[code]++
}

func (w *worker) claim(ctx context.Context, k ownedKey, claimID string) (int, []byte, string) {
	body := fmt.Sprintf(`{"principal":%q,"endpoint":"POST /bench","key":%q,"fingerprint":"9f86d081884c7d65","claim_id":%q}`,
		k.principal, k.key, claimID)
	return w.post(ctx, "/v1/claim", body)
}

func (w *worker) post(ctx context.Context, path, body string) (int, []byte, string) {
	return w.do1(ctx, http.MethodPost, path, body)
}

func (w *worker) do1(ctx context.Context, method, path, body string) (int, []byte, string) {
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, "http://"+w.addr()+path, rd)
	if err != nil {
		return 0, nil, "request"
	}
	req.Header.Set("Content-Type", "application/json")
	if w.cfg.AuthToken != "" {
		req.Header.Set("Authorization", "Bearer "+w.cfg.AuthToken)
	}
	resp, err := w.client.Do(req)
	if err != nil {
		return 0, nil, ""
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	code := ""
	if resp.StatusCode >= 300 {
		var p struct{ Code string }
		if json.Unmarshal(b, &p) == nil {
			code = p.Code
		}
	}
	return resp.StatusCode, bytes.TrimSpace(b), code
}
