package middleware

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idem-store/idem/client"
)

// memStore is a store in memory, enough for the middleware: a key is
// claimed, completed (then replayed) or released (then claimed again).
type memStore struct {
	mu     sync.Mutex
	stored map[string]*client.Response
	held   map[string]bool
	claims int
}

func (s *memStore) Claim(_ context.Context, req client.ClaimRequest) (*client.ClaimResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if resp, ok := s.stored[req.Key]; ok {
		return &client.ClaimResponse{Outcome: client.OutcomeReplay, Record: &client.Record{
			Principal: req.Principal, Endpoint: req.Endpoint, Key: req.Key, State: client.StateCompleted, Response: resp}}, nil
	}
	if s.held[req.Key] {
		return nil, &client.Problem{Status: http.StatusConflict, Code: client.CodeInProgress}
	}
	if s.held == nil {
		s.held, s.stored = map[string]bool{}, map[string]*client.Response{}
	}
	s.held[req.Key] = true
	s.claims++
	return &client.ClaimResponse{Outcome: client.OutcomeClaimed, Token: "tok", Attempt: s.claims}, nil
}

func (s *memStore) Complete(_ context.Context, req client.CompleteRequest) (*client.CompleteResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.held, req.Key)
	resp := req.Response
	s.stored[req.Key] = &resp
	return &client.CompleteResponse{}, nil
}

func (s *memStore) Release(_ context.Context, req client.ReleaseRequest) (*client.ReleaseResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.held, req.Key)
	return &client.ReleaseResponse{}, nil
}

func (s *memStore) Extend(context.Context, client.ExtendRequest) (*client.ExtendResponse, error) {
	return &client.ExtendResponse{}, nil
}

// response is what the store holds for key, or nil.
func (s *memStore) response(key string) *client.Response {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stored[key]
}

// memServer serves h behind the middleware over a memStore, and returns
// the store and how to send a keyed POST with extra headers (pairs).
func memServer(t *testing.T, o Options, h http.HandlerFunc) (*memStore, func(key string, hdr ...string) *http.Response) {
	t.Helper()
	store := &memStore{}
	o.Store, o.Principal = store, AnonymousPrincipal
	idem, err := New(o)
	require.NoError(t, err)
	srv := newTestServer(t, idem(h))
	t.Cleanup(srv.Close)
	return store, func(key string, hdr ...string) *http.Response {
		req, err := http.NewRequest(http.MethodPost, srv.URL+"/pay", strings.NewReader("{}"))
		require.NoError(t, err)
		req.Header.Set(HeaderKey, key)
		for i := 0; i+1 < len(hdr); i += 2 {
			req.Header.Add(hdr[i], hdr[i+1])
		}
		resp, err := http.DefaultTransport.(*http.Transport).RoundTrip(req)
		require.NoError(t, err)
		t.Cleanup(func() { resp.Body.Close() })
		return resp
	}
}
