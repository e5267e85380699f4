package bench

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idem-store/idem/client"
)

// The driver follows a leader named in Idem-Leader however its address is
// spelled ([::ffff:127.0.0.1] for 127.0.0.1, as the Go client does), and
// only to a node it was given.
func TestDriverFollowsTheLeaderSpelledOtherwise(t *testing.T) {
	var hits [2]atomic.Int64
	var leaderAddr string
	srv := make([]*httptest.Server, 2)
	for i := range srv {
		srv[i] = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			hits[i].Add(1)
			w.Header().Set(client.LeaderHeader, leaderAddr)
			w.Write([]byte(`{}`))
		}))
		t.Cleanup(srv[i].Close)
	}
	addr := func(i int) string { return strings.TrimPrefix(srv[i].URL, "http://") }
	d := NewHTTPDriver([]string{addr(0), addr(1)}, "")

	// A host it was not given is never followed.
	leaderAddr = "evil.example:80"
	_, _, err := d.do(context.Background(), "GET", "/", "")
	require.NoError(t, err)
	require.Zero(t, d.leader.Load())

	leaderAddr = strings.Replace(addr(1), "127.0.0.1", "[::ffff:127.0.0.1]", 1)
	for range 4 {
		_, _, err := d.do(context.Background(), "GET", "/", "")
		require.NoError(t, err)
	}
	require.Equal(t, int32(2), d.leader.Load(), "the leader %s is the second node", leaderAddr)
	before := hits[0].Load()
	for range 10 {
		_, _, err := d.do(context.Background(), "GET", "/", "")
		require.NoError(t, err)
	}
	require.Equal(t, before, hits[0].Load(), "requests go to the leader once it is known")
}
