package client

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
)

// A replay hands the caller a stored answer to send as its own, so one
// without a stored answer of an HTTP status (100-599, all a node stores) is
// a malformed answer, from a Client and a Batcher alike. Bug: only a
// missing record was refused, and a status of 0 or 1000 reached the
// middleware, whose WriteHeader panicked: the caller's connection dropped
// with no answer.
func TestReplayWithoutAStoredAnswerIsABadAnswer(t *testing.T) {
	for _, rec := range []string{
		`{"state":"completed","response":{"status":0,"body":""}}`,
		`{"state":"completed","response":{"status":1000,"body":""}}`,
		`{"state":"completed","response":{"status":99,"body":""}}`,
		`{"state":"completed"}`,
	} {
		node := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			if r.URL.Path == "/v1/batch" {
				io.WriteString(w, `{"results":[{"status":200,"body":{"outcome":"replay","record":`+rec+`}}]}`)
				return
			}
			io.WriteString(w, `{"outcome":"replay","record":`+rec+`}`)
		}))
		c, err := New(node.URL)
		if err != nil {
			t.Fatal(err)
		}
		req := ClaimRequest{Principal: "p", Endpoint: "e", Key: "k", Fingerprint: "aa"}
		if res, err := c.Claim(context.Background(), req); !errors.Is(err, ErrBadAnswer) {
			t.Errorf("Client, record %s: got %+v, %v; want ErrBadAnswer", rec, res, err)
		}
		b := c.NewBatcher(BatcherConfig{})
		if res, err := b.Claim(context.Background(), req); !errors.Is(err, ErrBadAnswer) {
			t.Errorf("Batcher, record %s: got %+v, %v; want ErrBadAnswer", rec, res, err)
		}
		b.Close()
		node.Close()
	}
}
