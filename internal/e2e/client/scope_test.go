package e2eclient_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/idem-store/idem/client"
	"github.com/idem-store/idem/internal/idemtest"
	"github.com/idem-store/idem/wire"
)

// A record in an answer must be of the scope asked for. A node only ever
// answers with that one, so another comes from something between it and
// the client (a cache or proxy that mixed answers up): taken, its stored
// response would be replayed to the wrong request, another tenant's to a
// caller. Client and Batcher alike refuse it as a malformed answer, and
// the message names none of the other record's values. Bug: the client
// handed the caller whatever record came back.
func TestRecordOfAnotherScopeIsABadAnswer(t *testing.T) {
	const asked = `"principal":"cus_1","endpoint":"POST /payments","key":"k1"`
	for name, scope := range map[string]string{
		"principal": `"principal":"cus_2","endpoint":"POST /payments","key":"k1"`,
		"key":       `"principal":"cus_1","endpoint":"POST /payments","key":"k2"`,
		"both":      `"principal":"cus_2","endpoint":"POST /payments","key":"k2"`,
		"matching":  asked,
	} {
		t.Run(name, func(t *testing.T) {
			rec := `{` + scope + `,"state":"completed","fingerprint":"aa","attempt":1,` +
				`"created_at":"2026-11-30T06:14:58.856Z","expires_at":"2026-12-01T06:14:58.856Z",` +
				`"completed_at":"2026-11-30T06:14:59.102Z","response":{"status":201,"body":"c2VjcmV0"}}`
			node := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				switch {
				case r.URL.Path == "/v1/batch":
					body, _ := io.ReadAll(r.Body)
					if strings.Contains(string(body), `"op":"get"`) {
						io.WriteString(w, `{"results":[{"status":200,"body":{"record":`+rec+`}}]}`)
					} else {
						io.WriteString(w, `{"results":[{"status":200,"body":{"outcome":"replay","record":`+rec+`}}]}`)
					}
				case r.URL.Path == "/v1/records":
					io.WriteString(w, `{"record":`+rec+`}`)
				default:
					io.WriteString(w, `{"outcome":"replay","record":`+rec+`}`)
				}
			}))
			defer node.Close()
			c, err := client.New(node.URL)
			if err != nil {
				t.Fatal(err)
			}
			b := c.NewBatcher(client.BatcherConfig{})
			defer b.Close()
			ctx := context.Background()
			req := client.ClaimRequest{Principal: "cus_1", Endpoint: "POST /payments", Key: "k1", Fingerprint: "aa"}
			check := func(what string, got any, err error) {
				t.Helper()
				if name == "matching" {
					if err != nil {
						t.Errorf("%s of the scope asked for: %v", what, err)
					}
					return
				}
				if !errors.Is(err, client.ErrBadAnswer) {
					t.Errorf("%s: got %T, %v; want ErrBadAnswer", what, got, err)
					return
				}
				if strings.Contains(err.Error(), "cus_2") || strings.Contains(err.Error(), "k2") {
					t.Errorf("%s: the error names the other record's scope: %v", what, err)
				}
			}
			res, err := c.Claim(ctx, req)
			check("Client.Claim", res, err)
			rec2, err := c.Get(ctx, "cus_1", "POST /payments", "k1", "")
			check("Client.Get", rec2, err)
			res, err = b.Claim(ctx, req)
			check("Batcher.Claim", res, err)
			rec2, err = b.Get(ctx, "cus_1", "POST /payments", "k1", "")
			check("Batcher.Get", rec2, err)
		})
	}
}

// With --scope principal a record is found by principal and key, and
// shows the endpoint of its first claim: a claim or lookup naming another
// endpoint gets it, from a real node, and the check of an answer's scope
// takes it (the endpoint is not compared).
func TestPrincipalScopeRecordOfAnotherEndpointIsTaken(t *testing.T) {
	n := idemtest.Start(t, idemtest.Options{PrincipalScope: true})
	c, err := client.New(n.URL)
	if err != nil {
		t.Fatal(err)
	}
	b := c.NewBatcher(client.BatcherConfig{})
	defer b.Close()
	ctx := context.Background()
	first, err := c.Claim(ctx, client.ClaimRequest{Principal: "cus_1", Endpoint: "POST /payments", Key: "k1", Fingerprint: "aa"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Complete(ctx, client.CompleteRequest{Principal: "cus_1", Endpoint: "POST /payments", Key: "k1",
		Token: first.Token, Response: client.Response{Status: 201, Body: []byte("ok")}}); err != nil {
		t.Fatal(err)
	}
	other := client.ClaimRequest{Principal: "cus_1", Endpoint: "POST /refunds", Key: "k1", Fingerprint: "aa"}
	for name, claim := range map[string]func(context.Context, client.ClaimRequest) (*client.ClaimResponse, error){
		"Client": c.Claim, "Batcher": b.Claim,
	} {
		res, err := claim(ctx, other)
		if err != nil || res.Outcome != client.OutcomeReplay || res.Record.Endpoint != "POST /payments" {
			t.Fatalf("%s: claim from another endpoint: %+v, %v; want the replay of the first endpoint's record", name, res, err)
		}
	}
	for name, get := range map[string]func(context.Context, string, string, string, string) (*client.Record, error){
		"Client": c.Get, "Batcher": b.Get,
	} {
		if rec, err := get(ctx, "cus_1", "POST /refunds", "k1", ""); err != nil || rec.Endpoint != "POST /payments" {
			t.Fatalf("%s: lookup from another endpoint: %+v, %v", name, rec, err)
		}
	}
}

// In a batch answer, one op's record of another scope refuses the whole
// answer: its results are not known to be in the order of the ops, so not
// even the other op's won claim (and its token) is taken.
func TestBatchAnswerWithARecordOfAnotherScopeIsRefusedWhole(t *testing.T) {
	node := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"results":[{"status":201,"body":{"outcome":"claimed","token":"t1","attempt":1}},`+
			`{"status":200,"body":{"outcome":"replay","record":{"principal":"cus_1","endpoint":"e","key":"k9",`+
			`"state":"completed","response":{"status":200,"body":""}}}}]}`)
	}))
	defer node.Close()
	c, err := client.New(node.URL)
	if err != nil {
		t.Fatal(err)
	}
	ops := wire.BatchRequest{Ops: []wire.BatchOp{
		{Op: wire.OpClaim, Body: &client.ClaimRequest{Principal: "cus_1", Endpoint: "e", Key: "k1", Fingerprint: "aa"}},
		{Op: wire.OpClaim, Body: &client.ClaimRequest{Principal: "cus_1", Endpoint: "e", Key: "k2", Fingerprint: "aa"}},
	}}
	raw, err := c.Do(context.Background(), http.MethodPost, "/v1/batch", nil, ops)
	if !errors.Is(err, client.ErrBadAnswer) || !strings.Contains(err.Error(), "claim op 2") {
		t.Fatalf("got %s, %v; want ErrBadAnswer naming op 2", raw, err)
	}
}

// An answer with more results than the ops is not this request's (a cache
// or proxy in front that mixed answers up), and Do refuses it as it refuses
// a record of another scope: the check was skipped when the counts
// differed, and so was it when one op did not decode (an op the server
// refuses, holding no record), and a caller taking the results by place
// got another tenant's record for its op.
func TestDoRefusesABatchAnswerOfAnotherRequest(t *testing.T) {
	other := `{"status":200,"body":{"outcome":"replay","record":{"principal":"cus_2","endpoint":"e","key":"k1",` +
		`"state":"completed","response":{"status":200,"body":""}}}}`
	answer := ""
	node := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, answer)
	}))
	defer node.Close()
	c, err := client.New(node.URL)
	if err != nil {
		t.Fatal(err)
	}
	claim := func(key string) wire.BatchOp {
		return wire.BatchOp{Op: wire.OpClaim, Body: &client.ClaimRequest{Principal: "cus_1", Endpoint: "e", Key: key, Fingerprint: "aa"}}
	}
	answer = `{"results":[` + other + `,{"status":201,"body":{"outcome":"claimed","token":"t1","attempt":1}}]}`
	raw, err := c.Do(context.Background(), http.MethodPost, "/v1/batch", nil, wire.BatchRequest{Ops: []wire.BatchOp{claim("k1")}})
	if !errors.Is(err, client.ErrBadAnswer) || !strings.Contains(err.Error(), "2 results for 1 ops") {
		t.Fatalf("got %s, %v; want ErrBadAnswer: 2 results for 1 ops", raw, err)
	}
	// One op the server would refuse (its principal is not a string) and
	// one whose result holds another principal's record.
	answer = `{"results":[{"status":400,"body":{"status":400,"code":"invalid_request"}},` + other + `]}`
	bad := wire.BatchOp{Op: wire.OpClaim, Body: map[string]any{"principal": 1, "endpoint": "e", "key": "k0", "fingerprint": "aa"}}
	raw, err = c.Do(context.Background(), http.MethodPost, "/v1/batch", nil, wire.BatchRequest{Ops: []wire.BatchOp{bad, claim("k1")}})
	if !errors.Is(err, client.ErrBadAnswer) || !strings.Contains(err.Error(), "claim op 2") {
		t.Fatalf("got %s, %v; want ErrBadAnswer naming op 2", raw, err)
	}
}
