package e2emiddleware_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idem-store/idem/client"
	"github.com/idem-store/idem/internal/idemtest"
	"github.com/idem-store/idem/middleware"
)

// noExtend passes calls to a real store, except extends while up is unset:
// those fail as a store that cannot be reached does (this process lost the
// store; the callers' retries, from another process, still reach it), or
// with block, hang until their context ends.
type noExtend struct {
	*client.Client
	block bool
	up    atomic.Bool
}

func (s *noExtend) Extend(ctx context.Context, req client.ExtendRequest) (*client.ExtendResponse, error) {
	switch {
	case s.up.Load():
		return s.Client.Extend(ctx, req)
	case s.block:
		<-ctx.Done()
		return nil, ctx.Err()
	}
	return nil, errors.New("dial tcp 127.0.0.1:7070: connect: connection refused")
}

// Bug (adoption walk): only a store saying "token mismatch" or "not found"
// cancelled a handler. With every extend failing, the handler ran on past
// its lease; a retry that reached the store took the key over and ran the
// handler a second time beside the first (two charges). The handler's
// context is now cancelled, with ErrLeaseExpired, before the lease can run
// out by the store's clock.
func TestUnextendableLeaseCancelsTheHandlerBeforeATakeover(t *testing.T) {
	real, err := client.New(idemtest.Start(t, idemtest.Options{}).URL)
	require.NoError(t, err)
	var running, most, runs atomic.Int32
	causes := make(chan error, 2)
	started := make(chan struct{}, 2)
	send := keyedServer(t, idemtest.Options{}, middleware.Options{Store: &noExtend{Client: real}, Lease: 300 * time.Millisecond},
		func(w http.ResponseWriter, r *http.Request) {
			n := running.Add(1)
			defer running.Add(-1)
			for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
			}
			run := runs.Add(1)
			started <- struct{}{}
			if run > 1 {
				w.WriteHeader(http.StatusCreated)
				io.WriteString(w, "run 2")
				return
			}
			select {
			case <-r.Context().Done():
				causes <- context.Cause(r.Context())
				w.WriteHeader(http.StatusServiceUnavailable) // not committed: released
			case <-time.After(10 * time.Second):
				causes <- nil
				w.WriteHeader(http.StatusCreated)
				io.WriteString(w, "run 1")
			}
		})
	first := make(chan *http.Response, 1)
	go func() {
		resp, _ := send("lease-1")
		first <- resp
	}()
	<-started
	time.Sleep(700 * time.Millisecond) // the lease (300 ms) has run out by the store's clock
	var resp *http.Response
	var body string
	require.Eventually(t, func() bool {
		resp, body = send("lease-1")
		return resp.StatusCode != http.StatusConflict
	}, 10*time.Second, 50*time.Millisecond)
	require.Equal(t, http.StatusCreated, resp.StatusCode, body)
	require.Equal(t, "run 2", body)
	cause := <-causes
	require.ErrorIs(t, cause, middleware.ErrLeaseExpired)
	require.ErrorIs(t, cause, middleware.ErrLeaseLost, "a handler checking ErrLeaseLost sees this one too")
	require.Equal(t, http.StatusServiceUnavailable, (<-first).StatusCode)
	require.Equal(t, int32(1), most.Load(), "the retry ran the handler beside the first attempt")
}

// A handler that goes on after its lease was lost (it ignores its
// context) answers after a retry took the key over and stored its own
// answer. That answer went to its caller, who then held "run 1" while every
// retry replays "run 2". The store refuses its complete; the caller gets
// 409 lease_lost, and its retry the stored answer.
func TestAnswerOfASupersededAttemptIsNotSent(t *testing.T) {
	real, err := client.New(idemtest.Start(t, idemtest.Options{}).URL)
	require.NoError(t, err)
	var runs atomic.Int32
	proceed := make(chan struct{})
	started := make(chan struct{}, 2)
	send := keyedServer(t, idemtest.Options{}, middleware.Options{Store: &noExtend{Client: real}, Lease: 300 * time.Millisecond},
		func(w http.ResponseWriter, r *http.Request) {
			started <- struct{}{}
			if runs.Add(1) > 1 {
				w.WriteHeader(http.StatusCreated)
				io.WriteString(w, "run 2")
				return
			}
			<-proceed // whatever its context says
			w.WriteHeader(http.StatusCreated)
			io.WriteString(w, "run 1")
		})
	type got struct {
		resp *http.Response
		body string
	}
	first := make(chan got, 1)
	go func() {
		resp, body := send("lease-2")
		first <- got{resp, body}
	}()
	<-started
	time.Sleep(700 * time.Millisecond)
	var resp *http.Response
	var body string
	require.Eventually(t, func() bool {
		resp, body = send("lease-2")
		return resp.StatusCode != http.StatusConflict
	}, 10*time.Second, 50*time.Millisecond)
	require.Equal(t, "run 2", body)
	close(proceed)
	a := <-first
	require.Equal(t, http.StatusConflict, a.resp.StatusCode, a.body)
	require.Contains(t, a.body, `"code":"lease_lost"`)
	require.Equal(t, "1", a.resp.Header.Get("Retry-After"))
	resp, body = send("lease-2")
	require.Equal(t, "true", resp.Header.Get(middleware.HeaderReplayed))
	require.Equal(t, "run 2", body, "the retry replays the answer that is stored")
}

// Bug (adoption walk): once the handler returned, its answer waited for an
// extend in flight to the store (up to StoreTimeout, a minute here), and a
// tick due then could start one more. The extend is abandoned instead.
func TestAnswerDoesNotWaitForAnExtendInFlight(t *testing.T) {
	real, err := client.New(idemtest.Start(t, idemtest.Options{}).URL)
	require.NoError(t, err)
	var once sync.Once
	send := keyedServer(t, idemtest.Options{}, middleware.Options{Store: &noExtend{Client: real, block: true},
		Lease: 6 * time.Second, StoreTimeout: time.Minute},
		func(w http.ResponseWriter, r *http.Request) {
			once.Do(func() { time.Sleep(2500 * time.Millisecond) }) // one extend (at 2 s) is in flight
			w.WriteHeader(http.StatusCreated)
			io.WriteString(w, "charged once")
		})
	answered := make(chan string, 1)
	go func() {
		_, body := send("held-extend")
		answered <- body
	}()
	select {
	case body := <-answered:
		require.Equal(t, "charged once", body)
	case <-time.After(30 * time.Second):
		t.Fatal("the answer waited for an extend the handler no longer needed")
	}
	resp, body := send("held-extend")
	require.Equal(t, "true", resp.Header.Get(middleware.HeaderReplayed))
	require.Equal(t, "charged once", body)
}

// A review: a handler stopped by ErrLeaseExpired that returns without
// writing (the usual `<-ctx.Done(); return`) had an empty 200 completed —
// no other attempt held the key to refuse it — sent, and replayed to every
// retry as the request's success. It is released; the caller gets 503, and
// the retry runs.
func TestHandlerStoppedByItsLeaseWithoutAnswerIsReleased(t *testing.T) {
	real, err := client.New(idemtest.Start(t, idemtest.Options{}).URL)
	require.NoError(t, err)
	store := &noExtend{Client: real}
	var runs atomic.Int32
	send := keyedServer(t, idemtest.Options{}, middleware.Options{Store: store, Lease: 300 * time.Millisecond},
		func(w http.ResponseWriter, r *http.Request) {
			if runs.Add(1) == 1 {
				<-r.Context().Done()
				return
			}
			w.WriteHeader(http.StatusCreated)
			io.WriteString(w, "done")
		})
	resp, body := send("stopped-1")
	require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode, body)
	require.Contains(t, body, "could not be kept")
	require.Equal(t, "1", resp.Header.Get("Retry-After"))
	store.up.Store(true)
	resp, body = send("stopped-1")
	require.Equal(t, http.StatusCreated, resp.StatusCode, body)
	require.Empty(t, resp.Header.Get(middleware.HeaderReplayed), "the retry runs: nothing was stored")
	require.Equal(t, int32(2), runs.Load())
}

// A review: a complete answered not found (an operator evicted the key
// while the handler ran) was taken as a lost lease, and the caller told
// 409 to retry for a stored answer that did not exist: the retry ran the
// payment again. Nothing holds the key; the caller gets its answer.
func TestAnswerOfAnEvictedKeyIsSent(t *testing.T) {
	real, err := client.New(idemtest.Start(t, idemtest.Options{}).URL)
	require.NoError(t, err)
	send := keyedServer(t, idemtest.Options{}, middleware.Options{Store: real},
		func(w http.ResponseWriter, r *http.Request) {
			a, _ := middleware.FromContext(r.Context())
			_, err := real.Delete(context.Background(), a.Principal, a.Endpoint, a.Key)
			require.NoError(t, err)
			w.WriteHeader(http.StatusCreated)
			io.WriteString(w, "charged once")
		})
	resp, body := send("evicted-1")
	require.Equal(t, http.StatusCreated, resp.StatusCode, body)
	require.Equal(t, "charged once", body)
}

// A review: after ErrLeaseExpired no extend was sent again, so a handler
// still finishing its commit lost the key to a retry once the store was
// back, and failed extends were asked again only every third of the lease.
// They go on, a failure asked again within a tenth of the lease: the store
// back, the lease is kept, and the retry meets 409.
func TestExtendsGoOnAfterTheLeaseRanOut(t *testing.T) {
	real, err := client.New(idemtest.Start(t, idemtest.Options{}).URL)
	require.NoError(t, err)
	store := &noExtend{Client: real}
	var runs atomic.Int32
	cancelled := make(chan struct{})
	finish := make(chan struct{})
	var finished sync.Once
	release := func() { finished.Do(func() { close(finish) }) }
	defer release() // on a failure too, or the server's Close waits for the handler
	send := keyedServer(t, idemtest.Options{}, middleware.Options{Store: store, Lease: 600 * time.Millisecond},
		func(w http.ResponseWriter, r *http.Request) {
			if runs.Add(1) > 1 {
				w.WriteHeader(http.StatusCreated)
				io.WriteString(w, "ran again")
				return
			}
			<-r.Context().Done()
			store.up.Store(true) // the store answers again at once
			close(cancelled)
			<-finish // committing, whatever its context says
			w.WriteHeader(http.StatusCreated)
			io.WriteString(w, "committed")
		})
	first := make(chan string, 1)
	go func() {
		_, body := send("goes-on-1")
		first <- body
	}()
	<-cancelled
	time.Sleep(time.Second) // past the lease the claim was given
	resp, body := send("goes-on-1")
	require.Equal(t, http.StatusConflict, resp.StatusCode, "the extends kept the key once the store was back: %s", body)
	release()
	require.Equal(t, "committed", <-first)
	resp, body = send("goes-on-1")
	require.Equal(t, "true", resp.Header.Get(middleware.HeaderReplayed))
	require.Equal(t, "committed", body)
	require.Equal(t, int32(1), runs.Load())
}

// A review: a retry in a record's last Lease of retention took it over
// with a lease the store had cut at the record's expires_at, while the
// middleware counted a whole Lease; once the record expired, a claim made
// a new one (attempt 1) and ran the handler beside it. Such a claim is
// released, and the caller told to retry once the key is new.
func TestRetryInTheRecordsLastLeaseIsNotRun(t *testing.T) {
	node := idemtest.Start(t, idemtest.Options{Retention: 3 * time.Second})
	real, err := client.New(node.URL)
	require.NoError(t, err)
	var runs atomic.Int32
	send := keyedServer(t, idemtest.Options{}, middleware.Options{Store: real, Lease: 2 * time.Second},
		func(w http.ResponseWriter, r *http.Request) {
			if runs.Add(1) == 1 {
				w.WriteHeader(http.StatusInternalServerError) // released: a retry may run
				return
			}
			w.WriteHeader(http.StatusCreated)
			io.WriteString(w, "done")
		})
	resp, _ := send("last-lease-1")
	require.Equal(t, http.StatusInternalServerError, resp.StatusCode)
	time.Sleep(1500 * time.Millisecond) // within 2 s of the record's expiry
	resp, body := send("last-lease-1")
	require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode, body)
	require.Contains(t, body, "end of its retention within the lease")
	require.Equal(t, "2", resp.Header.Get("Retry-After"))
	require.Equal(t, int32(1), runs.Load(), "not run on a lease of unknown length")
	require.Eventually(t, func() bool {
		resp, body = send("last-lease-1")
		return resp.StatusCode == http.StatusCreated
	}, 10*time.Second, 200*time.Millisecond, "once the record expired the key is new: %s", body)
	require.Equal(t, int32(2), runs.Load())
}

// slowRelease is noExtend whose releases hang until their context ends
// (StoreTimeout): the store the handler lost its lease to is still away.
type slowRelease struct{ noExtend }

func (s *slowRelease) Release(ctx context.Context, req client.ReleaseRequest) (*client.ReleaseResponse, error) {
	<-ctx.Done()
	return nil, ctx.Err()
}

// A handler stopped by ErrLeaseExpired without an answer, while the store
// is still away: the release waited for it, and after a second the held
// empty answer went out as a 200. The caller gets its 503 at once.
func TestHandlerStoppedByItsLeaseGets503WhileTheStoreIsAway(t *testing.T) {
	real, err := client.New(idemtest.Start(t, idemtest.Options{}).URL)
	require.NoError(t, err)
	send := keyedServer(t, idemtest.Options{}, middleware.Options{Store: &slowRelease{noExtend{Client: real}}, Lease: 300 * time.Millisecond, StoreTimeout: 3 * time.Second},
		func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Set-Cookie", "session=handler") // set, never sent
			<-r.Context().Done()
		})
	resp, body := send("stopped-away-1")
	require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode, body)
	require.Contains(t, body, "could not be kept")
	require.Empty(t, resp.Header.Get("Set-Cookie"))
}

// Bug (adoption walk): an Options.Lease outside the store's --min-lease and
// --max-lease had every keyed request answered 400 "idempotency scope is
// not valid", blaming the caller for the server's configuration. It is a
// 503, as the store's other refusals of the middleware's own calls are,
// with an error log naming Options.Lease and the store's bounds (at most
// every 10 s); the handler never runs.
func TestLeaseOutsideTheStoresBoundsIsTheServersFault(t *testing.T) {
	t.Parallel()
	node := idemtest.Start(t, idemtest.Options{MaxLease: 20 * time.Second})
	store, err := client.New(node.URL)
	require.NoError(t, err)
	logs := &syncLog{}
	var runs atomic.Int32
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { runs.Add(1); w.WriteHeader(http.StatusCreated) })
	for _, failOpen := range []bool{false, true} {
		e := newEnv(t, middleware.Options{Store: store, Lease: 30 * time.Second, FailOpen: failOpen,
			Logger: slog.New(slog.NewTextHandler(logs, nil))}, h)
		for i := range 10 {
			a := e.post("/p", fmt.Sprintf("lease-bounds-%v-%d", failOpen, i), "{}")
			require.Equal(t, http.StatusServiceUnavailable, a.status, "FailOpen %v: %s", failOpen, a.body)
			require.Equal(t, "unavailable", problemCode(t, a))
			require.NotContains(t, a.body, "scope")
		}
	}
	require.Equal(t, int32(0), runs.Load(), "the handler must not run")
	// Every keyed request meets it: said at most every 10 s by each
	// middleware, with the count, not once a request (a busy server's log
	// held nothing else).
	require.Equal(t, 2, strings.Count(logs.String(), "idempotency store refused the lease"), logs.String())
	require.Contains(t, logs.String(), "refused-total=1")
	require.Contains(t, logs.String(), "level=ERROR")
	require.Contains(t, logs.String(), "20000") // the store's --max-lease, in ms
}

// The store publishes its lease bounds (GET /v1/config): New reads them
// and says once, before any request, that Options.Lease is outside them.
func TestNewSaysOnceThatTheLeaseIsOutsideTheStoresBounds(t *testing.T) {
	t.Parallel()
	node := idemtest.Start(t, idemtest.Options{MaxLease: 20 * time.Second})
	store, err := client.New(node.URL)
	require.NoError(t, err)
	logs := &syncLog{}
	read := logs.String
	_, err = middleware.New(middleware.Options{Store: store, Lease: 30 * time.Second,
		Logger: slog.New(slog.NewTextHandler(logs, nil))})
	require.NoError(t, err)
	require.Eventually(t, func() bool { return strings.Contains(read(), "Options.Lease is outside") }, 10*time.Second, 10*time.Millisecond, read())
	require.Contains(t, read(), "store-max-lease=20s")
	require.Contains(t, read(), "level=ERROR")

	// Within the bounds: nothing said.
	logs2 := &syncLog{}
	_, err = middleware.New(middleware.Options{Store: store, Lease: 15 * time.Second,
		Logger: slog.New(slog.NewTextHandler(logs2, nil))})
	require.NoError(t, err)
	time.Sleep(300 * time.Millisecond)
	require.Empty(t, logs2.String())
}

type syncLog struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *syncLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *syncLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
