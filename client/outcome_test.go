package client

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/idem-store/idem/wire"
)

// A 2xx that is not the route's answer (a service that answers every POST
// 200 {"ok":true}, a careless --addr; another op's answer mixed in) was
// taken for a stored complete, a release or an extend: the middleware
// answered its caller and left the key in progress, so a retry once the
// lease ran out ran the request again. Each call now wants its route's
// outcome, and a complete's record must be of the scope asked for.
func TestAnswerOfAnotherRouteIsABadAnswer(t *testing.T) {
	body := `{"ok":true}`
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, body)
	}))
	defer srv.Close()
	c, err := New(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	calls := map[string]func() error{
		"complete": func() error {
			_, err := c.Complete(ctx, CompleteRequest{Principal: "p", Endpoint: "e", Key: "k", Token: "1.a", Response: Response{Status: 200}})
			return err
		},
		"release": func() error {
			_, err := c.Release(ctx, ReleaseRequest{Principal: "p", Endpoint: "e", Key: "k", Token: "1.a"})
			return err
		},
		"extend": func() error {
			_, err := c.Extend(ctx, ExtendRequest{Principal: "p", Endpoint: "e", Key: "k", Token: "1.a", LeaseMs: 1000})
			return err
		},
		"delete": func() error {
			_, err := c.Delete(ctx, "p", "e", "k")
			return err
		},
	}
	for _, b := range []string{`{"ok":true}`, `{}`, `{"outcome":"claimed","token":"1.a"}`, `{"outcome":"extended"}`} {
		body = b
		for name, call := range calls {
			if strings.Contains(b, `"extended"`) && name == "extend" {
				continue
			}
			if err := call(); !errors.Is(err, ErrBadAnswer) {
				t.Errorf("%s answered 200 %s: %v, want ErrBadAnswer", name, b, err)
			}
		}
	}
	body = `{"outcome":"completed","record":{"principal":"p","endpoint":"e","key":"other","state":"completed"}}`
	if err := calls["complete"](); !errors.Is(err, ErrBadAnswer) {
		t.Errorf("complete answered with another key's record: %v, want ErrBadAnswer", err)
	}
	body = `{"outcome":"completed","record":{"principal":"p","endpoint":"e","key":"k","state":"completed"}}`
	if err := calls["complete"](); err != nil {
		t.Errorf("complete answered as a node does: %v", err)
	}
}

// The results of a batch are matched to its ops by place. A batch
// answered out of order (a complete's answer at a claim's place and the
// other way round) handed the complete's caller a claim's answer as its
// success; now the whole answer is refused, the won claim's token
// included (it shows no scope, so it may be another caller's).
func TestBatcherRefusesResultsOfAnotherOpsKind(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req struct{ Ops []map[string]any }
		json.NewDecoder(r.Body).Decode(&req)
		out := wire.BatchResponse{}
		for _, op := range req.Ops {
			// Each op gets the other's answer: the claim a release's,
			// the release a claim's.
			switch op["op"] {
			case wire.OpClaim:
				out.Results = append(out.Results, wire.BatchResult{Status: 200, Body: json.RawMessage(`{"outcome":"released"}`)})
			default:
				out.Results = append(out.Results, wire.BatchResult{Status: 201, Body: json.RawMessage(`{"outcome":"claimed","token":"1.a","attempt":1}`)})
			}
		}
		json.NewEncoder(w).Encode(out)
	}))
	defer srv.Close()
	c, err := New(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	b := c.NewBatcher(BatcherConfig{})
	defer b.Close()
	claim := &ClaimRequest{Principal: "p", Endpoint: "e", Key: "a", Fingerprint: "aa"}
	rel := &ReleaseRequest{Principal: "p", Endpoint: "e", Key: "b", Token: "2.b"}
	var live []*batchCall
	for _, o := range []wire.BatchOp{{Op: wire.OpClaim, Body: claim}, {Op: wire.OpRelease, Body: rel}} {
		op, err := o.MarshalJSON()
		if err != nil {
			t.Fatal(err)
		}
		live = append(live, &batchCall{ctx: context.Background(), op: op, done: make(chan batchAnswer, 1), scope: opScope{Op: o.Op}})
	}
	for i, a := range b.post(live) {
		if !errors.Is(a.err, ErrBadAnswer) {
			t.Errorf("op %d: got %d %s, %v; want ErrBadAnswer", i+1, a.res.Status, a.res.Body, a.err)
		}
	}
	// Through the Batcher's own calls, one at a time: each is refused.
	if _, err := b.Release(context.Background(), *rel); !errors.Is(err, ErrBadAnswer) {
		t.Errorf("release answered with a claim's answer: %v, want ErrBadAnswer", err)
	}
	// And through Client.Do: a raw batch is checked as the Batcher's.
	raw, err := c.Do(context.Background(), http.MethodPost, "/v1/batch", nil, wire.BatchRequest{Ops: []wire.BatchOp{{Op: wire.OpClaim, Body: claim}, {Op: wire.OpRelease, Body: rel}}})
	if !errors.Is(err, ErrBadAnswer) {
		t.Errorf("Do: %s, %v; want ErrBadAnswer", raw, err)
	}
}
