package api

import (
	"bytes"
	"log/slog"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// refusedByLeader logs once a minute per status. Its stamps were wall
// clock nanoseconds: a clock stepped back (an NTP step on a node whose
// clock ran ahead, what cluster status warns of) made now-last negative,
// so the warning stayed silent until the clock caught up with the last
// stamp, an hour for a clock an hour ahead. It is spaced by a mono.Spacer
// now, as the other once-a-while logs of the package (on the monotonic
// clock by construction: internal/mono's tests).
func TestRefusedByLeaderLogsOnceAMinuteOnTheMonotonicClock(t *testing.T) {
	var buf bytes.Buffer
	f := &forwarder{s: &Server{log: slog.New(slog.NewTextHandler(&buf, nil))}}
	f.refusedByLeader(http.StatusUnauthorized, "127.0.0.11:27000")
	f.refusedByLeader(http.StatusUnauthorized, "127.0.0.11:27000")
	f.refusedByLeader(http.StatusForbidden, "127.0.0.11:27000")
	f.refusedByLeader(http.StatusOK, "127.0.0.11:27000")
	require.Equal(t, 1, strings.Count(buf.String(), "the leader answered 401"), buf.String())
	require.Equal(t, 1, strings.Count(buf.String(), "the leader answered 403"), buf.String())
	require.Equal(t, 2, strings.Count(buf.String(), "\n"), buf.String())
}
