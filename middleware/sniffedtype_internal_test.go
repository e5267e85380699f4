package middleware

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Bug (adoption walk): an answer without a Content-Type that went out as
// it was written (a stream, or a body over MaxStoredBody) reached its
// caller with the type net/http sniffed, but was stored without one, so
// its replays had none. The sniffed type is stored, as it is for an answer
// held whole; a stream flushed before any body had none to sniff, and its
// replay has none either.
func TestReplayOfAnAnswerPassedOnKeepsItsSniffedType(t *testing.T) {
	page := "<!DOCTYPE html><html><body>" + strings.Repeat("paid ", 20) + "</body></html>"
	for _, tc := range []struct {
		name, want string
		h          http.HandlerFunc
	}{
		{"too-large", "text/html; charset=utf-8", func(w http.ResponseWriter, r *http.Request) {
			io.WriteString(w, page)
		}},
		{"streamed", "text/html; charset=utf-8", func(w http.ResponseWriter, r *http.Request) {
			io.WriteString(w, page[:20])
			w.(http.Flusher).Flush()
			io.WriteString(w, page[20:])
		}},
		{"flushed-first", "", func(w http.ResponseWriter, r *http.Request) {
			w.(http.Flusher).Flush()
			io.WriteString(w, page)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			store, send := memServer(t, Options{MaxStoredBody: 16}, tc.h)
			first := send("k")
			require.Equal(t, tc.want, first.Header.Get("Content-Type"))
			b, err := io.ReadAll(first.Body)
			require.NoError(t, err)
			require.Equal(t, page, string(b))
			require.Eventually(t, func() bool { return store.response("k") != nil }, 5*time.Second, 5*time.Millisecond)
			again := send("k")
			require.Equal(t, "true", again.Header.Get(HeaderReplayed))
			require.Equal(t, tc.want, again.Header.Get("Content-Type"))
		})
	}
}
