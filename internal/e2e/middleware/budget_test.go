package e2emiddleware_test

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
	"github.com/idem-store/idem/middleware"
)

// floodStore stands for a store in an outage, seen from the middleware:
// claims of keys "flood-…" go unanswered (until over), the key "pay" is
// claimed, and its complete fails while down.
type floodStore struct {
	down, over, completed atomic.Bool
}

var errUnreachable = errors.New("dial tcp 127.0.0.1:7070: connect: connection refused")

func (s *floodStore) Claim(ctx context.Context, req client.ClaimRequest) (*client.ClaimResponse, error) {
	if strings.HasPrefix(req.Key, "flood-") {
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
		// The flood's background claims stop at their next try (2 s at
		// most), so that they hold no places in the tests after this one.
		store.over.Store(true)
		time.Sleep(2500 * time.Millisecond)
	})
	idem, err := middleware.New(middleware.Options{Store: store, StoreTimeout: 30 * time.Millisecond, Lease: time.Minute,
		Principal: middleware.AnonymousPrincipal})
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
