package e2emiddleware_test

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idem-store/idem/client"
	"github.com/idem-store/idem/internal/idemtest"
	"github.com/idem-store/idem/middleware"
)

// X-Request-Id only links the record to the request (its correlation_id),
// so no value of it may keep the request from running. Bug: the header was
// passed as it came, cut at 255 bytes: one whose 255th byte falls inside a
// character, or with bytes that are not UTF-8 (header values may carry any
// byte from 0x80 up), was sent with each bad byte as U+FFFD (3 bytes), over
// the store's 255, and the request got 400 "the request's idempotency scope
// is not valid".
func TestAnyRequestIDStillRuns(t *testing.T) {
	e := newEnv(t, middleware.Options{}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "ran")
	}))
	for name, id := range map[string]string{
		"cut inside a character": strings.Repeat("a", 254) + "é",
		"not UTF-8":              strings.Repeat("a", 250) + "\xff\xfe",
	} {
		req, err := http.NewRequest(http.MethodPost, e.url+"/pay", strings.NewReader("{}"))
		require.NoError(t, err)
		req.Header.Set("Idempotency-Key", "k-"+strings.ReplaceAll(name, " ", "-"))
		req.Header.Set("X-Request-Id", id)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		require.Equal(t, http.StatusOK, resp.StatusCode, "%s: %s", name, b)
		require.Equal(t, "ran", string(b), name)
	}
}

// The store's --max-id-bytes may be below the 255 bytes the middleware
// cuts X-Request-Id to: a request whose id was longer than the store's
// limit (a trace id with a prefix, 64 against --max-id-bytes 48) was
// answered 400 "the request's idempotency scope is not valid:
// correlation_id must be at most 48 bytes", its handler never run, for a
// header that only links the record to the request. The claim is asked
// again without it.
func TestRequestIDOverTheStoresLimitStillRuns(t *testing.T) {
	node := idemtest.Start(t, idemtest.Options{MaxIDBytes: 48})
	store, err := client.New(node.URL)
	require.NoError(t, err)
	e := newEnv(t, middleware.Options{Store: store}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "ran")
	}))
	req, err := http.NewRequest(http.MethodPost, e.url+"/pay", strings.NewReader("{}"))
	require.NoError(t, err)
	req.Header.Set("Idempotency-Key", "long-id")
	req.Header.Set("Content-Type", "application/json") // as e.post sends it
	req.Header.Set("X-Request-Id", strings.Repeat("r", 64))
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s", b)
	require.Equal(t, "ran", string(b))
	require.Equal(t, "ran", e.post("/pay", "long-id", "{}").body, "the retry replays")
}
