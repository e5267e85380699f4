package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/idem-store/idem/wire"
)

// A status outside RFC 9110's 100-599 (net/http reads any three digits)
// came back as a *Problem of that status: 600-999 passed for a 5xx outage,
// which the middleware asks again and, with FailOpen, then runs its handler
// unprotected after. It is ErrBadAnswer now, as any answer that is not a
// store's, from a single call and in a batch's results alike.
func TestStatusThatIsNoHTTPStatusIsABadAnswer(t *testing.T) {
	for _, status := range []int{101, 600, 999} {
		url := rawServer(t, func(c net.Conn) {
			defer c.Close()
			buf := make([]byte, 4096)
			c.Read(buf)
			fmt.Fprintf(c, "HTTP/1.1 %d Odd\r\nContent-Type: application/problem+json\r\nContent-Length: 30\r\n\r\n{\"status\":503,\"code\":\"unavai\"}", status)
		})
		c, err := New(url)
		if err != nil {
			t.Fatal(err)
		}
		_, err = c.Claim(context.Background(), ClaimRequest{Principal: "p", Endpoint: "e", Key: "k", Fingerprint: "ab"})
		var p *Problem
		if !errors.Is(err, ErrBadAnswer) || errors.As(err, &p) {
			t.Errorf("status %d: %v, want ErrBadAnswer and no *Problem", status, err)
		}
	}
	for _, status := range []int{0, 99, 150, 600, 999} {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			var req struct{ Ops []json.RawMessage }
			json.NewDecoder(r.Body).Decode(&req)
			out := wire.BatchResponse{}
			for range req.Ops {
				out.Results = append(out.Results, wire.BatchResult{Status: status, Body: json.RawMessage(`{"status":503,"code":"unavailable"}`)})
			}
			json.NewEncoder(w).Encode(out)
		}))
		c, err := New(srv.URL)
		if err != nil {
			t.Fatal(err)
		}
		b := c.NewBatcher(BatcherConfig{})
		_, err = b.Claim(context.Background(), ClaimRequest{Principal: "p", Endpoint: "e", Key: "k", Fingerprint: "ab"})
		var p *Problem
		if !errors.Is(err, ErrBadAnswer) || errors.As(err, &p) {
			t.Errorf("batch result status %d: %v, want ErrBadAnswer and no *Problem", status, err)
		}
		raw, err := c.Do(context.Background(), http.MethodPost, "/v1/batch", nil, wire.BatchRequest{Ops: []wire.BatchOp{{Op: wire.OpClaim, Body: &ClaimRequest{Principal: "p", Endpoint: "e", Key: "k", Fingerprint: "ab"}}}})
		if !errors.Is(err, ErrBadAnswer) {
			t.Errorf("Do of a batch, result status %d: %s, %v; want ErrBadAnswer", status, raw, err)
		}
		b.Close()
		srv.Close()
	}
}

// A problem document's texts are bounded: a detail of megabytes (up to
// 64 MiB of an answer are read) went whole into the middleware's log line
// and, for a 400, into the answer it made for its caller. Raw keeps it.
func TestProblemTextsAreBounded(t *testing.T) {
	big := strings.Repeat("é", 1<<20)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/problem+json")
		w.WriteHeader(http.StatusBadRequest)
		json.NewEncoder(w).Encode(map[string]any{"status": 400, "code": "invalid_request", "title": big, "detail": big})
	}))
	defer srv.Close()
	c, err := New(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Claim(context.Background(), ClaimRequest{Principal: "p", Endpoint: "e", Key: "k", Fingerprint: "ab"})
	var p *Problem
	if !errors.As(err, &p) || !errors.Is(err, ErrInvalidRequest) {
		t.Fatalf("got %v, want a 400 invalid_request", err)
	}
	if len(p.Detail) > 16<<10+len("…") || len(p.Title) > 1<<10+len("…") || !utf8.ValidString(p.Detail) || !utf8.ValidString(p.Title) {
		t.Errorf("detail of %d bytes, title of %d: want at most %d and %d, valid UTF-8", len(p.Detail), len(p.Title), 16<<10, 1<<10)
	}
	if len(p.Raw) < 2<<20 {
		t.Errorf("Raw of %d bytes: want the answer whole", len(p.Raw))
	}
}
