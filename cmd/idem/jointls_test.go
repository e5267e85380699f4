package main

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// A node without TLS whose --join names members of a TLS cluster sent
// plain HTTP to their HTTPS port, and logged only "join refused; retrying
// every second status=400 code=\"\" detail=\"\"" every time: nothing said
// the cluster speaks TLS or which flags the node lacks.
func TestJoinToHTTPSMemberWithoutTLSSaysSo(t *testing.T) {
	t.Parallel()
	srv := httptest.NewTLSServer(http.NotFoundHandler())
	defer srv.Close()
	m := &member{c: &serveConfig{}, client: &http.Client{}}
	_, _, err := m.do(context.Background(), http.MethodPost, strings.TrimPrefix(srv.URL, "https://"), "/v1/cluster/join", []byte(`{}`))
	require.Error(t, err, "plain HTTP to an HTTPS member must be an error naming the fix, not a bare 400")
	require.ErrorContains(t, err, "HTTPS")
	require.ErrorContains(t, err, "--tls-ca-file")
}
