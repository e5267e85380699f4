package e2eclient_test

import (
	"context"
	"crypto/tls"
	"errors"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/idem-store/idem/client"
	"github.com/idem-store/idem/internal/idemtest"
)

// WithTLS(nil) asks for HTTPS (with the system's CAs, as NewTransport
// takes nil): the client never speaks plain HTTP then, so a node (or
// whatever listens in its place) that answers plain HTTP gets no request,
// and no bearer token in clear text. Bug: a nil config left the client on
// plain HTTP, and the claim with its token reached the node unencrypted.
func TestWithTLSNilIsHTTPS(t *testing.T) {
	n := idemtest.Start(t, idemtest.Options{}) // plain HTTP
	u, err := url.Parse(n.URL)
	if err != nil {
		t.Fatal(err)
	}
	var cfg *tls.Config // a loader's error ignored
	c, err := client.New(u.Host, client.WithTLS(cfg), client.WithToken("secret"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(c.Addr(), "https://") {
		t.Errorf("WithTLS(nil) sends to %s, want https://", c.Addr())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := c.Claim(ctx, client.ClaimRequest{Principal: "p", Endpoint: "e", Key: "k", Fingerprint: "aa"}); err == nil {
		t.Errorf("a claim over HTTPS to a plain HTTP node succeeded")
	}
	plain, err := client.New(n.URL)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := plain.Get(ctx, "p", "e", "k", ""); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("the claim reached the node in plain HTTP: get %v, want not_found", err)
	}
}
