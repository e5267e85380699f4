package api_test

import (
	"net/http"
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// metricValue reads one sample of /metrics, "" when absent.
func metricValue(t *testing.T, n *testNode, series string) string {
	t.Helper()
	r := n.do("GET", "/metrics", nil)
	require.Equal(t, http.StatusOK, r.status, "%s", r)
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(series) + ` (\S+)$`).FindSubmatch(r.raw)
	if m == nil {
		return ""
	}
	return string(m[1])
}

// idem_ready is what /readyz answers: a node a load balancer sends nothing
// (503) while the others serve showed nowhere in /metrics.
func TestReadyMetricIsWhatReadyzAnswers(t *testing.T) {
	t.Parallel()
	ready := mustNode(t)
	require.Equal(t, http.StatusOK, ready.do("GET", "/readyz", nil).status)
	require.Equal(t, "1", metricValue(t, ready, "idem_ready"))

	lost := mustNode(t, leaderless(100*time.Millisecond))
	require.Equal(t, http.StatusServiceUnavailable, lost.do("GET", "/readyz", nil).status)
	require.Equal(t, "0", metricValue(t, lost, "idem_ready"))
}

// Every refusal of --auth-file is counted by why: a flood of wrong tokens
// (a client deployed with an old token, or someone guessing) was counted
// nowhere and logged nowhere.
func TestAuthRefusalsAreCountedByReason(t *testing.T) {
	t.Parallel()
	n := mustNode(t, withAuthFile(t, authFile()))
	op := n.as(operatorToken)
	for _, reason := range []string{"no_token", "unknown_token", "role", "principal"} {
		require.Equal(t, "0", metricValue(t, op, `idem_http_auth_refused_total{reason="`+reason+`"}`), reason)
	}
	s := sc("auth-count")
	s.principal = "cus_b1" // not the app token's
	require.Equal(t, http.StatusUnauthorized, n.as("").do("GET", "/v1/config", nil).status)
	for range 2 {
		require.Equal(t, http.StatusUnauthorized, n.as(unknownToken).do("GET", "/v1/config", nil).status)
	}
	require.Equal(t, http.StatusForbidden, n.as(appToken).do("GET", "/v1/config", nil).status)
	require.Equal(t, http.StatusForbidden, n.as(appToken).do("GET", s.query(), nil).status)

	want := map[string]string{"no_token": "1", "unknown_token": "2", "role": "1", "principal": "1"}
	for reason, v := range want {
		require.Equal(t, v, metricValue(t, op, `idem_http_auth_refused_total{reason="`+reason+`"}`), reason)
	}
}
