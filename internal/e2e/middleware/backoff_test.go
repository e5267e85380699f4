package e2emiddleware_test

import (
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httputil"
	"net/url"
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

// failingFront is a real store behind a front that answers 503 to the
// routes in failing (a store that answers but does not take them), and
// notes when each such call came.
type failingFront struct {
	url     string
	mu      sync.Mutex
	failing map[string]bool
	calls   []time.Time
}

func newFailingFront(t *testing.T) *failingFront {
	t.Helper()
	node := idemtest.Start(t, idemtest.Options{})
	target, err := url.Parse(node.URL)
	require.NoError(t, err)
	rp := httputil.NewSingleHostReverseProxy(target)
	rp.ModifyResponse = func(resp *http.Response) error {
		resp.Header.Del("Idem-Leader") // the client keeps to this front
		return nil
	}
	f := &failingFront{failing: map[string]bool{}}
	srv := newServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		fail := f.failing[r.URL.Path]
		if fail {
			f.calls = append(f.calls, time.Now())
		}
		f.mu.Unlock()
		if fail {
			io.Copy(io.Discard, r.Body)
			w.Header().Set("Content-Type", "application/problem+json")
			w.WriteHeader(http.StatusServiceUnavailable)
			io.WriteString(w, `{"type":"about:blank","title":"Service Unavailable","status":503,"code":"unavailable","detail":"no leader is available; retry shortly"}`)
			return
		}
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	f.url = srv.URL
	return f
}

func (f *failingFront) fail(on bool, paths ...string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, p := range paths {
		f.failing[p] = on
	}
}

// callsIn returns the failed calls that came in [from, to).
func (f *failingFront) callsIn(from, to time.Time) []time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	var in []time.Time
	for _, c := range f.calls {
		if !c.Before(from) && c.Before(to) {
			in = append(in, c)
		}
	}
	return in
}

// While the store kept failing, each answer waiting to be stored had its
// extend asked again every second and its complete every 5 s, each answer
// in phase with the others: up to 10,000 of them sent over 10,000 requests
// a second, all at once, at a store already struggling. They back off now,
// exponentially, each pause drawn at random.
func TestStoreCallsOfWaitingAnswersBackOffWithJitter(t *testing.T) {
	front := newFailingFront(t)
	store, err := client.New(front.url)
	require.NoError(t, err)
	var runs atomic.Int32
	send := keyedServer(t, idemtest.Options{}, middleware.Options{Store: store, StoreTimeout: time.Second,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))},
		func(w http.ResponseWriter, r *http.Request) {
			runs.Add(1)
			w.WriteHeader(http.StatusCreated)
			io.WriteString(w, "charged")
		})
	const answers = 20
	front.fail(true, "/v1/complete", "/v1/extend") // the store fails once the keys are claimed
	var wg sync.WaitGroup
	for i := range answers {
		wg.Go(func() {
			resp, body := send(fmt.Sprint("backoff-", i))
			require.Equal(t, http.StatusCreated, resp.StatusCode, body)
		})
	}
	wg.Wait()
	start := time.Now()
	const window = 10 * time.Second
	time.Sleep(5*time.Second + window)
	calls := front.callsIn(start.Add(5*time.Second), start.Add(5*time.Second+window))
	perSecond := float64(len(calls)) / window.Seconds() / answers
	t.Logf("%d completes and extends in %s from %d answers waiting: %.2f a second each", len(calls), window, answers, perSecond)
	require.Less(t, perSecond, 0.6, "the store calls of answers waiting to be stored do not back off")
	// Not in phase: no quarter of a second holds the calls of half of them.
	buckets := map[int64]int{}
	for _, c := range calls {
		buckets[c.Sub(start).Milliseconds()/250]++
	}
	for b, n := range buckets {
		require.LessOrEqual(t, n, answers/2, "%d calls in the quarter second from %s: in phase", n, time.Duration(b)*250*time.Millisecond)
	}

	front.fail(false, "/v1/complete", "/v1/extend")
	for i := range answers {
		require.Eventually(t, func() bool {
			resp, _ := send(fmt.Sprint("backoff-", i))
			return resp.Header.Get(middleware.HeaderReplayed) == "true"
		}, 15*time.Second, 200*time.Millisecond, "answer %d is stored once the store takes it", i)
	}
	require.EqualValues(t, answers, runs.Load())
}

// However long the backoff, the lease of an answer waiting to be stored is
// extended before it runs out once the store takes extends again: a retry
// from another process (another middleware on the same store) is answered
// 409 throughout, and never runs the handler a second time.
func TestBackoffKeepsTheLeaseOfAWaitingAnswer(t *testing.T) {
	front := newFailingFront(t)
	store, err := client.New(front.url)
	require.NoError(t, err)
	const lease = 3 * time.Second
	var runs atomic.Int32
	h := func(w http.ResponseWriter, r *http.Request) {
		runs.Add(1)
		front.fail(true, "/v1/complete", "/v1/extend") // the store fails once the key is claimed
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, "charged")
	}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	o := middleware.Options{Store: store, StoreTimeout: 300 * time.Millisecond, Lease: lease, Logger: quiet}
	first := keyedServer(t, idemtest.Options{}, o, h)
	// The other process only asks: it may wait for the store as long as
	// the middleware lets it (a quarter of the lease), so that a slow
	// machine's claim is not taken for the store away.
	po := o
	po.StoreTimeout = lease / 4
	other := keyedServer(t, idemtest.Options{}, po, h)
	resp, body := first("held-1")
	require.Equal(t, http.StatusCreated, resp.StatusCode, body)
	claimed := time.Now().Add(-300 * time.Millisecond) // about when
	// Extends fail for two thirds of the lease (the backoff grows), then
	// the store takes them again; completes still fail.
	time.AfterFunc(time.Until(claimed.Add(2*lease/3)), func() { front.fail(false, "/v1/extend") })
	conflicts, unanswered := 0, 0
	for time.Since(claimed) < 3*lease {
		resp, body := other("held-1")
		if resp.StatusCode == http.StatusServiceUnavailable && strings.Contains(body, "unreachable") {
			unanswered++ // the store did not answer the other process in time: nothing taken over
		} else {
			require.Equal(t, http.StatusConflict, resp.StatusCode, "%s after the claim: %s", time.Since(claimed), body)
			require.True(t, strings.Contains(body, "in_progress"), body)
			conflicts++
		}
		time.Sleep(50 * time.Millisecond)
	}
	require.Greater(t, conflicts, 3*unanswered, "the store answered too few of the other process's retries to tell")
	require.EqualValues(t, 1, runs.Load())
	front.fail(false, "/v1/complete")
	require.Eventually(t, func() bool {
		resp, body := other("held-1")
		return resp.Header.Get(middleware.HeaderReplayed) == "true" && body == "charged"
	}, 15*time.Second, 100*time.Millisecond)
	require.EqualValues(t, 1, runs.Load())
}
