package e2emiddleware_test

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idem-store/idem/middleware"
)

// TestTrailersReachTheFirstCallerAsTrailers: a handler's trailers, declared
// in Trailer or set with http.TrailerPrefix after the body, reach the first
// caller after the body and not among the headers. The middleware holds the
// answer until the handler has returned, and wrote the status with the
// trailers' values already set: they went out as headers too, and a
// TrailerPrefix one was lost (the held answer was sent with a
// Content-Length). A replay has none: the store keeps headers only, and a
// trailer replayed as a header says something else (a checksum of a body
// the caller has not read yet).
func TestTrailersReachTheFirstCallerAsTrailers(t *testing.T) {
	e := newEnv(t, middleware.Options{}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Trailer", "X-Sum")
		w.Header().Set("X-Before", "kept")
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, `{"ok":true}`)
		w.Header().Set("X-Sum", "abc")
		w.Header().Set(http.TrailerPrefix+"X-Undeclared", "def")
	}))
	send := func() (*http.Response, string) {
		req, err := http.NewRequest(http.MethodPost, e.url+"/pay", strings.NewReader("{}"))
		require.NoError(t, err)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", "trailer-1")
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return resp, string(b)
	}

	resp, body := send()
	require.Equal(t, http.StatusCreated, resp.StatusCode)
	require.Equal(t, `{"ok":true}`, body)
	require.Equal(t, "kept", resp.Header.Get("X-Before"))
	require.Empty(t, resp.Header.Values("X-Sum"), "a trailer among the headers")
	require.Empty(t, resp.Header.Values("X-Undeclared"), "a trailer among the headers")
	require.Equal(t, "abc", resp.Trailer.Get("X-Sum"))
	require.Equal(t, "def", resp.Trailer.Get("X-Undeclared"))

	resp, body = send()
	require.Equal(t, "true", resp.Header.Get(middleware.HeaderReplayed))
	require.Equal(t, http.StatusCreated, resp.StatusCode)
	require.Equal(t, `{"ok":true}`, body)
	require.Equal(t, "kept", resp.Header.Get("X-Before"))
	require.Empty(t, resp.Header.Values("X-Sum"))
	require.Empty(t, resp.Header.Values("X-Undeclared"))
	require.Empty(t, resp.Header.Values("Trailer"))
	require.Empty(t, resp.Trailer)
}
