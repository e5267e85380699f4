package api_test

import (
	"errors"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idem-store/idem/api"
)

// A client that asks for a snapshot and stops reading it (a save stopped
// with Ctrl-Z and forgotten, a script stuck on a full pipe) held the
// download for ever: its handler, its connection and the Pebble snapshot,
// which keeps every record dropped since on disk. A download that makes no
// progress for SnapshotStallTimeout is dropped.
func TestSnapshotStalledClientIsDropped(t *testing.T) {
	n := mustNode(t, withBearer("secret"), withAPI(func(c *api.Config) { c.SnapshotStallTimeout = 300 * time.Millisecond }))
	body := strings.Repeat("x", 32<<10)
	for i := range 500 { // 12 MB: more than the sockets' buffers hold unread
		k := "k" + strconv.Itoa(i)
		r := n.post("/v1/claim", map[string]any{"principal": "p", "endpoint": "e", "key": k, "fingerprint": "aa"})
		require.Equal(t, 201, r.status, "%s", r)
		r = n.post("/v1/complete", map[string]any{"principal": "p", "endpoint": "e", "key": k, "token": r.obj(t)["token"], "response": map[string]any{"status": 200, "body": body}})
		require.Equal(t, 200, r.status, "%s", r)
	}

	conn, err := net.Dial("tcp", strings.TrimPrefix(n.url, "http://"))
	require.NoError(t, err)
	defer conn.Close()
	_, err = io.WriteString(conn, "GET /v1/admin/snapshot HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer secret\r\n\r\n")
	require.NoError(t, err)
	time.Sleep(2 * time.Second) // reads nothing

	// The node gave up: what it sent ends before the backup's end, and
	// the connection is closed (not kept open, the stream held).
	require.NoError(t, conn.SetReadDeadline(time.Now().Add(10*time.Second)))
	got, err := io.Copy(io.Discard, conn)
	require.False(t, errors.Is(err, os.ErrDeadlineExceeded), "after %d bytes the connection was still open: the stalled download was kept", got)
	require.Less(t, got, int64(11<<20))
}
