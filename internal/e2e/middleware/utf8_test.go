package e2emiddleware_test

import (
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idem-store/idem/middleware"
)

// The client refuses strings that are not valid UTF-8 (JSON would send
// each bad byte as U+FFFD, so two values would reach the store as one).
// What reaches the middleware from outside may hold such bytes, and must
// neither be merged with another value nor keep an answer from being
// stored.
//
// A principal header with a byte that is not UTF-8 ("acme\xff", "acme\xfe"
// were one tenant once the JSON encoder replaced the bytes): refused, 401.
func TestPrincipalThatIsNotUTF8IsRefused(t *testing.T) {
	var runs atomic.Int32
	e := newEnv(t, middleware.Options{Principal: middleware.HeaderPrincipal("X-Tenant")},
		http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { runs.Add(1); io.WriteString(w, "ok") }))
	send := func(tenant string) int {
		req, err := http.NewRequest(http.MethodPost, e.url+"/pay", strings.NewReader("{}"))
		require.NoError(t, err)
		req.Header.Set("Idempotency-Key", "k-1")
		req.Header["X-Tenant"] = []string{tenant}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		return resp.StatusCode
	}
	require.Equal(t, http.StatusUnauthorized, send("acme\xff"))
	require.Equal(t, http.StatusUnauthorized, send("acme\xfe"))
	require.Zero(t, runs.Load(), "the handler ran for a principal the store cannot hold")
	require.Equal(t, http.StatusOK, send("acme"))
}

// An answer header whose value is not UTF-8 (obs-text, which HTTP allows:
// a Latin-1 filename) is left out of the stored answer, which is stored:
// with the client refusing such strings, a value reaching Complete would
// keep the answer from being stored, and every retry would run again.
func TestAnswerHeaderThatIsNotUTF8IsStored(t *testing.T) {
	var runs atomic.Int32
	e := newEnv(t, middleware.Options{}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs.Add(1)
		w.Header()["X-Filename"] = []string{"caf\xe9.pdf"}
		w.Header()["Content-Type"] = []string{"text/plain; name=caf\xe9"}
		io.WriteString(w, "charged once")
	}))
	send := func() (int, string, http.Header) {
		req, err := http.NewRequest(http.MethodPost, e.url+"/pay", strings.NewReader("{}"))
		require.NoError(t, err)
		req.Header.Set("Idempotency-Key", "k-latin1")
		req.Header.Set("Authorization", "Bearer t1")
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b), resp.Header
	}
	code, body, _ := send()
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, "charged once", body)
	code, body, h := send()
	require.Equal(t, http.StatusOK, code, "%s", body)
	require.Equal(t, "charged once", body)
	require.Equal(t, "true", h.Get("Idempotency-Replayed"))
	require.Empty(t, h.Values("X-Filename"), "left out, not stored changed")
	require.Equal(t, int32(1), runs.Load(), "the retry ran the handler again")
}

// An endpoint that is not UTF-8 (an Endpoint function taking it from a
// header the caller sets) is one the store cannot hold: 400, not a 503
// after every retry.
func TestEndpointThatIsNotUTF8IsRefused(t *testing.T) {
	var runs atomic.Int32
	e := newEnv(t, middleware.Options{Endpoint: func(r *http.Request) string { return "POST " + r.Header.Get("X-Route") }},
		http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { runs.Add(1); io.WriteString(w, "ok") }))
	req, err := http.NewRequest(http.MethodPost, e.url+"/pay", strings.NewReader("{}"))
	require.NoError(t, err)
	req.Header.Set("Idempotency-Key", "k-path")
	req.Header.Set("Authorization", "Bearer t1")
	req.Header["X-Route"] = []string{"pay\xff"}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Equal(t, http.StatusBadRequest, resp.StatusCode, "%s", b)
	require.Contains(t, string(b), "not valid UTF-8")
	require.Zero(t, runs.Load())
}
