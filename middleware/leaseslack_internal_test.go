package middleware

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/idem-store/idem/client"
)

// slackStore refuses extends with 503 until from (a leader shedding load,
// its clock running), and runs its lease by its own clock: an extend it
// takes is late when the lease it renews had already run out.
type slackStore struct {
	Store
	lease      time.Duration
	from       time.Time
	mu         sync.Mutex
	leaseUntil time.Time
	lapsed     bool
	extended   bool
}

func (s *slackStore) Extend(_ context.Context, req client.ExtendRequest) (*client.ExtendResponse, error) {
	now := time.Now()
	if now.Before(s.from) {
		return nil, &client.Problem{Status: http.StatusServiceUnavailable, Code: client.CodeUnavailable, Detail: "the node is handling 64 requests, the most it takes at once (--max-inflight); retry shortly"}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.extended {
		s.extended, s.lapsed = true, now.After(s.leaseUntil)
	}
	s.leaseUntil = now.Add(s.lease)
	return &client.ExtendResponse{LeaseExpiresAt: s.leaseUntil}, nil
}

// An answer waiting to be stored keeps its lease: a failed extend was asked
// again every second up to and past held, where the lease surely still
// runs, and so within its last tenth, when the store's clock may still
// run it. Backed off, the first try past held came after a pause of up to
// ten seconds, and a store that took extends again within the lease's last
// tenth had let it run out by then: a retry took the key over and ran the
// request a second time, though its answer had gone out.
func TestHeldAnswersLeaseIsExtendedWithinItsLastTenth(t *testing.T) {
	for i := range 3 {
		lease := 2 * time.Second
		sent := time.Now()
		st := &slackStore{lease: lease, leaseUntil: sent.Add(lease), from: sent.Add(lease * 95 / 100)} // past held (90 %), before the end
		m := &mw{o: Options{Store: st, Lease: lease, StoreTimeout: time.Second}, log: slog.New(slog.NewTextHandler(io.Discard, nil))}
		ctx, cancel := context.WithTimeout(context.Background(), lease+lease/2)
		m.holdLease(ctx, scope{"p", "POST /pay", "k"}, "tok", leaseHeld(sent, lease), time.Time{})
		cancel()
		st.mu.Lock()
		extended, lapsed := st.extended, st.lapsed
		st.mu.Unlock()
		if !extended || lapsed {
			t.Fatalf("run %d: the lease ran out before an extend reached the store (extended %v), which took extends again from 95%% of it", i, extended)
		}
	}
}
