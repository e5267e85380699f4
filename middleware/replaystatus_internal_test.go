package middleware

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/idem-store/idem/client"
)

// replayStore answers every claim with a replay of rec.
type replayStore struct{ rec client.Record }

func (s *replayStore) Claim(ctx context.Context, req client.ClaimRequest) (*client.ClaimResponse, error) {
	r := s.rec
	r.Principal, r.Endpoint, r.Key = req.Principal, req.Endpoint, req.Key
	return &client.ClaimResponse{Outcome: client.OutcomeReplay, StatusCode: http.StatusOK, Record: &r}, nil
}

func (s *replayStore) Complete(context.Context, client.CompleteRequest) (*client.CompleteResponse, error) {
	return &client.CompleteResponse{Outcome: client.OutcomeCompleted}, nil
}

func (s *replayStore) Release(context.Context, client.ReleaseRequest) (*client.ReleaseResponse, error) {
	return &client.ReleaseResponse{Outcome: client.OutcomeReleased}, nil
}

func (s *replayStore) Extend(context.Context, client.ExtendRequest) (*client.ExtendResponse, error) {
	return &client.ExtendResponse{Outcome: client.OutcomeExtended}, nil
}

// replayedHead sends one keyed POST over a raw connection to a middleware
// replaying resp, and returns what came back up to the connection's end or
// a second's silence.
func replayedHead(t *testing.T, resp client.Response) string {
	t.Helper()
	mw, err := New(Options{Store: &replayStore{rec: client.Record{State: client.StateCompleted, Response: &resp}}, Principal: AnonymousPrincipal})
	if err != nil {
		t.Fatal(err)
	}
	srv := newTestServer(t, mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { t.Error("the handler ran on a replay") })))
	defer srv.Close()
	c, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(time.Second))
	fmt.Fprintf(c, "POST /pay HTTP/1.1\r\nHost: x\r\nIdempotency-Key: \"k1\"\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}")
	b, _ := io.ReadAll(bufio.NewReader(c))
	return string(b)
}

// A stored answer of a 1xx status (the store takes 100-599 through its
// API; another writer of the key stored it) was written as the answer: a
// 103 went out as an informational answer followed by "200 OK" with the
// stored body, a 101 switched the caller's connection to nothing, and it
// hung. The middleware answers 500 stored_answer_not_final instead.
func TestReplayOfA1xxIsNotWritten(t *testing.T) {
	for _, status := range []int{100, 101, 103} {
		got := replayedHead(t, client.Response{Status: status, Headers: map[string]string{"X-A": "1"}, Body: []byte("stored")})
		if !strings.HasPrefix(got, "HTTP/1.1 500 ") || strings.Count(got, "HTTP/1.1") != 1 || !strings.Contains(got, "stored_answer_not_final") {
			t.Errorf("replay of a stored %d: got\n%s", status, got)
		}
	}
}

// A stored header name not in canonical form ("content-type") was
// replayed as it was, beside the Content-Type the replay sets: two
// Content-Type headers, the caller's client picking either.
func TestReplayWritesEachHeaderOnce(t *testing.T) {
	got := replayedHead(t, client.Response{Status: 200, ContentType: "application/json",
		Headers: map[string]string{"content-type": "text/html", "x-request-id": "r1"}, Body: []byte("{}")})
	if n := strings.Count(strings.ToLower(got), "\r\ncontent-type:"); n != 1 || !strings.Contains(got, "\r\nContent-Type: application/json\r\n") {
		t.Errorf("%d Content-Type headers, want application/json once:\n%s", n, got)
	}
	if !strings.Contains(got, "\r\nX-Request-Id: r1\r\n") {
		t.Errorf("the stored X-Request-Id is not replayed:\n%s", got)
	}
}

// Header names that differ only in case are stored apart (a handler that
// set w.Header()["set-cookie"] beside Header().Add("Set-Cookie", ...)), and
// both went out on the first answer. Canonicalised at the replay, one of
// them replaced the other, picked at random by map order: a replay lost a
// cookie. Their values are joined, in the order net/http sent them.
func TestReplayKeepsHeadersWhoseNamesDifferInCase(t *testing.T) {
	for range 20 {
		got := replayedHead(t, client.Response{Status: 201,
			Headers:     map[string]string{"set-cookie": "a=1", "x-legacy": "L", "X-Legacy": "C"},
			HeaderLists: map[string][]string{"Set-Cookie": {"b=2", "c=3"}},
			Body:        []byte("ok")})
		if !strings.Contains(got, "\r\nSet-Cookie: b=2\r\nSet-Cookie: c=3\r\nSet-Cookie: a=1\r\n") {
			t.Fatalf("want the three cookies, Set-Cookie's then set-cookie's:\n%s", got)
		}
		if !strings.Contains(got, "\r\nX-Legacy: C\r\nX-Legacy: L\r\n") {
			t.Fatalf("want both X-Legacy values:\n%s", got)
		}
	}
}
