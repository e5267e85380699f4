package client

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"
)

// racyConn makes the end of ctx land exactly between the moment the
// transport has read a final answer to an Expect: 100-continue request and
// the moment it clears the wait's read deadline: the deadline the end of
// ctx sets (exchange's context.AfterFunc) comes first.
type racyConn struct {
	net.Conn
	cancel  context.CancelFunc
	once    sync.Once
	ctxDone chan struct{} // closed when the end of ctx set its deadline
	mu      sync.Mutex
	armed   bool
}

func (c *racyConn) SetDeadline(t time.Time) error {
	err := c.Conn.SetDeadline(t)
	if t.Equal(time.Unix(1, 0)) {
		c.once.Do(func() { close(c.ctxDone) })
	}
	return err
}

func (c *racyConn) SetReadDeadline(t time.Time) error {
	c.mu.Lock()
	if !t.IsZero() {
		c.armed = true // the wait for the go-ahead began
	}
	fire := c.armed && t.IsZero()
	c.mu.Unlock()
	if fire {
		c.cancel()
		<-c.ctxDone
	}
	return c.Conn.SetReadDeadline(t)
}

// A caller whose context ends while a node's final answer to a request
// that asked with Expect: 100-continue is read gets the end of its context
// when it reads the body, not a read that waits on the node for ever: the
// transport cleared the read deadline that the end of ctx had just set.
func TestTransportExpectContinueCancelWhileAnswerReadEndsTheBody(t *testing.T) {
	hold := make(chan struct{})
	t.Cleanup(func() { close(hold) })
	url := rawServer(t, func(c net.Conn) {
		defer c.Close()
		br := bufio.NewReader(c)
		if _, err := http.ReadRequest(br); err != nil {
			return
		}
		// A 413 whose body never comes in full (a node that hangs).
		fmt.Fprintf(c, "HTTP/1.1 413 Request Entity Too Large\r\nContent-Length: 100\r\nConnection: close\r\n\r\n{")
		<-hold
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	st := newSyncTransport(time.Second, nil)
	dial := st.dial
	st.dial = func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return &racyConn{Conn: c, cancel: cancel, ctxDone: make(chan struct{})}, nil
	}
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url+"/v1/complete", bytes.NewReader(bytes.Repeat([]byte("x"), 1024)))
	req.Header.Set("Expect", "100-continue")
	resp, err := st.RoundTrip(req)
	if err != nil {
		return // the end of ctx seen at once: fine
	}
	done := make(chan error, 1)
	go func() {
		_, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		done <- err
	}()
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("the body read to its end, though the node sent 1 byte of 100")
		}
	case <-time.After(3 * time.Second):
		t.Fatal("the body's read hangs on the node after the caller's context ended")
	}
}

// A node (or a proxy) that sends a 103 and then nothing more gets the body
// after the second's wait, as net/http sends it, and as it does when
// nothing at all comes: the 103 is no go-ahead nor refusal.
func TestTransportExpectContinueSendsTheBodyAfterA103AndSilence(t *testing.T) {
	forEachScheme(t, func(t *testing.T, sch testScheme) {
		url := expectServer(t, sch, func(c net.Conn, br *bufio.Reader, n int) {
			io.WriteString(c, "HTTP/1.1 103 Early Hints\r\nLink: </x>\r\n\r\n")
			m, err := io.CopyN(io.Discard, br, int64(n))
			if err != nil {
				return
			}
			s := fmt.Sprint(m)
			fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s", len(s), s)
		})
		resp, body := postExpecting(t, sch, url, 256<<10)
		if resp.StatusCode != http.StatusOK || body != fmt.Sprint(256<<10) {
			t.Fatalf("got %d %q, want 200 and the whole body received", resp.StatusCode, body)
		}
	})
}
