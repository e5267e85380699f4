package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idem-store/idem/raftfsm"
)

// `idem serve --min-free-disk 32MiB` was refused as an "invalid integer"
// without a word on what the flag takes. Every flag that takes bytes takes
// a size: plain bytes or a whole number with a unit, on the command line
// and in its IDEM_* variable; a bad one is refused naming the flag and the
// forms, and nothing starts.
func TestSizeFlagsTakeUnits(t *testing.T) {
	t.Setenv("IDEM_MAX_RESPONSE_BYTES", "1KB")
	dir := filepath.Join(t.TempDir(), "d")
	httpAddr, raftAddr := freePort(t), freePort(t)
	start(t, dir, httpAddr, raftAddr, "--min-free-disk", "32MiB", "--max-request-bytes", "4 KiB", "--cache-bytes", "16MiB")

	// The ballast is a quarter of --min-free-disk: 8 MiB.
	waitFor(t, 10*time.Second, "the ballast of a quarter of 32MiB", func() (bool, string) {
		st, err := os.Stat(filepath.Join(dir, raftfsm.BallastFile))
		if err != nil {
			return false, err.Error()
		}
		return st.Size() == 8<<20, fmt.Sprintf("ballast of %d bytes", st.Size())
	})
	// --max-request-bytes 4 KiB: a body of 5000 bytes is refused.
	a := call("POST", httpAddr, "/v1/claim", `{"principal":"p","endpoint":"e","key":"k","claim_id":"`+strings.Repeat("x", 5000)+`"}`)
	require.Equal(t, 413, a.code, a.String())
	require.Equal(t, "request_too_large", a.problemCode(), a.String())
	// IDEM_MAX_RESPONSE_BYTES=1KB: a stored body of 1001 bytes is refused,
	// one of 1000 is stored.
	c := claimOK(t, httpAddr, "big")
	a = call("POST", httpAddr, "/v1/complete", completeReq("big", c.Token, strings.Repeat("b", 1001)))
	require.Equal(t, 413, a.code, a.String())
	require.Equal(t, "response_too_large", a.problemCode(), a.String())
	completeOK(t, httpAddr, "big", c.Token, strings.Repeat("b", 1000))

	os.Unsetenv("IDEM_MAX_RESPONSE_BYTES")
	forms := "a size is a number of bytes, or a whole number with a unit: KiB, MiB, GiB, TiB (powers of 1024) or KB, MB, GB, TB (powers of 1000), e.g. 32MiB, 1GiB, 500MB, 65536"
	bad := filepath.Join(t.TempDir(), "bad")
	for _, tc := range []struct {
		args []string
		env  string // IDEM_MIN_FREE_DISK
		want string
	}{
		{args: []string{"serve", "--data-dir", bad, "--min-free-disk", "32XB"}, want: `idem serve: --min-free-disk: invalid size "32XB": ` + forms},
		{args: []string{"serve", "--data-dir", bad, "--cache-bytes", "1.5GiB"}, want: `idem serve: --cache-bytes: invalid size "1.5GiB": ` + forms},
		{args: []string{"serve", "--data-dir", bad, "--gc-floor-bytes", "-1"}, want: `idem serve: --gc-floor-bytes: invalid size "-1": ` + forms},
		{args: []string{"serve", "--data-dir", bad, "--max-request-bytes", "99999999TiB"}, want: `idem serve: --max-request-bytes: invalid size "99999999TiB": out of range`},
		{args: []string{"serve", "--data-dir", bad}, env: "lots", want: `idem serve: $IDEM_MIN_FREE_DISK (--min-free-disk): invalid size "lots": ` + forms},
		{args: []string{"proxy", "--upstream", "http://127.0.0.1:1", "--max-stored-body", "64k"}, want: `idem proxy: --max-stored-body: invalid size "64k": ` + forms + " (see idem proxy --help)"},
	} {
		t.Setenv("IDEM_MIN_FREE_DISK", tc.env) // restored after the test
		if tc.env == "" {
			os.Unsetenv("IDEM_MIN_FREE_DISK")
		}
		var stdout, stderr bytes.Buffer
		require.Equal(t, 2, run(context.Background(), tc.args, &stdout, &stderr), "%v: %s", tc.args, stderr.String())
		require.Equal(t, tc.want+"\n", stderr.String(), "%v", tc.args)
		_, err := os.Stat(bad)
		require.ErrorIs(t, err, os.ErrNotExist, "%v: nothing was created", tc.args)
	}
}

// A size flag past the machine's memory is refused at start, naming the
// flag, the value as it is shortest written and the machine's memory,
// and nothing is created.
func TestSizeBeyondMemoryIsRefused(t *testing.T) {
	require.Equal(t, "", memoryBound("cache-bytes", 8<<30, 16<<30))
	require.Equal(t, "", memoryBound("cache-bytes", 1<<40, 0), "memory unknown: no bound")
	require.Equal(t, "--cache-bytes 1TiB is more than this machine's memory (16.0GiB)", memoryBound("cache-bytes", 1<<40, 16<<30))
	require.Equal(t, "--max-request-bytes 100GB is more than this machine's memory (23.5GiB)", memoryBound("max-request-bytes", 100e9, 23.5*(1<<30)))
	if physicalMemory() == 0 {
		t.Skip("no /proc/meminfo here")
	}
	for _, flagName := range []string{"cache-bytes", "gc-floor-bytes", "max-request-bytes", "max-response-bytes"} {
		dir := filepath.Join(t.TempDir(), "data")
		var stdout, stderr bytes.Buffer
		code := run(context.Background(), []string{"serve", "--data-dir", dir, "--" + flagName, "1000TiB"}, &stdout, &stderr)
		require.Equal(t, 2, code, stderr.String())
		require.Contains(t, stderr.String(), "idem serve: --"+flagName+" 1000TiB is more than this machine's memory (")
		require.NoDirExists(t, dir)
	}
}

// --max-inflight-bytes bounds the request bodies a node holds at once,
// which take about twice their bytes while read and decoded (1,000 bodies
// of 1 MiB took a node to 2.1 GB). A bound whose memory is past the
// machine's says so at start; the default (256 MiB) says nothing on a
// machine of 512 MiB or more.
func TestRequestMemoryPastTheMachineIsWarned(t *testing.T) {
	mem := physicalMemory()
	if mem == 0 {
		t.Skip("no /proc/meminfo here")
	}
	held := mem/2 + 1 // twice the bodies: past the memory
	p := launch(t, t.TempDir(), freePort(t), freePort(t), "--max-inflight-bytes", strconv.FormatUint(held, 10))
	require.Eventually(t, func() bool { return strings.Contains(p.logs.String(), "idem serving") }, 20*time.Second, 20*time.Millisecond, "%s", p.logs)
	require.Contains(t, p.logs.String(), "--max-inflight-bytes "+formatShortest(held)+" of request bodies held at once")
	require.Contains(t, p.logs.String(), "more than this machine's")

	if mem < 2*256<<20 {
		return // the default does not fit this machine either
	}
	q := launch(t, t.TempDir(), freePort(t), freePort(t), "--max-inflight", "100000")
	require.Eventually(t, func() bool { return strings.Contains(q.logs.String(), "idem serving") }, 20*time.Second, 20*time.Millisecond, "%s", q.logs)
	require.NotContains(t, q.logs.String(), "of request bodies held at once", "the default fits this machine, whatever --max-inflight")
}

// idem bench's --gc-floor-bytes is "as idem serve's flag of the same name",
// and idem bench scale's --cache-bytes is "the server's --cache-bytes", but
// both took plain integers: `idem bench --gc-floor-bytes 64MiB` was refused
// as an invalid integer. They take sizes as the server's flags do.
func TestBenchSizeFlagsTakeUnits(t *testing.T) {
	forms := "a size is a number of bytes, or a whole number with a unit: KiB, MiB, GiB, TiB (powers of 1024) or KB, MB, GB, TB (powers of 1000), e.g. 32MiB, 1GiB, 500MB, 65536"
	for _, tc := range []struct {
		args []string
		want string
	}{
		// Accepted, so the run goes on to the next check, which refuses.
		{args: []string{"bench", "--gc-floor-bytes", "64MiB", "--batch", "99999"}, want: "idem bench: --batch 99999 is more than the maximum"},
		{args: []string{"bench", "--gc-floor-bytes", "1.5GiB"}, want: `idem bench: --gc-floor-bytes: invalid size "1.5GiB": ` + forms},
		{args: []string{"bench", "--gc-floor-bytes", "-1"}, want: `idem bench: --gc-floor-bytes: invalid size "-1": ` + forms},
		{args: []string{"bench", "scale", "--cache-bytes", "512KiB", "--dir", filepath.Join(t.TempDir(), "scale")}, want: "--cache-bytes must be at least 1 MiB"},
		{args: []string{"bench", "scale", "--cache-bytes", "64k"}, want: `idem bench scale: --cache-bytes: invalid size "64k": ` + forms},
	} {
		var stdout, stderr bytes.Buffer
		require.Equal(t, 2, run(context.Background(), tc.args, &stdout, &stderr), "%v: %s", tc.args, stderr.String())
		require.Contains(t, stderr.String(), tc.want, "%v", tc.args)
		require.NotContains(t, stderr.String(), "invalid integer", "%v", tc.args)
	}
}

// --min-free-disk 10 (an operator meaning 10GiB) was taken as 10 bytes: the
// node started with a ballast of 2 bytes ("ballast in place ... bytes=2")
// and nothing said the unit was missing. A size under 1MiB is no free
// space to keep, and is refused naming the flag, with nothing written.
func TestMinFreeDiskWithoutAUnitIsRefused(t *testing.T) {
	for _, v := range []string{"10", "524288"} {
		dir := filepath.Join(t.TempDir(), "data")
		var stdout, stderr bytes.Buffer
		// Bounded: taken, the node would serve until ctx ends.
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		code := run(ctx, []string{"serve", "--data-dir", dir, "--min-free-disk", v,
			"--http-addr", freePort(t), "--raft-addr", freePort(t)}, &stdout, &stderr)
		cancel()
		require.Equal(t, 2, code, stderr.String())
		require.Contains(t, stderr.String(), "idem serve: --min-free-disk "+v+" is less than 1MiB")
		require.NoDirExists(t, dir)
	}
}
