package middleware

import (
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idem-store/idem/client"
)

// The headers the answer's Connection names, and the other hop-by-hop ones
// (RFC 9110 7.6.1) and Proxy-Authenticate, were stored and replayed: they
// were for the first caller's connection only. Neither stored nor
// replayed (a record stored before, with them, replays without them).
func TestHopByHopHeadersAreNotStoredOrReplayed(t *testing.T) {
	store, send := memServer(t, Options{}, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Connection", "X-Hop, Keep-Alive")
		w.Header().Set("X-Hop", "1")
		w.Header().Set("Proxy-Authenticate", `Basic realm="p"`)
		w.Header().Set("Te", "trailers")
		w.Header().Set("X-Kept", "1")
		w.WriteHeader(http.StatusCreated)
	})
	resp := send("hop-1")
	require.Equal(t, http.StatusCreated, resp.StatusCode)
	stored := store.response("hop-1")
	require.NotNil(t, stored)
	for _, h := range []string{"X-Hop", "Proxy-Authenticate", "Te", "Connection"} {
		require.Empty(t, stored.Values(h), "%s stored", h)
	}
	require.Equal(t, []string{"1"}, stored.Values("X-Kept"))

	old := client.Response{Status: http.StatusCreated}
	old.SetHeader("Proxy-Authenticate", `Basic realm="p"`)
	old.SetHeader("Te", "trailers")
	old.SetHeader("X-Kept", "1")
	store.mu.Lock()
	store.stored["hop-old"] = &old
	store.mu.Unlock()
	resp = send("hop-old")
	require.Equal(t, "true", resp.Header.Get(HeaderReplayed))
	require.Empty(t, resp.Header.Get("Proxy-Authenticate"))
	require.Empty(t, resp.Header.Get("Te"))
	require.Equal(t, "1", resp.Header.Get("X-Kept"))
}

// A handler that declared Content-Length: 100 and wrote 5 bytes: its
// caller got a broken transfer, and the 5 bytes were stored and replayed
// as a complete answer. The key is released: the retry runs again.
func TestAnswerShorterThanItsContentLengthIsNotStored(t *testing.T) {
	var runs atomic.Int32
	store, send := memServer(t, Options{}, func(w http.ResponseWriter, r *http.Request) {
		runs.Add(1)
		w.Header().Set("Content-Length", "100")
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, "short")
	})
	for i := 1; i <= 2; i++ {
		resp := send("short-1")
		_, err := io.ReadAll(resp.Body)
		require.Error(t, err, "the transfer is broken")
		require.Empty(t, resp.Header.Get(HeaderReplayed))
		require.EqualValues(t, i, runs.Load())
	}
	require.Nil(t, store.response("short-1"))

	// Declared and written alike, it is stored.
	_, send = memServer(t, Options{}, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "5")
		io.WriteString(w, "whole")
	})
	send("whole-1")
	resp := send("whole-1")
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, "whole", string(b))
	require.Equal(t, "true", resp.Header.Get(HeaderReplayed))
}

// Headers an outer middleware sets before the handler runs belong to the
// request they were set for: stored with the answer, they were replayed
// over the retry's own (its request id, the Access-Control-Allow-Origin
// for its Origin), so a browser retrying from another origin was refused
// the answer. A header the handler changes is its answer's.
func TestOuterHeadersAreNotReplayedOverTheRetrysOwn(t *testing.T) {
	store := &memStore{}
	idem, err := New(Options{Store: store, Principal: AnonymousPrincipal})
	require.NoError(t, err)
	inner := idem(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store") // the handler's, over the outer one
		io.WriteString(w, `{"ok":true}`)
	}))
	srv := newTestServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Request-Id", r.Header.Get("X-Request-Id"))
		w.Header().Set("Access-Control-Allow-Origin", r.Header.Get("Origin"))
		w.Header().Set("Cache-Control", "private")
		inner.ServeHTTP(w, r)
	}))
	defer srv.Close()
	send := func(id, origin string) *http.Response {
		req, err := http.NewRequest(http.MethodPost, srv.URL+"/pay", strings.NewReader("{}"))
		require.NoError(t, err)
		req.Header.Set(HeaderKey, "k")
		req.Header.Set("X-Request-Id", id)
		req.Header.Set("Origin", origin)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		return resp
	}
	first := send("req-1", "https://a.example")
	require.Equal(t, "https://a.example", first.Header.Get("Access-Control-Allow-Origin"))
	require.Equal(t, "req-1", first.Header.Get("X-Request-Id"))
	retry := send("req-2", "https://b.example")
	require.Equal(t, "true", retry.Header.Get(HeaderReplayed))
	require.Equal(t, "https://b.example", retry.Header.Get("Access-Control-Allow-Origin"))
	require.Equal(t, "req-2", retry.Header.Get("X-Request-Id"))
	require.Equal(t, "no-store", retry.Header.Get("Cache-Control"), "the handler's header is replayed")
	stored := store.response("k")
	require.NotNil(t, stored)
	require.Empty(t, stored.Headers["X-Request-Id"])
}
