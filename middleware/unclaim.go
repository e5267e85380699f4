package middleware

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idem-store/idem/client"
)

// A claim whose answer never came (the store did not answer within
// StoreTimeout, or answered 503, or the caller left) may have been applied
// all the same, or may be yet (a stalled leader that resumes, an entry
// committed once the quorum is back): the key then stayed taken until the
// lease ran out, and the caller's retry answered 409 for the whole lease
// although nothing ran. Such claims are queued, and once the store answers
// again each is sent again with its claim_id: it comes back as the same
// claim if it was decided, or is made now; either way it is released. It
// stops at any other answer (another attempt holds the key, or completed
// it), and is dropped once the first claim's lease would have run out by
// the wall clock (the store's clock runs no faster), so it never takes over
// a key from an attempt that claimed it after this one. Nor is it sent while
// an attempt of the key runs in this process or has its answer stored: that
// attempt's lease may have run out in the outage, and the claim would take
// the key from it, its complete refused, its handler run again by a retry.
// (An attempt in another process is not seen: there the claim can take it.)
//
// One loop per middleware works the queue: while the store does not answer
// it asks with one claim at a time, pausing up to unclaimPauseMax, so an
// outage's thousands of refused requests do not become thousands of
// claims a second against a store that is struggling (each in a goroutine
// of its own, they were), and a store that is back gets them a few at a time.
type unclaims struct {
	mu      sync.Mutex
	queue   []unclaimed
	running bool
}

type unclaimed struct {
	s     scope
	req   client.ClaimRequest
	until time.Time
}

// pendingUnclaims counts the queued claims of every middleware of the
// process. They have their own bound: an outage's flood of refused requests
// must not take the places of completes, which keep a handler from running
// twice (sharing one bound, 10,000 unanswered claims made the complete of
// a request that had run wait for nothing, and its retry ran it again).
var pendingUnclaims atomic.Int64

const (
	maxPendingUnclaims = 10_000
	unclaimPauseMax    = 5 * time.Second
	unclaimAtOnce      = 16
)

// unclaim queues the claim req of scope s, first sent at claimedAt.
func (m *mw) unclaim(s scope, req client.ClaimRequest, claimedAt time.Time) {
	until := claimedAt.Add(m.o.Lease)
	if !time.Now().Before(until) {
		return
	}
	if pendingUnclaims.Add(1) > maxPendingUnclaims {
		pendingUnclaims.Add(-1)
		m.log.Warn("idempotency claim unanswered, and too many others wait for the store: if it was applied, the key stays taken until its lease runs out", "endpoint", s.endpoint)
		return
	}
	u := &m.unclaims
	u.mu.Lock()
	defer u.mu.Unlock()
	u.queue = append(u.queue, unclaimed{s: s, req: req, until: until})
	if !u.running {
		u.running = true
		go m.unclaimLoop()
	}
}

// unclaimLoop works the queue until it is empty.
func (m *mw) unclaimLoop() {
	u := &m.unclaims
	pause := 50 * time.Millisecond
	for {
		u.mu.Lock()
		now := time.Now()
		// A claim whose lease has run out has a free key anyway.
		u.dropLocked(func(_ int, c unclaimed) bool { return !now.Before(c.until) })
		if len(u.queue) == 0 {
			u.running = false
			u.mu.Unlock()
			return
		}
		// One while the store has not answered since the last pause, then
		// a few at once.
		n := 1
		if pause == 50*time.Millisecond {
			n = min(unclaimAtOnce, len(u.queue))
		}
		batch := append([]unclaimed(nil), u.queue[:n]...)
		u.mu.Unlock()

		answered := make([]bool, n)
		var wg sync.WaitGroup
		for i, c := range batch {
			wg.Go(func() { answered[i] = m.unclaimOne(c) })
		}
		wg.Wait()
		// Only unclaim appends, at the end: the batch is still the head.
		u.mu.Lock()
		progress := false
		u.dropLocked(func(i int, _ unclaimed) bool {
			done := i < n && answered[i]
			progress = progress || done
			return done
		})
		u.mu.Unlock()
		if progress {
			pause = 50 * time.Millisecond
			continue
		}
		time.Sleep(pause + rand.N(pause/2))
		pause = min(pause*2, unclaimPauseMax)
	}
}

// dropLocked takes the claims gone names out of the queue, and out of
// pendingUnclaims. The caller holds u.mu.
func (u *unclaims) dropLocked(gone func(i int, c unclaimed) bool) {
	kept := u.queue[:0]
	for i, c := range u.queue {
		if gone(i, c) {
			pendingUnclaims.Add(-1)
			continue
		}
		kept = append(kept, c)
	}
	clear(u.queue[len(kept):])
	u.queue = kept
}

// unclaimOne sends the claim c again and releases it if the store gives it
// back; it reports whether the store answered (nothing more to do for c).
func (m *mw) unclaimOne(c unclaimed) bool {
	if m.running.held(c.s) {
		// An attempt of this key runs in this process, or its answer is
		// on its way to the store. Its lease may have run out by the
		// store's clock (the outage that refused this claim outlasted
		// it): sent again, this claim, if it was never decided, took the
		// key over and released it, the attempt's complete was refused,
		// and the next retry ran the handler a second time. If it was
		// decided, it took the key over already, and its lease runs out.
		return true
	}
	ctx, cancel := context.WithTimeout(context.Background(), m.o.StoreTimeout)
	defer cancel()
	res, err := m.o.Store.Claim(ctx, c.req)
	switch {
	case err != nil:
		return refusedByStore(err) // an answer, but not the key: nothing to release
	case res.Outcome != client.OutcomeClaimed:
		return true // a replay: the key is another attempt's answer
	}
	err = retry(ctx, func() error {
		_, err := m.o.Store.Release(ctx, client.ReleaseRequest{Principal: c.s.principal, Endpoint: c.s.endpoint, Key: c.s.key,
			Token: res.Token, Reason: "idempotency middleware: the store did not answer this claim in time; the request was not processed"})
		return err
	})
	if err != nil && !errors.Is(err, client.ErrTokenMismatch) {
		if refusedByStore(err) {
			m.log.Warn("idempotency release of an unanswered claim refused: the key stays taken until its lease runs out", "endpoint", c.s.endpoint, "error", err)
			return true
		}
		return false // asked again: the same claim_id gives the same token
	}
	m.log.Info("idempotency claim the store had not answered in time released", "endpoint", c.s.endpoint)
	return true
}

// running counts the attempts of each scope that run in this process, or
// whose answer is still being stored (a complete asked again in the
// background).
type running struct {
	mu sync.Mutex
	n  map[scope]int
}

// hold counts an attempt of s until the returned func is called.
func (r *running) hold(s scope) (unhold func()) {
	r.mu.Lock()
	if r.n == nil {
		r.n = map[scope]int{}
	}
	r.n[s]++
	r.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			r.mu.Lock()
			if r.n[s]--; r.n[s] <= 0 {
				delete(r.n, s)
			}
			r.mu.Unlock()
		})
	}
}

// held reports whether an attempt of s is counted.
func (r *running) held(s scope) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.n[s] > 0
}
