package middleware

import (
	"compress/gzip"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// gzipOuter is the gzip middleware found in many services: it sets
// Content-Encoding before the handler runs and wraps the writer in a
// gzip.Writer, leaving any Content-Length to net/http.
func gzipOuter(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !strings.Contains(r.Header.Get("Accept-Encoding"), "gzip") {
			next.ServeHTTP(w, r)
			return
		}
		w.Header().Set("Content-Encoding", "gzip")
		gz := gzip.NewWriter(w)
		defer gz.Close()
		next.ServeHTTP(gzipWriter{gz, w}, r)
	})
}

type gzipWriter struct {
	io.Writer
	http.ResponseWriter
}

func (g gzipWriter) Write(p []byte) (int, error) { return g.Writer.Write(p) }

// The held answer went out with the Content-Length of what the handler
// wrote; an outer gzip middleware then sent fewer bytes, and the first
// caller's transfer broke (unexpected EOF) though its answer was stored.
func TestOuterCompressionGetsNoContentLengthOfTheUncompressedBody(t *testing.T) {
	store := &memStore{}
	idem, err := New(Options{Store: store, Principal: AnonymousPrincipal})
	require.NoError(t, err)
	body := strings.Repeat(`{"id":"py_1","status":"succeeded"}`, 100)
	srv := newTestServer(t, gzipOuter(idem(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, body)
	}))))
	t.Cleanup(srv.Close)
	send := func() (*http.Response, string) {
		req, err := http.NewRequest(http.MethodPost, srv.URL+"/pay", strings.NewReader("{}"))
		require.NoError(t, err)
		req.Header.Set(HeaderKey, `"k1"`)
		req.Header.Set("Accept-Encoding", "gzip") // set here: the transport leaves the body as sent
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		raw, err := io.ReadAll(resp.Body)
		require.NoError(t, err, "the transfer must end whole")
		zr, err := gzip.NewReader(strings.NewReader(string(raw)))
		require.NoError(t, err)
		plain, err := io.ReadAll(zr)
		require.NoError(t, err)
		return resp, string(plain)
	}
	first, got := send()
	require.Equal(t, http.StatusCreated, first.StatusCode)
	require.Equal(t, body, got)
	replay, got := send()
	require.Equal(t, "true", replay.Header.Get(HeaderReplayed))
	require.Equal(t, http.StatusCreated, replay.StatusCode)
	require.Equal(t, "gzip", replay.Header.Get("Content-Encoding"))
	require.Equal(t, body, got)
}

// The first caller of an answer over net/http's 2 KiB buffer got it with
// its Content-Length (the held answer is sent whole); its replay went out
// chunked, without one: the same answer framed otherwise.
func TestReplayHasTheContentLengthTheFirstCallerGot(t *testing.T) {
	body := strings.Repeat("x", 5000)
	_, send := memServer(t, Options{}, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, body)
	})
	first := send(`"k1"`)
	require.EqualValues(t, len(body), first.ContentLength)
	replay := send(`"k1"`)
	require.Equal(t, "true", replay.Header.Get(HeaderReplayed))
	require.Nil(t, replay.TransferEncoding)
	require.EqualValues(t, len(body), replay.ContentLength)
	got, err := io.ReadAll(replay.Body)
	require.NoError(t, err)
	require.Equal(t, body, string(got))
}
