package e2eclient_test

import (
	"context"
	"testing"

	"github.com/idem-store/idem/client"
	"github.com/idem-store/idem/internal/idemtest"
)

// A nil context is an error from a Batcher's calls, as from a Client's
// (net/http refuses it), and nothing is sent. Bug: the Batcher's call
// panicked with a nil dereference.
func TestBatcherRefusesANilContext(t *testing.T) {
	n := idemtest.Start(t, idemtest.Options{})
	c, err := client.New(n.URL)
	if err != nil {
		t.Fatal(err)
	}
	b := c.NewBatcher(client.BatcherConfig{})
	defer b.Close()
	var nilCtx context.Context // a careless caller's
	req := client.ClaimRequest{Principal: "p", Endpoint: "e", Key: "k", Fingerprint: "aa"}
	calls := map[string]func() error{
		"Client.Claim":  func() error { _, err := c.Claim(nilCtx, req); return err },
		"Batcher.Claim": func() error { _, err := b.Claim(nilCtx, req); return err },
		"Batcher.Get":   func() error { _, err := b.Get(nilCtx, "p", "e", "k", ""); return err },
		"Batcher.Complete": func() error {
			_, err := b.Complete(nilCtx, client.CompleteRequest{Principal: "p", Endpoint: "e", Key: "k", Token: "t", Response: client.Response{Status: 200}})
			return err
		},
	}
	for name, call := range calls {
		func() {
			defer func() {
				if r := recover(); r != nil {
					t.Errorf("%s with a nil context panicked: %v", name, r)
				}
			}()
			if err := call(); err == nil {
				t.Errorf("%s with a nil context: no error", name)
			}
		}()
	}
	if _, err := c.Get(context.Background(), "p", "e", "k", ""); err == nil {
		t.Errorf("a call with a nil context was sent: the key is held")
	}
}
