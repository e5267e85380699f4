package middleware

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idem-store/idem/client"
)

// stuckNodeStore stands for a client of several nodes whose leader stops
// (SIGSTOP) while a handler runs: the first call of each kind after stuck
// is set is taken by the stopped node and never answered (it waits for
// its context), as a call to a node that accepts connections does; the
// calls after it reach the new leader, which answers.
type stuckNodeStore struct {
	stuck     atomic.Bool
	mu        sync.Mutex
	hung      map[string]bool
	completed chan time.Time
}

func (s *stuckNodeStore) hang(ctx context.Context, kind string) error {
	if !s.stuck.Load() {
		return nil
	}
	s.mu.Lock()
	first := !s.hung[kind]
	s.hung[kind] = true
	s.mu.Unlock()
	if !first {
		return nil
	}
	<-ctx.Done()
	return ctx.Err()
}

func (s *stuckNodeStore) Claim(ctx context.Context, req client.ClaimRequest) (*client.ClaimResponse, error) {
	if err := s.hang(ctx, "claim"); err != nil {
		return nil, err
	}
	return &client.ClaimResponse{Outcome: client.OutcomeClaimed, Token: "tok", Attempt: 1}, nil
}

func (s *stuckNodeStore) Complete(ctx context.Context, req client.CompleteRequest) (*client.CompleteResponse, error) {
	if err := s.hang(ctx, "complete"); err != nil {
		return nil, err
	}
	s.completed <- time.Now()
	return &client.CompleteResponse{}, nil
}

func (s *stuckNodeStore) Release(ctx context.Context, req client.ReleaseRequest) (*client.ReleaseResponse, error) {
	return &client.ReleaseResponse{}, s.hang(ctx, "release")
}

func (s *stuckNodeStore) Extend(ctx context.Context, req client.ExtendRequest) (*client.ExtendResponse, error) {
	if err := s.hang(ctx, "extend"); err != nil {
		return nil, err
	}
	return &client.ExtendResponse{}, nil
}

// A complete taken by a node that never answers was left to wait for it
// the whole StoreTimeout: with a lease shorter than that, the lease ran out
// first, and a retry reaching the new leader took the key over and ran the
// handler again (a payment charged twice in a walk under faults: Lease 3 s,
// StoreTimeout 5 s, the leader stopped for 6 s). Each call is cut at a
// quarter of the lease and asked again, so the complete is stored within
// the lease; the same for a claim, which would otherwise answer 503.
func TestStoreCallStuckOnAStoppedNodeIsAskedAgainWithinTheLease(t *testing.T) {
	const lease = 400 * time.Millisecond
	store := &stuckNodeStore{hung: map[string]bool{}, completed: make(chan time.Time, 4)}
	idem, err := New(Options{Store: store, StoreTimeout: 5 * time.Second, Lease: lease, Principal: AnonymousPrincipal})
	require.NoError(t, err)
	var ended time.Time
	h := idem(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		store.stuck.Store(true) // the leader stops while the payment runs
		ended = time.Now()
		w.WriteHeader(http.StatusCreated)
	}))
	send := func(key string) (int, time.Duration) {
		req := httptest.NewRequest(http.MethodPost, "/pay", strings.NewReader("{}"))
		req.Header.Set("Idempotency-Key", key)
		rec := httptest.NewRecorder()
		start := time.Now()
		h.ServeHTTP(rec, req)
		return rec.Code, time.Since(start)
	}
	code, _ := send("pay")
	require.Equal(t, http.StatusCreated, code)
	select {
	case at := <-store.completed:
		require.Less(t, at.Sub(ended), lease, "the complete was stored after the lease ran out: a retry could have taken the key over")
	case <-time.After(10 * time.Second):
		t.Fatal("the complete was never stored")
	}

	// A claim taken by the stopped node is asked again too, within
	// StoreTimeout: the request runs rather than getting 503.
	code, took := send("next")
	require.Equal(t, http.StatusCreated, code)
	require.Less(t, took, 2*time.Second)
}
