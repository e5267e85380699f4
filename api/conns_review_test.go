package api

import (
	"bufio"
	"crypto/tls"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// testIP is the loopback address tests listen on.
func testIP() string {
	if v := os.Getenv("IDEM_TEST_IP"); v != "" {
		return v
	}
	return "127.0.0.1"
}

// Keep-alive callers of a full cap, while newcomers arrive all the time
// and take the slots of the connections without a request: a caller may
// see its connection closed, but only for a request the server never
// read (the handler never ran for it, so sending it again is safe). A
// request whose handler ran and whose answer never came would be one lost.
// Afterwards the listener holds nothing (no list element, no slot).
//
// Callers now and then stay idle for evictMinAge, so their connections may
// be closed as their next request goes out; and some newcomers stay until
// closed. With only newcomers held for a random while, one subtest in
// about 50 had none closed for another within its 3 s, and failed.
func TestEvictionLosesNoHandledRequest(t *testing.T) {
	for _, mode := range []string{"keepalive", "pipelined", "expect", "http10"} {
		for _, tlsOn := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/tls=%v", mode, tlsOn), func(t *testing.T) {
				evictionStress(t, mode, tlsOn)
			})
		}
	}
}

func evictionStress(t *testing.T, mode string, tlsOn bool) {
	var handled sync.Map
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.ReadAll(r.Body)
		handled.Store(r.Header.Get("X-Id"), true)
		fmt.Fprint(w, "ok")
	})
	srv := httptest.NewUnstartedServer(h)
	ln, err := net.Listen("tcp", net.JoinHostPort(testIP(), "0"))
	require.NoError(t, err)
	srv.Listener.Close()
	cl := ListenNoHeadroom(ln, 10, nil) // 8 callers, 2 slots the newcomers churn
	srv.Listener = cl
	srv.Config.ConnContext = cl.ConnContext
	srv.Config.ConnState = cl.ConnState
	srv.Config.ErrorLog = slog.NewLogLogger(slog.DiscardHandler, slog.LevelDebug)
	if tlsOn {
		srv.StartTLS()
	} else {
		srv.Start()
	}
	addr := ln.Addr().String()
	dial := func() (net.Conn, error) {
		if tlsOn {
			c, err := tls.DialWithDialer(&net.Dialer{Timeout: time.Second}, "tcp", addr, &tls.Config{InsecureSkipVerify: true})
			if err != nil {
				return nil, err
			}
			return c, nil
		}
		return net.DialTimeout("tcp", addr, time.Second)
	}

	stop := make(chan struct{})
	var wg sync.WaitGroup
	var failedMu sync.Mutex
	var failed []string
	var answered, ids atomic.Int64
	reqFor := func(id string) string {
		switch mode {
		case "expect":
			return "POST / HTTP/1.1\r\nHost: x\r\nX-Id: " + id + "\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\n"
		case "http10":
			return "GET / HTTP/1.0\r\nConnection: keep-alive\r\nX-Id: " + id + "\r\n\r\n"
		}
		return "POST / HTTP/1.1\r\nHost: x\r\nX-Id: " + id + "\r\nContent-Length: 2\r\n\r\n{}"
	}
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var c net.Conn
			var br *bufio.Reader
			for {
				select {
				case <-stop:
					if c != nil {
						c.Close()
					}
					return
				default:
				}
				if c == nil {
					var err error
					if c, err = dial(); err != nil {
						time.Sleep(time.Millisecond)
						continue
					}
					br = bufio.NewReader(c)
				}
				n := 1
				if mode == "pipelined" {
					n = 2
				}
				var sent []string
				var out strings.Builder
				for range n {
					id := fmt.Sprint(ids.Add(1))
					sent = append(sent, id)
					out.WriteString(reqFor(id))
				}
				c.SetDeadline(time.Now().Add(5 * time.Second))
				_, err := io.WriteString(c, out.String())
				for i := range sent {
					if err == nil && mode == "expect" {
						var resp *http.Response
						if resp, err = http.ReadResponse(br, nil); err == nil && resp.StatusCode == 100 {
							_, err = io.WriteString(c, "{}")
						}
					}
					var resp *http.Response
					if err == nil {
						resp, err = http.ReadResponse(br, nil)
					}
					if err == nil {
						_, err = io.ReadAll(resp.Body)
					}
					if err != nil {
						failedMu.Lock()
						failed = append(failed, sent[i:]...)
						failedMu.Unlock()
						c.Close()
						c = nil
						break
					}
					answered.Add(1)
					if resp.Close {
						c.Close()
						c = nil
						break
					}
				}
				pause := time.Duration(rand.IntN(3000)) * time.Microsecond
				if rand.IntN(200) == 0 {
					// Idle for evictMinAge: a newcomer may close the
					// connection as the next request goes out on it.
					pause = evictMinAge + time.Duration(rand.IntN(300))*time.Millisecond
				}
				select {
				case <-time.After(pause):
				case <-stop:
				}
			}
		}()
	}
	// Newcomers that stay until closed: one is closed for another once
	// open for evictMinAge.
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				c, err := net.DialTimeout("tcp", addr, time.Second)
				if err != nil {
					continue
				}
				go func() { <-stop; c.Close() }()
				c.SetReadDeadline(time.Now().Add(5 * time.Second))
				io.Copy(io.Discard, c) // refused (a 503) or closed
				c.Close()
				time.Sleep(time.Millisecond)
			}
		}()
	}
	// Newcomers: a connection that sends nothing, all the time.
	for range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				c, err := net.DialTimeout("tcp", addr, time.Second)
				if err == nil {
					// Some held past evictMinAge, which a silent
					// connection must reach to be closed for another.
					hold := time.Duration(rand.IntN(2000)) * time.Microsecond
					if rand.IntN(4) == 0 {
						hold = evictMinAge + time.Duration(rand.IntN(500))*time.Millisecond
					}
					select {
					case <-time.After(hold):
					case <-stop:
					}
					c.Close()
				}
			}
		}()
	}
	time.Sleep(3 * time.Second)
	close(stop)
	wg.Wait()

	lost := 0
	for _, id := range failed {
		if _, ok := handled.Load(id); ok {
			lost++
		}
	}
	t.Logf("answered %d, closed without an answer %d (handled anyway: %d), evicted %d, refused %d",
		answered.Load(), len(failed), lost, cl.Evicted(), cl.Refused())
	require.NotZero(t, cl.Evicted(), "no connection was closed for a newcomer: the test tests nothing")
	require.Zero(t, lost, "requests handled whose answer never came")

	srv.Close()
	requireForgotten(t, cl)
}

// Connections that end every way (a failed TLS handshake, nothing sent, a
// header in part, idle after an answer, hijacked and closed by the
// handler or by the client) leave nothing in the listener once gone,
// while the server still runs.
func TestListenerForgetsEveryEndedConnection(t *testing.T) {
	for _, tlsOn := range []bool{false, true} {
		t.Run(fmt.Sprintf("tls=%v", tlsOn), func(t *testing.T) {
			h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path == "/hijack" {
					c, _, err := http.NewResponseController(w).Hijack()
					if err == nil {
						io.WriteString(c, "HTTP/1.1 101 Switching Protocols\r\nConnection: upgrade\r\nUpgrade: x\r\n\r\n")
						if r.Header.Get("X-Keep") == "" {
							c.Close()
						} else {
							go func() { io.Copy(io.Discard, c); c.Close() }()
						}
					}
					return
				}
				fmt.Fprint(w, "ok")
			})
			srv := httptest.NewUnstartedServer(h)
			ln, err := net.Listen("tcp", net.JoinHostPort(testIP(), "0"))
			require.NoError(t, err)
			srv.Listener.Close()
			cl := ListenNoHeadroom(ln, 4, nil)
			srv.Listener = cl
			srv.Config.ConnContext = cl.ConnContext
			srv.Config.ConnState = cl.ConnState
			srv.Config.ErrorLog = slog.NewLogLogger(slog.DiscardHandler, slog.LevelDebug)
			if tlsOn {
				srv.StartTLS()
			} else {
				srv.Start()
			}
			defer srv.Close()
			addr := ln.Addr().String()
			open := func() net.Conn {
				if tlsOn {
					c, err := tls.Dial("tcp", addr, &tls.Config{InsecureSkipVerify: true})
					require.NoError(t, err)
					return c
				}
				c, err := net.Dial("tcp", addr)
				require.NoError(t, err)
				return c
			}
			ask := func(c net.Conn, req string) {
				io.WriteString(c, req)
				c.SetReadDeadline(time.Now().Add(5 * time.Second))
				resp, err := http.ReadResponse(bufio.NewReader(c), nil)
				if err == nil {
					io.Copy(io.Discard, resp.Body)
				}
			}
			for i := range 40 {
				switch i % 6 {
				case 0: // garbage, or a TLS handshake that fails
					c, err := net.Dial("tcp", addr)
					require.NoError(t, err)
					io.WriteString(c, "\x16\x03\x01\x00\x05hello")
					time.Sleep(time.Millisecond)
					c.Close()
				case 1: // nothing sent
					c, err := net.Dial("tcp", addr)
					require.NoError(t, err)
					c.Close()
				case 2: // a header in part
					c := open()
					io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\n")
					c.Close()
				case 3: // idle after an answer
					c := open()
					ask(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
					c.Close()
				case 4: // hijacked, closed by the handler
					c := open()
					ask(c, "GET /hijack HTTP/1.1\r\nHost: x\r\n\r\n")
					c.Close()
				case 5: // hijacked, closed by the client
					c := open()
					ask(c, "GET /hijack HTTP/1.1\r\nHost: x\r\nX-Keep: 1\r\n\r\n")
					c.Close()
				}
			}
			requireForgotten(t, cl)
		})
	}
}

// requireForgotten waits for the listener to hold no connection: none on
// its list, no slot, none open.
func requireForgotten(t *testing.T, cl *ConnListener) {
	t.Helper()
	var list int
	for end := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		cl.mu.Lock()
		list = cl.waiting.Len()
		cl.mu.Unlock()
		if list == 0 && cl.Open() == 0 && cl.api.Load() == 0 {
			return
		}
		if time.Now().After(end) {
			t.Fatalf("the listener holds connections gone: list %d, open %d, slots %d", list, cl.Open(), cl.api.Load())
		}
	}
}
