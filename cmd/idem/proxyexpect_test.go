package main

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A keyed method refused before its body is read (no Idempotency-Key, no
// credential) and sent with Expect: 100-continue was answered only at
// --body-read-timeout: the client waits for that answer (or a 100) before
// it sends its body, and net/http, given the proxy's wrapper of the body
// in place of its own, waited for the body to discard it before it wrote
// the answer. The answer comes at once now, and the connection is closed
// (its body was never sent).
func TestProxyRefusalOfAnExpectContinueRequestIsNotHeldForItsBody(t *testing.T) {
	px := startProxy(t, "--upstream", "http://"+deadAddr(t), "--store", deadAddr(t), "--body-read-timeout", "1m")
	for _, hdr := range []string{
		"Authorization: Bearer e\r\n",   // no key: 400
		"Idempotency-Key: expect-1\r\n", // no credential: 401
	} {
		conn, err := net.Dial("tcp", strings.TrimPrefix(px.url, "http://"))
		require.NoError(t, err)
		fmt.Fprintf(conn, "POST /pay HTTP/1.1\r\nHost: x\r\n%sExpect: 100-continue\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n", hdr)
		conn.SetReadDeadline(time.Now().Add(5 * time.Second))
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		require.NoError(t, err, "no answer within 5 s of the headers (%q)", hdr)
		resp.Body.Close()
		require.Contains(t, []int{http.StatusBadRequest, http.StatusUnauthorized}, resp.StatusCode, "%q", hdr)
		conn.Close()
	}
}

// sendExpecting sends a request with Expect: 100-continue as a client
// does: its headers, then, once a 100 Continue comes, its body. It hands
// back how many 100 Continue came in all and the final answer's status.
func sendExpecting(t *testing.T, addr, head, body string) (continues, status int) {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	defer conn.Close()
	fmt.Fprintf(conn, "%sExpect: 100-continue\r\nContent-Length: %d\r\n\r\n", head, len(body))
	conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	br := bufio.NewReader(conn)
	for sent := false; ; {
		resp, err := http.ReadResponse(br, nil)
		require.NoError(t, err, "after %d 100 Continue", continues)
		if resp.StatusCode != http.StatusContinue {
			resp.Body.Close()
			return continues, resp.StatusCode
		}
		continues++
		if !sent {
			io.WriteString(conn, body)
			sent = true
		}
	}
}

// A keyed request sent with Expect: 100-continue got two 100 Continue: the
// proxy's own server sent one when the middleware read the body, and the
// reverse proxy passed on the upstream's, which it got for the Expect it
// sent on. An unkeyed one whose upstream sent its 100 only after the
// transport had stopped waiting for it (1 s) and sent the body got two as
// well. A caller is sent one 100 Continue at most now: the proxy's server
// sends it when the body is first read, and no upstream's is passed on.
func TestProxySendsOneContinue(t *testing.T) {
	node := startStore(t)
	up := newSlowUpstream(t)

	// An upstream that answers its 100 Continue late: after the 1 s the
	// proxy's transport waits for it before it sends the body anyway.
	late := rawUpstream(t, func(c net.Conn, req *http.Request) {
		time.Sleep(1500 * time.Millisecond)
		io.WriteString(c, "HTTP/1.1 100 Continue\r\n\r\n")
		io.Copy(io.Discard, req.Body)
		io.WriteString(c, "HTTP/1.1 201 Created\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
	})

	for _, c := range []struct{ name, upstream, head string }{
		{"keyed", up.url, "POST /pay HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer t\r\nIdempotency-Key: one-continue\r\nContent-Type: application/json\r\n"},
		{"unkeyed", up.url, "PUT /upload HTTP/1.1\r\nHost: x\r\n"},
		{"unkeyed, the upstream's 100 late", late, "PUT /upload HTTP/1.1\r\nHost: x\r\n"},
		{"keyed, the upstream's 100 late", late, "POST /pay HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer t\r\nIdempotency-Key: one-continue-late\r\nContent-Type: application/json\r\n"},
	} {
		t.Run(c.name, func(t *testing.T) {
			px := startProxy(t, "--upstream", c.upstream, "--store", node.http)
			continues, status := sendExpecting(t, strings.TrimPrefix(px.url, "http://"), c.head, `{"amount":1}`)
			require.Less(t, status, 300, "the request failed")
			require.Equal(t, 1, continues, "100 Continue sent %d times", continues)
		})
	}
}

// A keyed request's body is read whole before the upstream is called, so
// its Expect: 100-continue is not passed on: the transport waited for the
// upstream's 100 before it sent the body it already held, 1 s on every
// such request to an upstream that sends none. An unkeyed request streams
// its body, and keeps it: its caller waits for the upstream's go-ahead.
func TestProxyKeyedRequestSendsNoExpectUpstream(t *testing.T) {
	node := startStore(t)
	expects := make(chan string, 4)
	up := rawUpstream(t, func(c net.Conn, req *http.Request) {
		expects <- req.URL.Path + " " + req.Header.Get("Expect")
		if req.Header.Get("Expect") != "" {
			io.WriteString(c, "HTTP/1.1 100 Continue\r\n\r\n")
		}
		io.Copy(io.Discard, req.Body)
		io.WriteString(c, "HTTP/1.1 201 Created\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
	})
	px := startProxy(t, "--upstream", up, "--store", node.http)
	addr := strings.TrimPrefix(px.url, "http://")

	_, status := sendExpecting(t, addr, "POST /pay HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer t\r\nIdempotency-Key: no-expect\r\nContent-Type: application/json\r\n", `{"amount":1}`)
	require.Equal(t, http.StatusCreated, status)
	require.Equal(t, "/pay ", <-expects, "a keyed request's Expect reached the upstream")

	_, status = sendExpecting(t, addr, "PUT /upload HTTP/1.1\r\nHost: x\r\n", "data")
	require.Equal(t, http.StatusCreated, status)
	require.Equal(t, "/upload 100-continue", <-expects, "an unkeyed request's Expect must reach the upstream")
}

// An upstream's interim answer (103 Early Hints) was passed on to a caller
// that spoke HTTP/1.0, which knows no 1xx (RFC 9110 15.2: a server must
// not send one to an HTTP/1.0 client): such a client takes the 103 for
// the answer, and the real one for its body. A caller of HTTP/1.1 still
// hears it.
func TestProxySendsNoInterimAnswerToAnHTTP10Caller(t *testing.T) {
	node := startStore(t)
	up := rawUpstream(t, func(c net.Conn, req *http.Request) {
		io.Copy(io.Discard, req.Body)
		io.WriteString(c, "HTTP/1.1 103 Early Hints\r\nLink: </a.css>; rel=preload\r\n\r\n")
		io.WriteString(c, "HTTP/1.1 201 Created\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok")
	})
	px := startProxy(t, "--upstream", up, "--store", node.http)
	addr := strings.TrimPrefix(px.url, "http://")
	first := func(head string) int {
		conn, err := net.Dial("tcp", addr)
		require.NoError(t, err)
		defer conn.Close()
		io.WriteString(conn, head)
		conn.SetReadDeadline(time.Now().Add(10 * time.Second))
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		require.NoError(t, err)
		resp.Body.Close()
		return resp.StatusCode
	}
	for _, c := range []struct {
		name, head string
		want       int
	}{
		{"HTTP/1.0 unkeyed", "GET /page HTTP/1.0\r\nHost: x\r\n\r\n", http.StatusCreated},
		{"HTTP/1.0 keyed", "POST /pay HTTP/1.0\r\nHost: x\r\nAuthorization: Bearer t\r\nIdempotency-Key: h10\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}", http.StatusCreated},
		{"HTTP/1.1 unkeyed", "GET /page HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", http.StatusEarlyHints},
	} {
		require.Equal(t, c.want, first(c.head), "%s: the first answer's status", c.name)
	}
}

// rawUpstream is an upstream that writes its answers by hand (interim
// answers, late ones), one request a connection: serve reads req's body
// if it wants it and writes the answer to c. It returns its URL.
func rawUpstream(t *testing.T, serve func(c net.Conn, req *http.Request)) string {
	t.Helper()
	ln, err := net.Listen("tcp", freePort(t))
	require.NoError(t, err)
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				req, err := http.ReadRequest(bufio.NewReader(c))
				if err != nil {
					return
				}
				serve(c, req)
			}()
		}
	}()
	return "http://" + ln.Addr().String()
}
