package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"encoding/xml"
	"errors"
	"image/png"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestParseMix(t *testing.T) {
	m, err := ParseMix("fresh=70, dup=10,complete=15,lookup=5")
	if err != nil {
		t.Fatal(err)
	}
	if (m != Mix{Fresh: 70, Dup: 10, Complete: 15, Lookup: 5}) {
		t.Fatalf("got %+v", m)
	}
	if got := m.String(); got != "fresh=70,dup=10,complete=15,lookup=5" {
		t.Fatalf("String() = %q", got)
	}
	if m, _ := ParseMix("dup=3"); m.String() != "dup=3" || m.Fresh != 0 {
		t.Fatalf("got %+v", m)
	}
	for _, bad := range []string{"", "fresh", "fresh=x", "fresh=-1", "fresh=0", "bogus=1", "fresh=1,,"} {
		if _, err := ParseMix(bad); err == nil {
			t.Errorf("ParseMix(%q) accepted", bad)
		}
	}
}

func TestSummarizePercentiles(t *testing.T) {
	ms := make([]float64, 100)
	for i := range ms {
		ms[i] = float64(100 - i) // 100 .. 1, unsorted
	}
	l := summarize(ms)
	if l != (Latency{Count: 100, P50: 50, P90: 90, P99: 99, Max: 100}) {
		t.Fatalf("got %+v", l)
	}
	if l := summarize([]float64{7}); l != (Latency{Count: 1, P50: 7, P90: 7, P99: 7, Max: 7}) {
		t.Fatalf("one sample: %+v", l)
	}
	if l := summarize(nil); l != (Latency{}) {
		t.Fatalf("no samples: %+v", l)
	}
	ten := []float64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}
	if p := percentile(ten, 0.5); p != 5 {
		t.Fatalf("p50 of 1..10 = %v", p)
	}
	if p := percentile(ten, 0.99); p != 10 {
		t.Fatalf("p99 of 1..10 = %v", p)
	}
}

func TestHistogramBins(t *testing.T) {
	bins := Histogram([]float64{1, 1.1, 1.3, 9.9, 10, 0}, 10)
	// from the bin of 0 (clamped to 1 µs: 10^-3) to the bin of 10 (10^1): 41 bins
	if len(bins) != 41 {
		t.Fatalf("%d bins", len(bins))
	}
	total := 0
	for i, b := range bins {
		total += b.Count
		if b.Hi <= b.Lo || (i > 0 && bins[i-1].Hi != b.Lo) {
			t.Fatalf("bin %d: %+v not contiguous", i, b)
		}
	}
	if total != 6 {
		t.Fatalf("%d samples counted", total)
	}
	if b := bins[30]; b.Count != 2 || b.Lo != 1 { // [1, 1.259): 1 and 1.1
		t.Fatalf("bin of 1 ms: %+v", b)
	}
	if b := bins[40]; b.Count != 1 || b.Lo != 10 {
		t.Fatalf("last bin: %+v", b)
	}
	if Histogram(nil, 10) != nil {
		t.Fatal("bins without samples")
	}
}

func TestHistogramSVG(t *testing.T) {
	var ms []float64
	for i := range 1000 {
		ms = append(ms, 0.2+float64(i%50)*0.1) // 0.2 .. 5.1 ms
	}
	ms = append(ms, 80) // one outlier, far right
	nonEmpty := 0
	for _, b := range Histogram(ms, 10) {
		if b.Count > 0 {
			nonEmpty++
		}
	}
	var buf bytes.Buffer
	if err := WriteHistogramSVG(&buf, "test <run> & co", ms); err != nil {
		t.Fatal(err)
	}
	// valid XML, an <svg> root, one bar per non-empty bin
	dec := xml.NewDecoder(bytes.NewReader(buf.Bytes()))
	bars, root := 0, ""
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("invalid SVG: %v\n%s", err, buf.String())
		}
		if se, ok := tok.(xml.StartElement); ok {
			if root == "" {
				root = se.Name.Local
			}
			for _, a := range se.Attr {
				if se.Name.Local == "rect" && a.Name.Local == "class" && a.Value == "bar" {
					bars++
				}
			}
		}
	}
	if root != "svg" {
		t.Fatalf("root element %q", root)
	}
	if bars != nonEmpty || bars < 10 {
		t.Fatalf("%d bars, want %d", bars, nonEmpty)
	}
	for _, want := range []string{"p50", "p99", "max", "log scale", "test &lt;run&gt; &amp; co"} {
		if !strings.Contains(buf.String(), want) {
			t.Errorf("SVG lacks %q", want)
		}
	}
	// no samples: still a valid picture
	buf.Reset()
	if err := WriteHistogramSVG(&buf, "empty", nil); err != nil || !strings.Contains(buf.String(), "no samples") {
		t.Fatalf("empty: %v", err)
	}
}

func TestHistogramFilePNGAndSVG(t *testing.T) {
	dir := t.TempDir()
	r := &Report{Latencies: []float64{0.5, 0.7, 1, 2, 3, 40}}
	if err := WriteHistogramFile(filepath.Join(dir, "h.png"), "png run", r); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(filepath.Join(dir, "h.png"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatal(err)
	}
	if b := img.Bounds(); b.Dx() != histW || b.Dy() != histH {
		t.Fatalf("png is %v", b)
	}
	if err := WriteHistogramFile(filepath.Join(dir, "h.SVG"), "svg run", r); err != nil {
		t.Fatal(err)
	}
	if err := WriteHistogramFile(filepath.Join(dir, "h.jpg"), "x", r); err == nil {
		t.Fatal("a .jpg histogram was accepted")
	}
}

func TestValidateNamesFlags(t *testing.T) {
	err := (&Config{KeyBytes: 3, BodyBytes: -1}).Validate()
	if err == nil {
		t.Fatal("bad config accepted")
	}
	for _, flag := range []string{"--addr", "--concurrency", "--duration", "--principals", "--key-bytes", "--body-bytes", "--mix"} {
		if !strings.Contains(err.Error(), flag) {
			t.Errorf("error does not name %s: %v", flag, err)
		}
	}
	ok := Config{Driver: &memDriver{}, Concurrency: 1, Ops: 1, Mix: Mix{Fresh: 1}, Principals: 1, KeyBytes: 32}
	if err := ok.Validate(); err != nil {
		t.Fatalf("a driver needs no --addr: %v", err)
	}
}

// fakeIdem is a tiny in-memory server speaking the parts of the API the
// HTTP driver uses.
func fakeIdem(t *testing.T) *httptest.Server {
	type rec struct {
		token     string
		completed bool
	}
	var mu sync.Mutex
	recs := map[string]*rec{}
	next := 0
	scope := func(p, e, k string) string { return strconv.Quote(p) + strconv.Quote(e) + strconv.Quote(k) }
	problem := func(w http.ResponseWriter, status int, code string) {
		w.Header().Set("Content-Type", "application/problem+json")
		w.WriteHeader(status)
		json.NewEncoder(w).Encode(map[string]any{"status": status, "code": code})
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/claim", func(w http.ResponseWriter, r *http.Request) {
		var req struct{ Principal, Endpoint, Key, Fingerprint, ClaimID string }
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil || req.Key == "" {
			problem(w, 400, "invalid_request")
			return
		}
		mu.Lock()
		defer mu.Unlock()
		s := scope(req.Principal, req.Endpoint, req.Key)
		if x, ok := recs[s]; ok {
			if x.completed {
				w.Write([]byte(`{"outcome":"replay","record":{}}`))
				return
			}
			problem(w, 409, "in_progress")
			return
		}
		next++
		recs[s] = &rec{token: strconv.Itoa(next)}
		w.WriteHeader(201)
		w.Write([]byte(`{"outcome":"claimed","token":"` + strconv.Itoa(next) + `"}`))
	})
	mux.HandleFunc("POST /v1/complete", func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Principal, Endpoint, Key, Token string
			Response                        struct{ Body []byte }
		}
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			problem(w, 400, "invalid_request")
			return
		}
		mu.Lock()
		defer mu.Unlock()
		x, ok := recs[scope(req.Principal, req.Endpoint, req.Key)]
		switch {
		case !ok:
			problem(w, 404, "not_found")
		case x.token != req.Token:
			problem(w, 409, "token_mismatch")
		default:
			x.completed = true
			rec, _ := json.Marshal(map[string]string{"principal": req.Principal, "endpoint": req.Endpoint, "key": req.Key})
			w.Write([]byte(`{"outcome":"completed","record":` + string(rec) + `}`))
		}
	})
	mux.HandleFunc("GET /v1/records", func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		mu.Lock()
		_, ok := recs[scope(q.Get("principal"), q.Get("endpoint"), q.Get("key"))]
		mu.Unlock()
		if !ok {
			problem(w, 404, "not_found")
			return
		}
		w.Write([]byte(`{"record":{}}`))
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv
}

func TestRunHTTPDriverAgainstFakeServer(t *testing.T) {
	srv := fakeIdem(t)
	var progress bytes.Buffer
	rep, err := Run(context.Background(), Config{
		Addrs: []string{srv.URL}, Concurrency: 8, Ops: 2000, Mix: Mix{Fresh: 40, Dup: 20, Complete: 20, Lookup: 20},
		Principals: 5, KeyBytes: 32, BodyBytes: 64, Progress: &progress,
	})
	if err != nil {
		t.Fatal(err)
	}
	if !rep.OK() || len(rep.Errors) != 0 {
		t.Fatalf("report: %+v", rep)
	}
	if rep.Ops != 2000 || len(rep.Latencies) != 2000 {
		t.Fatalf("%d ops measured, want 2000", rep.Ops)
	}
	for _, op := range []string{"fresh", "dup", "complete", "lookup"} {
		if rep.ByOp[op].Count == 0 {
			t.Errorf("no %s operation ran", op)
		}
	}
	if rep.Mix != "fresh=40,dup=20,complete=20,lookup=20" || rep.Concurrency != 8 {
		t.Fatalf("report header: %+v", rep)
	}
}

func TestHTTPDriverOutcomes(t *testing.T) {
	srv := fakeIdem(t)
	d := NewHTTPDriver([]string{srv.URL}, "")
	defer d.Close()
	ctx := context.Background()
	s := Scope{"p", "POST /x", "k1"}
	res, err := d.Claim(ctx, s, "a")
	if err != nil || res.Outcome != Won || res.Token == "" {
		t.Fatalf("first claim: %+v %v", res, err)
	}
	if res, err := d.Claim(ctx, s, "b"); err != nil || res.Outcome != Lost {
		t.Fatalf("second claim: %+v %v", res, err)
	}
	if err := d.Complete(ctx, s, "wrong", []byte("x")); err == nil {
		t.Fatal("complete with a wrong token succeeded")
	} else if code, indet := errorInfo(err); code != "token_mismatch" || indet {
		t.Fatalf("wrong token: %q %v", code, indet)
	}
	if err := d.Complete(ctx, s, res.Token, []byte("body")); err != nil {
		t.Fatal(err)
	}
	if res, err := d.Claim(ctx, s, "c"); err != nil || res.Outcome != Replay {
		t.Fatalf("claim after complete: %+v %v", res, err)
	}
	if found, err := d.Lookup(ctx, s); !found || err != nil {
		t.Fatalf("lookup: %v %v", found, err)
	}
	if found, err := d.Lookup(ctx, Scope{"p", "POST /x", "absent"}); found || err != nil {
		t.Fatalf("lookup of an absent key: %v %v", found, err)
	}
	srv.Close()
	if _, err := d.Claim(ctx, s, "d"); err == nil {
		t.Fatal("claim against a closed server succeeded")
	} else if code, indet := errorInfo(err); code != "transport" || !indet {
		t.Fatalf("closed server: %q %v", code, indet)
	}
}

// memDriver is an in-memory store; broken makes every claim win.
type memDriver struct {
	mu          sync.Mutex
	keys        map[Scope]bool
	broken      bool
	unavailable bool
	full        bool // every claim refused 507 storage_full
}

func (m *memDriver) Claim(_ context.Context, s Scope, _ string) (ClaimResult, error) {
	if m.unavailable {
		return ClaimResult{}, Indeterminately("unavailable", nil)
	}
	if m.full {
		return ClaimResult{}, statusError(http.StatusInsufficientStorage, []byte(`{"code":"storage_full","status":507}`))
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.keys == nil {
		m.keys = map[Scope]bool{}
	}
	if m.keys[s] && !m.broken {
		return ClaimResult{Outcome: Lost}, nil
	}
	m.keys[s] = true
	return ClaimResult{Outcome: Won, Token: "t"}, nil
}
func (m *memDriver) Complete(context.Context, Scope, string, []byte) error { return nil }
func (m *memDriver) Lookup(_ context.Context, s Scope) (bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.keys[s], nil
}
func (m *memDriver) Close() error { return nil }

func TestRunCatchesDuplicateWins(t *testing.T) {
	cfg := Config{Concurrency: 4, Ops: 400, Mix: Mix{Fresh: 1, Dup: 1}, Principals: 2, KeyBytes: 16}
	cfg.Driver = &memDriver{}
	rep, err := Run(context.Background(), cfg)
	if err != nil || !rep.OK() {
		t.Fatalf("correct store failed the check: %+v %v", rep, err)
	}
	cfg.Driver = &memDriver{broken: true}
	rep, err = Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if rep.OK() || rep.DupsWon == 0 || rep.Errors["duplicate_won"] != rep.DupsWon {
		t.Fatalf("a store where duplicates win passed: %+v", rep)
	}
}

func TestRunCountsIndeterminateWithoutFailing(t *testing.T) {
	rep, err := Run(context.Background(), Config{Driver: &memDriver{unavailable: true}, Concurrency: 2,
		Duration: 50 * time.Millisecond, Mix: Mix{Fresh: 1}, Principals: 1, KeyBytes: 16})
	if err != nil {
		t.Fatal(err)
	}
	if !rep.OK() || rep.Errors["unavailable"] == 0 || rep.Indeterminate != rep.Errors["unavailable"] || rep.Ops != 0 {
		t.Fatalf("report: %+v", rep)
	}
}

// A store that refuses (507 storage_full on a full disk, 429 over a
// quota) changed nothing: the run counts the refusals by code, and they
// are not fresh claims lost. A full disk's run said "CORRECTNESS CHECK
// FAILED: 452 fresh claims lost" for 507s the store is bound to give.
func TestRunCountsRefusalsWithoutFailing(t *testing.T) {
	rep, err := Run(context.Background(), Config{Driver: &memDriver{full: true}, Concurrency: 2,
		Duration: 50 * time.Millisecond, Mix: Mix{Fresh: 1, Complete: 1}, Principals: 1, KeyBytes: 16})
	if err != nil {
		t.Fatal(err)
	}
	if !rep.OK() || rep.Errors["storage_full"] == 0 || rep.Refused != rep.Errors["storage_full"] || rep.Indeterminate != 0 || rep.Ops != 0 {
		t.Fatalf("report: %+v", rep)
	}
	// 401 and 403 too: a wrong token, or an app token without the run's
	// principals, reported "CORRECTNESS CHECK FAILED: 50 fresh claims lost"
	// for a run that wrote nothing.
	for status, want := range map[int]bool{507: true, 429: true, 401: true, 403: true, 409: false, 422: false, 400: false} {
		err := statusError(status, nil)
		if excused(err) != want {
			t.Errorf("status %d: excused %v, want %v (%v)", status, excused(err), want, err)
		}
	}
}

// leaseDriver is a store with leases: an attempt left in progress is
// taken over by the next claim once its lease has run out (early: while
// it has not, the bug a run must catch).
type leaseDriver struct {
	mu    sync.Mutex
	lease time.Duration
	early bool
	held  map[Scope]time.Time // when each attempt's lease ends
}

func (d *leaseDriver) Claim(_ context.Context, s Scope, _ string) (ClaimResult, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.held == nil {
		d.held = map[Scope]time.Time{}
	}
	now := time.Now()
	if end, ok := d.held[s]; ok && now.Before(end) && !d.early {
		return ClaimResult{Outcome: Lost}, nil
	}
	d.held[s] = now.Add(d.lease)
	return ClaimResult{Outcome: Won, Token: "t", Lease: d.lease}, nil
}
func (d *leaseDriver) Complete(context.Context, Scope, string, []byte) error {
	return errors.New("not used")
}
func (d *leaseDriver) Lookup(context.Context, Scope) (bool, error) { return true, nil }
func (d *leaseDriver) Close() error                                { return nil }

// An attempt left in progress past its lease is taken over by the next
// claim (attempt 2): the rule. `idem bench --mix fresh=60,dup=15,...` for
// longer than idem's 30 s lease reported those takeovers as "duplicates
// won" (1,209 in a 120 s run) and failed its correctness check. A
// takeover before the lease has run out is still caught.
func TestRunTakesTakeoversAfterTheLeaseForTheRule(t *testing.T) {
	cfg := Config{Concurrency: 2, Duration: 400 * time.Millisecond, Mix: Mix{Fresh: 1, Dup: 4}, Principals: 1, KeyBytes: 16}
	cfg.Driver = &leaseDriver{lease: 20 * time.Millisecond}
	rep, err := Run(context.Background(), cfg)
	if err != nil || !rep.OK() || rep.DupsWon != 0 {
		t.Fatalf("takeovers after the lease failed the check: %+v %v", rep, err)
	}
	cfg.Driver = &leaseDriver{lease: time.Hour, early: true}
	rep, err = Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if rep.OK() || rep.DupsWon == 0 {
		t.Fatalf("takeovers within the lease passed: %+v", rep)
	}
}
