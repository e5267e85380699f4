package middleware

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idem-store/idem/client"
)

// smallStore refuses a complete whose body is over limit, as a store does
// over its --max-response-bytes.
type smallStore struct {
	memStore
	limit int
}

func (s *smallStore) Complete(ctx context.Context, req client.CompleteRequest) (*client.CompleteResponse, error) {
	if len(req.Response.Body) > s.limit {
		return nil, &client.Problem{Status: http.StatusRequestEntityTooLarge, Code: client.CodeResponseTooLarge}
	}
	return s.memStore.Complete(ctx, req)
}

// syncBuffer is a log's buffer, written by the server's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// With MaxStoredBody above the store's --max-response-bytes, answers were
// stored without their body and nothing said so: every replay lacked its
// body, and the operator never learnt why.
func TestBodyRefusedAsTooLargeIsLogged(t *testing.T) {
	store := &smallStore{limit: 4}
	var logs syncBuffer
	idem, err := New(Options{Store: store, Principal: AnonymousPrincipal, MaxStoredBody: 1024,
		Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	require.NoError(t, err)
	h := idem(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, "a body over four bytes")
	}))
	for range 2 {
		req, _ := http.NewRequest(http.MethodPost, "/pay", strings.NewReader("{}"))
		req.Header.Set(HeaderKey, "big-1")
		h.ServeHTTP(httptest.NewRecorder(), req)
	}
	resp := store.response("big-1")
	require.NotNil(t, resp)
	require.Equal(t, []string{OmittedTooLarge}, resp.Values(HeaderBodyOmitted))
	require.Contains(t, logs.String(), "max-response-bytes")
	require.Contains(t, logs.String(), "MaxStoredBody")
}
