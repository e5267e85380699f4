package e2emiddleware_test

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idem-store/idem/middleware"
)

// A chunked request may end in trailer fields, which reach the handler
// (r.Trailer) and, through idem proxy, the upstream. They did not count in
// the fingerprint: a retry of a key with another trailer (X-Amount: 100,
// then 999) was replayed the first request's answer instead of 422, and
// the caller was never told its second request did not run. A request's
// trailers count now, as the body they close; one without trailers keeps
// its fingerprint.
func TestRequestTrailersCountInTheFingerprint(t *testing.T) {
	t.Parallel()
	var runs atomic.Int32
	e := newEnv(t, middleware.Options{}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := runs.Add(1)
		io.Copy(io.Discard, r.Body)
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, "run %d amount %s", n, r.Trailer.Get("X-Amount"))
	}))
	send := func(key, amount string) answer {
		t.Helper()
		// An unknown length: sent chunked, the trailer after the last chunk.
		req, err := http.NewRequest(http.MethodPost, e.url+"/pay", io.MultiReader(strings.NewReader(`{"to":"acct-1"}`)))
		require.NoError(t, err)
		req.ContentLength = -1
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", key)
		if amount != "" {
			req.Trailer = http.Header{"X-Amount": {amount}}
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return answer{status: resp.StatusCode, header: resp.Header, body: string(b)}
	}

	first := send("tr-1", "100")
	require.Equal(t, http.StatusCreated, first.status, first.body)
	require.Equal(t, "run 1 amount 100", first.body)

	other := send("tr-1", "999")
	require.Equal(t, http.StatusUnprocessableEntity, other.status, "another trailer is another request: %s", other.body)
	require.Equal(t, "fingerprint_mismatch", problemCode(t, other))
	none := send("tr-1", "")
	require.Equal(t, http.StatusUnprocessableEntity, none.status, "no trailer is another request: %s", none.body)

	again := send("tr-1", "100")
	require.Equal(t, http.StatusCreated, again.status, again.body)
	require.Equal(t, "true", again.header.Get(middleware.HeaderReplayed))
	require.Equal(t, "run 1 amount 100", again.body)
	require.Equal(t, int32(1), runs.Load())

	// A request without trailers keeps the fingerprint it always had.
	plain := e.post("/pay", "tr-2", "{}")
	require.Equal(t, http.StatusCreated, plain.status, plain.body)
	require.Equal(t, http.StatusCreated, e.post("/pay", "tr-2", "{}").status)
	require.Equal(t, int32(2), runs.Load())
}
