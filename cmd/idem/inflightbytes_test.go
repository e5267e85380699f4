package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// --max-inflight-bytes is a size, at least 1 and at least
// --max-request-bytes (a body of the largest size must fit), and not past
// the machine's memory; a bad value is refused at start, exit 2, naming
// the flag (and --max-request-bytes when it is the other one at fault).
// Not given, it is raised to --max-request-bytes.
func TestServeValidatesMaxInFlightBytes(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "d")
	base := []string{"serve", "--data-dir", dir, "--http-addr", "127.0.0.13:27741", "--raft-addr", "127.0.0.13:27742", "--bootstrap-expect", "10"}
	cases := []struct {
		args []string
		env  string
		want string
	}{
		{[]string{"--max-inflight-bytes", "0"}, "", "--max-inflight-bytes must be at least 1 (got 0)"},
		{[]string{"--max-inflight-bytes", "-1"}, "", `--max-inflight-bytes: invalid size "-1"`},
		{[]string{"--max-inflight-bytes", "lots"}, "", `--max-inflight-bytes: invalid size "lots"`},
		{nil, "12XB", `$IDEM_MAX_INFLIGHT_BYTES (--max-inflight-bytes): invalid size "12XB"`},
		{[]string{"--max-inflight-bytes", "1MiB", "--max-request-bytes", "2MiB"}, "", "--max-inflight-bytes 1048576 is less than --max-request-bytes 2097152"},
		{nil, "512KiB", "--max-inflight-bytes 524288 is less than --max-request-bytes 1048576"},
	}
	if mem := physicalMemory(); mem != 0 {
		cases = append(cases, struct {
			args []string
			env  string
			want string
		}{[]string{"--max-inflight-bytes", strconv.FormatUint(mem+1, 10)}, "", "--max-inflight-bytes " + formatShortest(mem+1) + " is more than this machine's memory"})
	}
	for _, tc := range cases {
		t.Setenv("IDEM_MAX_INFLIGHT_BYTES", tc.env)
		if tc.env == "" {
			os.Unsetenv("IDEM_MAX_INFLIGHT_BYTES")
		}
		var stdout, stderr bytes.Buffer
		code := run(context.Background(), append(append([]string{}, base...), tc.args...), &stdout, &stderr)
		require.Equal(t, 2, code, "%v %s: %s", tc.args, tc.env, stderr.String())
		require.Contains(t, stderr.String(), tc.want, "%v %s", tc.args, tc.env)
		_, err := os.Stat(dir)
		require.ErrorIs(t, err, os.ErrNotExist)
	}

	for _, tc := range []struct {
		args []string
		want int64
	}{
		{nil, defaultInFlightBytes(physicalMemory(), 1<<20)},
		{[]string{"--max-request-bytes", "300MiB"}, defaultInFlightBytes(physicalMemory(), 300<<20)},
		{[]string{"--max-inflight-bytes", "8MiB", "--max-request-bytes", "8MiB"}, 8 << 20},
		{[]string{"--max-inflight-bytes", "1GB"}, 1e9},
	} {
		c, err := validatedServe(t, dir, tc.args...)
		if err != nil && strings.Contains(err.Error(), "this machine's memory") {
			continue // a small machine
		} else {
			require.NoError(t, err, "%v", tc.args)
		}
		require.Equal(t, tc.want, c.limits.MaxInFlightBytes, "%v", tc.args)
	}
}

// The default scales with the machine: an eighth of its memory, at least
// 256 MiB and at least one body of --max-request-bytes.
func TestDefaultInFlightBytesFollowsTheMachine(t *testing.T) {
	const mib = 1 << 20
	for _, tc := range []struct {
		mem        uint64
		maxRequest int64
		want       int64
	}{
		{0, mib, 256 * mib},             // memory unknown
		{1 << 30, mib, 256 * mib},       // 1 GiB: the floor
		{24 << 30, mib, 3 << 30},        // 24 GiB: 3 GiB, more than 2,048 bodies of 1 MiB
		{24 << 30, 4 << 30, 4 << 30},    // one body of --max-request-bytes
		{2 << 30, 300 * mib, 300 * mib}, // raised to one body
		// A machine of less than the floor: the default stays within its
		// memory, which validate refuses past as a typo (a node that
		// started before the flag existed must start after it).
		{192 * mib, mib, 192 * mib},
		{192 * mib, 300 * mib, 300 * mib}, // --max-request-bytes is refused itself
	} {
		require.Equal(t, tc.want, defaultInFlightBytes(tc.mem, tc.maxRequest), "%+v", tc)
	}
}

// On a real node: bodies held at once past --max-inflight-bytes are
// refused 503 with Retry-After before they are read, and
// idem_http_request_body_bytes_in_use shows what they hold, back to 0
// once they are answered, cut off or refused.
func TestMaxInFlightBytesOnANode(t *testing.T) {
	addr := freePort(t)
	start(t, t.TempDir(), addr, freePort(t), "--log-level", "warn", "--max-inflight-bytes", "8KiB", "--max-request-bytes", "4KiB")
	inUse := func() float64 {
		status, metrics := get(t, addr, "/metrics")
		require.Equal(t, http.StatusOK, status)
		v := -1.0
		for _, line := range strings.Split(string(metrics), "\n") {
			if s, ok := strings.CutPrefix(line, "idem_http_request_body_bytes_in_use "); ok {
				fmt.Sscan(s, &v)
			}
		}
		return v
	}
	require.Zero(t, inUse())

	body := func(key string, n int) string {
		b := fmt.Sprintf(`{"principal":"p","endpoint":"e","key":%q,"fingerprint":"aa"}`, key)
		return b + strings.Repeat(" ", n-len(b))
	}
	hold := func(key string, n, sent int) (net.Conn, *bufio.Reader, string) {
		c, err := net.Dial("tcp", addr)
		require.NoError(t, err)
		t.Cleanup(func() { c.Close() })
		b := body(key, n)
		_, err = fmt.Fprintf(c, "POST /v1/claim HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s", n, b[:sent])
		require.NoError(t, err)
		return c, bufio.NewReader(c), b[sent:]
	}
	answer := func(c net.Conn, br *bufio.Reader) *http.Response {
		c.SetReadDeadline(time.Now().Add(20 * time.Second)) // a guard against a hang, not a bound under test
		resp, err := http.ReadResponse(br, nil)
		require.NoError(t, err)
		io.Copy(io.Discard, resp.Body)
		return resp
	}

	c1, br1, rest1 := hold("a", 4000, 10)
	c2, _, _ := hold("b", 4000, 10)
	require.Eventually(t, func() bool { return inUse() == 8000 }, 20*time.Second, 20*time.Millisecond)

	c3, br3, _ := hold("c", 300, 300)
	resp := answer(c3, br3)
	require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
	require.Equal(t, "1", resp.Header.Get("Retry-After"))
	require.True(t, resp.Close)
	status, _ := get(t, addr, "/v1/records?principal=p&endpoint=e&key=c")
	require.Equal(t, http.StatusNotFound, status, "the refused claim decided nothing")

	c2.Close() // cut off mid-body
	_, err := io.WriteString(c1, rest1)
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, answer(c1, br1).StatusCode)
	require.Eventually(t, func() bool { return inUse() == 0 }, 20*time.Second, 20*time.Millisecond)

	resp, err = http.Post("http://"+addr+"/v1/claim", "application/json", strings.NewReader(body("c", 300)))
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusCreated, resp.StatusCode)
}
