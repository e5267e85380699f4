package chaos

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/idem-store/idem/client"
)

// WorkloadConfig shapes the clients.
type WorkloadConfig struct {
	Clients int
	Rate    float64       // operations per second, all clients together
	Seed    uint64        // reproducible choices
	Timeout time.Duration // per request
	LeaseMs int64         // lease of every claim and extend
	// Epoch is how long a set of contended keys is used before the clients
	// move to fresh ones (it keeps each scope's history short enough for
	// the checker, and shorter than a lease).
	Epoch time.Duration
	// Batch, when positive, sends the operations through each node's
	// client's Batcher, at most Batch ops a request (batch.go).
	Batch int
}

// Contended scopes: every principal × endpoint × key of the current epoch.
var (
	principals = []string{"p0", "p1", "p2"}
	endpoints  = []string{"POST /a", "POST /b", "PUT /c"}
	keysPerEp  = 4
)

// Workload runs the clients and records their operations.
type Workload struct {
	cfg WorkloadConfig
	cl  *Cluster
	h   *History

	mu     sync.Mutex
	tokens map[string][]string // scope -> tokens seen in 201 answers, oldest first

	// gate is read-held around every client operation; Pause takes it
	// for writing, which waits for the operations in flight and holds
	// the clients until Resume.
	gate sync.RWMutex

	Count, Infos atomic.Int64
}

// NewWorkload prepares clients of the cluster recording into h.
func NewWorkload(cfg WorkloadConfig, cl *Cluster, h *History) *Workload {
	return &Workload{cfg: cfg, cl: cl, h: h, tokens: map[string][]string{}}
}

// Run drives the clients until ctx ends.
func (w *Workload) Run(ctx context.Context) {
	var wg sync.WaitGroup
	for i := 0; i < w.cfg.Clients; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := &worker{w: w, id: i, rnd: rand.New(rand.NewPCG(w.cfg.Seed, uint64(i)+1)), proc: w.h.NewProcess()}
			c.run(ctx)
		}()
	}
	wg.Wait()
}

type worker struct {
	w       *Workload
	id      int
	rnd     *rand.Rand
	proc    int
	pending *Op
	seq     int
}

func (c *worker) run(ctx context.Context) {
	gap := time.Duration(float64(c.w.cfg.Clients) / c.w.cfg.Rate * float64(time.Second))
	next := time.Now().Add(time.Duration(c.rnd.Int64N(int64(gap) + 1)))
	for {
		if !sleep(ctx, time.Until(next)) {
			return
		}
		next = next.Add(gap/2 + time.Duration(c.rnd.Int64N(int64(gap)+1)))
		if d := time.Until(next); d < -5*gap {
			next = time.Now() // behind after a long stall: don't burst
		}
		c.w.gate.RLock()
		if ctx.Err() != nil {
			c.w.gate.RUnlock()
			return
		}
		op := c.nextOp()
		node := pick(c.rnd, c.w.cl.Nodes)
		c.w.Exec(ctx, node, op, c.proc)
		c.w.gate.RUnlock()
		c.w.h.Add(op)
		c.w.Count.Add(1)
		if op.Outcome == Info {
			c.w.Infos.Add(1)
			c.proc = c.w.h.NewProcess() // the old process stays open forever
		}
		c.followUp(op)
	}
}

// Pause waits for the operations in flight to finish and holds every
// client until Resume.
func (w *Workload) Pause() { w.gate.Lock() }

// Resume lets the clients go on after Pause.
func (w *Workload) Resume() { w.gate.Unlock() }

// nextOp chooses the next operation: a follow-up of the last one, a claim
// of a fresh key, or an operation on a contended scope.
func (c *worker) nextOp() *Op {
	if op := c.pending; op != nil {
		c.pending = nil
		return op
	}
	c.seq++
	r := c.rnd.IntN(100)
	if r < 12 {
		p := pick(c.rnd, principals)
		return c.claim(p, pick(c.rnd, endpoints), fmt.Sprintf("fresh-c%d-%d", c.id, c.seq))
	}
	epoch := int(time.Duration(c.w.h.Now()) / c.w.cfg.Epoch)
	p, e := pick(c.rnd, principals), pick(c.rnd, endpoints)
	k := fmt.Sprintf("k%d.e%d", c.rnd.IntN(keysPerEp), epoch)
	scope := scopeString(p, e, k)
	kind := pickWeighted(c.rnd, []string{KindClaim, KindComplete, KindRelease, KindExtend, KindLookup}, []int{35, 20, 8, 7, 30})
	if kind == KindClaim {
		return c.claim(p, e, k)
	}
	if kind == KindLookup {
		return &Op{Kind: KindLookup, Principal: p, Endpoint: e, Key: k}
	}
	toks := c.w.knownTokens(scope)
	if len(toks) == 0 {
		return c.claim(p, e, k)
	}
	tok := toks[len(toks)-1]
	if c.rnd.IntN(100) < 20 {
		tok = pick(c.rnd, toks)
	}
	return c.tokenOp(kind, p, e, k, tok)
}

func (c *worker) claim(p, e, k string) *Op {
	fp := fingerprint(p, e, k, false)
	if c.rnd.IntN(100) < 4 {
		fp = fingerprint(p, e, k, true)
	}
	return &Op{Kind: KindClaim, Principal: p, Endpoint: e, Key: k, Fingerprint: fp,
		ClaimID: fmt.Sprintf("c%d-%d", c.id, c.seq)}
}

func (c *worker) tokenOp(kind, p, e, k, tok string) *Op {
	op := &Op{Kind: kind, Principal: p, Endpoint: e, Key: k, Token: tok}
	if kind == KindComplete {
		op.Response = &Response{Status: 201, Body: responseBody(p, e, k, c.rnd.IntN(2))}
	}
	return op
}

// followUp decides what the client does next after op, as a service would:
// complete or release the attempt it won, repeat a claim whose answer was
// lost with the same claim_id.
func (c *worker) followUp(op *Op) {
	if op.Kind != KindClaim || op.Final {
		return
	}
	switch {
	case op.Outcome == Info && c.rnd.IntN(100) < 60:
		retry := &Op{Kind: KindClaim, Principal: op.Principal, Endpoint: op.Endpoint, Key: op.Key,
			Fingerprint: op.Fingerprint, ClaimID: op.ClaimID}
		c.pending = retry
	case op.Outcome == OK && op.Status == 201:
		r := c.rnd.IntN(100)
		switch {
		case r < 55:
			c.pending = c.tokenOp(KindComplete, op.Principal, op.Endpoint, op.Key, op.ResToken)
		case r < 70:
			c.pending = c.tokenOp(KindRelease, op.Principal, op.Endpoint, op.Key, op.ResToken)
		case r < 78:
			c.pending = c.tokenOp(KindExtend, op.Principal, op.Endpoint, op.Key, op.ResToken)
		}
	}
}

func pickWeighted(r *rand.Rand, xs []string, w []int) string {
	total := 0
	for _, x := range w {
		total += x
	}
	n := r.IntN(total)
	for i, x := range w {
		if n < x {
			return xs[i]
		}
		n -= x
	}
	return xs[len(xs)-1]
}

// fingerprint is the scope's request hash; other gives a different request
// under the same key (which must get 422).
func fingerprint(p, e, k string, other bool) string {
	s := scopeString(p, e, k)
	if other {
		s += "/other"
	}
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:8])
}

// responseBody names its scope, so a response shown to another scope or
// principal is recognised.
func responseBody(p, e, k string, n int) []byte {
	return []byte(fmt.Sprintf("%s|%d", scopeString(p, e, k), n))
}

func (w *Workload) knownTokens(scope string) []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.tokens[scope]
}

func (w *Workload) learn(scope, tok string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, t := range w.tokens[scope] {
		if t == tok {
			return
		}
	}
	w.tokens[scope] = append(w.tokens[scope], tok)
}

// Exec sends op to node and fills in its times and answer.
func (w *Workload) Exec(ctx context.Context, node *Node, op *Op, proc int) {
	op.Node, op.Process = node.ID, proc
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), w.cfg.Timeout)
	defer cancel()
	op.Call = w.h.Now()
	err := w.send(rctx, w.via(node), op)
	op.Return = w.h.Now()
	classify(op, err)
	if op.Kind == KindClaim && op.Status == 201 && op.ResToken != "" {
		w.learn(op.Scope(), op.ResToken)
	}
}

func (w *Workload) send(ctx context.Context, c caller, op *Op) error {
	switch op.Kind {
	case KindClaim:
		res, err := c.Claim(ctx, client.ClaimRequest{Principal: op.Principal, Endpoint: op.Endpoint, Key: op.Key,
			Fingerprint: op.Fingerprint, LeaseMs: w.cfg.LeaseMs, ClaimID: op.ClaimID})
		if err != nil {
			return err
		}
		op.Status = res.StatusCode
		if res.StatusCode == 201 {
			op.ResToken, op.Attempt = res.Token, res.Attempt
			if !res.CreatedAt.IsZero() && !res.ExpiresAt.IsZero() {
				op.RetentionMs = res.ExpiresAt.Sub(res.CreatedAt).Milliseconds()
			}
			if !res.LeaseExpiresAt.IsZero() && res.LeaseExpiresAt.Before(res.ExpiresAt) {
				op.ClusterMs = res.LeaseExpiresAt.UnixMilli() - w.cfg.LeaseMs
			}
		} else {
			setRecord(op, res.Record)
		}
	case KindComplete:
		res, err := c.Complete(ctx, client.CompleteRequest{Principal: op.Principal, Endpoint: op.Endpoint, Key: op.Key,
			Token: op.Token, Response: client.Response{Status: op.Response.Status, ContentType: "text/plain", Body: op.Response.Body}})
		if err != nil {
			return err
		}
		op.Status = 200
		setRecord(op, res.Record)
	case KindRelease:
		if _, err := c.Release(ctx, client.ReleaseRequest{Principal: op.Principal, Endpoint: op.Endpoint, Key: op.Key, Token: op.Token}); err != nil {
			return err
		}
		op.Status = 200
	case KindExtend:
		res, err := c.Extend(ctx, client.ExtendRequest{Principal: op.Principal, Endpoint: op.Endpoint, Key: op.Key, Token: op.Token, LeaseMs: w.cfg.LeaseMs})
		if err != nil {
			return err
		}
		op.Status = 200
		op.LeaseUntil = res.LeaseExpiresAt.Format(time.RFC3339Nano)
	case KindLookup:
		rec, err := c.Get(ctx, op.Principal, op.Endpoint, op.Key, "")
		if err != nil {
			return err
		}
		op.Status = 200
		setRecord(op, rec)
	default:
		return fmt.Errorf("chaos: unknown op kind %q", op.Kind)
	}
	return nil
}

func setRecord(op *Op, r *client.Record) {
	if r == nil {
		return
	}
	op.State, op.Attempt, op.RecFP = r.State, r.Attempt, r.Fingerprint
	op.RecScope = scopeString(r.Principal, r.Endpoint, r.Key)
	if r.Response != nil {
		op.RecResp = &Response{Status: r.Response.Status, Body: r.Response.Body}
	}
}

// classify sets the op's outcome from the error of its request.
func classify(op *Op, err error) {
	if err == nil {
		op.Outcome = OK
		return
	}
	var p *client.Problem
	if errors.As(err, &p) {
		op.Status, op.Code = p.Status, p.Code
		if p.Status == http.StatusInsufficientStorage {
			// 507 storage_full: nothing is written (docs/API.md). A
			// definite refusal, which the model holds to that: a write
			// answered 507 that took effect is a violation.
			op.Outcome = OK
			return
		}
		if p.Status >= 500 {
			op.Outcome, op.Error = Info, fmt.Sprintf("%d %s", p.Status, p.Code)
			return
		}
		op.Outcome = OK
		return
	}
	op.Error = err.Error()
	if len(op.Error) > 120 {
		op.Error = op.Error[len(op.Error)-120:]
	}
	if errors.Is(err, syscall.ECONNREFUSED) {
		op.Outcome = Fail // never reached a server
		return
	}
	op.Outcome = Info
	if errors.Is(err, context.DeadlineExceeded) {
		op.Error = "timeout"
	}
}
