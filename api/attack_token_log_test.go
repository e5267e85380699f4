package api_test

import (
	"fmt"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idem-store/idem/api"
)

// The warning of a token's requests refused for its share was spaced 10 s
// for all tokens together, and its refused-total counted every token's
// under the one it named: one tenant at its share kept another's refusals
// out of the log. Each token has its own now.
func TestEachTokensShareRefusalsAreLoggedUnderItsName(t *testing.T) {
	const otherToken = "other-app-token-0123456789"
	var logs lockedLog
	n := mustNode(t, withAuthFile(t, authFile(fmt.Sprintf(`{"name":"shop","sha256":%q,"role":"app","principals":["cus_b*"]}`, api.HashToken(otherToken)))),
		withLimits(func(l *api.Limits) {
			l.MaxInFlight = 6
			l.BodyReadTimeout = 30 * time.Second
		}),
		withAPI(func(c *api.Config) { c.Logger = slog.New(slog.NewTextHandler(&logs, nil)) }))
	addr := strings.TrimPrefix(n.url, "http://")
	// Claims whose bodies do not come hold their slots: each token's
	// past its share (payments 3 of 6 alone, shop then 1 of the 3 left)
	// is refused.
	slow := func(token, principal string, count int) {
		for i := range count {
			c, err := net.Dial("tcp", addr)
			require.NoError(t, err)
			t.Cleanup(func() { c.Close() })
			b := fmt.Sprintf(`{"principal":%q,"endpoint":"POST /payments","key":"slow-%d","fingerprint":"%s"}`, principal, i, fp1)
			_, err = fmt.Fprintf(c, "POST /v1/claim HTTP/1.1\r\nHost: idem\r\nAuthorization: Bearer %s\r\nContent-Length: %d\r\n\r\n%s", token, len(b), b[:5])
			require.NoError(t, err)
		}
	}
	slow(appToken, "cus_a1", 4)
	require.Eventually(t, func() bool { return strings.Contains(logs.String(), "token=payments") }, 5*time.Second, 10*time.Millisecond)
	slow(otherToken, "cus_b1", 2)
	require.Eventually(t, func() bool { return strings.Contains(logs.String(), "token=shop") }, 5*time.Second, 10*time.Millisecond,
		"the second token's refusal is logged beside the first's: %s", logs.String())
	out := logs.String()
	require.Equal(t, 2, strings.Count(out, "one app token's requests hold their share of --max-inflight"), out)
	for _, token := range []string{"payments", "shop"} {
		require.Regexp(t, `token=`+token+` max-inflight=6 refused-total=1\b`, out, "each token counts its own refusals")
	}
}
