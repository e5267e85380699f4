package middleware

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idem-store/idem/client"
)

// electingStore answers every claim 503, as a cluster electing a leader
// does, and notes when each key's claims came from a request's own loop
// (retry, within StoreTimeout): those whose context carries foreground{}.
// The claim the unclaim loop sends again once StoreTimeout refused it
// (the same claim_id, on a context of its own) is not noted: sent at once
// after the last foreground try, while the request's 503 was on its way,
// it was counted as a pause of the foreground (ci-84's 9 ms).
type electingStore struct {
	memStore
	mu    sync.Mutex
	tries map[string][]time.Time
}

// foreground marks, in a request's context, the claims of the request's
// own loop (electingStore).
type foreground struct{}

func (s *electingStore) Claim(ctx context.Context, req client.ClaimRequest) (*client.ClaimResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if ctx.Value(foreground{}) != nil {
		s.tries[req.Key] = append(s.tries[req.Key], time.Now())
	}
	return nil, unavailable("no leader")
}

// The tries of a store call within StoreTimeout paused 50 ms, doubling to
// 1 s, alike for every caller: the callers a leader change refused
// together asked the new leader together, each time, in phase. Each
// pause is drawn at random now, as in the background: the callers' pauses
// differ, each stays within its bound (never more than 1 s), and the
// request still gets its 503 at StoreTimeout.
func TestForegroundRetriesOfCallersAreNotInPhase(t *testing.T) {
	const callers, storeTimeout = 8, 2 * time.Second
	store := &electingStore{tries: map[string][]time.Time{}}
	idem, err := New(Options{Store: store, Principal: AnonymousPrincipal, StoreTimeout: storeTimeout})
	require.NoError(t, err)
	h := idem(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t.Error("the handler ran without a claim")
	}))
	srv := newTestServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), foreground{}, true)))
	}))
	t.Cleanup(srv.Close)
	ended := make([]time.Time, callers)
	var wg sync.WaitGroup
	for i := range callers {
		wg.Go(func() {
			req, _ := http.NewRequest(http.MethodPost, srv.URL+"/pay", strings.NewReader("{}"))
			req.Header.Set(HeaderKey, fmt.Sprint(i))
			start := time.Now()
			resp, err := http.DefaultClient.Do(req)
			ended[i] = time.Now()
			if assert.NoError(t, err) {
				resp.Body.Close()
				assert.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
			}
			assert.Less(t, ended[i].Sub(start), storeTimeout+500*time.Millisecond, "the request's bound")
		})
	}
	wg.Wait()
	require.False(t, t.Failed())
	store.mu.Lock()
	defer store.mu.Unlock()
	// pauses[k] are the callers' k-th pauses, within the request.
	var pauses [][]time.Duration
	for i := range callers {
		tries := store.tries[fmt.Sprint(i)]
		for k := 1; k < len(tries); k++ {
			require.True(t, tries[k].Before(ended[i]), "caller %d's try %d after its 503", i, k)
			p := tries[k].Sub(tries[k-1])
			ceiling := min(time.Second, 50*time.Millisecond<<k)
			require.GreaterOrEqual(t, p, 25*time.Millisecond, "caller %d's pause %d", i, k)
			require.Less(t, p, ceiling+250*time.Millisecond, "caller %d's pause %d", i, k)
			if len(pauses) < k {
				pauses = append(pauses, nil)
			}
			pauses[k-1] = append(pauses[k-1], p)
		}
	}
	require.GreaterOrEqual(t, len(pauses), 4, "tries within StoreTimeout")
	for k, ps := range pauses[1:4] { // from 25 ms to 200, 400 and 800 ms
		require.Len(t, ps, callers)
		require.Greater(t, slices.Max(ps)-slices.Min(ps), 20*time.Millisecond, "the callers' pauses %d are alike: %v", k+2, ps)
	}
}
