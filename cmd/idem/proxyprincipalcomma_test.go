package main

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"
)

// --principal-header holding a comma is refused (401) as the header sent
// twice is: RFC 9110 (5.3) makes one line "victim, attacker" the same
// two values, and an intermediary may join them so (httpd does; Apache's
// RequestHeader append writes them so). Bug: the proxy took the whole
// line as the principal and called the upstream, which, reading the first
// item of the list, acted for the tenant the caller named.
func TestProxyPrincipalHeaderWithACommaIsRefused(t *testing.T) {
	p := &proxy{cfg: proxyConfig{principalHeader: "X-Tenant"}}
	r, err := http.NewRequest(http.MethodPost, "http://proxy/pay", nil)
	require.NoError(t, err)
	r.Header.Set("X-Tenant", "victim, attacker")
	_, err = p.principal(r)
	require.ErrorContains(t, err, "comma")

	r.Header.Set("X-Tenant", "attacker")
	pr, err := p.principal(r)
	require.NoError(t, err)
	require.Equal(t, "attacker", pr)
}
