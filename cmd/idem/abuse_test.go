package main

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idem-store/idem/api"
)

// launchWithFiles is launch under an open-files limit of files (soft and
// hard), as on a host whose limit is 1,024.
func launchWithFiles(t *testing.T, files int, dataDir, httpAddr, raftAddr string, args ...string) *proc {
	t.Helper()
	all := append([]string{"-c", fmt.Sprintf(`ulimit -n %d && exec "$0" "$@"`, files), binary,
		"serve", "--data-dir", dataDir, "--http-addr", httpAddr, "--raft-addr", raftAddr}, args...)
	p := &proc{cmd: exec.Command("sh", all...), http: httpAddr, logs: &logBuffer{}, done: make(chan struct{})}
	p.cmd.Stdout, p.cmd.Stderr = p.logs, p.logs
	require.NoError(t, p.cmd.Start())
	go func() { p.err = p.cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		p.cmd.Process.Kill()
		p.wait()
		if t.Failed() {
			t.Logf("logs of %s:\n%s", httpAddr, p.logs)
		}
	})
	require.Eventually(t, func() bool {
		resp, err := http.Get("http://" + httpAddr + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200
	}, 20*time.Second, 50*time.Millisecond, "the node never became ready")
	return p
}

// The attack of issue 10 on a node limited to 1,024 open files: 1,100
// connections that send a claim's headers and then a body one byte at a
// time, without credentials. Before the connection cap and the body
// timeout they held every descriptor, and /healthz and claims timed out.
// Now the node keeps descriptors for itself: claims keep being served on
// the clients' open connections, /healthz answers on a new one, the slow
// bodies are refused after --body-read-timeout and their connections
// closed, and new connections are served again.
func TestSlowBodiesDoNotTakeANodeDown(t *testing.T) {
	const slow = 1100
	soft, hard, err := raiseOpenFiles() // this process holds the attackers' ends
	if err != nil || soft < slow+300 {
		t.Skipf("this test needs %d open files in the test process (soft %d, hard %d, %v)", slow+300, soft, hard, err)
	}
	addr := freePort(t)
	p := launchWithFiles(t, 1024, t.TempDir(), addr, freePort(t), "--body-read-timeout", "3s", "--log-level", "warn")
	waitForLine(t, p.logs, "--max-conns lowered to fit the open-files limit") // --log-level warn: no start line to wait for

	// The clients' connections, open before the attack.
	const workers = 8
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: workers, MaxConnsPerHost: workers}}
	defer client.CloseIdleConnections()
	var keys atomic.Int64
	claim := func() (int, string) {
		body := fmt.Sprintf(`{"principal":"p%d","endpoint":"e","key":"k%d","fingerprint":"aa"}`, keys.Load()%50, keys.Add(1))
		resp, err := client.Post("http://"+addr+"/v1/claim", "application/json", strings.NewReader(body))
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	var warm sync.WaitGroup
	for range workers {
		warm.Add(1)
		go func() { defer warm.Done(); claim() }()
	}
	warm.Wait()

	// The clients keep claiming from before the attack to its end: a
	// connection idle for 1 s is one a newcomer may take (the clients'
	// connections sat idle while a loaded machine dialled the attack, one
	// was closed for an attacker, and its client's new one found every
	// slot held by a body in flight).
	var served, failed atomic.Int64
	var firstFailure atomic.Value
	var stopAt atomic.Int64
	stopAt.Store(time.Now().Add(time.Minute).UnixNano())
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().UnixNano() < stopAt.Load() {
				if status, body := claim(); status == http.StatusCreated {
					served.Add(1)
				} else {
					failed.Add(1)
					firstFailure.CompareAndSwap(nil, fmt.Sprintf("%d %s", status, body))
				}
			}
		}()
	}

	// The attack.
	conns := make([]net.Conn, 0, slow)
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for range slow {
		c, err := net.DialTimeout("tcp", addr, 2*time.Second)
		if err != nil {
			break // the kernel's backlog is full: the node keeps serving anyway
		}
		conns = append(conns, c)
		c.SetWriteDeadline(time.Now().Add(time.Second))
		io.WriteString(c, "POST /v1/claim HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{")
	}
	require.GreaterOrEqual(t, len(conns), 1000)
	stop := time.Now().Add(1500 * time.Millisecond)
	stopAt.Store(stop.UnixNano())
	servedBefore := served.Load() // while the attack was dialled
	go func() {                   // one more byte now and then: the bodies never finish
		for time.Now().Before(stop) {
			for _, c := range conns {
				c.SetWriteDeadline(time.Now().Add(10 * time.Millisecond))
				c.Write([]byte(" "))
			}
			time.Sleep(500 * time.Millisecond)
		}
	}()

	// Meanwhile: claims are served, and /healthz answers on a new connection.
	probe := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	for i := range 5 {
		resp, err := probe.Get("http://" + addr + "/healthz")
		require.NoError(t, err, "/healthz during the attack (%d)", i)
		resp.Body.Close()
		require.Equal(t, http.StatusOK, resp.StatusCode)
		time.Sleep(200 * time.Millisecond)
	}
	wg.Wait()
	require.Zero(t, failed.Load(), "claims failed during the attack, first: %v", firstFailure.Load())
	require.Greater(t, served.Load()-servedBefore, int64(workers), "claims served once every slow connection was open")
	t.Logf("%d slow connections; %d claims served meanwhile (%d while they were opened)", len(conns), served.Load()-servedBefore, servedBefore)

	// Past the body timeout each slow body is refused and closed; those
	// beyond the cap were refused at once, unread.
	var timedOut, beyondCap atomic.Int64
	var rg sync.WaitGroup
	for _, c := range conns {
		rg.Add(1)
		go func() {
			defer rg.Done()
			c.SetReadDeadline(time.Now().Add(6 * time.Second))
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			switch {
			case err != nil:
			case resp.StatusCode == http.StatusBadRequest:
				timedOut.Add(1)
			case resp.StatusCode == http.StatusServiceUnavailable:
				beyondCap.Add(1)
			}
		}()
	}
	rg.Wait()
	t.Logf("%d slow bodies timed out, %d connections refused beyond the cap", timedOut.Load(), beyondCap.Load())
	require.Equal(t, int64(len(conns)), timedOut.Load()+beyondCap.Load(), "every slow body is answered and closed")
	require.Positive(t, timedOut.Load())
	require.Positive(t, beyondCap.Load(), "1,100 connections exceed what 1,024 files allow")
	for _, c := range conns {
		c.Close()
	}
	// New connections are served again.
	require.Eventually(t, func() bool {
		resp, err := probe.Post("http://"+addr+"/v1/claim", "application/json",
			strings.NewReader(`{"principal":"p","endpoint":"e","key":"after","fingerprint":"aa"}`))
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusCreated
	}, 10*time.Second, 100*time.Millisecond)
	// Every slot came back.
	status, metrics := get(t, addr, "/metrics")
	require.Equal(t, http.StatusOK, status)
	open := -1.0
	for _, line := range strings.Split(string(metrics), "\n") {
		if v, ok := strings.CutPrefix(line, "idem_http_connections_open "); ok {
			fmt.Sscan(v, &open)
		}
	}
	require.GreaterOrEqual(t, open, 1.0)
	require.Less(t, open, float64(workers+10), "connections still counted open after the attack")
}

// A request with both Content-Length and Transfer-Encoding is 400 and its
// connection closed, on a real node: on the API's routes and on --pprof's,
// which are served beside the API's mux and once skipped its front door.
func TestContentLengthAndTransferEncodingCloseTheConnection(t *testing.T) {
	addr := freePort(t)
	start(t, t.TempDir(), addr, freePort(t), "--log-level", "warn", "--pprof")
	for _, path := range []string{"/v1/claim", "/debug/pprof/"} {
		c, err := net.Dial("tcp", addr)
		require.NoError(t, err)
		defer c.Close()
		io.WriteString(c, "POST "+path+" HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n")
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		br := bufio.NewReader(c)
		resp, err := http.ReadResponse(br, nil)
		require.NoError(t, err)
		require.Equal(t, http.StatusBadRequest, resp.StatusCode, path)
		io.Copy(io.Discard, resp.Body)
		_, err = br.ReadByte()
		require.ErrorIs(t, err, io.EOF, "%s: the connection is closed", path)
	}
}

// With every API connection taken by requests whose bodies are held back,
// and the health headroom by callers that send half a header, the API's
// own /healthz cannot be answered (it waits for a slot, then is refused);
// --health-addr's listener answers all the same, and serves nothing but
// the probes.
func TestHealthAddrAnswersWhileTheAPIConnectionsAreFull(t *testing.T) {
	addr, health := freePort(t), freePort(t)
	start(t, t.TempDir(), addr, freePort(t), "--max-conns", "2", "--read-header-timeout", "30s", "--body-read-timeout", "30s", "--health-addr", health)

	var conns []net.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	hold := func() { // the API's 2 slots and the 64 of the headroom
		// A held connection the node closed (refused while a connection
		// of start's readiness probe still counted, on a loaded machine)
		// is dialled again, or its slot stays free for the probe below.
		//
		// A connection in the headroom lives 3 s (overflowLife): redialled
		// one by one as each ends, the held connections ended at times
		// spread over those 3 s, a slot came free every ~50 ms, and the
		// probe (which waits 250 ms for one) was served every time (a
		// loaded CI, 10 s of rounds). So when one has ended, all are
		// closed and dialled again together: they end together again, and
		// between those moments no slot comes free.
		ended := false
		for _, c := range conns {
			c.SetReadDeadline(time.Now().Add(time.Millisecond))
			var b [1]byte
			if _, err := c.Read(b[:]); err != nil && !errors.Is(err, os.ErrDeadlineExceeded) {
				ended = true
				break
			}
		}
		if ended {
			for _, c := range conns {
				c.Close()
			}
			conns = nil
			time.Sleep(100 * time.Millisecond) // the node frees their slots
		}
		for len(conns) < 2+api.HealthHeadroom {
			c, err := net.DialTimeout("tcp", addr, 2*time.Second)
			if err != nil {
				return // a full backlog: the next round dials again
			}
			if len(conns) < 2 {
				// The API's slots: a request in flight, its body held back.
				// A connection without one (half a header) would give its
				// slot to a newcomer, the probe included.
				io.WriteString(c, "POST /v1/claims HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{")
			} else {
				io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: x\r\n") // never ends its header
			}
			conns = append(conns, c)
		}
	}
	probe := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	// The API's /healthz: refused (503) or cut, not answered ok, once the
	// node has accepted them all (a sleep of 300 ms for that was too short
	// on a loaded machine, and the probe took a slot still free).
	require.Eventually(t, func() bool {
		hold()
		resp, err := probe.Get("http://" + addr + "/healthz")
		if err != nil {
			return true
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode != http.StatusOK
	}, 30*time.Second, 100*time.Millisecond, "the API keeps room for its own /healthz")
	for _, path := range []string{"/healthz", "/readyz"} {
		resp, err := probe.Get("http://" + health + path)
		require.NoError(t, err, "--health-addr %s", path)
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		require.Equal(t, http.StatusOK, resp.StatusCode, "%s: %s", path, b)
	}
	resp, err := probe.Get("http://" + health + "/v1/config")
	require.NoError(t, err)
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Equal(t, http.StatusNotFound, resp.StatusCode)
	require.Contains(t, string(b), "serves only /healthz and /readyz")
}

// Anyone who reaches the raft port may hold its bound of connections, each
// silent until its first byte is due, and open them again. That bound
// (256) did not count against the open-files limit: on a node limited to
// 1,024 files whose API connections were full, or to 256 files at all,
// the process ran out of descriptors. Its HTTP and raft accepts failed,
// and Pebble's flushes failed in a loop that logged hundreds of thousands
// of lines. Now the raft port's bound is fitted into the limit beside
// --max-conns, and the node keeps descriptors for its own files.
func TestRaftPortFloodLeavesDescriptorsForTheStore(t *testing.T) {
	const httpFlood, raftFlood = 800, 400
	soft, hard, err := raiseOpenFiles() // this process holds the attackers' ends
	if err != nil || soft < httpFlood+raftFlood+300 {
		t.Skipf("this test needs %d open files in the test process (soft %d, hard %d, %v)", httpFlood+raftFlood+300, soft, hard, err)
	}
	addr, raftAddr := freePort(t), freePort(t)
	p := launchWithFiles(t, 1024, t.TempDir(), addr, raftAddr, "--log-level", "warn")
	pid := p.cmd.Process.Pid // sh exec'd the node
	openFiles := func() int {
		fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
		require.NoError(t, err)
		return len(fds)
	}

	// The client's connection, open before the attack.
	client := &http.Client{Timeout: 15 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 1, MaxConnsPerHost: 1}}
	defer client.CloseIdleConnections()
	post := func(path, body string) (int, string) {
		resp, err := client.Post("http://"+addr+path, "application/json", strings.NewReader(body))
		require.NoError(t, err)
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	status, _ := post("/v1/claim", `{"principal":"p","endpoint":"e","key":"warm","fingerprint":"aa"}`)
	require.Equal(t, http.StatusCreated, status)

	// The attack: silent connections to both ports, more than either holds.
	var conns []net.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for i := range httpFlood + raftFlood {
		to := addr
		if i%3 == 2 {
			to = raftAddr
		}
		c, err := net.DialTimeout("tcp", to, 2*time.Second)
		if err != nil {
			continue // the kernel's backlog is full
		}
		conns = append(conns, c)
	}
	require.Eventually(t, func() bool { return openFiles() >= 600 }, 20*time.Second, 50*time.Millisecond,
		"the node never took the attackers' connections")

	// Meanwhile the store writes more than a memtable (a flush makes new
	// files), through the client's connection.
	body := base64.StdEncoding.EncodeToString(bytes.Repeat([]byte("r"), 60<<10))
	for i := range 100 {
		status, answer := post("/v1/claim", fmt.Sprintf(`{"principal":"p","endpoint":"e","key":"k%d","fingerprint":"aa"}`, i))
		require.Equal(t, http.StatusCreated, status, answer)
		var claim struct{ Token string }
		require.NoError(t, json.Unmarshal([]byte(answer), &claim))
		status, answer = post("/v1/complete", fmt.Sprintf(`{"principal":"p","endpoint":"e","key":"k%d","token":%q,"response":{"status":200,"body":%q}}`, i, claim.Token, body))
		require.Equal(t, http.StatusOK, status, answer)
	}
	require.Less(t, openFiles(), 1024, "the node holds every descriptor it may open")
	require.NotContains(t, p.logs.String(), "too many open files")
}
