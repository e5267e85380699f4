package conformance_test

import (
	"net"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/idem-store/idem/client"
	"github.com/idem-store/idem/conformance"
	"github.com/idem-store/idem/internal/idemtest"
	"github.com/idem-store/idem/middleware"
)

// The suite against the Go middleware, with real idem nodes as its store:
// one with the default retention, one that keeps records for two seconds,
// and an address where nothing listens.
func TestMiddlewareConforms(t *testing.T) { conforms(t, false) }

// The same with the store calls sent through a client.Batcher.
func TestMiddlewareConformsBatched(t *testing.T) { conforms(t, true) }

func conforms(t *testing.T, batched bool) {
	up := conformance.NewUpstream()
	front := func(storeURL string) string {
		c, err := client.New(storeURL)
		if err != nil {
			t.Fatal(err)
		}
		var store middleware.Store = c
		if batched {
			b := c.NewBatcher(client.BatcherConfig{MaxOps: 16})
			t.Cleanup(func() { b.Close() })
			store = b
		}
		idem, err := middleware.New(middleware.Options{Store: store, StoreTimeout: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		srv := httptest.NewServer(idem(up))
		t.Cleanup(srv.Close)
		return srv.URL
	}
	const shortRetention = 2 * time.Second
	node := idemtest.Start(t, idemtest.Options{})
	short := idemtest.Start(t, idemtest.Options{Retention: shortRetention})
	conformance.Run(t, conformance.Target{
		URL:               front(node.URL),
		Upstream:          up,
		DownURL:           front("http://" + deadAddr(t)),
		ShortRetentionURL: front(short.URL),
		ShortRetention:    shortRetention,
	})
}

// deadAddr is a loopback address where nothing listens.
func deadAddr(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}
