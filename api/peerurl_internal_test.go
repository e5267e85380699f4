package api

import (
	"net/http"
	"testing"
)

// A member recorded at a link-local IPv6 address with its zone
// ([fe80::1%eth0]:7070) got "http://[fe80::1%eth0]:7070/..." from
// peerURL, which does not parse ("invalid URL escape"): no forward,
// health check or snapshot reached it.
func TestPeerURLOfAZonedIPv6Address(t *testing.T) {
	for _, addr := range []string{"[fe80::1%eth0]:7070", "[::1]:7070", "10.0.0.1:7070", "n1.example.com:7070"} {
		u := peerURL(nil, addr, "/v1/claim?consistency=stale")
		r, err := http.NewRequest(http.MethodGet, u, nil)
		if err != nil {
			t.Errorf("%s: %s: %v", addr, u, err)
			continue
		}
		if r.URL.Host != addr || r.URL.Path != "/v1/claim" || r.URL.RawQuery != "consistency=stale" {
			t.Errorf("%s: %s is host %q path %q query %q", addr, u, r.URL.Host, r.URL.Path, r.URL.RawQuery)
		}
	}
	if u := peerURL(nil, "10.0.0.1:7070", "/v1/cluster"); u != "http://10.0.0.1:7070/v1/cluster" {
		t.Errorf("peerURL = %s", u)
	}
}
