package main

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// slowUpstream is an upstream on the test's own address (IDEM_TEST_IP)
// that reads an upload whole (PUT /upload, answering how much it got),
// answers an upload without reading it (PUT /refuse, 401, as an auth
// check in front of an upload handler does), and answers POST /pay 201.
type slowUpstream struct {
	url      string
	uploads  atomic.Int64 // PUT /upload bodies read to their end
	uploaded atomic.Value // the last of them
}

func newSlowUpstream(t *testing.T) *slowUpstream {
	u := &slowUpstream{}
	mux := http.NewServeMux()
	mux.HandleFunc("PUT /upload", func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			return // cut short: not an upload
		}
		u.uploads.Add(1)
		u.uploaded.Store(body)
		fmt.Fprintf(w, "got %d bytes", len(body))
	})
	mux.HandleFunc("PUT /refuse", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Connection", "close") // not waiting for the body either
		w.WriteHeader(http.StatusUnauthorized)
	})
	mux.HandleFunc("POST /pay", func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.WriteHeader(http.StatusCreated)
	})
	mux.HandleFunc("GET /ok", func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "ok")
	})
	srv := httptest.NewUnstartedServer(mux)
	ln, err := net.Listen("tcp", freePort(t))
	require.NoError(t, err)
	srv.Listener.Close()
	srv.Listener = ln
	srv.Start()
	t.Cleanup(srv.Close)
	u.url = srv.URL
	return u
}

// dripUpload sends the headers of an upload that announces a megabyte,
// then a byte of it every 100 ms until the connection fails; it hands back
// the proxy's answer (its status line and body), or why there was none.
func dripUpload(t *testing.T, addr, path string) <-chan string {
	conn, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close() })
	fmt.Fprintf(conn, "PUT %s HTTP/1.1\r\nHost: x\r\nContent-Length: 1000000\r\n\r\n", path)
	stop := make(chan struct{})
	go func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(100 * time.Millisecond):
			}
			if _, err := conn.Write([]byte("a")); err != nil {
				return
			}
		}
	}()
	answer := make(chan string, 1)
	go func() {
		defer close(stop)
		// Only so that a test without the bound ends: a drip of a
		// megabyte at this pace lasts a day.
		conn.SetReadDeadline(time.Now().Add(30 * time.Second))
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			answer <- "no answer: " + err.Error()
			return
		}
		b, _ := io.ReadAll(resp.Body)
		answer <- resp.Status + " " + string(b)
	}()
	return answer
}

// An unkeyed upload streams to the upstream, and its body had no bound at
// all: a caller with no credential that announced a megabyte and sent a
// byte every two seconds held a --max-inflight slot for as long as it
// liked, and eight such callers starved every other caller of a proxy
// with --max-inflight 8 (an attack walk: every request 503 for the whole
// minute watched; the uploads would have lasted 23 days). The body must
// keep coming now (1 KiB per --stream-stall-timeout): a drip is cut with
// 408, the upstream never sees it as a whole upload, and the slot is free.
// --body-read-timeout, a keyed body's bound, has no part in it.
func TestProxyDripFedUploadIsCutAndItsSlotFreed(t *testing.T) {
	node := startStore(t)
	up := newSlowUpstream(t)
	px := startProxy(t, "--upstream", up.url, "--store", node.http, "--max-inflight", "2", "--stream-stall-timeout", "1s", "--body-read-timeout", "1m")
	addr := strings.TrimPrefix(px.url, "http://")

	drips := []<-chan string{dripUpload(t, addr, "/upload"), dripUpload(t, addr, "/upload")}
	for _, d := range drips {
		a := <-d
		require.True(t, strings.HasPrefix(a, "408 "), "a drip-fed upload was not cut: %s", a)
		require.Contains(t, a, "(--stream-stall-timeout)")
		require.Contains(t, a, `"code":"request_timeout"`)
	}
	require.Zero(t, up.uploads.Load(), "the upstream took a cut body for a whole upload")

	// Both slots are free again: a keyed request and an unkeyed one are served.
	require.Equal(t, http.StatusCreated, pxSend(t, "POST", px.url+"/pay", "after-drip", `{}`).status)
	require.Equal(t, "ok", pxSend(t, "GET", px.url+"/ok", "", "").body)
}

// slowReader gives piece bytes of body per Read, each after every, and
// stops once for pause halfway.
type slowReader struct {
	body         []byte
	piece        int
	every, pause time.Duration
	read         int
}

func (s *slowReader) Read(p []byte) (int, error) {
	if s.read == len(s.body) {
		return 0, io.EOF
	}
	if s.pause > 0 && s.read >= len(s.body)/2 {
		time.Sleep(s.pause)
		s.pause = 0
	}
	time.Sleep(s.every)
	n := copy(p, s.body[s.read:min(s.read+s.piece, len(s.body))])
	s.read += n
	return n, nil
}

// The bound on an unkeyed body is on its progress, not its length: an
// upload that takes several times --stream-stall-timeout, at a few times
// the least rate and with a pause of a third of the timeout, reaches the
// upstream whole.
func TestProxySlowSteadyUploadPasses(t *testing.T) {
	up := newSlowUpstream(t)
	px := startProxy(t, "--upstream", up.url, "--store", deadAddr(t), "--stream-stall-timeout", "3s")

	body := bytes.Repeat([]byte("0123456789abcdef"), 512) // 8 KiB
	// 256 bytes every 100 ms: 2.5 KiB a second, five times the least
	// (1 KiB per 3 s), for over three seconds, and a second's pause.
	req, err := http.NewRequest(http.MethodPut, px.url+"/upload", &slowReader{body: body, piece: 256, every: 100 * time.Millisecond, pause: time.Second})
	require.NoError(t, err)
	req.ContentLength = int64(len(body))
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	got, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s", got)
	require.Equal(t, fmt.Sprintf("got %d bytes", len(body)), string(got))
	require.Equal(t, int64(1), up.uploads.Load())
	require.Equal(t, body, up.uploaded.Load())
}

// A request answered without its body being read was answered only once
// net/http had read up to 256 KiB of that body, at the caller's pace:
// a keyed method refused for want of a key (without Expect: 100-continue)
// at --body-read-timeout, OPTIONS * and an upload its upstream refused
// unread not at all while the caller held the rest back, the upload
// holding its --max-inflight slot meanwhile. The answer goes out at once
// now, and the connection is closed after it instead of being drained.
func TestProxyAnswerIsNotHeldForTheBodyItDidNotRead(t *testing.T) {
	up := newSlowUpstream(t)
	px := startProxy(t, "--upstream", up.url, "--store", deadAddr(t), "--body-read-timeout", "1m", "--stream-stall-timeout", "1m", "--max-inflight", "1")
	addr := strings.TrimPrefix(px.url, "http://")
	for _, c := range []struct{ name, head, status string }{
		{"keyed method without a key", "POST /pay HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer e\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n{", "400 "},
		{"OPTIONS *", "OPTIONS * HTTP/1.1\r\nHost: x\r\nContent-Length: 4000\r\n\r\nab", "200 "},
		{"upload refused unread", "PUT /refuse HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\nab", "401 "},
		// Refused by framing, outside the body deadlines: the connection
		// waited for the rest of the body with no deadline at all, so a
		// caller held it (and one of --max-conns) for as long as it liked
		// with one request of 80 bytes (a review: four such held every
		// connection of a proxy with --max-conns 4, every other caller 503).
		{"keyed method in lower case", "post /pay HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\nab", "400 "},
		{"keyed method in lower case, chunked", "post /pay HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n1\r\na\r\n", "400 "},
	} {
		t.Run(c.name, func(t *testing.T) {
			conn, err := net.Dial("tcp", addr)
			require.NoError(t, err)
			defer conn.Close()
			io.WriteString(conn, c.head)
			conn.SetReadDeadline(time.Now().Add(10 * time.Second))
			br := bufio.NewReader(conn)
			resp, err := http.ReadResponse(br, nil)
			require.NoError(t, err, "no answer while the body is held back")
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			require.True(t, strings.HasPrefix(resp.Status, c.status), resp.Status)
			_, err = br.ReadByte()
			require.ErrorIs(t, err, io.EOF, "the connection stayed open for the rest of the body")
		})
	}
	// The upload's slot (the only one) is free.
	require.Equal(t, "ok", pxSend(t, "GET", px.url+"/ok", "", "").body)
}
