package api

import (
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
)

// BenchmarkConnListenerKeepAlive: many parallel keep-alive clients of a
// server behind a ConnListener wired as idem serve wires it (ConnState
// included): the cost of the listener-wide bookkeeping on every request
// (without ConnState, none).
func BenchmarkConnListenerKeepAlive(b *testing.B) {
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "ok")
	}))
	ln, err := net.Listen("tcp", net.JoinHostPort(testIP(), "0"))
	if err != nil {
		b.Fatal(err)
	}
	srv.Listener.Close()
	cl := Listen(ln, 4096, nil)
	srv.Listener = cl
	srv.Config.ConnContext = cl.ConnContext
	srv.Config.ConnState = cl.ConnState
	srv.Start()
	defer srv.Close()
	client := &http.Client{Transport: &http.Transport{MaxIdleConns: 256, MaxIdleConnsPerHost: 256}}
	defer client.CloseIdleConnections()
	url := "http://" + ln.Addr().String() + "/"
	b.SetParallelism(32)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			resp, err := client.Get(url)
			if err != nil {
				b.Error(err)
				return
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
	})
}

// BenchmarkConnStateParallel: what a request adds to the listener (its
// StateActive and StateIdle), from many connections at once.
func BenchmarkConnStateParallel(b *testing.B) {
	ln, err := net.Listen("tcp", net.JoinHostPort(testIP(), "0"))
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	cl := Listen(ln, 1<<20, nil)
	b.SetParallelism(32)
	b.RunParallel(func(pb *testing.PB) {
		c := &limitedConn{l: cl}
		cl.ConnState(c, http.StateNew)
		for pb.Next() {
			cl.ConnState(c, http.StateActive)
			cl.ConnState(c, http.StateIdle)
		}
		cl.ConnState(c, http.StateClosed)
	})
}
