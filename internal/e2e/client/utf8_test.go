package e2eclient_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/idem-store/idem/client"
	"github.com/idem-store/idem/internal/idemtest"
)

// A string that is not valid UTF-8 is refused before any request. JSON
// carries only UTF-8, and encoding/json sent each invalid byte as U+FFFD:
// two attempts whose claim ids differed only in such bytes both won the
// claim, with the same token, each believing it ran the request alone; a
// tenant whose principal held such bytes could claim, but every replay of
// its key came back as a malformed answer (the stored principal was no
// longer the one asked for).
func TestInvalidUTF8IsRefusedBeforeAnyRequest(t *testing.T) {
	n := idemtest.Start(t, idemtest.Options{})
	c, err := client.New(n.URL)
	if err != nil {
		t.Fatal(err)
	}
	b := c.NewBatcher(client.BatcherConfig{})
	defer b.Close()
	ctx := context.Background()
	for name, claim := range map[string]func(client.ClaimRequest) (*client.ClaimResponse, error){
		"client":  func(r client.ClaimRequest) (*client.ClaimResponse, error) { return c.Claim(ctx, r) },
		"batcher": func(r client.ClaimRequest) (*client.ClaimResponse, error) { return b.Claim(ctx, r) },
	} {
		t.Run(name, func(t *testing.T) {
			key := "k-" + name
			won := 0
			for _, id := range []string{"attempt-\xff", "attempt-\xfe"} {
				res, err := claim(client.ClaimRequest{Principal: "p", Endpoint: "e", Key: key, Fingerprint: "aa", ClaimID: id})
				if err == nil && res.Outcome == client.OutcomeClaimed {
					won++
				}
				if err == nil || !strings.Contains(err.Error(), "claim_id is not valid UTF-8") {
					t.Errorf("claim id %q: got %v, want it refused as not UTF-8", id, err)
				}
			}
			if won > 1 {
				t.Errorf("%d attempts with different claim ids won the same key", won)
			}
			if _, err := c.Get(ctx, "p", "e", key, ""); !errors.Is(err, client.ErrNotFound) {
				t.Errorf("after the refused claims the key is %v, want not_found (nothing sent)", err)
			}
			if _, err := claim(client.ClaimRequest{Principal: "tenant-\xff", Endpoint: "e", Key: key, Fingerprint: "aa"}); err == nil || !strings.Contains(err.Error(), "principal is not valid UTF-8") {
				t.Errorf("principal with a byte not UTF-8: got %v, want it refused", err)
			}
		})
	}
	// The other calls, of both.
	checks := map[string]error{}
	_, checks["Client.Get"] = c.Get(ctx, "p", "e\xff", "k", "")
	_, checks["Batcher.Get"] = b.Get(ctx, "p", "e\xff", "k", "")
	_, checks["Client.Delete"] = c.Delete(ctx, "p", "e", "k\xff")
	bad := client.CompleteRequest{Principal: "p", Endpoint: "e", Key: "k", Token: "t",
		Response: client.Response{Status: 200, Headers: map[string]string{"X-Name": "caf\xe9"}}}
	_, checks["Client.Complete"] = c.Complete(ctx, bad)
	_, checks["Batcher.Complete"] = b.Complete(ctx, bad)
	_, checks["Client.Release"] = c.Release(ctx, client.ReleaseRequest{Principal: "p", Endpoint: "e", Key: "k", Token: "t", Reason: "\xff"})
	_, checks["Batcher.Release"] = b.Release(ctx, client.ReleaseRequest{Principal: "p", Endpoint: "e", Key: "k", Token: "t", Reason: "\xff"})
	_, checks["Client.Extend"] = c.Extend(ctx, client.ExtendRequest{Principal: "\xff", Endpoint: "e", Key: "k", Token: "t", LeaseMs: 1000})
	_, checks["Batcher.Extend"] = b.Extend(ctx, client.ExtendRequest{Principal: "\xff", Endpoint: "e", Key: "k", Token: "t", LeaseMs: 1000})
	for call, err := range checks {
		var p *client.Problem
		if err == nil || errors.As(err, &p) || !strings.Contains(err.Error(), "not valid UTF-8") {
			t.Errorf("%s with a string not UTF-8: got %v, want it refused before any request", call, err)
		}
	}
}
