package api_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idem-store/idem/api"
)

const (
	cappedToken = "capped-token-0123456789"
	otherToken  = "other-token-0123456789"
)

func capAuthFile() string {
	return authFile(
		fmt.Sprintf(`{"name":"tenant-a","sha256":%q,"role":"app","principals":["ta_*","ta_x*","ta_fixed","solo"],"max_principals":2}`, api.HashToken(cappedToken)),
		fmt.Sprintf(`{"name":"tenant-b","sha256":%q,"role":"app","principals":["tb_*"]}`, api.HashToken(otherToken)),
	)
}

// One credential with a prefix pattern may not take every principal the
// cluster allows: at its max_principals its new principals get 429
// principal_limit naming its own bound, while another credential still
// creates principals and its principals holding keys still claim. The
// batch answers as the route.
func TestCredentialMaxPrincipals(t *testing.T) {
	t.Parallel()
	n := mustNode(t, withAuthFile(t, capAuthFile()), withLimits(func(l *api.Limits) { l.MaxPrincipals = 100 }))
	a, b := n.as(cappedToken), n.as(otherToken)
	s := func(p, k string) scope { return scope{p, "POST /x", k} }
	a.mustClaim(s("ta_1", "k"), fp1)
	a.mustClaim(s("ta_x2", "k"), fp1) // under both prefixes: one principal
	hash := n.stateHash()
	r := a.claim(s("ta_3", "k"), fp1)
	p := requireProblem(t, r, http.StatusTooManyRequests, "principal_limit")
	require.Contains(t, p["detail"], `"tenant-a"`)
	require.Contains(t, p["detail"], "at most 2 principals")
	require.Contains(t, p["detail"], "max_principals")
	require.NotContains(t, p["detail"], "--max-principals")
	require.Equal(t, 60, retryAfter(t, r))
	require.Equal(t, hash, n.stateHash(), "the refusal wrote nothing")

	// The other tenant is not held back; held principals add keys; an
	// exact name is not under the cap.
	for i := range 5 {
		b.mustClaim(s(fmt.Sprint("tb_", i), "k"), fp1)
	}
	a.mustClaim(s("ta_1", "k2"), fp1)
	a.mustClaim(s("solo", "k"), fp1)
	// An exact name that a prefix covers is counted under it.
	requireProblem(t, a.claim(s("ta_fixed", "k"), fp1), http.StatusTooManyRequests, "principal_limit")
	require.Equal(t, http.StatusTooManyRequests, a.claim(s("ta_4", "k"), fp1).status)

	// The batch: same answers as the route, in order.
	res := a.batch(
		op("claim", s("ta_4", "k"), "fingerprint", fp1),
		op("claim", s("ta_1", "k3"), "fingerprint", fp1),
		op("claim", s("solo", "k2"), "fingerprint", fp1),
	)
	require.Equal(t, http.StatusTooManyRequests, res[0].Status, "%s", res[0].Body)
	require.Equal(t, 60, res[0].RetryAfter)
	var bp map[string]any
	require.NoError(t, json.Unmarshal(res[0].Body, &bp))
	require.Equal(t, "principal_limit", bp["code"])
	require.Equal(t, p["detail"].(string)[:40], bp["detail"].(string)[:40])
	require.Contains(t, bp["detail"], `principal "ta_4"`)
	require.Equal(t, http.StatusCreated, res[1].Status, "%s", res[1].Body)
	require.Equal(t, http.StatusCreated, res[2].Status, "%s", res[2].Body)

	// A principal whose keys go frees its place.
	require.Equal(t, http.StatusOK, n.as(operatorToken).do("DELETE", s("ta_x2", "k").query(), nil).status)
	a.mustClaim(s("ta_4", "k"), fp1)
	require.Equal(t, http.StatusTooManyRequests, a.claim(s("ta_5", "k"), fp1).status)
	count, err := n.node.DB().PrefixPrincipals("ta_")
	require.NoError(t, err)
	require.EqualValues(t, 2, count) // ta_1, ta_4
	require.Contains(t, strings.Split(n.do("GET", "/healthz", nil).header.Get("X-Idem-Features"), ","), "credential-max-principals")
}

// The cap is checked with the file's other fields, each error naming the
// token.
func TestAuthFileMaxPrincipals(t *testing.T) {
	t.Parallel()
	h := api.HashToken("t")
	for _, c := range []struct{ entry, want string }{
		{`"role":"operator","max_principals":5`, `tokens[0] ("a"): max_principals bounds the principals an app token's prefix patterns create; an operator token has none`},
		{`"role":"admin","max_principals":5`, `tokens[0] ("a"): max_principals bounds`},
		{`"role":"app","principals":["cus_*"],"max_principals":0`, `tokens[0] ("a"): max_principals must be at least 1 (0)`},
		{`"role":"app","principals":["cus_*"],"max_principals":-3`, `tokens[0] ("a"): max_principals must be at least 1 (-3)`},
		{`"role":"app","principals":["alice","bob"],"max_principals":2`, `tokens[0] ("a"): max_principals bounds the principals of prefix patterns ending in '*', and this token has only exact names`},
		{`"role":"app","principals":["cus_*"],"max_principals":"10"`, `not valid JSON`},
		{`"role":"app","principals":["cus_*"],"max_principals":1.5`, `not valid JSON`},
	} {
		file := `{"tokens":[{"name":"a","sha256":"` + h + `",` + c.entry + `}]}`
		_, err := api.ParseAuthFile([]byte(file))
		require.Error(t, err, file)
		require.Contains(t, err.Error(), c.want, file)
	}
	creds, err := api.ParseAuthFile([]byte(`{"tokens":[{"name":"a","sha256":"` + h + `","role":"app","principals":["cus_*","vip"],"max_principals":10000}]}`))
	require.NoError(t, err)
	require.EqualValues(t, 10000, creds.List()[0].MaxPrincipals)
	creds, err = api.ParseAuthFile([]byte(`{"tokens":[{"name":"a","sha256":"` + h + `","role":"app","principals":["*"]}]}`))
	require.NoError(t, err)
	require.Zero(t, creds.List()[0].MaxPrincipals, "no cap unless set")
}

// With auth on, the cluster's 429 principal_limit gave a tenant the
// operator's --max-principals (only /v1/config, an operator route, shows
// it) and, less its own principals, how many the other tenants hold. It
// names the flag, not the figure; with auth off the figure stays.
func TestClusterPrincipalLimitHidesTheCountFromTenants(t *testing.T) {
	t.Parallel()
	n := mustNode(t, withAuthFile(t, capAuthFile()), withLimits(func(l *api.Limits) { l.MaxPrincipals = 3 }))
	a, b := n.as(cappedToken), n.as(otherToken)
	s := func(p, k string) scope { return scope{p, "POST /x", k} }
	b.mustClaim(s("tb_1", "k"), fp1)
	b.mustClaim(s("tb_2", "k"), fp1)
	a.mustClaim(s("ta_1", "k"), fp1)
	p := requireProblem(t, a.claim(s("solo", "k"), fp1), http.StatusTooManyRequests, "principal_limit")
	require.Contains(t, p["detail"], "--max-principals")
	require.NotContains(t, p["detail"], "3")
	res := a.batch(op("claim", s("solo", "k"), "fingerprint", fp1))
	require.Equal(t, http.StatusTooManyRequests, res[0].Status, "%s", res[0].Body)
	require.NotContains(t, string(res[0].Body), "3 principals")
}
