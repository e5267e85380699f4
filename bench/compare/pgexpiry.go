package main

// compare pg-expiry: what expiring N records costs PostgreSQL on the seed's
// table, the figure to set beside idem's expiry of a bucket (one Pebble
// DeleteRange). For each mode it recreates the table from the same DDL as
// the claim benchmark (schema, postgres.go), bulk-loads N expired rows and
// M live ones, settles the load (VACUUM ANALYZE, CHECKPOINT), then times
// the seed's cleanup job (one DELETE ... WHERE expires_at < now(), or the
// chunked form the seed recommends), the WAL it writes, the size after it,
// after VACUUM and after VACUUM FULL, while a few clients keep claiming and
// their latency is recorded per phase.

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
)

// The phases a claim's latency is attributed to (by its start time).
const (
	phaseOther = iota
	phaseBaseline
	phaseDelete
	phaseVacuum
	phaseVacuumFull
	numPhases
)

var phaseNames = [numPhases]string{"", "before (idle)", "during the DELETE", "during VACUUM", "during VACUUM FULL"}

// stallMs is idem's target: no claim stalls above 50 ms while a bucket drops.
const stallMs = 50

const (
	deleteAllSQL   = `DELETE FROM idempotency_keys WHERE expires_at < now()`
	deleteBatchSQL = `DELETE FROM idempotency_keys WHERE id IN
  (SELECT id FROM idempotency_keys WHERE expires_at < now() ORDER BY expires_at LIMIT $1)`
	// loadSQL inserts rows $1..$2 of a series, all of one kind: key prefix
	// $3 ('e' expired, 'l' live), expires_at = $4 + g * $5 seconds, so
	// that the heap is in expiry order as it is when rows arrive over time
	// (the expired rows first). Rows look like completed claims of the
	// claim benchmark: 32-byte keys, sha256 fingerprint, 1000 principals
	// by default, a response body of $7 bytes (none when 0).
	loadSQL = `INSERT INTO idempotency_keys
  (principal_id, endpoint, key, fingerprint, state, response_status, response_body, created_at, expires_at)
SELECT md5('p' || (g % $6))::uuid, 'POST /bench', rpad($3 || '-' || g || '-', 32, 'k'),
  sha256(int8send(g)), 'completed', 201, b.body,
  $4::timestamptz + g * $5::float8 * interval '1 second' - interval '24 hours',
  $4::timestamptz + g * $5::float8 * interval '1 second'
FROM generate_series($1::bigint, $2::bigint) g,
  (SELECT CASE WHEN $7::int > 0 THEN jsonb_build_object('status', 201, 'content_type', 'application/json',
     'body', repeat('x', $7::int)) END AS body) b`
	sizesSQL = `SELECT pg_total_relation_size('idempotency_keys'), pg_relation_size('idempotency_keys'),
  pg_indexes_size('idempotency_keys')`
)

type expiryOpts struct {
	target, dataDir    string
	rows, live         int64
	batch              int
	modes              []string
	principals         int
	bodyBytes          int
	claimers           int
	claimRate          float64
	baseline           time.Duration
	autovacuum         bool
	markdown, jsonFile string
}

// sizes of the table and of the data directory at one point.
type sizes struct {
	Total   int64 `json:"total_bytes"`    // pg_total_relation_size: heap, indexes, TOAST
	Heap    int64 `json:"heap_bytes"`     // pg_relation_size
	Indexes int64 `json:"index_bytes"`    // pg_indexes_size
	DataDir int64 `json:"datadir_du"`     // du of the data dir, bytes on disk (0: not measured)
	WALDir  int64 `json:"pg_wal_du"`      // du of pg_wal
	Rows    int64 `json:"rows,omitempty"` // live tuples counted at the end
}

// claimStats are the claims whose start fell in one phase.
type claimStats struct {
	Count  int     `json:"count"`
	Errors int     `json:"errors"`
	P50    float64 `json:"p50_ms"`
	P99    float64 `json:"p99_ms"`
	Max    float64 `json:"max_ms"`
	Over   int     `json:"over_50ms"`
	Secs   float64 `json:"phase_s"`
}

// expiryRun is one mode's figures.
type expiryRun struct {
	Mode        string                `json:"mode"` // "single" or "batched"
	Batch       int                   `json:"batch,omitempty"`
	Expired     int64                 `json:"expired_rows"`
	Live        int64                 `json:"live_rows"`
	LoadS       float64               `json:"load_s"`
	SettleS     float64               `json:"settle_s"` // VACUUM ANALYZE + CHECKPOINT after the load
	Before      sizes                 `json:"before"`
	DeleteS     float64               `json:"delete_s"`
	Deleted     int64                 `json:"deleted"`
	Batches     int                   `json:"batches,omitempty"`
	MaxBatchMs  float64               `json:"max_batch_ms,omitempty"`
	DeleteWAL   int64                 `json:"delete_wal_bytes"`
	AfterDelete sizes                 `json:"after_delete"`
	VacuumS     float64               `json:"vacuum_s"`
	VacuumWAL   int64                 `json:"vacuum_wal_bytes"`
	AfterVacuum sizes                 `json:"after_vacuum"`
	FullS       float64               `json:"vacuum_full_s"`
	FullWAL     int64                 `json:"vacuum_full_wal_bytes"`
	AfterFull   sizes                 `json:"after_vacuum_full"`
	LiveKept    int64                 `json:"live_kept"`
	ExpiredLeft int64                 `json:"expired_left"`
	Claims      map[string]claimStats `json:"claims,omitempty"`
}

// expiryReport is everything pg-expiry prints.
type expiryReport struct {
	Server     string      `json:"server"`
	Settings   string      `json:"settings"`
	Autovacuum bool        `json:"autovacuum"`
	BodyBytes  int         `json:"body_bytes"`
	Principals int         `json:"principals"`
	Claimers   int         `json:"claimers"`
	ClaimRate  float64     `json:"claim_rate"`
	Runs       []expiryRun `json:"runs"`
}

func cmdPGExpiry(ctx context.Context, args []string) int {
	fs := flag.NewFlagSet("compare pg-expiry", flag.ContinueOnError)
	var o expiryOpts
	fs.StringVar(&o.target, "target", "", "PostgreSQL DSN (postgres://user@host:port/db); the table idempotency_keys in it is dropped and recreated")
	fs.StringVar(&o.dataDir, "data-dir", "", "the server's data dir, for du (empty: no on-disk figures)")
	fs.Int64Var(&o.rows, "rows", 10_000_000, "expired rows to load and delete")
	fs.Int64Var(&o.live, "live", 1_000_000, "live rows (expires_at in the future) that must survive")
	fs.IntVar(&o.batch, "batch", 10_000, "rows per DELETE in the batched mode")
	modes := fs.String("modes", "single,batched", "comma-separated: single (one DELETE), batched (DELETE ... LIMIT --batch until none is left)")
	fs.IntVar(&o.principals, "principals", 1000, "distinct principals among the loaded rows")
	fs.IntVar(&o.bodyBytes, "body-bytes", 0, "stored response body per row (0: none, like a claim that idem stores)")
	fs.IntVar(&o.claimers, "claimers", 4, "clients claiming fresh keys through every phase (0: none)")
	fs.Float64Var(&o.claimRate, "claim-rate", 200, "claims per second, all clients together")
	fs.DurationVar(&o.baseline, "baseline", 5*time.Second, "claims measured before the DELETE, for comparison")
	fs.BoolVar(&o.autovacuum, "autovacuum", false, "leave autovacuum on for the table (default off, so that VACUUM is timed alone)")
	fs.StringVar(&o.markdown, "results", "", "also write the markdown table to this file")
	fs.StringVar(&o.jsonFile, "json", "", "write the figures as JSON to this file")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	o.modes = splitList(*modes)
	for _, m := range o.modes {
		if m != "single" && m != "batched" {
			fmt.Fprintf(os.Stderr, "compare pg-expiry: unknown mode %q (single, batched)\n", m)
			return 2
		}
	}
	if o.target == "" || len(o.modes) == 0 || o.rows < 1 || o.live < 0 || o.batch < 1 || o.principals < 1 || o.claimRate <= 0 {
		fmt.Fprintln(os.Stderr, "compare pg-expiry: needs --target, a mode, --rows >= 1, --live >= 0, --batch >= 1, --principals >= 1, --claim-rate > 0")
		return 2
	}
	rep, err := pgExpiry(ctx, o)
	if err != nil {
		fmt.Fprintf(os.Stderr, "compare pg-expiry: %v\n", err)
		if ctx.Err() != nil {
			return 130
		}
		return 1
	}
	var b strings.Builder
	writeExpiryTable(&b, rep)
	fmt.Print(b.String())
	if o.markdown != "" {
		if err := os.WriteFile(o.markdown, []byte(b.String()), 0o644); err != nil {
			fmt.Fprintf(os.Stderr, "compare pg-expiry: %v\n", err)
			return 1
		}
	}
	if o.jsonFile != "" {
		j, _ := json.MarshalIndent(rep, "", "  ")
		if err := os.WriteFile(o.jsonFile, append(j, '\n'), 0o644); err != nil {
			fmt.Fprintf(os.Stderr, "compare pg-expiry: %v\n", err)
			return 1
		}
	}
	for _, r := range rep.Runs {
		if r.LiveKept != r.Live || r.ExpiredLeft != 0 {
			fmt.Fprintf(os.Stderr, "compare pg-expiry: %s: %d of %d live rows kept, %d expired rows left\n", r.Mode, r.LiveKept, r.Live, r.ExpiredLeft)
			return 1
		}
	}
	return 0
}

func logf(format string, a ...any) {
	fmt.Fprintf(os.Stderr, "[pg-expiry %s] %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, a...))
}

func pgExpiry(ctx context.Context, o expiryOpts) (*expiryReport, error) {
	c, err := pgx.Connect(ctx, o.target)
	if err != nil {
		return nil, err
	}
	defer c.Close(context.Background())
	rep := &expiryReport{Autovacuum: o.autovacuum, BodyBytes: o.bodyBytes, Principals: o.principals,
		Claimers: o.claimers, ClaimRate: o.claimRate}
	var fsync, sync, sb, mws, ver string
	if err := c.QueryRow(ctx, `SELECT current_setting('fsync'), current_setting('synchronous_commit'),
  current_setting('shared_buffers'), current_setting('max_wal_size'), current_setting('server_version')`).Scan(&fsync, &sync, &sb, &mws, &ver); err != nil {
		return nil, err
	}
	if fsync != "on" || sync != "on" {
		return nil, fmt.Errorf("the server runs with fsync=%s synchronous_commit=%s; the comparison needs both on", fsync, sync)
	}
	rep.Server = "PostgreSQL " + strings.Fields(ver)[0]
	rep.Settings = fmt.Sprintf("fsync=on, synchronous_commit=on, shared_buffers=%s, max_wal_size=%s, other settings default", sb, mws)
	for _, m := range o.modes {
		r, err := expiryMode(ctx, c, o, m)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", m, err)
		}
		rep.Runs = append(rep.Runs, *r)
	}
	return rep, nil
}

func expiryMode(ctx context.Context, c *pgx.Conn, o expiryOpts, mode string) (*expiryRun, error) {
	r := &expiryRun{Mode: mode, Expired: o.rows, Live: o.live}
	if mode == "batched" {
		r.Batch = o.batch
	}
	logf("%s: recreating the table", mode)
	if _, err := c.Exec(ctx, "DROP TABLE IF EXISTS idempotency_keys"); err != nil {
		return nil, err
	}
	if _, err := c.Exec(ctx, "CHECKPOINT"); err != nil {
		return nil, err
	}
	if _, err := c.Exec(ctx, schema); err != nil {
		return nil, fmt.Errorf("creating the table: %w", err)
	}
	if !o.autovacuum {
		if _, err := c.Exec(ctx, "ALTER TABLE idempotency_keys SET (autovacuum_enabled = false)"); err != nil {
			return nil, err
		}
	}

	// Load: the expired rows expire over the last 24 hours (the newest
	// ten minutes ago), the live ones over the next 23 (the first in an
	// hour), so neither kind changes side while the run lasts.
	var now time.Time
	if err := c.QueryRow(ctx, "SELECT now()").Scan(&now); err != nil {
		return nil, err
	}
	t0 := time.Now()
	const chunk = 1_000_000
	load := func(kind string, n int64, first time.Time, spanS float64) error {
		step := spanS / float64(max(n, 1))
		for lo := int64(1); lo <= n; lo += chunk {
			hi := min(n, lo+chunk-1)
			if _, err := c.Exec(ctx, loadSQL, lo, hi, kind, first, step, o.principals, o.bodyBytes); err != nil {
				return fmt.Errorf("loading rows %d..%d: %w", lo, hi, err)
			}
			logf("%s: loaded %s rows %d..%d of %d (%.0f s)", mode, kind, lo, hi, n, time.Since(t0).Seconds())
		}
		return nil
	}
	if err := load("e", o.rows, now.Add(-24*time.Hour-10*time.Minute), 24*3600); err != nil {
		return nil, err
	}
	if err := load("l", o.live, now.Add(time.Hour), 23*3600); err != nil {
		return nil, err
	}
	r.LoadS = time.Since(t0).Seconds()
	t0 = time.Now()
	logf("%s: VACUUM ANALYZE, CHECKPOINT", mode)
	for _, q := range []string{"VACUUM ANALYZE idempotency_keys", "CHECKPOINT"} {
		if _, err := c.Exec(ctx, q); err != nil {
			return nil, fmt.Errorf("%s: %w", q, err)
		}
	}
	r.SettleS = time.Since(t0).Seconds()
	var err error
	if r.Before, err = measure(ctx, c, o.dataDir); err != nil {
		return nil, err
	}

	// The claim load runs from here to the end of VACUUM FULL.
	var phase atomic.Int32
	cl, err := startClaimers(ctx, o, &phase)
	if err != nil {
		return nil, err
	}
	defer cl.stop()
	phaseSecs := map[int]float64{}
	if o.claimers > 0 {
		time.Sleep(time.Second) // connections open, first claims done
		phase.Store(phaseBaseline)
		time.Sleep(o.baseline)
		phaseSecs[phaseBaseline] = o.baseline.Seconds()
	}

	// timed runs f in phase p and returns its duration and the WAL written.
	timed := func(p int, f func() error) (float64, int64, error) {
		var l0, l1 string
		if err := c.QueryRow(ctx, "SELECT pg_current_wal_lsn()::text").Scan(&l0); err != nil {
			return 0, 0, err
		}
		phase.Store(int32(p))
		t := time.Now()
		err := f()
		d := time.Since(t).Seconds()
		phase.Store(phaseOther)
		phaseSecs[p] = d
		if err != nil {
			return d, 0, err
		}
		var wal int64
		if err := c.QueryRow(ctx, "SELECT pg_current_wal_lsn()::text").Scan(&l1); err != nil {
			return d, 0, err
		}
		if err := c.QueryRow(ctx, "SELECT pg_wal_lsn_diff($1::pg_lsn, $2::pg_lsn)::bigint", l1, l0).Scan(&wal); err != nil {
			return d, 0, err
		}
		return d, wal, nil
	}

	logf("%s: deleting %d expired rows", mode, o.rows)
	r.DeleteS, r.DeleteWAL, err = timed(phaseDelete, func() error {
		if mode == "single" {
			tag, err := c.Exec(ctx, deleteAllSQL)
			r.Deleted = tag.RowsAffected()
			return err
		}
		for {
			t := time.Now()
			tag, err := c.Exec(ctx, deleteBatchSQL, o.batch)
			if err != nil {
				return err
			}
			r.Batches++
			r.MaxBatchMs = max(r.MaxBatchMs, float64(time.Since(t).Microseconds())/1000)
			r.Deleted += tag.RowsAffected()
			if tag.RowsAffected() == 0 {
				return nil
			}
			if r.Batches%100 == 0 {
				logf("%s: %d batches, %d rows deleted", mode, r.Batches, r.Deleted)
			}
		}
	})
	if err != nil {
		return nil, fmt.Errorf("DELETE: %w", err)
	}
	logf("%s: deleted %d rows in %.1f s, %s of WAL", mode, r.Deleted, r.DeleteS, humanBytes(r.DeleteWAL))
	if r.AfterDelete, err = measure(ctx, c, o.dataDir); err != nil {
		return nil, err
	}

	logf("%s: VACUUM", mode)
	if r.VacuumS, r.VacuumWAL, err = timed(phaseVacuum, func() error {
		_, err := c.Exec(ctx, "VACUUM idempotency_keys")
		return err
	}); err != nil {
		return nil, fmt.Errorf("VACUUM: %w", err)
	}
	if r.AfterVacuum, err = measure(ctx, c, o.dataDir); err != nil {
		return nil, err
	}

	logf("%s: VACUUM FULL", mode)
	if r.FullS, r.FullWAL, err = timed(phaseVacuumFull, func() error {
		_, err := c.Exec(ctx, "VACUUM FULL idempotency_keys")
		return err
	}); err != nil {
		return nil, fmt.Errorf("VACUUM FULL: %w", err)
	}
	lat := cl.stop()
	if r.AfterFull, err = measure(ctx, c, o.dataDir); err != nil {
		return nil, err
	}
	if err := c.QueryRow(ctx, `SELECT count(*) FILTER (WHERE key LIKE 'l-%'), count(*) FILTER (WHERE key LIKE 'e-%'),
  count(*) FROM idempotency_keys`).Scan(&r.LiveKept, &r.ExpiredLeft, &r.AfterFull.Rows); err != nil {
		return nil, err
	}
	if o.claimers > 0 {
		r.Claims = map[string]claimStats{}
		for p := phaseBaseline; p < numPhases; p++ {
			s := summarizeClaims(lat[p])
			s.Secs = phaseSecs[p]
			r.Claims[phaseNames[p]] = s
		}
	}
	logf("%s: done: VACUUM %.1f s, VACUUM FULL %.1f s, %d live rows kept, %d expired left", mode, r.VacuumS, r.FullS, r.LiveKept, r.ExpiredLeft)
	return r, nil
}

func measure(ctx context.Context, c *pgx.Conn, dataDir string) (sizes, error) {
	var s sizes
	if err := c.QueryRow(ctx, sizesSQL).Scan(&s.Total, &s.Heap, &s.Indexes); err != nil {
		return s, err
	}
	if dataDir != "" {
		var err error
		if s.DataDir, err = du(dataDir); err != nil {
			return s, err
		}
		if s.WALDir, err = du(filepath.Join(dataDir, "pg_wal")); err != nil {
			return s, err
		}
	}
	return s, nil
}

// du is the bytes a directory tree takes on disk (du -s -B1).
func du(dir string) (int64, error) {
	out, err := exec.Command("du", "-s", "-B1", dir).Output()
	if err != nil {
		// files vanish under a running server (WAL recycling, temp files)
		var ee *exec.ExitError
		if !errors.As(err, &ee) || len(out) == 0 {
			return 0, fmt.Errorf("du %s: %w", dir, err)
		}
	}
	f := strings.Fields(string(out))
	if len(f) == 0 {
		return 0, fmt.Errorf("du %s: no output", dir)
	}
	return strconv.ParseInt(f[0], 10, 64)
}

type claimSample struct {
	phase int32
	ms    float64
	err   bool
}

type claimers struct {
	quit chan struct{}
	wg   sync.WaitGroup
	mu   sync.Mutex
	got  []claimSample
	once sync.Once
	byPh [numPhases][]claimSample
}

// startClaimers opens o.claimers connections, each claiming fresh keys with
// the seed's INSERT ... ON CONFLICT DO NOTHING RETURNING id at
// o.claimRate/o.claimers per second (the next claim starts on the next
// tick, or at once when one took longer than a tick), each latency
// recorded under the phase in which the claim started.
func startClaimers(ctx context.Context, o expiryOpts, phase *atomic.Int32) (*claimers, error) {
	cl := &claimers{quit: make(chan struct{})}
	conns := make([]*pgx.Conn, o.claimers)
	for i := range conns {
		c, err := pgx.Connect(ctx, o.target)
		if err != nil {
			for _, c := range conns[:i] {
				c.Close(context.Background())
			}
			return nil, err
		}
		conns[i] = c
	}
	fp := make([]byte, 32)
	every := time.Duration(float64(time.Second) * float64(max(o.claimers, 1)) / o.claimRate)
	for i, c := range conns {
		cl.wg.Add(1)
		go func() {
			defer cl.wg.Done()
			defer c.Close(context.Background())
			tick := time.NewTicker(every)
			defer tick.Stop()
			var local []claimSample
			defer func() { cl.mu.Lock(); cl.got = append(cl.got, local...); cl.mu.Unlock() }()
			for n := 0; ; n++ {
				select {
				case <-cl.quit:
					return
				case <-ctx.Done():
					return
				case <-tick.C:
				}
				p := phase.Load()
				key := fmt.Sprintf("c-%d-%d-", i, n)
				key += strings.Repeat("k", max(0, 32-len(key)))
				t := time.Now()
				var id int64
				err := c.QueryRow(ctx, claimSQL, principalUUID("cus_"+strconv.Itoa(n%o.principals)), "POST /bench", key, fp, 86400.0).Scan(&id)
				if ctx.Err() != nil {
					return // interrupted: not a measurement
				}
				local = append(local, claimSample{phase: p, ms: float64(time.Since(t).Microseconds()) / 1000, err: err != nil})
			}
		}()
	}
	return cl, nil
}

// stop ends the claim load and returns the samples by phase. Claims in
// flight finish first: those waiting on VACUUM FULL's lock are measured.
func (cl *claimers) stop() [numPhases][]claimSample {
	cl.once.Do(func() {
		close(cl.quit)
		cl.wg.Wait()
		for _, s := range cl.got {
			cl.byPh[s.phase] = append(cl.byPh[s.phase], s)
		}
	})
	return cl.byPh
}

// summarizeClaims: nearest-rank percentiles (as package bench) of the
// successful claims, the errors, and how many took over stallMs.
func summarizeClaims(ss []claimSample) claimStats {
	var s claimStats
	ms := make([]float64, 0, len(ss))
	for _, x := range ss {
		if x.err {
			s.Errors++
			continue
		}
		ms = append(ms, x.ms)
		if x.ms > stallMs {
			s.Over++
		}
	}
	s.Count = len(ms)
	if len(ms) == 0 {
		return s
	}
	slices.Sort(ms)
	rank := func(p float64) float64 {
		i := int(p*float64(len(ms))+0.999999999) - 1
		return ms[min(len(ms)-1, max(0, i))]
	}
	s.P50, s.P99, s.Max = rank(0.50), rank(0.99), ms[len(ms)-1]
	return s
}

func humanBytes(b int64) string {
	switch {
	case b >= 1<<30:
		return fmt.Sprintf("%.2f GiB", float64(b)/(1<<30))
	case b >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20))
	case b >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(b)/(1<<10))
	}
	return fmt.Sprintf("%d B", b)
}

// thousands writes n with comma separators.
func thousands(n int64) string {
	s := strconv.FormatInt(n, 10)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, ch := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(ch)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}

func secs(s float64) string {
	if s < 10 {
		return fmt.Sprintf("%.2f s", s)
	}
	return fmt.Sprintf("%.1f s", s)
}

func (s sizes) table() string {
	return fmt.Sprintf("%s (heap %s, indexes %s)", humanBytes(s.Total), humanBytes(s.Heap), humanBytes(s.Indexes))
}

func (s sizes) disk() string {
	if s.DataDir == 0 {
		return "—"
	}
	return fmt.Sprintf("%s (pg_wal %s)", humanBytes(s.DataDir), humanBytes(s.WALDir))
}

func (c claimStats) String() string {
	if c.Count == 0 && c.Errors == 0 {
		return "none started"
	}
	s := fmt.Sprintf("%d in %s: p50 %.1f, p99 %.1f, max %.1f ms; %d over %d ms", c.Count, secs(c.Secs), c.P50, c.P99, c.Max, c.Over, stallMs)
	if c.Over > 0 {
		s = strings.Replace(s, fmt.Sprintf("; %d over", c.Over), fmt.Sprintf("; **%d over**", c.Over), 1)
	}
	if c.Errors > 0 {
		s += fmt.Sprintf(", %d errors", c.Errors)
	}
	return s
}

// writeExpiryTable prints the figures, one column per mode.
func writeExpiryTable(w io.Writer, rep *expiryReport) {
	fmt.Fprintf(w, "%s, %s; autovacuum on the table %s.\n", rep.Server, rep.Settings, map[bool]string{true: "on", false: "off (VACUUM timed alone)"}[rep.Autovacuum])
	body := "no response body (as a claim)"
	if rep.BodyBytes > 0 {
		body = fmt.Sprintf("a %d-byte response body", rep.BodyBytes)
	}
	fmt.Fprintf(w, "Rows: the seed's table and indexes, 32-byte keys, sha256 fingerprints, %d principals, %s, in expiry order.\n", rep.Principals, body)
	if rep.Claimers > 0 {
		fmt.Fprintf(w, "Claims: %d clients, %.0f claims/s together, the seed's INSERT ... ON CONFLICT DO NOTHING RETURNING id, latency by the phase the claim started in.\n", rep.Claimers, rep.ClaimRate)
	}
	fmt.Fprintln(w)
	head, rule := "| |", "|---|"
	for _, r := range rep.Runs {
		if r.Mode == "single" {
			head += " one `DELETE ... WHERE expires_at < now()` |"
		} else {
			head += fmt.Sprintf(" batched: `DELETE ... WHERE id IN (SELECT ... LIMIT %s)` until none left |", thousands(int64(r.Batch)))
		}
		rule += "---:|"
	}
	fmt.Fprintln(w, head)
	fmt.Fprintln(w, rule)
	row := func(name string, f func(r expiryRun) string) {
		line := "| " + name + " |"
		for _, r := range rep.Runs {
			line += " " + f(r) + " |"
		}
		fmt.Fprintln(w, line)
	}
	row("expired rows / live rows", func(r expiryRun) string {
		return thousands(r.Expired) + " / " + thousands(r.Live)
	})
	row("bulk load, then VACUUM ANALYZE + CHECKPOINT", func(r expiryRun) string {
		return secs(r.LoadS) + " + " + secs(r.SettleS)
	})
	row("table + indexes before", func(r expiryRun) string { return r.Before.table() })
	row("data dir on disk before (du)", func(r expiryRun) string { return r.Before.disk() })
	row("**delete time**", func(r expiryRun) string {
		s := "**" + secs(r.DeleteS) + "**"
		if r.Mode == "batched" {
			s += fmt.Sprintf(" (%s statements, slowest %.0f ms)", thousands(int64(r.Batches)), r.MaxBatchMs)
		}
		return s
	})
	row("rows deleted", func(r expiryRun) string { return thousands(r.Deleted) })
	row("**WAL written by the delete**", func(r expiryRun) string {
		return fmt.Sprintf("**%s** (%.0f B per row)", humanBytes(r.DeleteWAL), float64(r.DeleteWAL)/float64(max(r.Deleted, 1)))
	})
	row("table + indexes after the delete", func(r expiryRun) string { return r.AfterDelete.table() })
	row("data dir after the delete (du)", func(r expiryRun) string { return r.AfterDelete.disk() })
	row("plain VACUUM: time, WAL", func(r expiryRun) string {
		return secs(r.VacuumS) + ", " + humanBytes(r.VacuumWAL)
	})
	row("table + indexes after VACUUM (space kept by the table)", func(r expiryRun) string { return r.AfterVacuum.table() })
	row("data dir after VACUUM (du)", func(r expiryRun) string { return r.AfterVacuum.disk() })
	row("VACUUM FULL (ACCESS EXCLUSIVE lock: claims wait): time, WAL", func(r expiryRun) string {
		return secs(r.FullS) + ", " + humanBytes(r.FullWAL)
	})
	row("table + indexes after VACUUM FULL", func(r expiryRun) string { return r.AfterFull.table() })
	row("data dir after VACUUM FULL (du)", func(r expiryRun) string { return r.AfterFull.disk() })
	row("live rows kept / expired rows left", func(r expiryRun) string {
		ok := "all kept"
		if r.LiveKept != r.Live || r.ExpiredLeft != 0 {
			ok = "**WRONG**"
		}
		return fmt.Sprintf("%s / %s (%s)", thousands(r.LiveKept), thousands(r.ExpiredLeft), ok)
	})
	if rep.Claimers > 0 {
		for p := phaseBaseline; p < numPhases; p++ {
			name := phaseNames[p]
			row("claims "+name, func(r expiryRun) string { return r.Claims[name].String() })
		}
		fmt.Fprintln(w)
		fmt.Fprintln(w, "During VACUUM FULL each client waits on its first claim until the lock is released, so only")
		fmt.Fprintln(w, "one claim per client starts and their latency is the time they were locked out.")
	}
}
