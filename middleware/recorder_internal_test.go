package middleware

import (
	"io"
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A held answer goes out as net/http would have sent it as written: the
// headers of the status (later changes ignored), the trailers the handler
// declared and set after it (as trailers, not among the headers), and a
// length.
func TestHeldAnswerKeepsHeadersAndTrailers(t *testing.T) {
	srv := newTestServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec := newRecorder(w, r, 1<<10)
		rec.Header().Set("Content-Type", "application/json")
		rec.Header().Set("Trailer", "X-Sum")
		rec.Header().Set(http.TrailerPrefix+"X-Early", "1") // a trailer, whenever set
		rec.WriteHeader(http.StatusAccepted)
		io.WriteString(rec, `{"ok":true}`)
		rec.Header().Set("X-Sum", "42")    // a declared trailer
		rec.Header().Set("X-Late", "no")   // not sent: after the status
		rec.WriteHeader(http.StatusTeapot) // superfluous: the first stands
		stored := rec.response()
		assert.Equal(t, http.StatusAccepted, stored.Status)
		assert.Empty(t, rec.dropped, "a trailer is no header the store refused")
		assert.Empty(t, stored.Values(http.TrailerPrefix+"X-Early"))
		assert.Empty(t, stored.Values("X-Sum"))
		rec.finish()
	}))
	defer srv.Close()
	resp, err := http.Get(srv.URL)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, http.StatusAccepted, resp.StatusCode)
	require.Equal(t, `{"ok":true}`, string(body))
	require.Equal(t, "application/json", resp.Header.Get("Content-Type"))
	require.Empty(t, resp.Header.Get("X-Late"))
	require.Empty(t, resp.Header.Values("X-Sum"), "a trailer among the headers")
	require.Equal(t, "42", resp.Trailer.Get("X-Sum"))
	require.Equal(t, "1", resp.Trailer.Get("X-Early"))

	// Past the limit, the answer goes through as written, and is stored
	// without its body.
	srv2 := newTestServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec := newRecorder(w, r, 4)
		io.WriteString(rec, "abc")
		io.WriteString(rec, "defgh")
		assert.True(t, rec.passing)
		resp := rec.response()
		assert.Equal(t, []string{OmittedTooLarge}, resp.Values(HeaderBodyOmitted))
		rec.finish()
	}))
	defer srv2.Close()
	resp, err = http.Get(srv2.URL)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err = io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, "abcdefgh", string(body))
}
