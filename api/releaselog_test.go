package api_test

import (
	"bytes"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idem-store/idem/api"
)

// syncBuffer is a log destination safe for a node's goroutines.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// A release's reason is logged ("attempt released"), and a repeat of the
// release by the same token is answered 200 again, and was logged again:
// one app token sending batches of 256 repeat releases, each with a
// 240-byte reason, wrote 25,000 lines (56 MB) in 5 s to a node's log on
// one connection (a protocol walk). At most a few lines a second are
// written now, and the next one says how many were held back. The reason
// is still written escaped (a newline or an ANSI escape in it cannot make
// a line of its own).
func TestReleaseReasonsDoNotFloodTheLog(t *testing.T) {
	var logs syncBuffer
	n := mustNode(t, withAPI(func(c *api.Config) { c.Logger = slog.New(slog.NewTextHandler(&logs, nil)) }))
	s := sc("flood-1")
	tok := n.mustClaim(s, "aa")["token"].(string)
	reason := "\n\x1b[31mlevel=ERROR msg=forged " + strings.Repeat("r", 200)
	r := n.post("/v1/release", s.body("token", tok, "reason", reason))
	require.Equal(t, http.StatusOK, r.status, "%s", r)

	op := s.body("op", "release", "token", tok, "reason", reason)
	ops := make([]any, 256)
	for i := range ops {
		ops[i] = op
	}
	for range 4 {
		r = n.post("/v1/batch", map[string]any{"ops": ops})
		require.Equal(t, http.StatusOK, r.status, "%s", r)
		require.Equal(t, 256, strings.Count(string(r.raw), `"released"`), "%s", r)
	}
	out := logs.String()
	lines := strings.Count(out, `msg="attempt released"`)
	require.GreaterOrEqual(t, lines, 1, "the first release's reason is logged:\n%s", out)
	require.LessOrEqual(t, lines, 2*20, "1,025 releases in well under two seconds wrote %d lines", lines)
	require.NotContains(t, out, "\nlevel=ERROR msg=forged", "the reason's newline began a line of its own")
	require.NotContains(t, out, "\x1b", "the reason's escape reached the log raw")

	time.Sleep(1100 * time.Millisecond)
	r = n.post("/v1/release", s.body("token", tok, "reason", "after"))
	require.Equal(t, http.StatusOK, r.status, "%s", r)
	last := logs.String()[len(out):]
	require.Contains(t, last, `reason=after`, "a release after a quiet second is logged:\n%s", last)
	require.Regexp(t, `released_unlogged=\d+`, last, "the line after the held-back ones says how many")
}
