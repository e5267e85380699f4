package client

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
)

// No idem route redirects (docs/API.md: an unclean path is 404, not
// redirected), so a redirect comes from something else: a proxy or load
// balancer in front, or a hostile server. The client must not follow it.
// Bug: it followed net/http's default, so a node answering a claim with a
// redirect to another port of the same host (net/http compares hosts without
// the port) got the caller's bearer token sent there with the claim (307,
// 308) or the claim turned into a GET (301, 302, 303), whose 200 was taken as
// "claimed" though no claim had reached a node.
func TestRedirectIsNotFollowed(t *testing.T) {
	var hits atomic.Int32
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		w.Write([]byte(`{"outcome":"claimed","token":"1","attempt":1}`))
	}))
	defer other.Close()
	for _, code := range []int{301, 302, 303, 307, 308} {
		node := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, other.URL+r.URL.Path, code)
		}))
		for _, own := range []bool{false, true} {
			var opts []Option
			if own {
				opts = append(opts, WithHTTPClient(&http.Client{}))
			}
			c, err := New(node.URL, append(opts, WithToken("secret"))...)
			if err != nil {
				t.Fatal(err)
			}
			res, err := c.Claim(context.Background(), ClaimRequest{Principal: "p", Endpoint: "e", Key: "k", Fingerprint: "aa"})
			var p *Problem
			if !errors.As(err, &p) || p.Status != code || !strings.Contains(p.Detail, other.URL) {
				t.Errorf("%d (own http.Client %v): got %+v, %v; want a *Problem with status %d naming the location", code, own, res, err, code)
			}
		}
		node.Close()
	}
	if n := hits.Load(); n != 0 {
		t.Errorf("the redirect's target got %d requests; want none", n)
	}
}
