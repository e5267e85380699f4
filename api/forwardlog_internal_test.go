package api

import (
	"bytes"
	"context"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idem-store/idem/raftfsm"
)

// selfStore is a Store that knows only who it is (what forward reads).
type selfStore struct{ Store }

func (selfStore) Self() raftfsm.NodeInfo { return raftfsm.NodeInfo{ID: "n1"} }

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// A follower logged "forward to leader failed; outcome unknown" (WARN) for
// every forwarded write whose client hung up while it was on its way: a
// loop that sent a claim to a follower over TLS and reset the connection
// made 277 WARN lines of 300 requests, each telling the operator of a
// leader problem there was not. A client gone is not logged, and a leader
// that fails every forward (it died) is logged a few times a second, the
// next line counting the others.
func TestForwardLogsNeitherAClientThatHungUpNorEveryFailure(t *testing.T) {
	var cut atomic.Bool // false: answers late; true: closes without answering
	leader := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !cut.Load() {
			select {
			case <-r.Context().Done():
			case <-time.After(2 * time.Second):
			}
			return
		}
		c, _, err := http.NewResponseController(w).Hijack()
		if err == nil {
			c.Close()
		}
	}))
	ip := "127.0.0.1"
	if v := os.Getenv("IDEM_TEST_IP"); v != "" { // a shared machine's own loopback address
		ip = v
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
	require.NoError(t, err)
	leader.Listener.Close()
	leader.Listener = ln
	leader.Start()
	defer leader.Close()
	addr := strings.TrimPrefix(leader.URL, "http://")
	var logs lockedBuffer
	s := &Server{log: slog.New(slog.NewTextHandler(&logs, nil)), store: selfStore{}}
	f := newForwarder(s)
	body := []byte(`{"principal":"p","endpoint":"e","key":"k","fingerprint":"aa"}`)

	for range 5 {
		ctx, cancel := context.WithCancel(context.Background())
		r := httptest.NewRequest(http.MethodPost, "/v1/claim", nil).WithContext(ctx)
		time.AfterFunc(50*time.Millisecond, cancel)
		w := httptest.NewRecorder()
		require.False(t, f.forward(w, r, body, addr, time.Now().Add(-time.Second)))
		require.Equal(t, http.StatusServiceUnavailable, w.Code)
		cancel()
	}
	require.NotContains(t, logs.String(), "forward to leader failed", "a client that hung up was logged as a leader's failure")

	// A leader slower than the forward waits: the answer said leadership
	// had changed (a disk-full walk, where none had).
	r := httptest.NewRequest(http.MethodPost, "/v1/claim", nil)
	w := httptest.NewRecorder()
	require.False(t, f.forward(w, r, body, addr, time.Now().Add(-time.Second)))
	require.Equal(t, http.StatusServiceUnavailable, w.Code)
	require.Contains(t, w.Body.String(), "the leader at "+addr+" did not answer in time")
	require.Contains(t, w.Body.String(), "its outcome is unknown")
	require.NotContains(t, w.Body.String(), "leadership changed")
	require.Equal(t, "1", w.Header().Get("Retry-After"), "an unknown outcome is retried: the header went with the new detail")

	cut.Store(true)
	for range 50 {
		r := httptest.NewRequest(http.MethodPost, "/v1/claim", nil)
		w := httptest.NewRecorder()
		require.False(t, f.forward(w, r, body, addr, time.Now().Add(-time.Second)))
		require.Contains(t, w.Body.String(), "unknown", "%s", w.Body)
		require.Contains(t, w.Body.String(), "the connection to the leader at "+addr+" broke before it answered", "%s", w.Body)
	}
	out := logs.String()
	n := strings.Count(out, "forward to leader failed")
	require.GreaterOrEqual(t, n, 1, "a leader that fails forwards is logged")
	require.LessOrEqual(t, n, 10, "50 failed forwards made %d lines:\n%s", n, out)
}
