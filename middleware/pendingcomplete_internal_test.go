package middleware

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idem-store/idem/client"
)

// leasedStore holds one key with a lease, as the store does: a claim after
// the lease ran out takes the key over (a new token), and it refuses
// completes with 503 until completesFrom (a store that answers, but not
// this complete: a cluster whose new leader has not yet seen a member
// that is down list a feature the answer needs).
type leasedStore struct {
	mu            sync.Mutex
	lease         time.Duration
	completesFrom time.Time
	token         int
	leaseUntil    time.Time
	stored        *client.Response
}

func (s *leasedStore) Claim(_ context.Context, req client.ClaimRequest) (*client.ClaimResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stored != nil {
		return &client.ClaimResponse{Outcome: client.OutcomeReplay, Record: &client.Record{
			Principal: req.Principal, Endpoint: req.Endpoint, Key: req.Key, State: client.StateCompleted, Response: s.stored}}, nil
	}
	if time.Now().Before(s.leaseUntil) {
		return nil, &client.Problem{Status: http.StatusConflict, Code: client.CodeInProgress}
	}
	s.token++
	s.leaseUntil = time.Now().Add(s.lease)
	return &client.ClaimResponse{Outcome: client.OutcomeClaimed, Token: strconv.Itoa(s.token), Attempt: s.token}, nil
}

func (s *leasedStore) Complete(_ context.Context, req client.CompleteRequest) (*client.CompleteResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if req.Token != strconv.Itoa(s.token) {
		return nil, &client.Problem{Status: http.StatusConflict, Code: client.CodeTokenMismatch}
	}
	if time.Now().Before(s.completesFrom) {
		return nil, &client.Problem{Status: http.StatusServiceUnavailable, Code: client.CodeUnavailable}
	}
	resp := req.Response
	s.stored = &resp
	return &client.CompleteResponse{}, nil
}

func (s *leasedStore) Release(context.Context, client.ReleaseRequest) (*client.ReleaseResponse, error) {
	return &client.ReleaseResponse{}, nil
}

func (s *leasedStore) Extend(_ context.Context, req client.ExtendRequest) (*client.ExtendResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if req.Token != strconv.Itoa(s.token) {
		return nil, &client.Problem{Status: http.StatusConflict, Code: client.CodeTokenMismatch}
	}
	s.leaseUntil = time.Now().Add(s.lease)
	return &client.ExtendResponse{LeaseExpiresAt: s.leaseUntil}, nil
}

// An answer whose complete the store kept refusing with 503 (while it
// answered everything else) was asked again in the background, but its
// lease was no longer extended: once it ran out, the caller's retry took
// the key over and ran the handler a second time, though the first caller
// had its answer (a payment charged twice). Its lease is kept now while
// the complete is asked again.
func TestLeaseIsKeptWhileACompleteIsAskedAgainInTheBackground(t *testing.T) {
	const lease = 300 * time.Millisecond
	store := &leasedStore{lease: lease, completesFrom: time.Now().Add(time.Hour)}
	idem, err := New(Options{Store: store, Principal: AnonymousPrincipal, Lease: lease, StoreTimeout: 200 * time.Millisecond})
	require.NoError(t, err)
	var runs atomic.Int32
	srv := newTestServer(t, idem(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs.Add(1)
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, "charged")
	})))
	t.Cleanup(srv.Close)
	send := func() *http.Response { return payK1(t, srv.URL) }
	require.Equal(t, http.StatusCreated, send().StatusCode)
	time.Sleep(4 * lease) // the lease, left alone, has run out
	r := send()
	require.Equal(t, http.StatusConflict, r.StatusCode, "a retry while the answer waits to be stored")
	require.EqualValues(t, 1, runs.Load(), "the handler ran again while its first answer waited to be stored")

	requireStoredOnceTaken(t, store, send, &runs)
}

// Nothing extends the lease between the handler's return and the
// background complete that keeps it (holdLease), and the complete was
// asked in the foreground for the whole StoreTimeout first: with a
// StoreTimeout longer than the lease had left (a 2 s lease and the
// default 5 s; a store refusing the complete with 503 while it took
// claims, one of its members down), the lease ran out, and the caller's
// retry took the key over and ran the handler a second time. The
// foreground complete is asked for half the lease at most, and said.
func TestCompleteGoesToTheBackgroundWithinHalfTheLease(t *testing.T) {
	const lease = time.Second
	store := &leasedStore{lease: lease, completesFrom: time.Now().Add(time.Hour)}
	var logs syncBuffer
	idem, err := New(Options{Store: store, Principal: AnonymousPrincipal, Lease: lease, StoreTimeout: 4 * time.Second,
		Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	require.NoError(t, err)
	require.Contains(t, logs.String(), "StoreTimeout (idem proxy's --store-timeout) is longer than half the Lease (--lease)")
	var runs atomic.Int32
	srv := newTestServer(t, idem(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs.Add(1)
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, "charged")
	})))
	t.Cleanup(srv.Close)
	send := func() *http.Response { return payK1(t, srv.URL) }
	start := time.Now()
	require.Equal(t, http.StatusCreated, send().StatusCode)
	time.Sleep(time.Until(start.Add(2 * lease))) // the claim's lease, left alone, has run out
	require.Equal(t, http.StatusConflict, send().StatusCode, "a retry while the answer waits to be stored")
	require.EqualValues(t, 1, runs.Load(), "the handler ran again while its first answer waited to be stored")

	requireStoredOnceTaken(t, store, send, &runs)
}

// payK1 sends POST /pay with the key "k1" and returns the answer, its body
// read.
func payK1(t *testing.T, url string) *http.Response {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url+"/pay", strings.NewReader("{}"))
	require.NoError(t, err)
	req.Header.Set(HeaderKey, `"k1"`)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp
}

// requireStoredOnceTaken has store take completes from now on and requires
// the answer stored and replayed to send, the handler having run once.
func requireStoredOnceTaken(t *testing.T, store *leasedStore, send func() *http.Response, runs *atomic.Int32) {
	t.Helper()
	store.mu.Lock()
	store.completesFrom = time.Time{}
	store.mu.Unlock()
	require.Eventually(t, func() bool {
		return send().Header.Get(HeaderReplayed) == "true"
	}, 10*time.Second, 100*time.Millisecond, "the complete is stored once the store takes it, and replayed")
	require.EqualValues(t, 1, runs.Load())
	require.NoError(t, WaitCompletes(context.Background()))
}
