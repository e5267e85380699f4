package middleware

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idem-store/idem/client"
)

// stealStore is one key's record through an outage that outlasts the
// lease: while down nothing answers; once back, a claim with another
// claim_id takes the key over (the holder's lease ran out by the store's
// clock), and the holder's complete, slower to get through (it waited on a
// stopped node), arrives only completeLag later, refused if the key was
// taken over meanwhile.
type stealStore struct {
	mu          sync.Mutex
	down        bool
	backAt      time.Time
	holderClaim string
	token       string
	attempt     int
	completed   *client.Response
	takeovers   int
}

const completeLag = 2 * time.Second

func (s *stealStore) Claim(_ context.Context, req client.ClaimRequest) (*client.ClaimResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.down:
		return nil, errUnreachable
	case s.completed != nil:
		return &client.ClaimResponse{Outcome: client.OutcomeReplay, Record: &client.Record{Principal: req.Principal,
			Endpoint: req.Endpoint, Key: req.Key, State: client.StateCompleted, Response: s.completed}}, nil
	case s.token != "" && req.ClaimID == s.holderClaim:
		return &client.ClaimResponse{Outcome: client.OutcomeClaimed, Token: s.token, Attempt: s.attempt}, nil
	case s.token != "" && s.backAt.IsZero():
		return nil, &client.Problem{Status: http.StatusConflict, Code: client.CodeInProgress}
	case s.token != "":
		s.takeovers++ // the lease ran out during the outage
	}
	s.attempt++
	s.holderClaim, s.token = req.ClaimID, "tok"+string(rune('0'+s.attempt))
	return &client.ClaimResponse{Outcome: client.OutcomeClaimed, Token: s.token, Attempt: s.attempt}, nil
}

func (s *stealStore) Complete(_ context.Context, req client.CompleteRequest) (*client.CompleteResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.down || time.Since(s.backAt) < completeLag {
		return nil, errUnreachable
	}
	if req.Token != s.token {
		return nil, &client.Problem{Status: http.StatusConflict, Code: client.CodeTokenMismatch}
	}
	resp := req.Response
	s.completed, s.token = &resp, ""
	return &client.CompleteResponse{}, nil
}

func (s *stealStore) Release(_ context.Context, req client.ReleaseRequest) (*client.ReleaseResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.down {
		return nil, errUnreachable
	}
	if req.Token != s.token {
		return nil, &client.Problem{Status: http.StatusConflict, Code: client.CodeTokenMismatch}
	}
	s.token = ""
	return &client.ReleaseResponse{}, nil
}

func (s *stealStore) Extend(context.Context, client.ExtendRequest) (*client.ExtendResponse, error) {
	return &client.ExtendResponse{}, nil
}

// A retry refused 503 while the store was down had its claim queued, to
// be sent again and released once the store answered (unclaim.go). Sent
// again while the first attempt's answer was still on its way to the store
// (the lease run out by then), that claim took the key over from the
// attempt that had run, and released it: the first attempt's complete was
// refused, and the next retry ran the handler a second time (a walk under
// faults: 14 payments charged twice in two minutes, each a "claim ...
// released" log line followed by a "complete failed: token_mismatch").
// While an attempt of the key runs or its answer is being stored in this
// process, the retry's claim is not sent again.
func TestUnansweredClaimDoesNotTakeOverAKeyWhoseAnswerIsOnItsWay(t *testing.T) {
	store := &stealStore{}
	idem, err := New(Options{Store: store, StoreTimeout: 200 * time.Millisecond, Lease: 10 * time.Second,
		Principal: AnonymousPrincipal})
	require.NoError(t, err)
	var h http.Handler
	send := func() int {
		req := httptest.NewRequest(http.MethodPost, "/pay", strings.NewReader("{}"))
		req.Header.Set("Idempotency-Key", "pay")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec.Code
	}
	runs := 0
	h = idem(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs++
		if runs == 1 {
			store.mu.Lock()
			store.down = true // the store goes away while the payment runs
			store.mu.Unlock()
			// The caller's retry meanwhile: refused, its claim queued.
			require.Equal(t, http.StatusServiceUnavailable, send())
		}
		w.WriteHeader(http.StatusCreated)
	}))
	require.Equal(t, http.StatusCreated, send())
	store.mu.Lock()
	store.down, store.backAt = false, time.Now()
	store.mu.Unlock()
	require.Eventually(t, func() bool {
		store.mu.Lock()
		defer store.mu.Unlock()
		return store.completed != nil || store.takeovers > 0
	}, 10*time.Second, 20*time.Millisecond)
	store.mu.Lock()
	takeovers, completed := store.takeovers, store.completed != nil
	store.mu.Unlock()
	require.Zero(t, takeovers, "the queued claim took the key over from the attempt that ran")
	require.True(t, completed)
	require.Equal(t, http.StatusCreated, send())
	require.Equal(t, 1, runs, "the handler ran twice")
}
