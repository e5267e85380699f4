package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idem-store/idem/wire"
)

// batchFake answers POST /v1/batch op by op with answer, recording each
// request's op count. gate, when set, holds every request until closed.
func batchFake(t *testing.T, gate chan struct{}, answer func(op map[string]any) wire.BatchResult) (*Client, func() []int) {
	t.Helper()
	var mu sync.Mutex
	var sizes []int
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/batch" || r.Method != http.MethodPost {
			t.Errorf("unexpected %s %s", r.Method, r.URL.Path)
		}
		var req struct{ Ops []map[string]any }
		raw, _ := io.ReadAll(r.Body)
		if err := json.Unmarshal(raw, &req); err != nil {
			t.Errorf("batch body: %v: %s", err, raw)
		}
		mu.Lock()
		sizes = append(sizes, len(req.Ops))
		mu.Unlock()
		if gate != nil {
			<-gate
		}
		out := wire.BatchResponse{}
		for _, op := range req.Ops {
			out.Results = append(out.Results, answer(op))
		}
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(out)
	}))
	t.Cleanup(srv.Close)
	c, err := New(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	return c, func() []int { mu.Lock(); defer mu.Unlock(); return append([]int(nil), sizes...) }
}

func claimedFor(op map[string]any) wire.BatchResult {
	return wire.BatchResult{Status: 201, Body: json.RawMessage(fmt.Sprintf(`{"outcome":"claimed","token":"tok-%s","attempt":1}`, op["key"]))}
}

// Concurrent calls share requests, and each caller gets its own op's answer.
func TestBatcherCoalescesAndAnswersEachCaller(t *testing.T) {
	c, sizes := batchFake(t, nil, func(op map[string]any) wire.BatchResult {
		if op["op"] != "claim" {
			t.Errorf("op %v", op)
		}
		return claimedFor(op)
	})
	b := c.NewBatcher(BatcherConfig{Linger: 20 * time.Millisecond, MaxOps: 16})
	defer b.Close()
	const callers = 64
	var wg sync.WaitGroup
	for i := 0; i < callers; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			key := fmt.Sprint("k", i)
			res, err := b.Claim(context.Background(), ClaimRequest{Principal: "p", Endpoint: "e", Key: key, Fingerprint: "aa"})
			if err != nil {
				t.Errorf("claim %s: %v", key, err)
				return
			}
			if res.Token != "tok-"+key || res.StatusCode != 201 || res.Outcome != OutcomeClaimed {
				t.Errorf("claim %s got %+v", key, res)
			}
		}()
	}
	wg.Wait()
	total := 0
	for _, n := range sizes() {
		if n > 16 {
			t.Errorf("a request of %d ops, over MaxOps 16", n)
		}
		total += n
	}
	if total != callers || len(sizes()) >= callers {
		t.Errorf("%d ops in %d requests: want %d ops in fewer requests", total, len(sizes()), callers)
	}
}

// An op's problem is the error the single call would return, Retry-After
// included; a whole-request refusal is every op's.
func TestBatcherMapsProblemsAsSingleCalls(t *testing.T) {
	c, _ := batchFake(t, nil, func(op map[string]any) wire.BatchResult {
		switch op["key"] {
		case "busy":
			return wire.BatchResult{Status: 409, RetryAfter: 2, Body: json.RawMessage(`{"type":"x","title":"t","status":409,"detail":"d","code":"in_progress","lease_expires_at":"2026-12-01T00:00:00.000Z"}`)}
		case "gone":
			return wire.BatchResult{Status: 404, Body: json.RawMessage(`{"status":404,"code":"not_found","detail":"no live record"}`)}
		}
		if op["op"] == "get" {
			return wire.BatchResult{Status: 200, Body: json.RawMessage(`{"record":{"principal":"p","endpoint":"e","key":"k","state":"failed","attempt":2}}`)}
		}
		return wire.BatchResult{Status: 200, Body: json.RawMessage(`{"outcome":"released"}`)}
	})
	b := c.NewBatcher(BatcherConfig{})
	defer b.Close()
	ctx := context.Background()
	_, err := b.Claim(ctx, ClaimRequest{Principal: "p", Endpoint: "e", Key: "busy", Fingerprint: "aa"})
	var p *Problem
	if !errors.Is(err, ErrInProgress) || !errors.As(err, &p) || p.RetryAfter != 2*time.Second || p.Status != 409 || p.LeaseExpiresAt.IsZero() {
		t.Fatalf("busy claim: %v %+v", err, p)
	}
	if _, err := b.Release(ctx, ReleaseRequest{Principal: "p", Endpoint: "e", Key: "gone", Token: "1"}); !errors.Is(err, ErrNotFound) {
		t.Fatalf("release of nothing: %v", err)
	}
	if r, err := b.Release(ctx, ReleaseRequest{Principal: "p", Endpoint: "e", Key: "k", Token: "1"}); err != nil || r.Outcome != OutcomeReleased {
		t.Fatalf("release: %+v %v", r, err)
	}
	if rec, err := b.Get(ctx, "p", "e", "k", ""); err != nil || rec.State != StateFailed || rec.Attempt != 2 {
		t.Fatalf("get: %+v %v", rec, err)
	}

	whole := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/problem+json")
		w.Header().Set("Retry-After", "1")
		w.WriteHeader(503)
		io.WriteString(w, `{"status":503,"code":"unavailable","detail":"no leader"}`)
	}))
	defer whole.Close()
	c2, _ := New(whole.URL)
	b2 := c2.NewBatcher(BatcherConfig{})
	defer b2.Close()
	if _, err := b2.Claim(ctx, ClaimRequest{Principal: "p", Endpoint: "e", Key: "k", Fingerprint: "aa"}); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("whole 503: %v", err)
	}
}

// A caller whose context ends gets ctx.Err() at once, and the others of its
// batch still get their answers.
func TestBatcherHonoursCancellation(t *testing.T) {
	gate := make(chan struct{})
	c, _ := batchFake(t, gate, claimedFor)
	b := c.NewBatcher(BatcherConfig{Linger: 10 * time.Millisecond})
	defer b.Close()
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		_, err := b.Claim(ctx, ClaimRequest{Principal: "p", Endpoint: "e", Key: "cancelled", Fingerprint: "aa"})
		errc <- err
	}()
	other := make(chan error, 1)
	go func() {
		res, err := b.Claim(context.Background(), ClaimRequest{Principal: "p", Endpoint: "e", Key: "other", Fingerprint: "aa"})
		if err == nil && res.Token != "tok-other" {
			err = fmt.Errorf("got %+v", res)
		}
		other <- err
	}()
	time.Sleep(50 * time.Millisecond) // both are in the request the gate holds
	cancel()
	select {
	case err := <-errc:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("cancelled caller: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a cancelled caller waited for its batch")
	}
	close(gate)
	if err := <-other; err != nil {
		t.Fatalf("the other caller: %v", err)
	}
	// An op whose context ended before it was sent is not sent.
	done, stop := context.WithCancel(context.Background())
	stop()
	if _, err := b.Claim(done, ClaimRequest{Principal: "p", Endpoint: "e", Key: "late", Fingerprint: "aa"}); !errors.Is(err, context.Canceled) {
		t.Fatalf("a call with an ended context: %v", err)
	}
	b.Close()
	if _, err := b.Claim(context.Background(), ClaimRequest{Principal: "p", Endpoint: "e", Key: "k", Fingerprint: "aa"}); !errors.Is(err, ErrBatcherClosed) {
		t.Fatalf("after Close: %v", err)
	}
}

// A lone call (nothing in flight) is sent at once, not after Linger.
func TestBatcherSendsALoneCallAtOnce(t *testing.T) {
	c, sizes := batchFake(t, nil, claimedFor)
	b := c.NewBatcher(BatcherConfig{Linger: time.Minute})
	defer b.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for i := range 3 {
		if _, err := b.Claim(ctx, ClaimRequest{Principal: "p", Endpoint: "e", Key: fmt.Sprint("alone-", i), Fingerprint: "aa"}); err != nil {
			t.Fatalf("call %d waited for the one-minute linger: %v", i, err)
		}
	}
	if n := len(sizes()); n != 3 {
		t.Fatalf("%d requests for 3 calls one after another", n)
	}
}

// Under load a batch goes once it holds as many ops as the batches in
// flight, not after the linger: with two calls held in flight, the next
// two go together at once, and a batch coming back lets a waiting one go.
func TestBatcherSendsOnceAsLargeAsWhatIsInFlight(t *testing.T) {
	gate := make(chan struct{})
	c, sizes := batchFake(t, gate, claimedFor)
	b := c.NewBatcher(BatcherConfig{Linger: time.Hour})
	defer b.Close()
	release := sync.OnceFunc(func() { close(gate) })
	defer release() // before Close, which waits for the held requests
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	waitSizes := func(want ...int) {
		t.Helper()
		for ctx.Err() == nil {
			if got := sizes(); fmt.Sprint(got) == fmt.Sprint(want) {
				return
			} else if len(got) > len(want) {
				t.Fatalf("requests of %v ops, want %v", got, want)
			}
			time.Sleep(5 * time.Millisecond)
		}
		t.Fatalf("requests of %v ops, want %v (waiting out the one-hour linger?)", sizes(), want)
	}
	errs := make(chan error, 16)
	claim := func(key string) {
		_, err := b.Claim(ctx, ClaimRequest{Principal: "p", Endpoint: "e", Key: key, Fingerprint: "aa"})
		errs <- err
	}
	go claim("a") // nothing in flight: sent at once
	waitSizes(1)
	go claim("b") // one op in flight: a batch of one is enough
	waitSizes(1, 1)
	go claim("c") // two in flight: waits for a second op
	go claim("d")
	waitSizes(1, 1, 2)
	go claim("e") // four in flight: waits for company...
	time.Sleep(50 * time.Millisecond)
	if got := sizes(); len(got) != 3 {
		t.Fatalf("a lone call went with four ops in flight and an hour's linger: requests of %v ops", got)
	}
	release() // ...until the batches come back and nothing is in flight
	waitSizes(1, 1, 2, 1)
	for range 5 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
}

// One op's record of another scope in a batch answer refuses the whole
// answer for every caller of the batch: its results are not known to be
// in the order of the ops, so not even the won claim's token is taken.
func TestBatcherRefusesWholeABatchWithARecordOfAnotherScope(t *testing.T) {
	c, _ := batchFake(t, nil, func(op map[string]any) wire.BatchResult {
		if op["key"] == "b" {
			return wire.BatchResult{Status: 200, Body: json.RawMessage(`{"outcome":"replay","record":{"principal":"p","endpoint":"e","key":"zz","state":"completed","response":{"status":200,"body":""}}}`)}
		}
		return claimedFor(op)
	})
	b := c.NewBatcher(BatcherConfig{})
	defer b.Close()
	var live []*batchCall
	for _, key := range []string{"a", "b"} {
		req := &ClaimRequest{Principal: "p", Endpoint: "e", Key: key, Fingerprint: "aa"}
		op, err := wire.BatchOp{Op: wire.OpClaim, Body: req}.MarshalJSON()
		if err != nil {
			t.Fatal(err)
		}
		live = append(live, &batchCall{ctx: context.Background(), op: op, done: make(chan batchAnswer, 1),
			scope: opScope{Op: wire.OpClaim, Principal: req.Principal, Key: req.Key}})
	}
	for i, a := range b.post(live) {
		if !errors.Is(a.err, ErrBadAnswer) || !strings.Contains(a.err.Error(), "claim op 2") {
			t.Errorf("op %d: got %+v, %v; want ErrBadAnswer naming op 2", i+1, a.res, a.err)
		}
	}
}

// A batch's claimed answer without a token was taken for a won claim, as a
// single call's was: the middleware ran the handler unprotected.
func TestBatcherRefusesAClaimWithoutAToken(t *testing.T) {
	c, _ := batchFake(t, nil, func(op map[string]any) wire.BatchResult {
		return wire.BatchResult{Status: 201, Body: json.RawMessage(`{"outcome":"claimed","attempt":1}`)}
	})
	b := c.NewBatcher(BatcherConfig{})
	defer b.Close()
	res, err := b.Claim(context.Background(), ClaimRequest{Principal: "p", Endpoint: "e", Key: "k", Fingerprint: "ab"})
	if !errors.Is(err, ErrBadAnswer) {
		t.Fatalf("claim = %+v, %v; want ErrBadAnswer", res, err)
	}
}

// A Batcher{} (not made by Client.NewBatcher) has no Client and no loop:
// its calls waited for ever on a nil queue unless their context ended, and
// Close panicked closing a nil channel. Every method answers
// ErrBatcherNotMade now, before looking at its context.
func TestZeroBatcherSaysToUseNewBatcher(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // before the fix, an ended context was the only way out
	for _, b := range []*Batcher{{}, nil} {
		calls := map[string]func() error{
			"Claim": func() error {
				_, err := b.Claim(ctx, ClaimRequest{Principal: "p", Endpoint: "e", Key: "k", Fingerprint: "00"})
				return err
			},
			"Complete": func() error {
				_, err := b.Complete(ctx, CompleteRequest{Principal: "p", Endpoint: "e", Key: "k", Token: "1", Response: Response{Status: 200}})
				return err
			},
			"Release": func() error {
				_, err := b.Release(ctx, ReleaseRequest{Principal: "p", Endpoint: "e", Key: "k", Token: "1"})
				return err
			},
			"Extend": func() error {
				_, err := b.Extend(ctx, ExtendRequest{Principal: "p", Endpoint: "e", Key: "k", Token: "1", LeaseMs: 1000})
				return err
			},
			"Get": func() error {
				_, err := b.Get(ctx, "p", "e", "k", "")
				return err
			},
			"Close": func() error { return b.Close() },
		}
		for name, call := range calls {
			if err := call(); !errors.Is(err, ErrBatcherNotMade) || !strings.Contains(err.Error(), "Client.NewBatcher") {
				t.Errorf("%T (nil %v): %s: %v, want ErrBatcherNotMade", b, b == nil, name, err)
			}
		}
	}
}

// MaxOps bounds a batch, not memory: a huge one (a typo, or "no limit")
// once made the queue that long before the first call, which asked for
// gigabytes or panicked. Batches are still cut by MaxBytes.
func TestBatcherWithAHugeMaxOpsWorks(t *testing.T) {
	c, sizes := batchFake(t, nil, claimedFor)
	b := c.NewBatcher(BatcherConfig{MaxOps: 1 << 40})
	defer b.Close()
	if got := cap(b.queue); got > maxQueuedCalls {
		t.Fatalf("queue of %d calls for MaxOps 1<<40, want at most %d", got, maxQueuedCalls)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := b.Claim(ctx, ClaimRequest{Principal: "p", Endpoint: "e", Key: "huge", Fingerprint: "aa"}); err != nil {
		t.Fatalf("claim: %v", err)
	}
	if n := len(sizes()); n != 1 {
		t.Fatalf("%d requests for one call", n)
	}
}
