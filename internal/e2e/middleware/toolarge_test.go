package e2emiddleware_test

import (
	"bytes"
	"fmt"
	"net/http"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idem-store/idem/internal/idemtest"
	"github.com/idem-store/idem/middleware"
)

// An answer whose body the store refused as too large (MaxStoredBody set
// above its --max-response-bytes) was stored with its status alone: the
// replay of a 201 lost its Location and its Set-Cookie, where the package
// doc promises "stored with its status and headers but an empty body". The
// headers fit; only the body is left out.
func TestAnswerRefusedForItsBodyKeepsItsHeaders(t *testing.T) {
	var runs atomic.Int32
	send := keyedServer(t, idemtest.Options{MaxResponseBytes: 4 << 10}, middleware.Options{MaxStoredBody: 64 << 10},
		func(w http.ResponseWriter, r *http.Request) {
			runs.Add(1)
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("Location", "/payments/py_1")
			w.Header().Add("Set-Cookie", "a=1")
			w.Header().Add("Set-Cookie", "b=2")
			w.WriteHeader(http.StatusCreated)
			w.Write(bytes.Repeat([]byte("x"), 16<<10))
		})
	first, b := send("body-1")
	require.Equal(t, http.StatusCreated, first.StatusCode)
	require.Len(t, b, 16<<10)
	again, b := send("body-1")
	require.Equal(t, http.StatusCreated, again.StatusCode)
	require.Equal(t, "true", again.Header.Get(middleware.HeaderReplayed))
	require.Equal(t, middleware.OmittedTooLarge, again.Header.Get(middleware.HeaderBodyOmitted))
	require.Empty(t, b)
	require.Equal(t, "/payments/py_1", again.Header.Get("Location"), "the replay lost the answer's headers")
	require.Equal(t, []string{"a=1", "b=2"}, again.Header.Values("Set-Cookie"))
	require.Equal(t, "application/json", again.Header.Get("Content-Type"))
	require.Equal(t, int32(1), runs.Load())
}

// An answer with more headers than the store keeps (its
// --max-response-headers, 32 values) cannot keep them: it is stored with
// its status alone, and the replay says a part is missing; the handler
// does not run again.
func TestAnswerWithMoreHeadersThanTheStoreKeepsIsStoredWithItsStatus(t *testing.T) {
	var runs atomic.Int32
	send := keyedServer(t, idemtest.Options{}, middleware.Options{},
		func(w http.ResponseWriter, r *http.Request) {
			runs.Add(1)
			for i := range 40 {
				w.Header().Add("Set-Cookie", fmt.Sprintf("c%d=v", i))
			}
			w.WriteHeader(http.StatusCreated)
			w.Write([]byte(`{"id":"py_1"}`))
		})
	first, _ := send("hdr-1")
	require.Equal(t, http.StatusCreated, first.StatusCode)
	require.Len(t, first.Header.Values("Set-Cookie"), 40)
	again, _ := send("hdr-1")
	require.Equal(t, http.StatusCreated, again.StatusCode)
	require.Equal(t, "true", again.Header.Get(middleware.HeaderReplayed))
	require.NotEmpty(t, again.Header.Get(middleware.HeaderBodyOmitted))
	require.Equal(t, int32(1), runs.Load())
}
