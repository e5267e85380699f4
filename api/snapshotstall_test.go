package api_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idem-store/idem/api"
	"github.com/idem-store/idem/raftfsm"
)

// A client that asks for a snapshot and stops reading it (a save stopped
// with Ctrl-Z and forgotten, a script stuck on a full pipe) held the
// download for ever: its handler, its connection and the Pebble snapshot,
// which keeps every record dropped since on disk. A download that makes no
// progress for SnapshotStallTimeout is dropped.
func TestSnapshotStalledClientIsDropped(t *testing.T) {
	n := mustNode(t, asServed(), withBearer("secret"), withAPI(func(c *api.Config) { c.SnapshotStallTimeout = 300 * time.Millisecond }))
	fillBigRecords(t, n, 500) // 12 MB: more than the sockets' buffers hold unread

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

// fillBigRecords stores count completed records of 32 KiB responses each
// (about 24 KB of the snapshot each).
func fillBigRecords(t *testing.T, n *testNode, count int) {
	t.Helper()
	body := strings.Repeat("x", 32<<10)
	for i := range count {
		k := "k" + strconv.Itoa(i)
		r := n.post("/v1/claim", map[string]any{"principal": "p", "endpoint": "e", "key": k, "fingerprint": "aa"})
		require.Equal(t, 201, r.status, "%s", r)
		r = n.post("/v1/complete", map[string]any{"principal": "p", "endpoint": "e", "key": k, "token": r.obj(t)["token"], "response": map[string]any{"status": 200, "body": body}})
		require.Equal(t, 200, r.status, "%s", r)
	}
}

// The stall cut is "no progress for SnapshotStallTimeout", but its
// deadline was renewed per write of the stream, and those were of up to
// 4 MiB: each had to be taken whole within the timeout, so a client
// reading steadily, only slower than 4 MiB per timeout (about 14 KB/s for
// 5 minutes: a save over a thin or throttled link), was cut off after the
// sockets' buffers filled, and its save failed every time. Here the
// timeout is 500 ms and the client reads 1 MiB/s: a 1 MiB write takes it
// a second, a 64 KiB piece a sixteenth of one.
func TestSnapshotSlowButSteadyClientIsNotCut(t *testing.T) {
	n := mustNode(t, asServed(), withBearer("secret"), withAPI(func(c *api.Config) { c.SnapshotStallTimeout = 500 * time.Millisecond }))
	fillBigRecords(t, n, 300) // 7 MB

	hc := &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
			if err == nil {
				c.(*net.TCPConn).SetReadBuffer(32 << 10) // the kernel holds little for it
			}
			return c, err
		},
	}}
	req, err := http.NewRequest(http.MethodGet, n.url+"/v1/admin/snapshot", nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer secret")
	resp, err := hc.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, 200, resp.StatusCode)

	const rate = 1 << 20 // bytes a second
	var got bytes.Buffer
	buf := make([]byte, 16<<10)
	start := time.Now()
	for {
		m, err := resp.Body.Read(buf)
		got.Write(buf[:m])
		if err == io.EOF {
			break
		}
		require.NoError(t, err, "cut off after %d bytes, read at 1 MiB/s", got.Len())
		if ahead := time.Duration(got.Len())*time.Second/rate - time.Since(start); ahead > 0 {
			time.Sleep(ahead)
		}
	}
	info, err := raftfsm.VerifyBackup(&got)
	require.NoError(t, err, "after %d bytes", got.Len())
	require.EqualValues(t, 300, info.Stream.Records)
}

// Snapshot downloads were not bounded: each holds about a MiB of buffers
// and, on the leader, a Pebble snapshot that keeps on disk every record
// dropped while it runs, and a script looping saves took them without
// end. Past DefaultMaxSnapshotDownloads at once, a download is refused,
// 503 unavailable with a Retry-After, as the route's other overloads are;
// once one ends, the next is served.
func TestSnapshotDownloadsAreCapped(t *testing.T) {
	n := mustNode(t, withBearer("secret"), withAPI(func(c *api.Config) { c.SnapshotStallTimeout = time.Minute }))
	fillBigRecords(t, n, 500) // 12 MB: more than the sockets' buffers hold unread

	var held []net.Conn
	for range api.DefaultMaxSnapshotDownloads {
		conn, err := net.Dial("tcp", strings.TrimPrefix(n.url, "http://"))
		require.NoError(t, err)
		defer conn.Close()
		_, err = io.WriteString(conn, "GET /v1/admin/snapshot HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer secret\r\n\r\n")
		require.NoError(t, err)
		held = append(held, conn) // reads nothing: the download stays
	}
	time.Sleep(time.Second)

	r := n.do("GET", "/v1/admin/snapshot", nil)
	require.Equal(t, 503, r.status, "%s", r)
	require.Equal(t, "unavailable", r.obj(t)["code"])
	require.Equal(t, "10", r.header.Get("Retry-After"))
	require.Contains(t, r.obj(t)["detail"], "4 snapshot downloads are already running on this node")

	held[0].Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		r = n.do("GET", "/v1/admin/snapshot", nil)
		if r.status == 200 || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	require.Equal(t, 200, r.status, "%s", r)
	_, err := raftfsm.VerifyBackup(bytes.NewReader(r.raw))
	require.NoError(t, err)
}
