package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idem-store/idem/wire"
)

// Batcher sends the calls of many goroutines together: concurrent Claim,
// Complete, Release, Extend and Get calls are coalesced into POST /v1/batch
// requests, which the server decides in one raft entry. Each call returns
// what the same call on the Client would (the same answer types, the same
// *Problem values for errors.Is), because the server answers each op of a
// batch exactly as its own route would.
//
// A batch is sent as soon as it holds as many ops as the batches already
// in flight hold together, or is full, or has waited Linger; with nothing
// in flight a call is sent at once. So a lone caller pays nothing, and
// under load the batches settle at about half the calls outstanding each:
// two in flight, one deciding while the other travels, instead of one
// full batch at a time with the next waiting out a timer. Batching pays
// when many goroutines call at once, the way a fleet of API servers talks
// to one store. A caller whose context ends
// gets ctx.Err() at once and never holds up the others; an op already sent
// may still be decided (retry a claim with its ClaimID, as after a timeout).
//
// Batcher is opt-in: create it with Client.NewBatcher and Close it when
// done. A Batcher it did not make (Batcher{}) answers every call, Close
// included, with ErrBatcherNotMade.
type Batcher struct {
	c        *Client
	cfg      BatcherConfig
	queue    chan *batchCall
	slots    chan struct{}
	stop     chan struct{}
	done     chan struct{}
	closeMu  sync.Once
	inflight sync.WaitGroup
	// sent counts the ops of the batches in flight: the size a batch
	// gathers to before it goes without waiting out the linger.
	sent atomic.Int64
	back chan struct{} // poked when a batch comes back
}

// BatcherConfig tunes a Batcher; zero fields take the defaults.
type BatcherConfig struct {
	// Linger is the longest the first call of a batch waits for others
	// while other batches are in flight (default 500µs); the batch goes
	// sooner once it holds as many ops as those batches.
	Linger time.Duration
	// MaxOps is the most ops in one request (default 256, the server's
	// default --max-batch-ops). Keep it at or below the server's: a batch
	// the server refuses as too large is sent again in halves, which
	// works but costs a request.
	MaxOps int
	// MaxBytes bounds a request's body (default DefaultBatchMaxBytes, half
	// the server's default request limit); an op larger than it goes alone.
	MaxBytes int
	// MaxInFlight is the most batch requests outstanding at once (default
	// 8); calls arriving meanwhile gather into the next batches.
	MaxInFlight int
	// Timeout bounds one batch request (default 30 s); a caller's own
	// context bounds its wait, and a request whose callers have all gone
	// is abandoned.
	Timeout time.Duration
}

// maxQueuedCalls bounds the Batcher's queue of calls not yet in a batch;
// callers past it wait for room, as their contexts allow.
const maxQueuedCalls = 4096

// DefaultBatchMaxBytes is the default of BatcherConfig.MaxBytes: 512 KiB.
const DefaultBatchMaxBytes = 512 << 10

func (c BatcherConfig) withDefaults() BatcherConfig {
	if c.Linger <= 0 {
		c.Linger = 500 * time.Microsecond
	}
	if c.MaxOps <= 0 {
		c.MaxOps = 256
	}
	if c.MaxBytes <= 0 {
		c.MaxBytes = DefaultBatchMaxBytes
	}
	if c.MaxInFlight <= 0 {
		c.MaxInFlight = 8
	}
	if c.Timeout <= 0 {
		c.Timeout = 30 * time.Second
	}
	return c
}

// ErrBatcherClosed is returned by calls on a closed Batcher, and by calls
// made before Close whose ops were not sent yet: an op answered so was
// never sent (a claim of it may be made again, through a Client).
var ErrBatcherClosed = errors.New("client: batcher closed")

// ErrBatcherNotMade is returned by every method of a Batcher that
// Client.NewBatcher did not make (a zero Batcher{}, or a nil *Batcher):
// it has no Client to send through, and its calls waited for ever.
var ErrBatcherNotMade = errors.New("client: Batcher not made by Client.NewBatcher: a zero Batcher has no Client to send through")

// made reports whether b came from Client.NewBatcher.
func (b *Batcher) made() bool { return b != nil && b.queue != nil }

// batchCall is one caller's op and where its answer goes (buffered: the
// caller may have gone).
type batchCall struct {
	ctx context.Context
	op  []byte // the op's JSON
	// scope is the op's kind and, of a claim or a get, the principal and
	// key its record must be of (checkScopes, in post for the whole batch).
	scope opScope
	done  chan batchAnswer
	taken atomic.Bool // the loop has it: an answer will come
}

type batchAnswer struct {
	res wire.BatchResult
	err error
}

// NewBatcher returns a Batcher sending through c.
func (c *Client) NewBatcher(cfg BatcherConfig) *Batcher {
	cfg = cfg.withDefaults()
	// The queue is a buffer, not a bound on a batch: a MaxOps in the
	// millions must not allocate its length before the first call.
	b := &Batcher{c: c, cfg: cfg, queue: make(chan *batchCall, min(cfg.MaxOps, maxQueuedCalls)),
		slots: make(chan struct{}, cfg.MaxInFlight), stop: make(chan struct{}), done: make(chan struct{}),
		back: make(chan struct{}, 1)}
	go b.loop()
	return b
}

// Close stops the Batcher after the batches already sent are answered;
// calls made after it return ErrBatcherClosed, and so may calls made
// before it that were not sent yet (their ops were never sent; some of
// them may still go out with the last batches). It may be called more
// than once, from several goroutines.
func (b *Batcher) Close() error {
	if !b.made() {
		return ErrBatcherNotMade
	}
	b.closeMu.Do(func() { close(b.stop) })
	<-b.done
	b.inflight.Wait()
	return nil
}

// Claim is Client.Claim through the batch.
func (b *Batcher) Claim(ctx context.Context, req ClaimRequest) (*ClaimResponse, error) {
	if err := checkClaim("claim", &req); err != nil {
		return nil, err
	}
	raw, status, err := b.do(ctx, wire.OpClaim, &req)
	if err != nil {
		return nil, err
	}
	var out ClaimResponse
	if !fastClaimed(raw, &out) {
		out = ClaimResponse{}
		if err := json.Unmarshal(raw, &out); err != nil {
			return nil, badAnswer(http.MethodPost, "/v1/batch", err)
		}
	}
	switch {
	case out.Outcome == OutcomeClaimed:
		if err := wonClaim(status, &out); err != nil {
			return nil, badAnswer(http.MethodPost, "/v1/batch", err)
		}
	case out.Outcome == OutcomeReplay && status == http.StatusOK:
		if err := replayable(out.Record); err != nil {
			return nil, badAnswer(http.MethodPost, "/v1/batch", err)
		}
	default:
		return nil, badAnswer(http.MethodPost, "/v1/batch", fmt.Errorf("claim answered %d with outcome %q", status, out.Outcome))
	}
	out.StatusCode, out.Raw = status, raw
	return &out, nil
}

// Complete is Client.Complete through the batch.
func (b *Batcher) Complete(ctx context.Context, req CompleteRequest) (*CompleteResponse, error) {
	if err := checkComplete("complete", &req); err != nil {
		return nil, err
	}
	if req.Response.Body == nil {
		req.Response.Body = []byte{} // "" rather than null, as Client.Complete sends
	}
	var out CompleteResponse
	if err := b.typed(ctx, wire.OpComplete, &req, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Release is Client.Release through the batch.
func (b *Batcher) Release(ctx context.Context, req ReleaseRequest) (*ReleaseResponse, error) {
	if err := checkRelease("release", &req); err != nil {
		return nil, err
	}
	var out ReleaseResponse
	if err := b.typed(ctx, wire.OpRelease, &req, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Extend is Client.Extend through the batch.
func (b *Batcher) Extend(ctx context.Context, req ExtendRequest) (*ExtendResponse, error) {
	if err := checkExtend("extend", &req); err != nil {
		return nil, err
	}
	var out ExtendResponse
	if err := b.typed(ctx, wire.OpExtend, &req, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Get is Client.Get through the batch.
func (b *Batcher) Get(ctx context.Context, principal, endpoint, key, consistency string) (*Record, error) {
	if err := checkScope("get", principal, endpoint, key); err != nil {
		return nil, err
	}
	raw, _, err := b.do(ctx, wire.OpGet, &wire.Lookup{Principal: principal, Endpoint: endpoint, Key: key, Consistency: consistency})
	if err != nil {
		return nil, err
	}
	var out struct {
		Record *Record `json:"record"`
	}
	if err := json.Unmarshal(raw, &out); err != nil {
		return nil, badAnswer(http.MethodPost, "/v1/batch", err)
	}
	if out.Record == nil {
		return nil, badAnswer(http.MethodPost, "/v1/batch", fmt.Errorf("get answered without a record"))
	}
	return out.Record, nil
}

// typed decodes a 2xx answer into out and sets its Raw.
func (b *Batcher) typed(ctx context.Context, kind string, in, out any) error {
	raw, _, err := b.do(ctx, kind, in)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(raw, out); err != nil {
		return badAnswer(http.MethodPost, "/v1/batch", err)
	}
	// Each op's answer must be of its kind, as a single call's (Client.
	// Complete): the results of a batch are matched to its ops by place,
	// and an answer of another op (results out of order, from something
	// between) must not pass for this one's.
	switch o := out.(type) {
	case *CompleteResponse:
		err = completed(o, in.(*CompleteRequest).Principal, in.(*CompleteRequest).Key)
		o.Raw = raw
	case *ReleaseResponse:
		err = wantOutcome(o.Outcome, OutcomeReleased)
		o.Raw = raw
	case *ExtendResponse:
		err = wantOutcome(o.Outcome, OutcomeExtended)
		o.Raw = raw
	}
	if err != nil {
		return badAnswer(http.MethodPost, "/v1/batch", fmt.Errorf("%s op: %w", kind, err))
	}
	return nil
}

// do queues one op and waits for its answer: the 2xx body and status, or
// the error a single call would return.
func (b *Batcher) do(ctx context.Context, kind string, body any) (json.RawMessage, int, error) {
	if ctx == nil {
		// As a Client's call answers it (net/http refuses it), rather
		// than a nil dereference in the caller's goroutine.
		return nil, 0, fmt.Errorf("client: %s: nil Context", kind)
	}
	if !b.made() {
		return nil, 0, ErrBatcherNotMade
	}
	// MarshalJSON directly: json.Marshal would compact and copy its output.
	op, err := wire.BatchOp{Op: kind, Body: body}.MarshalJSON()
	if err != nil {
		return nil, 0, fmt.Errorf("client: encode %s: %w", kind, err)
	}
	call := &batchCall{ctx: ctx, op: op, done: make(chan batchAnswer, 1), scope: opScope{Op: kind}}
	switch v := body.(type) {
	case *ClaimRequest:
		call.scope.Principal, call.scope.Key = v.Principal, v.Key
	case *wire.Lookup:
		call.scope.Principal, call.scope.Key = v.Principal, v.Key
	case *CompleteRequest:
		call.scope.Principal, call.scope.Key = v.Principal, v.Key
	}
	select {
	case <-b.stop:
		return nil, 0, ErrBatcherClosed
	default:
	}
	select {
	case b.queue <- call:
	case <-ctx.Done():
		return nil, 0, ctx.Err()
	case <-b.stop:
		return nil, 0, ErrBatcherClosed
	}
	var a batchAnswer
	select {
	case a = <-call.done:
	case <-ctx.Done():
		return nil, 0, ctx.Err()
	case <-b.done:
		// Closed: a call the loop never took gets no answer.
		if !call.taken.Load() {
			return nil, 0, ErrBatcherClosed
		}
		select {
		case a = <-call.done:
		case <-ctx.Done():
			return nil, 0, ctx.Err()
		}
	}
	if a.err != nil {
		return nil, 0, a.err
	}
	if a.res.Status < 200 || a.res.Status > 299 {
		h := http.Header{}
		if a.res.RetryAfter > 0 {
			h.Set("Retry-After", strconv.Itoa(a.res.RetryAfter))
		}
		return nil, 0, newProblem(&http.Response{StatusCode: a.res.Status, Header: h}, a.res.Body, time.Now())
	}
	return a.res.Body, a.res.Status, nil
}

// take receives a call from the queue for the loop.
func (b *Batcher) take(c *batchCall) *batchCall {
	c.taken.Store(true)
	return c
}

// loop gathers calls into batches and sends each on its own goroutine,
// at most MaxInFlight at once.
func (b *Batcher) loop() {
	defer close(b.done)
	var carry *batchCall // a call that did not fit the last batch
	for {
		first := carry
		carry = nil
		if first == nil {
			select {
			case c := <-b.queue:
				first = b.take(c)
			case <-b.stop:
				b.drain()
				return
			}
		}
		batch := []*batchCall{first}
		size := len(first.op)
		full := func() bool { return len(batch) >= b.cfg.MaxOps || size >= b.cfg.MaxBytes }
		add := func(c *batchCall) bool {
			if size+len(c.op)+1 > b.cfg.MaxBytes {
				carry = c
				return false
			}
			batch, size = append(batch, c), size+len(c.op)+1
			return true
		}
		// Linger for company until the batch holds as many ops as were in
		// flight when it began: gathering more would only wait, and
		// sending fewer would split the load unevenly (the callers of a
		// batch that comes back meanwhile join this one). With nothing in
		// flight, now or since, that is at once (a lone claim took 2.2 ms
		// instead of 0.95 when it lingered).
		target := int(b.sent.Load())
		enough := func() bool { return len(batch) >= target || b.sent.Load() == 0 }
		timer := time.NewTimer(b.cfg.Linger)
	linger:
		for !full() && carry == nil && !enough() {
			select {
			case c := <-b.queue:
				add(b.take(c))
			case <-b.back:
				// A batch came back: maybe nothing is in flight now.
			case <-timer.C:
				break linger
			case <-b.stop:
				break linger
			}
		}
		timer.Stop()
		// Wait for a free slot; calls arriving meanwhile join this batch.
		b.slots <- struct{}{}
	more:
		for !full() && carry == nil {
			select {
			case c := <-b.queue:
				add(b.take(c))
			default:
				break more
			}
		}
		b.inflight.Add(1)
		b.sent.Add(int64(len(batch)))
		go func() {
			defer b.inflight.Done()
			b.send(batch, func() {
				b.sent.Add(-int64(len(batch)))
				<-b.slots
				select {
				case b.back <- struct{}{}:
				default:
				}
			})
		}()
	}
}

// drain answers the calls still queued at Close.
func (b *Batcher) drain() {
	for {
		select {
		case c := <-b.queue:
			b.take(c).done <- batchAnswer{err: ErrBatcherClosed}
		default:
			return
		}
	}
}

// send posts one batch and hands each caller its result. Calls whose
// context ended before the send are left out.
func (b *Batcher) send(batch []*batchCall, free func()) {
	live := batch[:0]
	for _, c := range batch {
		if err := c.ctx.Err(); err != nil {
			c.done <- batchAnswer{err: err}
			continue
		}
		live = append(live, c)
	}
	var answers []batchAnswer
	if len(live) > 0 {
		answers = b.post(live)
	}
	// The slot is free before the callers hear: a caller's next call
	// must find nothing in flight, or a lone call would wait out the linger.
	free()
	for i, c := range live {
		c.done <- answers[i]
	}
}

// post sends the calls as one request. A batch the server refuses whole as
// too large (more ops than its --max-batch-ops, or more bytes than its
// request limit) decided nothing, so it is sent again in halves.
func (b *Batcher) post(live []*batchCall) []batchAnswer {
	var body bytes.Buffer
	body.WriteString(`{"ops":[`)
	for i, c := range live {
		if i > 0 {
			body.WriteByte(',')
		}
		body.Write(c.op)
	}
	body.WriteString(`]}`)
	parent, abandon := context.WithCancelCause(context.Background())
	defer abandon(nil)
	ctx, cancel := context.WithTimeout(parent, b.cfg.Timeout)
	defer cancel()
	// Once every caller of the batch has gone (its context ended), no one
	// waits for the answer: the request is abandoned rather than left to
	// hold a slot (MaxInFlight) for up to Timeout. A node that took the
	// batch and does not answer (a stopped process) otherwise held up every
	// later call for Timeout, whatever its callers' deadlines, before the
	// client moved on to another node.
	// It is abandoned with the cause of the callers' leaving: past a
	// deadline (the node did not answer in time) the client moves on to
	// the next node, as after a single call; cancelled by all of them, it
	// stays (exchange's cancelledByCaller).
	var left atomic.Int64
	var timedOut atomic.Bool
	left.Store(int64(len(live)))
	for _, c := range live {
		cctx := c.ctx
		stop := context.AfterFunc(cctx, func() {
			if errors.Is(cctx.Err(), context.DeadlineExceeded) {
				timedOut.Store(true)
			}
			if left.Add(-1) == 0 {
				cause := context.Canceled
				if timedOut.Load() {
					cause = context.DeadlineExceeded
				}
				abandon(cause)
			}
		})
		defer stop()
	}
	raw, _, err := b.c.exchange(ctx, http.MethodPost, "/v1/batch", nil, body.Bytes(), true)
	if p := (*Problem)(nil); errors.As(err, &p) && p.Status == http.StatusRequestEntityTooLarge && len(live) > 1 {
		cancel()
		half := len(live) / 2
		return append(b.post(live[:half]), b.post(live[half:])...)
	}
	var out wire.BatchResponse
	if err == nil {
		var ok bool
		if out.Results, ok = fastBatchResults(raw); !ok {
			out = wire.BatchResponse{}
			err = json.Unmarshal(raw, &out)
		}
		if err == nil && len(out.Results) != len(live) {
			err = fmt.Errorf("%d results for %d ops", len(out.Results), len(live))
		}
		if err == nil {
			err = checkScopes(out.Results, func(i int) opScope { return live[i].scope })
		}
		if err != nil {
			err = badAnswer(http.MethodPost, "/v1/batch", err)
		}
	}
	answers := make([]batchAnswer, len(live))
	for i := range live {
		if err != nil {
			answers[i] = batchAnswer{err: err} // a whole-request refusal or a transport error is every op's
			continue
		}
		answers[i] = batchAnswer{res: out.Results[i]}
	}
	return answers
}
