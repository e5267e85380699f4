package e2eclient_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/idem-store/idem/client"
	"github.com/idem-store/idem/internal/idemtest"
)

// A Client whose address has a wrong base path gets the node's 404 for a
// path it serves no route at. It was ErrNotFound, as for a key with no
// record: a service asking Get "was this paid?" read "no" for every key.
// A real missing record still is ErrNotFound.
func TestNoRouteIsNotARecordNotFound(t *testing.T) {
	n := idemtest.Start(t, idemtest.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	good, err := client.New(n.URL)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := good.Get(ctx, "p", "e", "missing", ""); !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("a key with no record: %v, want ErrNotFound", err)
	}
	wrong, err := client.New(n.URL + "/idem")
	if err != nil {
		t.Fatal(err)
	}
	_, err = wrong.Get(ctx, "p", "e", "missing", "")
	if err == nil || errors.Is(err, client.ErrNotFound) {
		t.Fatalf("a path the node serves no route at: %v, want an error that is not ErrNotFound", err)
	}
	var p *client.Problem
	if !errors.As(err, &p) || !p.NoRoute() {
		t.Fatalf("%v: want a Problem that says NoRoute", err)
	}
}
