package client

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// expectServer reads a request's head, checks it asked with Expect:
// 100-continue, and hands over to then, with the declared body length.
func expectServer(t *testing.T, sch testScheme, then func(c net.Conn, br *bufio.Reader, n int)) string {
	return sch.rawServer(t, func(c net.Conn) {
		defer c.Close()
		br := bufio.NewReader(c)
		req, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		if req.Header.Get("Expect") != "100-continue" {
			fmt.Fprintf(c, "HTTP/1.1 400 Bad Request\r\nContent-Length: 9\r\nConnection: close\r\n\r\nno expect")
			return
		}
		then(c, br, int(req.ContentLength))
	})
}

func postExpecting(t *testing.T, sch testScheme, url string, n int) (*http.Response, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url+"/v1/complete", bytes.NewReader(bytes.Repeat([]byte("x"), n)))
	req.Header.Set("Expect", "100-continue")
	resp, err := (&http.Client{Transport: NewTransport(sch.clientTLS())}).Do(req)
	if err != nil {
		t.Fatalf("post: %v", err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, string(b)
}

// A node that refuses the request on its head alone (a 413 past its
// --max-request-bytes) is answered without a byte of the body sent.
func TestTransportExpectContinueFinalAnswerSkipsTheBody(t *testing.T) {
	forEachScheme(t, func(t *testing.T, sch testScheme) {
		var got atomic.Int64
		got.Store(-1)
		url := expectServer(t, sch, func(c net.Conn, br *bufio.Reader, n int) {
			body := `{"code":"request_too_large"}`
			fmt.Fprintf(c, "HTTP/1.1 413 Request Entity Too Large\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s", len(body), body)
			c.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
			m, _ := io.Copy(io.Discard, br)
			got.Store(m)
		})
		resp, body := postExpecting(t, sch, url, 256<<10)
		if resp.StatusCode != http.StatusRequestEntityTooLarge || !strings.Contains(body, "request_too_large") {
			t.Fatalf("got %d %q, want the 413", resp.StatusCode, body)
		}
		deadline := time.Now().Add(5 * time.Second)
		for got.Load() < 0 && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		if m := got.Load(); m != 0 {
			t.Fatalf("the node received %d bytes of a body it refused on the head", m)
		}
	})
}

// A go-ahead (after a 103, which is skipped) gets the body sent, and a node
// that says nothing gets it after a second: a proxy on the way may not
// pass 100 Continue on.
func TestTransportExpectContinueSendsTheBodyOnGoAheadOrSilence(t *testing.T) {
	for _, tc := range []struct {
		name  string
		first string
	}{
		{"go-ahead", "HTTP/1.1 103 Early Hints\r\nLink: </x>\r\n\r\nHTTP/1.1 100 Continue\r\n\r\n"},
		{"silence", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			forEachScheme(t, func(t *testing.T, sch testScheme) {
				url := expectServer(t, sch, func(c net.Conn, br *bufio.Reader, n int) {
					io.WriteString(c, tc.first)
					m, err := io.CopyN(io.Discard, br, int64(n))
					if err != nil {
						return
					}
					s := strconv.FormatInt(m, 10)
					fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s", len(s), s)
				})
				resp, body := postExpecting(t, sch, url, 256<<10)
				if resp.StatusCode != http.StatusOK || body != strconv.Itoa(256<<10) {
					t.Fatalf("got %d %q, want 200 and the whole body received", resp.StatusCode, body)
				}
			})
		})
	}
}
