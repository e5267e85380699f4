package main

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idem-store/idem/conformance"
)

// These tests run `idem proxy` as a process in front of a real `idem
// serve` process and an upstream in the test that counts how often each
// of its handlers ran.

// upstream is a fixture service: POST /pay answers 201 with a body that
// names the run, POST /slow waits for release, POST /fail answers 500,
// POST /stream writes an event, then waits for release before the next.
type pxUpstream struct {
	srv     *httptest.Server
	runs    atomic.Int64
	release chan struct{}
	started chan struct{}
}

func newUpstream(t *testing.T) *pxUpstream {
	u := &pxUpstream{release: make(chan struct{}), started: make(chan struct{}, 16)}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /pay", func(w http.ResponseWriter, r *http.Request) {
		n := u.runs.Add(1)
		body, _ := io.ReadAll(r.Body)
		w.Header().Add("Set-Cookie", "a=1")
		w.Header().Add("Set-Cookie", "b=2")
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"run":%d,"got":%q}`, n, body)
	})
	mux.HandleFunc("POST /slow", func(w http.ResponseWriter, r *http.Request) {
		u.runs.Add(1)
		u.started <- struct{}{}
		<-u.release
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, "slow done")
	})
	mux.HandleFunc("POST /big", func(w http.ResponseWriter, r *http.Request) {
		// Over net/http's 2 KiB buffer: sent chunked, without Content-Length.
		u.runs.Add(1)
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"pad":%q}`, strings.Repeat("x", 10000))
	})
	mux.HandleFunc("POST /huge", func(w http.ResponseWriter, r *http.Request) {
		// More than the socket buffers between the proxy and a caller
		// hold (tcp_wmem's largest is 4 MiB).
		u.runs.Add(1)
		w.Header().Set("Content-Type", "text/plain")
		w.Write(bytes.Repeat([]byte("x"), 8<<20))
	})
	mux.HandleFunc("POST /fail", func(w http.ResponseWriter, r *http.Request) {
		u.runs.Add(1)
		w.WriteHeader(http.StatusInternalServerError)
	})
	mux.HandleFunc("POST /stream", func(w http.ResponseWriter, r *http.Request) {
		u.runs.Add(1)
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, "data: first\n\n")
		w.(http.Flusher).Flush()
		<-u.release
		io.WriteString(w, "data: second\n\n")
	})
	mux.HandleFunc("GET /pay", func(w http.ResponseWriter, r *http.Request) {
		u.runs.Add(1)
		io.WriteString(w, "read")
	})
	u.srv = httptest.NewServer(mux)
	t.Cleanup(func() {
		select {
		case <-u.release:
		default:
			close(u.release)
		}
		u.srv.Close()
	})
	return u
}

// proxyProc is a running `idem proxy`.
type proxyProc struct {
	*proc
	url string
}

// startProxy runs `idem proxy --listen <free> args...` and waits until it
// accepts connections.
func startProxy(t *testing.T, args ...string) *proxyProc {
	t.Helper()
	addr := freePort(t)
	all := append([]string{"proxy", "--listen", addr}, args...)
	p := &proc{cmd: exec.Command(binary, all...), http: addr, logs: &logBuffer{}, done: make(chan struct{})}
	p.cmd.Stdout, p.cmd.Stderr = p.logs, p.logs
	require.NoError(t, p.cmd.Start())
	go func() { p.err = p.cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		p.cmd.Process.Kill()
		p.wait()
		if t.Failed() {
			t.Logf("logs of the proxy (%s):\n%s", strings.Join(args, " "), p.logs)
		}
	})
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if c, err := net.Dial("tcp", addr); err == nil {
			c.Close()
			return &proxyProc{proc: p, url: "http://" + addr}
		}
		select {
		case <-p.done:
			t.Fatalf("proxy exited: %v\n%s", p.err, p.logs)
		case <-time.After(20 * time.Millisecond):
		}
	}
	t.Fatalf("proxy never listened; logs:\n%s", p.logs)
	return nil
}

type pxAnswer struct {
	status int
	header http.Header
	body   string
}

func pxSend(t *testing.T, method, url, key, body string, hdr ...string) pxAnswer {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	// A caller presents a credential unless hdr gives its own
	// Authorization ("" for none).
	req.Header.Set("Authorization", "Bearer proxy-test")
	for i := 0; i+1 < len(hdr); i += 2 {
		if http.CanonicalHeaderKey(hdr[i]) == "Authorization" {
			req.Header.Del("Authorization")
			if hdr[i+1] == "" {
				continue
			}
		}
		req.Header.Add(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return pxAnswer{resp.StatusCode, resp.Header, string(b)}
}

// deadAddr is an address where nothing listens (refused at once).
func deadAddr(t *testing.T) string { return freePort(t) }

func startStore(t *testing.T) *proc {
	t.Helper()
	return start(t, filepath.Join(t.TempDir(), "data"), freePort(t), freePort(t))
}

// TestProxyFailsOverBetweenStores gives the proxy a dead store first and
// a live one second: requests are protected through the live one (first
// runs, retry replays, 5xx is not stored), and with every store dead the
// proxy answers 503 without calling the upstream.
func TestProxyFailsOverBetweenStores(t *testing.T) {
	node := startStore(t)
	up := newUpstream(t)
	deadStore := deadAddr(t)
	px := startProxy(t, "--upstream", up.srv.URL, "--store", deadStore+","+node.http)
	waitFor(t, 10*time.Second, "the proxy says which --store node does not answer", func() (bool, string) {
		return strings.Contains(px.logs.String(), "does not answer its health check"), ""
	})
	require.Contains(t, px.logs.String(), deadStore)
	require.NotContains(t, px.logs.String(), "store=http://"+node.http+" error", "the live node is not reported")

	first := pxSend(t, "POST", px.url+"/pay", "k-1", `{"amount":100}`)
	require.Equal(t, 201, first.status, first.body)
	require.Equal(t, int64(1), up.runs.Load())
	require.Empty(t, first.header.Get("Idempotency-Replayed"))

	again := pxSend(t, "POST", px.url+"/pay", `"k-1"`, `{"amount":100}`) // quoted: the same key
	require.Equal(t, 201, again.status, again.body)
	require.Equal(t, "true", again.header.Get("Idempotency-Replayed"))
	require.Equal(t, first.body, again.body)
	require.Equal(t, []string{"a=1", "b=2"}, again.header.Values("Set-Cookie"), "both cookies replayed, in order")
	require.Equal(t, int64(1), up.runs.Load(), "a replay does not call the upstream")

	other := pxSend(t, "POST", px.url+"/pay", "k-1", `{"amount":999}`)
	require.Equal(t, 422, other.status, other.body)
	require.Contains(t, other.header.Get("Content-Type"), "application/problem+json")

	// A 5xx is not stored: the retry runs again.
	require.Equal(t, 500, pxSend(t, "POST", px.url+"/fail", "k-2", `{}`).status)
	require.Equal(t, 500, pxSend(t, "POST", px.url+"/fail", "k-2", `{}`).status)
	require.Equal(t, int64(3), up.runs.Load())

	// A long answer is sent chunked (no Content-Length) by a Go upstream,
	// yet it is a complete answer, not a stream: stored and replayed whole.
	big := pxSend(t, "POST", px.url+"/big", "k-big", `{}`)
	require.Equal(t, 200, big.status)
	require.Len(t, big.body, len(`{"pad":""}`)+10000)
	bigAgain := pxSend(t, "POST", px.url+"/big", "k-big", `{}`)
	require.Equal(t, "true", bigAgain.header.Get("Idempotency-Replayed"))
	require.Empty(t, bigAgain.header.Get("Idempotency-Body-Omitted"))
	require.Equal(t, big.body, bigAgain.body)
	require.Equal(t, int64(4), up.runs.Load())

	// No key on a POST: 400 problem, upstream not called; GET passes through.
	nokey := pxSend(t, "POST", px.url+"/pay", "", `{}`)
	require.Equal(t, 400, nokey.status, nokey.body)
	require.Contains(t, nokey.header.Get("Content-Type"), "application/problem+json")
	require.Equal(t, int64(4), up.runs.Load())
	require.Equal(t, "read", pxSend(t, "GET", px.url+"/pay", "k-1", "").body)
	require.Equal(t, int64(5), up.runs.Load())

	// Every store dead: 503, the upstream is not called.
	dead := startProxy(t, "--upstream", up.srv.URL, "--store", deadAddr(t)+","+deadAddr(t))
	down := pxSend(t, "POST", dead.url+"/pay", "k-3", `{}`)
	require.Equal(t, 503, down.status, down.body)
	require.Contains(t, down.header.Get("Content-Type"), "application/problem+json")
	require.Equal(t, int64(5), up.runs.Load())
}

// TestProxyConcurrentRetryAndStreaming: a retry while the first request
// runs gets 409 with Retry-After; a text/event-stream pxAnswer reaches the
// caller while the upstream is still writing it.
// A keyed request without Authorization is refused and never reaches the
// upstream: otherwise every cookie-authenticated caller shared one tenant,
// and one sending another's key got that caller's answer and Set-Cookie.
// --allow-anonymous shares that tenant on purpose.
func TestProxyRefusesRequestsWithoutCredential(t *testing.T) {
	node := startStore(t)
	up := newUpstream(t)
	px := startProxy(t, "--upstream", up.srv.URL, "--store", node.http)
	alice := pxSend(t, "POST", px.url+"/pay", "order-77", `{}`, "Authorization", "", "Cookie", "session=alice")
	require.Equal(t, 401, alice.status, alice.body)
	require.Contains(t, alice.body, "Authorization")
	require.Equal(t, "Bearer", alice.header.Get("WWW-Authenticate"), "a 401 names a challenge (RFC 9110 11.6.1)")
	require.Zero(t, up.runs.Load(), "the upstream ran for a request without a credential")
	// The operator hears why, and what to set (the caller's 401 says neither flag).
	require.Eventually(t, func() bool {
		return strings.Contains(px.logs.String(), "refused a keyed request without an Authorization header (401)") &&
			strings.Contains(px.logs.String(), "--principal-header")
	}, 5*time.Second, 10*time.Millisecond, "logs: %s", px.logs)
	require.Equal(t, 201, pxSend(t, "POST", px.url+"/pay", "order-77", `{}`, "Authorization", "Bearer alice").status)
	bob := pxSend(t, "POST", px.url+"/pay", "order-77", `{}`, "Authorization", "Bearer bob")
	require.Equal(t, 201, bob.status, bob.body)
	require.Empty(t, bob.header.Get("Idempotency-Replayed"), "bob got alice's stored answer")

	anon := startProxy(t, "--upstream", up.srv.URL, "--store", node.http, "--allow-anonymous")
	first := pxSend(t, "POST", anon.url+"/pay", "shared-1", `{}`, "Authorization", "")
	require.Equal(t, 201, first.status, first.body)
	again := pxSend(t, "POST", anon.url+"/pay", "shared-1", `{}`, "Authorization", "")
	require.Equal(t, "true", again.header.Get("Idempotency-Replayed"))
	require.Equal(t, first.body, again.body)
}

func TestProxyConcurrentRetryAndStreaming(t *testing.T) {
	node := startStore(t)
	up := newUpstream(t)
	px := startProxy(t, "--upstream", up.srv.URL, "--store", node.http)

	var wg sync.WaitGroup
	var first pxAnswer
	wg.Add(1)
	go func() { defer wg.Done(); first = pxSend(t, "POST", px.url+"/slow", "s-1", `{}`) }()
	<-up.started
	dup := pxSend(t, "POST", px.url+"/slow", "s-1", `{}`)
	require.Equal(t, 409, dup.status, dup.body)
	require.NotEmpty(t, dup.header.Get("Retry-After"))

	// The stream's first event arrives before the upstream finishes it.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, "POST", px.url+"/stream", strings.NewReader(`{}`))
	require.NoError(t, err)
	req.Header.Set("Idempotency-Key", "st-1")
	req.Header.Set("Authorization", "Bearer proxy-test")
	got := make(chan string, 1)
	go func() {
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			got <- err.Error()
			return
		}
		defer resp.Body.Close()
		line, _ := bufio.NewReader(resp.Body).ReadString('\n')
		got <- line
	}()
	select {
	case line := <-got:
		require.Equal(t, "data: first\n", line)
	case <-time.After(5 * time.Second):
		t.Fatal("the first event of a stream did not pass through while the upstream was still writing")
	}
	close(up.release)
	wg.Wait()
	require.Equal(t, 201, first.status, first.body)
	require.Equal(t, "slow done", first.body)
}

// TestProxyCallerThatStopsReadingIsCutOff: a caller that sends a keyed
// request and reads none of the answer is cut off after --write-timeout,
// and the attempt is completed from the upstream's answer. Bug: the
// proxy's write to the caller waited for ever, the middleware extended the
// attempt's lease every 10 s for as long as the connection stayed (a raft
// write each, on the store), and a retry got 409 in_progress for ever:
// any caller, with an Authorization header of its choice, could make the
// proxy write to the store without end.
func TestProxyCallerThatStopsReadingIsCutOff(t *testing.T) {
	node := startStore(t)
	up := newUpstream(t)
	px := startProxy(t, "--upstream", up.srv.URL, "--store", node.http, "--write-timeout", "1s")

	d := net.Dialer{Control: func(_, _ string, c syscall.RawConn) error {
		return c.Control(func(fd uintptr) { syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096) })
	}}
	conn, err := d.Dial("tcp", strings.TrimPrefix(px.url, "http://"))
	require.NoError(t, err)
	defer conn.Close()
	_, err = io.WriteString(conn, "POST /huge HTTP/1.1\r\nHost: proxy\r\nAuthorization: Bearer proxy-test\r\n"+
		"Idempotency-Key: huge-1\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}")
	require.NoError(t, err)

	require.Eventually(t, func() bool { return up.runs.Load() == 1 }, 5*time.Second, 10*time.Millisecond)

	// A retry while the first caller still reads nothing.
	var last pxAnswer
	for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		if last = pxSend(t, "POST", px.url+"/huge", "huge-1", `{}`); last.status == http.StatusOK {
			break
		}
	}
	require.Equal(t, http.StatusOK, last.status, "%.300s", last.body)
	require.Equal(t, "true", last.header.Get("Idempotency-Replayed"))
	require.Equal(t, "too-large", last.header.Get("Idempotency-Body-Omitted"))
	require.Equal(t, int64(1), up.runs.Load())
}

// TestProxySlowKeyedBodyIsRefused: the body of a keyed request, which the
// middleware reads whole before anything else, must arrive within
// --body-read-timeout, as a node's must. Bug: the proxy waited for it for
// ever, so a caller that announced a body and sent it a byte at a time (or
// not at all) held a connection and a goroutine for as long as it liked.
func TestProxySlowKeyedBodyIsRefused(t *testing.T) {
	node := startStore(t)
	up := newUpstream(t)
	px := startProxy(t, "--upstream", up.srv.URL, "--store", node.http, "--body-read-timeout", "1s")

	conn, err := net.Dial("tcp", strings.TrimPrefix(px.url, "http://"))
	require.NoError(t, err)
	defer conn.Close()
	_, err = io.WriteString(conn, "POST /pay HTTP/1.1\r\nHost: proxy\r\nAuthorization: Bearer proxy-test\r\n"+
		"Idempotency-Key: slow-body\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"a\"")
	require.NoError(t, err)
	conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	require.NoError(t, err, "no answer to a body that never arrives")
	require.Equal(t, http.StatusBadRequest, resp.StatusCode)
	problem, _ := io.ReadAll(resp.Body)
	// Names the flag, as a node's answer does; it said only "read tcp
	// 127.0.0.1:8080->127.0.0.1:47218: i/o timeout", the proxy's and the
	// caller's addresses.
	require.Contains(t, string(problem), "did not arrive within 1s (--body-read-timeout)")
	require.NotContains(t, string(problem), "i/o timeout")
	require.Equal(t, int64(0), up.runs.Load())

	// A keyed body that arrives, and an unkeyed one, are not cut.
	require.Equal(t, http.StatusCreated, pxSend(t, "POST", px.url+"/pay", "quick-body", `{}`).status)
}

// TestProxyMaxInFlight: the proxy handles at most --max-inflight requests
// at once; one more is answered 503 unavailable, with Retry-After and a
// detail naming the flag, without a call to the store or the upstream,
// and once the others finish requests are taken again. Bug: nothing
// bounded them, and callers that held requests open (slow upstream calls,
// streams) took the proxy's file descriptors and goroutines without end.
func TestProxyMaxInFlight(t *testing.T) {
	node := startStore(t)
	up := newUpstream(t)
	px := startProxy(t, "--upstream", up.srv.URL, "--store", node.http, "--max-inflight", "2")

	done := make(chan pxAnswer, 2)
	for _, key := range []string{"cap-1", "cap-2"} {
		go func() { done <- pxSend(t, "POST", px.url+"/slow", key, `{}`) }()
	}
	<-up.started
	<-up.started
	for _, c := range []struct{ method, key string }{{"POST", "cap-3"}, {"GET", ""}} {
		a := pxSend(t, c.method, px.url+"/pay", c.key, `{}`)
		require.Equal(t, http.StatusServiceUnavailable, a.status, "%s beyond --max-inflight: %s", c.method, a.body)
		require.Equal(t, "application/problem+json", a.header.Get("Content-Type"))
		require.Equal(t, "1", a.header.Get("Retry-After"))
		require.Contains(t, a.body, `"code":"unavailable"`)
		require.Contains(t, a.body, "(--max-inflight)")
	}
	require.Equal(t, int64(2), up.runs.Load(), "a refused request reached the upstream")
	// Logged before the 503 is written, which does not make it reach the
	// test's pipe first.
	waitForLine(t, px.logs, "refusing requests: too many in flight")

	close(up.release)
	for range 2 {
		require.Equal(t, http.StatusCreated, (<-done).status)
	}
	// The refused claim stored nothing: the key runs now.
	a := pxSend(t, "POST", px.url+"/pay", "cap-3", `{}`)
	require.Equal(t, http.StatusCreated, a.status, a.body)
	require.Empty(t, a.header.Get("Idempotency-Replayed"))
	require.Equal(t, int64(3), up.runs.Load())
}

// TestProxyMaxConns: callers' connections beyond --max-conns are answered
// 503 and closed at once, without a call to the upstream; a connection that
// closes gives its slot back. Nothing bounded them: idle keep-alive
// connections (60 s each) could take every descriptor the proxy had, those
// its requests need for the upstream and the store included.
func TestProxyMaxConns(t *testing.T) {
	node := startStore(t)
	up := newUpstream(t)
	px := startProxy(t, "--upstream", up.srv.URL, "--store", node.http, "--max-conns", "2")
	addr := strings.TrimPrefix(px.url, "http://")

	// get sends a keyed request on c (a new key each time) and reads its
	// answer; c stays open (keep-alive) unless the proxy closes it.
	keys := 0
	get := func(c net.Conn) (*http.Response, string) {
		t.Helper()
		c.SetDeadline(time.Now().Add(10 * time.Second))
		keys++
		_, err := fmt.Fprintf(c, "POST /pay HTTP/1.1\r\nHost: px\r\nIdempotency-Key: conns-%d\r\n"+
			"Authorization: Bearer proxy-test\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}", keys)
		require.NoError(t, err)
		br := bufio.NewReader(c)
		resp, err := http.ReadResponse(br, nil)
		require.NoError(t, err)
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return resp, string(b)
	}
	// hold opens a connection whose request is in flight (the upstream's
	// /slow waits) and keeps it: an idle one would give its slot to a
	// newcomer (TestProxySlowlorisDoesNotStarveCallers). The start-up
	// check's connection may hold a slot for a moment.
	hold := func() (net.Conn, *bufio.Reader) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			c, err := net.Dial("tcp", addr)
			require.NoError(t, err)
			keys++
			fmt.Fprintf(c, "POST /slow HTTP/1.1\r\nHost: px\r\nIdempotency-Key: conns-%d\r\n"+
				"Authorization: Bearer proxy-test\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}", keys)
			select {
			case <-up.started:
				return c, bufio.NewReader(c)
			case <-time.After(500 * time.Millisecond):
			}
			c.Close()
			require.True(t, time.Now().Before(deadline), "no slot came free")
		}
	}
	a, ar := hold()
	b, _ := hold()
	defer a.Close()
	defer b.Close()
	runs := up.runs.Load()

	c, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	defer c.Close()
	resp, body := get(c)
	require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode, body)
	require.Equal(t, "1", resp.Header.Get("Retry-After"))
	require.Equal(t, "application/problem+json", resp.Header.Get("Content-Type"))
	require.Contains(t, body, "too many open connections")
	one := make([]byte, 1)
	_, err = c.Read(one)
	// Closed: at the end of the answer, or reset (the request was unread).
	require.True(t, errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET), "the refused connection is closed: %v", err)
	require.Equal(t, runs, up.runs.Load(), "a refused connection's request reached the upstream")
	require.Eventually(t, func() bool { return strings.Contains(px.logs.String(), "refusing HTTP connections: too many open") },
		5*time.Second, 10*time.Millisecond, "the refusal is logged")

	// The held requests complete, and a closed connection frees its slot.
	close(up.release)
	a.SetDeadline(time.Now().Add(10 * time.Second))
	resp, err = http.ReadResponse(ar, nil)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusCreated, resp.StatusCode)
	// b's slot comes back once the proxy reads its end (a's, idle for a
	// moment only, is not given to a newcomer).
	b.Close()
	require.Eventually(t, func() bool {
		d, err := net.Dial("tcp", addr)
		if err != nil {
			return false
		}
		defer d.Close()
		resp, _ := get(d)
		return resp.StatusCode == http.StatusCreated
	}, 10*time.Second, 50*time.Millisecond, "a closed connection frees its slot")
}

// TestProxySlowlorisDoesNotStarveCallers: 200 connections sending their
// headers a byte every 2 s (dialled again 0.5 s after the proxy closes
// one) held every slot of --max-conns 64 until the ReadHeaderTimeout, and
// 38 of 40 callers were answered 503. A newcomer now takes the slot of the
// oldest connection without a request.
func TestProxySlowlorisDoesNotStarveCallers(t *testing.T) {
	node := startStore(t)
	up := newUpstream(t)
	px := startProxy(t, "--upstream", up.srv.URL, "--store", node.http, "--max-conns", "64")
	addr := strings.TrimPrefix(px.url, "http://")
	require.Equal(t, 201, pxSend(t, "POST", px.url+"/pay", "warm", `{}`).status)

	stop := make(chan struct{})
	var wg sync.WaitGroup
	defer func() { close(stop); wg.Wait() }()
	for i := range 200 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				c, err := net.Dial("tcp", addr)
				if err == nil {
					fmt.Fprintf(c, "POST /pay HTTP/1.1\r\nHost: px\r\nIdempotency-Key: slow-%d\r\n", i)
					closed := make(chan struct{})
					go func() { io.Copy(io.Discard, c); close(closed) }()
				trickle:
					for {
						select {
						case <-stop:
							c.Close()
							return
						case <-closed:
							break trickle
						case <-time.After(2 * time.Second):
							if _, err := c.Write([]byte("X")); err != nil {
								break trickle
							}
						}
					}
					c.Close()
				}
				select {
				case <-stop:
					return
				case <-time.After(500 * time.Millisecond):
				}
			}
		}()
	}
	time.Sleep(2 * time.Second) // every slot taken, the attack settled

	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	served := 0
	for i := range 40 {
		req, err := http.NewRequest("POST", px.url+"/pay", strings.NewReader(`{}`))
		require.NoError(t, err)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", fmt.Sprintf("caller-%d", i))
		req.Header.Set("Authorization", "Bearer proxy-test")
		resp, err := client.Do(req)
		if err != nil {
			t.Logf("caller %d: %v", i, err)
			continue
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode == http.StatusCreated {
			served++
		} else {
			t.Logf("caller %d: %d", i, resp.StatusCode)
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("served %d of 40 callers behind 200 slow connections at --max-conns 64", served)
	require.Equal(t, 40, served, "callers served out of 40")
	require.Eventually(t, func() bool {
		return strings.Contains(px.logs.String(), "closed the oldest that held no request")
	}, 5*time.Second, 10*time.Millisecond, "the closing is logged")
}

// TestProxyMaxConnsFitsOpenFiles: with few descriptors --max-conns is
// lowered so that callers' connections leave one per request in flight for
// its upstream call, and the proxy says so.
func TestProxyMaxConnsFitsOpenFiles(t *testing.T) {
	prlimit, err := exec.LookPath("prlimit") // util-linux, on every Debian
	require.NoError(t, err)
	for _, c := range []struct {
		inflight, want string
	}{{"1024", "622"}, {"100", "1144"}} {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		cmd := exec.CommandContext(ctx, prlimit, "--nofile=1500:1500", binary, "proxy", "--listen", freePort(t),
			"--upstream", "http://"+deadAddr(t), "--store", deadAddr(t), "--max-inflight", c.inflight)
		out, err := cmd.StderrPipe()
		require.NoError(t, err)
		require.NoError(t, cmd.Start())
		var logs strings.Builder
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			logs.WriteString(sc.Text() + "\n")
			if strings.Contains(sc.Text(), "proxy listening") {
				break
			}
		}
		cmd.Process.Kill()
		cmd.Wait()
		cancel()
		require.Contains(t, logs.String(), "--max-conns lowered to fit the open-files limit", "--max-inflight %s", c.inflight)
		require.Contains(t, logs.String(), "lowered-to="+c.want, "--max-inflight %s", c.inflight)
		require.Contains(t, logs.String(), "max-conns="+c.want+"\n", "--max-inflight %s: the listening line", c.inflight)
	}
}

// TestProxySIGTERMFinishesInFlight: on SIGTERM the proxy stops listening,
// lets the request in flight finish (and store its pxAnswer), and exits 0.
func TestProxySIGTERMFinishesInFlight(t *testing.T) {
	node := startStore(t)
	up := newUpstream(t)
	px := startProxy(t, "--upstream", up.srv.URL, "--store", node.http)

	done := make(chan pxAnswer, 1)
	go func() { done <- pxSend(t, "POST", px.url+"/slow", "t-1", `{}`) }()
	<-up.started
	require.NoError(t, px.cmd.Process.Signal(syscall.SIGTERM))
	time.Sleep(200 * time.Millisecond) // the proxy is shutting down meanwhile
	close(up.release)
	a := <-done
	require.Equal(t, 201, a.status, a.body)
	select {
	case <-px.done:
		require.NoError(t, px.err, px.logs.String())
	case <-time.After(10 * time.Second):
		t.Fatal("proxy did not exit after SIGTERM")
	}
	require.Contains(t, px.logs.String(), "proxy stopped")

	// The pxAnswer was stored before the proxy exited: a new proxy replays it.
	px2 := startProxy(t, "--upstream", up.srv.URL, "--store", node.http)
	again := pxSend(t, "POST", px2.url+"/slow", "t-1", `{}`)
	require.Equal(t, "true", again.header.Get("Idempotency-Replayed"), again.body)
	require.Equal(t, int64(1), up.runs.Load())
}

// TestProxyRefusesBadFlags: each bad flag exits 2 with a message naming it,
// before anything listens.
func TestProxyRefusesBadFlags(t *testing.T) {
	// A valid --listen (never bound: every case is refused first). It was
	// 127.0.0.1:0, which 8b8e3ee made a refusal of its own: every case
	// then exited 2 for --listen whatever its own flag did.
	ok := []string{"--listen", "127.0.0.1:29391", "--upstream", "http://127.0.0.1:9", "--store", "127.0.0.1:7070"}
	with := func(flag, value string) []string {
		out := []string{"proxy"}
		replaced := false
		for i := 0; i < len(ok); i += 2 {
			if ok[i] == flag {
				replaced = true
				if value != "<none>" {
					out = append(out, flag, value)
				}
				continue
			}
			out = append(out, ok[i], ok[i+1])
		}
		if !replaced {
			out = append(out, flag, value)
		}
		return out
	}
	shortKey := filepath.Join(t.TempDir(), "short.key")
	require.NoError(t, os.WriteFile(shortKey, []byte("# hash key\nabc123\n"), 0o600))
	emptyKey := filepath.Join(t.TempDir(), "empty.key")
	require.NoError(t, os.WriteFile(emptyKey, []byte("# nothing\n\n"), 0o600))
	cases := []struct {
		args []string
		want string
	}{
		{with("--hash-key-file", "/nonexistent-key"), "--hash-key-file:"},
		{with("--fingerprint-header", "X-Account,bad header"), `--fingerprint-header: "bad header" is not a header name`},
		{with("--fingerprint-header", "X-Account,cookie"), "--fingerprint-header: Cookie carries a credential"},
		{with("--fingerprint-header", "X-Account,content-type"), "--fingerprint-header: Content-Type counts already"},
		{with("--fingerprint-header", "Idempotency-Key"), "--fingerprint-header: Idempotency-Key counts already"},
		{with("--fingerprint-header", "X-Account,connection"), "--fingerprint-header: Connection describes the connection"},
		{with("--fingerprint-header", "transfer-encoding"), "--fingerprint-header: Transfer-Encoding describes the connection"},
		{with("--fingerprint-header", "Content-Length"), "--fingerprint-header: Content-Length describes the connection"},
		// Set by the proxy from what it saw (a retry from another address
		// would get 422), or an address for a tenant (one NAT, one tenant).
		{with("--fingerprint-header", "X-Account,x-forwarded-for"), "--fingerprint-header: X-Forwarded-For says where a request came from"},
		{with("--fingerprint-header", "X_Real_IP"), "--fingerprint-header: X_real_ip says where a request came from"},
		{with("--principal-header", "X-Real-IP"), "--principal-header: X-Real-Ip says where a request came from, not who sent it"},
		// Content-Length made every caller sending a body of one length one
		// tenant (sharing stored answers), Connection every keep-alive
		// caller; Host and Transfer-Encoding never reach r.Header, so every
		// keyed request was a 401 saying a header the caller sent was missing.
		{with("--principal-header", "content-length"), "--principal-header: Content-Length describes the connection, the body's framing or the server asked"},
		{with("--principal-header", "Connection"), "--principal-header: Connection describes the connection"},
		{with("--principal-header", "Transfer-Encoding"), "--principal-header: Transfer-Encoding describes the connection"},
		{with("--principal-header", "host"), "--principal-header: Host describes the connection, the body's framing or the server asked"},
		{with("--hash-key-file", shortKey), "--hash-key-file: the key in " + shortKey + " is 6 characters: give at least 32"},
		// The command it suggests must make a file the proxy takes without its
		// warning that others can read it (openssl writes 0644 otherwise).
		{with("--hash-key-file", shortKey), "(umask 077; openssl rand -hex 32 > " + shortKey + ")"},
		{with("--hash-key-file", emptyKey), "--hash-key-file " + emptyKey + " holds no"},
		{with("--listen", "<none>"), "--listen: required"},
		{with("--listen", "nope"), "--listen:"},
		{with("--upstream", "<none>"), "--upstream: required"},
		{with("--upstream", "ftp://x"), "--upstream:"},
		{with("--upstream", "http://"), "--upstream:"},
		{with("--store", "<none>"), "--store: required"},
		{with("--store", "127.0.0.1"), "--store:"},
		{with("--store", "gopher://h:1"), "--store:"},
		{with("--store", "127.0.0.1:7070,127.0.0.1:7070"), "--store:"},
		// A port out of range: the proxy ran, answering every keyed
		// request 503; as --listen, it exited 1 on "invalid port".
		{with("--store", "127.0.0.1:99999"), `--store: "127.0.0.1:99999": port "99999" is not a number from 1 to 65535`},
		{with("--listen", "127.0.0.1:99999"), `--listen: "127.0.0.1:99999" is not host:port with a port from 1 to 65535`},
		{with("--methods", "GET"), "--methods:"},
		{with("--methods", "PO ST"), "--methods:"},
		{with("--principal-header", "X Tenant"), "--principal-header:"},
		{append(with("--principal-header", "X-Tenant"), "--allow-anonymous"), "--allow-anonymous:"},
		{with("--tls-cert-file", "/nonexistent.pem"), "--tls-key-file: required"},
		{with("--ca-file", "/nonexistent-ca.pem"), "--ca-file"},
		{with("--store-timeout", "0s"), "--store-timeout:"},
		// The value refused is named, as the middleware's Options.Lease is
		// ("--lease: must be between 100ms and 1h" said nothing of the 2h given).
		{with("--lease", "2h"), "--lease: 2h0m0s must be between 100ms and 1h"},
		{with("--max-stored-body", "0"), "--max-stored-body:"},
		{with("--store-batch", "-1"), "--store-batch:"},
		{with("--store-batch", "100000"), "--store-batch:"},
		{with("--log-level", "loud"), "--log-level:"},
		{with("--max-inflight", "0"), "--max-inflight:"},
		{with("--max-conns", "0"), "--max-conns:"},
		{with("--body-read-timeout", "0s"), "--body-read-timeout: must be positive"},
		{with("--stream-stall-timeout", "-1s"), "--stream-stall-timeout: must not be negative"},
		{with("--store-token-file", "/nonexistent-token"), "--store-token-file:"},
		{with("--bogus", "1"), "-bogus"},
		// The proxy's own address as its upstream or its store: every
		// keyed request answered to itself (a 409 in_progress stored and
		// replayed for a day), or "Idempotency-Key header is required".
		{withFlags(with("--upstream", "http://127.0.0.1:7390"), "--listen", "127.0.0.1:7390"), "--upstream: http://127.0.0.1:7390 is --listen's address"},
		{withFlags(with("--upstream", "http://localhost:7390"), "--listen", ":7390"), "--upstream: http://localhost:7390 is --listen's address"},
		{withFlags(with("--store", "127.0.0.1:7390"), "--listen", "127.0.0.1:7390"), "--store: 127.0.0.1:7390 is --listen's address"},
		// A secret as the principal: stored in plain text.
		{with("--principal-header", "authorization"), "--principal-header: Authorization carries a secret"},
		{with("--principal-header", "Cookie"), "--principal-header: Cookie carries a secret"},
	}
	for _, c := range cases {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		out, err := exec.CommandContext(ctx, binary, c.args...).CombinedOutput()
		cancel()
		var ee *exec.ExitError
		require.ErrorAs(t, err, &ee, "%v: %s", c.args, out)
		require.Equal(t, 2, ee.ExitCode(), "%v: %s", c.args, out)
		require.Contains(t, string(out), c.want, "%v", c.args)
		if !strings.Contains(c.want, "--listen") {
			require.NotContains(t, string(out), "--listen:", "%v: the base flags must be valid", c.args)
		}
	}
	out, err := exec.Command(binary, "proxy", "--help").CombinedOutput()
	require.NoError(t, err, "%s", out)
	for _, f := range []string{"--listen", "--upstream", "--store", "--principal-header", "--methods", "--store-token", "--ca-file", "--tls-cert-file", "--store-batch", "--max-inflight", "--max-conns", "--body-read-timeout", "--stream-stall-timeout"} {
		require.Contains(t, string(out), "-"+strings.TrimLeft(f, "-"), "--help lists %s", f)
	}
}

// TestProxyConformance runs the conformance suite against `idem proxy`
// processes in front of the suite's fixture upstream: one with a real
// `idem serve` store, one whose store keeps records for 3 s (the expiry
// case), and one whose only store is down.
func TestProxyConformance(t *testing.T) {
	up := conformance.NewUpstream()
	upSrv := httptest.NewServer(up)
	t.Cleanup(upSrv.Close)

	node := startStore(t)
	short := start(t, filepath.Join(t.TempDir(), "short"), freePort(t), freePort(t),
		"--retention", "3s", "--allow-short-retention", "--lease", "2s")
	for _, extra := range [][]string{nil, {"--store-batch", "16"}} {
		t.Run(strings.Join(append([]string{"proxy"}, extra...), " "), func(t *testing.T) {
			front := startProxy(t, append([]string{"--upstream", upSrv.URL, "--store", node.http}, extra...)...)
			shortFront := startProxy(t, append([]string{"--upstream", upSrv.URL, "--store", short.http}, extra...)...)
			downFront := startProxy(t, append([]string{"--upstream", upSrv.URL, "--store", deadAddr(t)}, extra...)...)
			conformance.Run(t, conformance.Target{
				URL:               front.url,
				Upstream:          up,
				ShortRetentionURL: shortFront.url,
				ShortRetention:    3 * time.Second,
				DownURL:           downFront.url,
			})
		})
	}
}

// TestProxyTLS: the proxy reaches a store that requires client
// certificates (--ca-file, --cert-file, --key-file; a host:port then means
// https) and serves HTTPS itself (--tls-cert-file, --tls-key-file).
func TestProxyTLS(t *testing.T) {
	ca := newPKI(t)
	args := append(ca.serveArgs("n1"), "--tls-client-auth", "require")
	node := launch(t, t.TempDir(), freePort(t), freePort(t), args...)
	opsCert, opsKey := ca.cert("ops", "--client")
	waitReadyTLS(t, ca.httpsClient(opsCert, opsKey), node)
	up := newUpstream(t)
	proxyCert, proxyKey := ca.cert("proxy", "--ip", testIP("127.0.0.9")) // where freePort listens

	px := startProxy(t, "--upstream", up.srv.URL, "--store", node.http,
		"--ca-file", ca.ca(), "--cert-file", opsCert, "--key-file", opsKey,
		"--tls-cert-file", proxyCert, "--tls-key-file", proxyKey)
	hc := ca.httpsClient("", "")
	post := func() *http.Response {
		req, err := http.NewRequest("POST", "https://"+px.http+"/pay", strings.NewReader(`{}`))
		require.NoError(t, err)
		req.Header.Set("Idempotency-Key", "tls-1")
		req.Header.Set("Authorization", "Bearer tls-test")
		resp, err := hc.Do(req)
		require.NoError(t, err)
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp
	}
	require.Equal(t, 201, post().StatusCode)
	again := post()
	require.Equal(t, 201, again.StatusCode)
	require.Equal(t, "true", again.Header.Get("Idempotency-Replayed"))
	require.Equal(t, int64(1), up.runs.Load())

	// Without the client certificate the store refuses the proxy: 503, and
	// the upstream is not called.
	bare := startProxy(t, "--upstream", up.srv.URL, "--store", node.http, "--ca-file", ca.ca())
	require.Equal(t, 503, pxSend(t, "POST", bare.url+"/pay", "tls-2", `{}`).status)
	require.Equal(t, int64(1), up.runs.Load())
}

// Attack on loopback: a keyed POST carrying both Content-Length and
// Transfer-Encoding, whose chunked body ended at once, was answered and its
// connection kept, so the bytes after the chunked end ran as a second
// request (a GET the front end never saw). Every request with a
// Transfer-Encoding is answered and its connection closed now. And a keyed
// method sent in lower case ("post") went through without a key.
func TestProxyClosesAfterTransferEncodingAndRefusesMethodCase(t *testing.T) {
	up := newUpstream(t)
	store := startStore(t)
	px := startProxy(t, "--upstream", up.srv.URL, "--store", store.http)

	conn, err := net.Dial("tcp", strings.TrimPrefix(px.url, "http://"))
	require.NoError(t, err)
	defer conn.Close()
	smuggled := "GET /pay HTTP/1.1\r\nHost: x\r\n\r\n"
	body := "0\r\n\r\n" + smuggled
	fmt.Fprintf(conn, "POST /pay HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer s\r\nIdempotency-Key: sm-1\r\nContent-Length: %d\r\nTransfer-Encoding: chunked\r\n\r\n%s", len(body), body)
	conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	all, _ := io.ReadAll(conn) // until the proxy closes the connection
	require.Equal(t, 1, strings.Count(string(all), "HTTP/1.1 "), "one answer, the connection closed after it:\n%s", all)
	require.Equal(t, int64(1), up.runs.Load(), "the smuggled GET reached the upstream")

	// OPTIONS *, which net/http answered before any handler: a chunked
	// one kept its connection, and the bytes after it ran as a request.
	conn2, err := net.Dial("tcp", strings.TrimPrefix(px.url, "http://"))
	require.NoError(t, err)
	defer conn2.Close()
	fmt.Fprintf(conn2, "OPTIONS * HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n%s", smuggled)
	conn2.SetReadDeadline(time.Now().Add(10 * time.Second))
	all, _ = io.ReadAll(conn2)
	require.Equal(t, 1, strings.Count(string(all), "HTTP/1.1 "), "one answer, the connection closed after it:\n%s", all)
	require.True(t, strings.HasPrefix(string(all), "HTTP/1.1 200 "), "%s", all)
	require.Equal(t, int64(1), up.runs.Load(), "OPTIONS * or the GET after it reached the upstream")

	for _, m := range []string{"post", "Post", "patch"} {
		a := pxSend(t, m, px.url+"/pay", "lower-1", `{}`)
		require.Equal(t, http.StatusBadRequest, a.status, "%s: %+v", m, a)
		require.Contains(t, a.body, "methods are case-sensitive")
	}
	require.Equal(t, int64(1), up.runs.Load(), "a lower-case keyed method reached the upstream")
}

// After a proxy crash or an --upstream-timeout, a retry runs the upstream
// again, and the upstream had nothing to tell the two runs apart: only
// Idempotency-Key and X-Forwarded-* reached it. It gets the attempt's
// number and fencing token now (never a caller's own), and a timeout is
// 504 upstream_timeout, not a 502 whose detail named the proxy's and the
// upstream's inside addresses.
func TestProxyTellsTheUpstreamTheAttempt(t *testing.T) {
	var seen atomic.Pointer[http.Header]
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := r.Header.Clone()
		seen.Store(&h)
		if r.URL.Path == "/slow" {
			time.Sleep(1500 * time.Millisecond)
		}
		w.WriteHeader(http.StatusCreated)
	}))
	defer up.Close()
	store := startStore(t)
	px := startProxy(t, "--upstream", up.URL, "--store", store.http, "--upstream-timeout", "500ms")

	a := pxSend(t, "POST", px.url+"/pay", "att-1", `{}`, "Idempotency-Attempt", "99", "Idempotency-Attempt-Token", "forged",
		"X-Real-IP", "203.0.113.7", "X-Forwarded-For", "203.0.113.8")
	require.Equal(t, http.StatusCreated, a.status, "%+v", a)
	h := *seen.Load()
	// The caller's address as this hop saw it, never the caller's claim
	// (a protocol walk: X-Real-IP went through as written).
	require.True(t, net.ParseIP(h.Get("X-Real-IP")).IsLoopback(), "X-Real-IP %q", h.Get("X-Real-IP"))
	require.Len(t, h.Values("X-Real-IP"), 1)
	require.Equal(t, h.Get("X-Real-IP"), h.Get("X-Forwarded-For"))
	require.Equal(t, "1", h.Get("Idempotency-Attempt"))
	require.Len(t, h.Values("Idempotency-Attempt"), 1)
	require.Regexp(t, `^\d{20}\.[0-9a-f]{32}$`, h.Get("Idempotency-Attempt-Token"))

	a = pxSend(t, "POST", px.url+"/slow", "att-2", `{}`)
	require.Equal(t, http.StatusGatewayTimeout, a.status, "%+v", a)
	require.Contains(t, a.body, "upstream_timeout")
	require.Contains(t, a.body, "--upstream-timeout")
	require.NotContains(t, a.body, "127.0.0.1", "inside addresses")
	time.Sleep(1200 * time.Millisecond) // the first run ends
	a = pxSend(t, "POST", px.url+"/slow", "att-2", `{}`)
	require.Equal(t, http.StatusGatewayTimeout, a.status, "%+v", a)
	require.Equal(t, "2", (*seen.Load()).Get("Idempotency-Attempt"), "the retry is the second attempt")

	// Unkeyed requests get no attempt.
	pxSend(t, "GET", px.url+"/pay", "", "", "Idempotency-Attempt", "5")
	require.Empty(t, (*seen.Load()).Get("Idempotency-Attempt"))
}

// An upstream whose answer net/http cannot read (a control character in
// a header) answered, and may have done the work: the 502 said it "did not
// answer". It says what happened, and that a retry runs it again.
func TestProxySaysWhenTheUpstreamsAnswerIsNotHTTP(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// The request read whole first: closing while the proxy still
		// wrote its body made the write's error the one net/http gave
		// ("use of closed network connection"), not the answer's (the
		// test failed so in CI once).
		io.Copy(io.Discard, r.Body)
		conn, buf, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		buf.WriteString("HTTP/1.1 201 Created\r\nX-Debug: a\x01b\r\nContent-Length: 2\r\n\r\nok")
		buf.Flush()
		conn.Close()
	}))
	defer up.Close()
	store := startStore(t)
	px := startProxy(t, "--upstream", up.URL, "--store", store.http)
	a := pxSend(t, "POST", px.url+"/pay", "bad-1", `{}`)
	require.Equal(t, http.StatusBadGateway, a.status, "%+v", a)
	require.Contains(t, a.body, "not HTTP")
	require.Contains(t, a.body, "may have done the work")
}

// curl --http2 on http:// offers h2c (Connection: Upgrade, HTTP2-Settings;
// Upgrade: h2c). A keyed request was refused 400; it runs, and is
// replayed. Neither it nor an unkeyed request passes the offer on: an
// upstream that took it up would switch the caller's connection under the
// proxy.
func TestProxyH2COfferIsNotAnUpgrade(t *testing.T) {
	var upgrades atomic.Int32
	var runs atomic.Int32
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Upgrade") != "" || r.Header.Get("HTTP2-Settings") != "" {
			upgrades.Add(1)
		}
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, "run %d", runs.Add(1))
	}))
	defer up.Close()
	store := startStore(t)
	px := startProxy(t, "--upstream", up.URL, "--store", store.http)
	offer := []string{"Connection", "Upgrade, HTTP2-Settings", "Upgrade", "h2c", "HTTP2-Settings", "AAMAAABkAAQAoAAAAAIAAAAA"}

	first := pxSend(t, "POST", px.url+"/pay", "h2c-1", `{}`, offer...)
	require.Equal(t, http.StatusCreated, first.status, "%+v", first)
	again := pxSend(t, "POST", px.url+"/pay", "h2c-1", `{}`, offer...)
	require.Equal(t, first.body, again.body, "%+v", again)
	require.Equal(t, "true", again.header.Get("Idempotency-Replayed"))
	a := pxSend(t, "GET", px.url+"/read", "", "", offer...)
	require.Equal(t, http.StatusCreated, a.status, "%+v", a)
	require.Zero(t, upgrades.Load(), "the upstream was offered h2c")

	a = pxSend(t, "POST", px.url+"/pay", "ws-1", `{}`, "Connection", "Upgrade", "Upgrade", "websocket")
	require.Equal(t, http.StatusBadRequest, a.status, "%+v", a)
}

// --max-stored-body above the store's --max-response-bytes: answers
// between the two were stored without their body, and nothing said so.
// The proxy says so at start (it reads the store's limit), and for each
// answer stored without its body.
func TestProxyWarnsOfAStoreLimitBelowMaxStoredBody(t *testing.T) {
	up := newUpstream(t)
	store := start(t, filepath.Join(t.TempDir(), "data"), freePort(t), freePort(t), "--max-response-bytes", "1024")
	px := startProxy(t, "--upstream", up.srv.URL, "--store", store.http, "--max-stored-body", "64KiB")
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(px.logs.String(), "above the store's --max-response-bytes") {
		require.True(t, time.Now().Before(deadline), "no warning at start; logs:\n%s", px.logs)
		time.Sleep(20 * time.Millisecond)
	}
	first := pxSend(t, "POST", px.url+"/big", "big-1", `{}`)
	require.Equal(t, http.StatusOK, first.status, "%+v", first)
	again := pxSend(t, "POST", px.url+"/big", "big-1", `{}`)
	require.Equal(t, "too-large", again.header.Get("Idempotency-Body-Omitted"), "%+v", again)
	// Logged before the bodyless copy is stored, which does not make it
	// reach the test's pipe before the replay's answer.
	waitForLine(t, px.logs, "stored without its body: the store refused it as too large")
}

// An upstream that gzips for callers that accept it: its answer to a
// caller with Accept-Encoding: gzip was stored gzipped, and replayed
// gzipped (Content-Encoding: gzip) to a retry that accepts no encoding.
// The stored answer is the identity, which every caller can read.
func TestProxyReplayIsReadableWhateverTheCallerAccepts(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		if !strings.Contains(r.Header.Get("Accept-Encoding"), "gzip") {
			io.WriteString(w, "paid in full")
			return
		}
		w.Header().Set("Content-Encoding", "gzip")
		zw := gzip.NewWriter(w)
		io.WriteString(zw, "paid in full")
		zw.Close()
	}))
	defer up.Close()
	store := startStore(t)
	px := startProxy(t, "--upstream", up.URL, "--store", store.http)
	// Its own transport: net/http's default one asks for gzip and
	// decompresses, which hid what a caller without it is sent.
	send := func(acceptEncoding string) (*http.Response, []byte) {
		req, err := http.NewRequest(http.MethodPost, px.url+"/pay", strings.NewReader("{}"))
		require.NoError(t, err)
		req.Header.Set("Idempotency-Key", "gz-1")
		req.Header.Set("Authorization", "Bearer proxy-test")
		if acceptEncoding != "" {
			req.Header.Set("Accept-Encoding", acceptEncoding)
		}
		tr := &http.Transport{DisableCompression: true}
		defer tr.CloseIdleConnections()
		resp, err := tr.RoundTrip(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return resp, b
	}
	resp, b := send("gzip")
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s", b)
	resp, b = send("")
	require.Equal(t, "true", resp.Header.Get("Idempotency-Replayed"))
	require.Empty(t, resp.Header.Get("Content-Encoding"))
	require.Equal(t, "paid in full", string(b))
}

// TestProxyWarnsWhenAnUpstreamCallOutlivesTheShutdown: an --upstream-timeout
// longer than --shutdown-timeout lets a SIGTERM cut a call still running,
// whose retry then runs again after the lease; the proxy says so at start,
// and not when the call fits the grace or has no timeout (the default).
func TestProxyWarnsWhenAnUpstreamCallOutlivesTheShutdown(t *testing.T) {
	const warning = "--upstream-timeout is longer than --shutdown-timeout"
	for _, c := range []struct {
		args []string
		warn bool
	}{
		{[]string{"--upstream-timeout", "1m", "--shutdown-timeout", "10s"}, true},
		{[]string{"--upstream-timeout", "10s", "--shutdown-timeout", "10s"}, false},
		{[]string{"--upstream-timeout", "5s"}, false}, // the default grace, 30s
		{nil, false}, // no timeout: not every proxy at its defaults
	} {
		args := append([]string{"--upstream", "http://" + deadAddr(t), "--store", deadAddr(t)}, c.args...)
		px := startProxy(t, args...)
		line := waitForLine(t, px.logs, "proxy listening")
		require.NotEmpty(t, line)
		logs := px.logs.String()
		if !c.warn {
			require.NotContains(t, logs, warning, "%v", c.args)
			continue
		}
		require.Contains(t, logs, warning)
		require.Contains(t, logs, "upstream-timeout=1m0s shutdown-timeout=10s lease=30s")
		require.Contains(t, logs, "set --shutdown-timeout to at least --upstream-timeout")
	}
}

// Nothing extends the lease between the upstream's answer and its
// complete going on in the background (where the lease is kept), so a
// --store-timeout longer than half --lease let the lease run out while
// the answer waited, and a retry call the upstream again. The complete is
// asked for half the lease then, and the start says so, naming both.
func TestProxyWarnsOfAStoreTimeoutOverHalfTheLease(t *testing.T) {
	const warning = "StoreTimeout (idem proxy's --store-timeout) is longer than half the Lease (--lease)"
	for _, c := range []struct {
		args []string
		warn bool
	}{
		{[]string{"--store-timeout", "5s", "--lease", "2s"}, true},
		{[]string{"--store-timeout", "1s", "--lease", "2s"}, false},
		{nil, false}, // 5s and 30s
	} {
		args := append([]string{"--upstream", "http://" + deadAddr(t), "--store", deadAddr(t)}, c.args...)
		px := startProxy(t, args...)
		require.NotEmpty(t, waitForLine(t, px.logs, "proxy listening"))
		logs := px.logs.String()
		if !c.warn {
			require.NotContains(t, logs, warning, "%v", c.args)
			continue
		}
		require.Contains(t, logs, warning)
		require.Contains(t, logs, "store-timeout=5s lease=2s complete-for=1s")
	}
}
