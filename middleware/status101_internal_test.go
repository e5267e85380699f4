package middleware

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idem-store/idem/client"
)

// claimedStore wins every claim and records what is completed and released.
type claimedStore struct {
	replayStore
	mu        sync.Mutex
	completed []int
	released  int
}

func (s *claimedStore) Claim(context.Context, client.ClaimRequest) (*client.ClaimResponse, error) {
	return &client.ClaimResponse{Outcome: client.OutcomeClaimed, StatusCode: http.StatusCreated, Token: "1.x", Attempt: 1}, nil
}

func (s *claimedStore) Complete(_ context.Context, req client.CompleteRequest) (*client.CompleteResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.completed = append(s.completed, req.Response.Status)
	return &client.CompleteResponse{Outcome: client.OutcomeCompleted}, nil
}

func (s *claimedStore) Release(context.Context, client.ReleaseRequest) (*client.ReleaseResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.released++
	return &client.ReleaseResponse{Outcome: client.OutcomeReleased}, nil
}

// A handler that wrote 101 without hijacking the connection had its 101
// stored, though the middleware stores final answers only: every replay of
// the key was then 500 stored_answer_not_final until the record expired.
// It is released, as a hijacked connection is.
func TestA101WithoutHijackIsReleasedNotStored(t *testing.T) {
	st := &claimedStore{}
	mw, err := New(Options{Store: st, Principal: AnonymousPrincipal})
	if err != nil {
		t.Fatal(err)
	}
	srv := newTestServer(t, mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusSwitchingProtocols)
	})))
	defer srv.Close()
	req, _ := http.NewRequest(http.MethodPost, srv.URL+"/p", strings.NewReader("{}"))
	req.Header.Set("Idempotency-Key", `"k1"`)
	if resp, err := http.DefaultClient.Do(req); err == nil {
		resp.Body.Close()
	}
	deadline := time.Now().Add(2 * time.Second)
	for {
		st.mu.Lock()
		completed, released := st.completed, st.released
		st.mu.Unlock()
		if len(completed) > 0 {
			t.Fatalf("stored answers of status %v, want none", completed)
		}
		if released == 1 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the claim was not released")
		}
		time.Sleep(10 * time.Millisecond)
	}
}
