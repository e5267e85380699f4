package e2eclient_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/idem-store/idem/client"
	"github.com/idem-store/idem/internal/idemtest"
)

// A complete whose body is over the node's --max-request-bytes gets the
// node's 413, every time: the node refuses such a body unread and closes
// the connection, so a client still writing it could meet a reset instead
// ("outcome unknown" to its caller, for a write that never happened). The
// client asks with Expect: 100-continue for a large body and reads the
// answer before it sends the body. The record stays claimed.
func TestLargeBodyOverTheNodeLimitGetsThe413(t *testing.T) {
	n := idemtest.Start(t, idemtest.Options{MaxRequestBytes: 64 << 10, MaxResponseBytes: 64 << 20})
	// Both transports: the client's own, and net/http's (through a proxy,
	// outside Linux and the BSDs, or given WithHTTPClient).
	for name, opts := range map[string][]client.Option{
		"own transport": nil,
		"net/http":      {client.WithHTTPClient(&http.Client{Transport: &http.Transport{ExpectContinueTimeout: time.Second}})},
	} {
		t.Run(name, func(t *testing.T) { completeOverLimit(t, n, opts) })
	}
}

func completeOverLimit(t *testing.T, n *idemtest.Node, opts []client.Option) {
	c, err := client.New(n.URL, opts...)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	body := bytes.Repeat([]byte("x"), 24<<20)
	for i := range 5 {
		key := fmt.Sprintf("%s-%d", t.Name(), i)
		cl, err := c.Claim(ctx, client.ClaimRequest{Principal: "p", Endpoint: "e", Key: key, Fingerprint: "ab"})
		if err != nil {
			t.Fatalf("claim %d: %v", i, err)
		}
		_, err = c.Complete(ctx, client.CompleteRequest{Principal: "p", Endpoint: "e", Key: key, Token: cl.Token,
			Response: client.Response{Status: 200, Body: body}})
		if !errors.Is(err, client.ErrRequestTooLarge) {
			t.Fatalf("complete %d with a body over the limit: want the 413 request_too_large, got %v", i, err)
		}
		rec, err := c.Get(ctx, "p", "e", key, "")
		if err != nil {
			t.Fatalf("get %d: %v", i, err)
		}
		if rec.State != "in_progress" {
			t.Fatalf("record %d after the refused complete: state %q, want in_progress", i, rec.State)
		}
	}
	// A small body still goes without the extra round trip, and works.
	cl, err := c.Claim(ctx, client.ClaimRequest{Principal: "p", Endpoint: "e", Key: t.Name() + "-small", Fingerprint: "ab"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Complete(ctx, client.CompleteRequest{Principal: "p", Endpoint: "e", Key: t.Name() + "-small", Token: cl.Token,
		Response: client.Response{Status: 200, Body: []byte("ok")}}); err != nil {
		t.Fatalf("small complete: %v", err)
	}
}

// The client asks with Expect: 100-continue only for a body over 64 KiB.
func TestExpectContinueOnlyForLargeBodies(t *testing.T) {
	expects := map[int]string{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		expects[len(b)/1024] = r.Header.Get("Expect")
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"outcome":"completed"}`)
	}))
	defer srv.Close()
	c, err := client.New(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []int{1 << 10, 40 << 10, 200 << 10} {
		if _, err := c.Complete(context.Background(), client.CompleteRequest{Principal: "p", Endpoint: "e", Key: "k", Token: "1",
			Response: client.Response{Status: 200, Body: bytes.Repeat([]byte("x"), n)}}); err != nil {
			t.Fatal(err)
		}
	}
	// Bodies are base64 in JSON: 4/3 of the response body, and a little.
	if e := expects[1]; e != "" {
		t.Errorf("1 KiB body sent with Expect %q", e)
	}
	if e := expects[53]; e != "" {
		t.Errorf("53 KiB body sent with Expect %q", e)
	}
	if e := expects[266]; e != "100-continue" {
		t.Errorf("266 KiB body sent with Expect %q, want 100-continue (saw %v)", e, expects)
	}
}
