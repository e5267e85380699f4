package middleware

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idem-store/idem/client"
)

// floodStore stands for a store in an outage, seen from the middleware:
// claims of keys "flood-…" go unanswered (until over), the key "pay" is
// claimed, and its complete fails while down.
type floodStore struct {
	down, over, completed atomic.Bool
	floodClaims           atomic.Int64
}

var errUnreachable = errors.New("dial tcp 127.0.0.1:7070: connect: connection refused")

func (s *floodStore) Claim(ctx context.Context, req client.ClaimRequest) (*client.ClaimResponse, error) {
	if strings.HasPrefix(req.Key, "flood-") {
		s.floodClaims.Add(1)
		if s.over.Load() {
			return nil, &client.Problem{Status: http.StatusConflict, Code: client.CodeInProgress}
		}
		return nil, errUnreachable
	}
	return &client.ClaimResponse{Outcome: client.OutcomeClaimed, Token: "tok", Attempt: 1}, nil
}

func (s *floodStore) Complete(ctx context.Context, req client.CompleteRequest) (*client.CompleteResponse, error) {
	if s.down.Load() {
		return nil, errUnreachable
	}
	s.completed.Store(true)
	return &client.CompleteResponse{}, nil
}

func (s *floodStore) Release(context.Context, client.ReleaseRequest) (*client.ReleaseResponse, error) {
	return &client.ReleaseResponse{}, nil
}

func (s *floodStore) Extend(context.Context, client.ExtendRequest) (*client.ExtendResponse, error) {
	return &client.ExtendResponse{}, nil
}

// The background releases of unanswered claims took their places from the
// background completes' bound (a review): 10,000 requests refused in an
// outage filled it for a lease, and the complete of a request that had run
// (a payment, claimed just before) was dropped, "too many others wait", so
// its retry ran it again. Each has its own bound now.
func TestUnansweredClaimsDoNotCrowdOutCompletes(t *testing.T) {
	store := &floodStore{}
	t.Cleanup(func() {
		// The flood's queued claims are answered at the queue's next try,
		// so that they hold no places in the tests after this one.
		store.over.Store(true)
		require.Eventually(t, func() bool { return pendingUnclaims.Load() == 0 }, 20*time.Second, 50*time.Millisecond)
	})
	idem, err := New(Options{Store: store, StoreTimeout: 30 * time.Millisecond, Lease: time.Minute,
		Principal: AnonymousPrincipal})
	require.NoError(t, err)
	h := idem(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Idempotency-Key") == "pay" {
			store.down.Store(true) // the store goes away while the payment runs
		}
		w.WriteHeader(http.StatusCreated)
	}))
	send := func(key string) int {
		req := httptest.NewRequest(http.MethodPost, "/pay", strings.NewReader("{}"))
		req.Header.Set("Idempotency-Key", key)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec.Code
	}
	var wg sync.WaitGroup
	sem := make(chan struct{}, 500)
	for i := range 10_000 { // the outage, within one lease
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			require.Equal(t, http.StatusServiceUnavailable, send("flood-"+strconv.Itoa(i)))
		}()
	}
	wg.Wait()
	require.Equal(t, http.StatusCreated, send("pay"))
	store.down.Store(false) // the store is back
	require.Eventually(t, store.completed.Load, 10*time.Second, 50*time.Millisecond,
		"the payment's answer was stored once the store was back (dropped, its retry runs it again)")
}

// Each unanswered claim was asked again by a goroutine of its own every
// two seconds at most (a review): an outage's thousands of refused requests
// became thousands of claims a second against the struggling store. One
// queue per middleware asks with one claim at a time until the store
// answers, then works through the rest.
func TestUnansweredClaimsAskTheStoreOneAtATime(t *testing.T) {
	store := &floodStore{}
	t.Cleanup(func() {
		store.over.Store(true)
		require.Eventually(t, func() bool { return pendingUnclaims.Load() == 0 }, 20*time.Second, 50*time.Millisecond)
	})
	idem, err := New(Options{Store: store, StoreTimeout: 30 * time.Millisecond, Lease: time.Minute, Principal: AnonymousPrincipal})
	require.NoError(t, err)
	h := idem(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusCreated) }))
	var wg sync.WaitGroup
	for i := range 1000 {
		wg.Go(func() {
			req := httptest.NewRequest(http.MethodPost, "/pay", strings.NewReader("{}"))
			req.Header.Set("Idempotency-Key", "flood-"+strconv.Itoa(i))
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			require.Equal(t, http.StatusServiceUnavailable, rec.Code)
		})
	}
	wg.Wait()
	before := store.floodClaims.Load()
	time.Sleep(3 * time.Second)
	asked := store.floodClaims.Load() - before
	require.Less(t, asked, int64(50), "claims asked again in 3 s of the outage, for 1,000 unanswered ones")
	require.Positive(t, asked, "they are asked again")

	store.over.Store(true) // the store answers: each queued claim is asked once more
	require.Eventually(t, func() bool { return pendingUnclaims.Load() == 0 }, 20*time.Second, 50*time.Millisecond)
	require.GreaterOrEqual(t, store.floodClaims.Load()-before, int64(1000))
}
