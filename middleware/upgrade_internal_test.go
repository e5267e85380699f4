package middleware

import (
	"fmt"
	"io"
	"net/http"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// curl --http2 on an http:// URL offers h2c (Connection: Upgrade,
// HTTP2-Settings; Upgrade: h2c): it was refused 400, the caller told to
// drop its key, though net/http ignores the offer and answers in
// HTTP/1.1. It runs and is replayed; the handler does not see the offer.
// Any other upgrade (WebSocket) is still refused.
func TestH2COfferIsAnOrdinaryRequest(t *testing.T) {
	var runs atomic.Int32
	_, send := memServer(t, Options{}, func(w http.ResponseWriter, r *http.Request) {
		runs.Add(1)
		assert.Empty(t, r.Header.Get("Upgrade"))
		assert.Empty(t, r.Header.Get("HTTP2-Settings"))
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, "paid")
	})
	offer := []string{"Connection", "Upgrade, HTTP2-Settings", "Upgrade", "h2c", "HTTP2-Settings", "AAMAAABkAAQAoAAAAAIAAAAA"}
	for i, want := range []string{"", "true"} {
		resp := send("h2c-1", offer...)
		b, _ := io.ReadAll(resp.Body)
		require.Equal(t, http.StatusCreated, resp.StatusCode, "%d: %s", i, b)
		require.Equal(t, "paid", string(b))
		require.Equal(t, want, resp.Header.Get(HeaderReplayed))
	}
	require.EqualValues(t, 1, runs.Load())

	for _, up := range []string{"websocket", "h2c, websocket"} {
		resp := send("ws-1", "Connection", "Upgrade", "Upgrade", up)
		b, _ := io.ReadAll(resp.Body)
		require.Equal(t, http.StatusBadRequest, resp.StatusCode, "%s: %s", up, b)
		require.Contains(t, string(b), "cannot be made idempotent")
	}
	require.EqualValues(t, 1, runs.Load())
}

// A review: an empty Upgrade header, or an h2c offer with an empty element
// ("h2c, "), was refused 400 as an upgrade; before the h2c change an empty
// one was no upgrade at all. Empty elements offer nothing.
func TestEmptyUpgradeIsNoUpgrade(t *testing.T) {
	var runs atomic.Int32
	_, send := memServer(t, Options{}, func(w http.ResponseWriter, r *http.Request) {
		runs.Add(1)
		w.WriteHeader(http.StatusCreated)
	})
	for i, up := range []string{"", "h2c, ", " , "} {
		resp := send(fmt.Sprint("empty-up-", i), "Upgrade", up)
		b, _ := io.ReadAll(resp.Body)
		require.Equal(t, http.StatusCreated, resp.StatusCode, "Upgrade %q: %s", up, b)
	}
	require.EqualValues(t, 3, runs.Load())
}
