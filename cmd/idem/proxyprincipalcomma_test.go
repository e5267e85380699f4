package main

import (
	"io"
	"log/slog"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idem-store/idem/middleware"
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

// The proxy's refusals of a principal are written for the caller: each is
// a middleware.CallerError, the 401's detail (the middleware logs any
// other error and tells the caller only that the principal could not be
// determined).
func TestProxyPrincipalRefusalsAreForTheCaller(t *testing.T) {
	for _, c := range []struct {
		cfg    proxyConfig
		values []string
	}{
		{proxyConfig{principalHeader: "X-Tenant"}, nil},
		{proxyConfig{principalHeader: "X-Tenant"}, []string{"a", "b"}},
		{proxyConfig{principalHeader: "X-Tenant"}, []string{"a, b"}},
		{proxyConfig{}, nil},
		{proxyConfig{}, []string{"Bearer a", "Bearer b"}},
		{proxyConfig{}, []string{"Bearer undefined"}},
	} {
		p := &proxy{cfg: c.cfg, byCredential: middleware.AuthorizationPrincipal, anonymous: middleware.AnonymousPrincipal, log: slog.New(slog.NewTextHandler(io.Discard, nil))}
		r, err := http.NewRequest(http.MethodPost, "http://proxy/pay", nil)
		require.NoError(t, err)
		name := "Authorization"
		if c.cfg.principalHeader != "" {
			name = c.cfg.principalHeader
		}
		for _, v := range c.values {
			r.Header.Add(name, v)
		}
		_, err = p.principal(r)
		var ce *middleware.CallerError
		require.ErrorAs(t, err, &ce, "%s %q", name, c.values)
		require.Contains(t, ce.Detail, name)
	}
}
