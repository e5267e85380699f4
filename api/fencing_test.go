package api_test

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idem-store/idem/api"
	"github.com/idem-store/idem/engine"
)

// tokenIndex is the raft index a token starts with.
func tokenIndex(t *testing.T, token string) uint64 {
	t.Helper()
	require.Regexp(t, `^[0-9]{20}\.[0-9a-f]{32}$`, token)
	return mustUint(t, token)
}

// Later attempts on a scope hold larger tokens, compared as strings, so an
// effect side can keep the largest token it has seen and refuse smaller.
func TestTokensOfOneScopeOrderAsStrings(t *testing.T) {
	t.Parallel()
	n := mustNode(t)
	s := sc("order")
	var tokens []string
	for i := 0; i < 12; i++ {
		c := n.mustClaim(s, fp1)
		tok := c["token"].(string)
		require.Equal(t, int64(i+1), num(t, c["attempt"]))
		tokens = append(tokens, tok)
		require.Equal(t, http.StatusOK, n.post("/v1/release", s.body("token", tok)).status)
		// Other scopes' claims in between move the raft index on.
		n.mustClaim(sc("order-other-"+strconv.Itoa(i)), fp1)
	}
	for i := 1; i < len(tokens); i++ {
		require.Less(t, tokens[i-1], tokens[i], "attempt %d's token must sort after attempt %d's", i+1, i)
		require.Less(t, tokenIndex(t, tokens[i-1]), tokenIndex(t, tokens[i]))
	}
}

// A tenant holding a token cannot act on another tenant's attempt with
// anything derived from it: its own token, the neighbouring raft indexes
// with its MAC, the bare indexes, or the victim's index with a made-up
// MAC. Each is token_mismatch, decided without a log entry: the whole
// state (applied index included) is unchanged.
func TestNeighbouringTokensAreWorthlessInAnotherScope(t *testing.T) {
	t.Parallel()
	n := mustNode(t)
	victim := scope{"cus_victim", "POST /payments", "pay-1"}
	attacker := scope{"cus_attacker", "POST /payments", "pay-1"}
	vtok := n.mustClaim(victim, fp1, "lease_ms", 600000)["token"].(string)
	atok := n.mustClaim(attacker, fp1, "lease_ms", 600000)["token"].(string)
	vi, ai := tokenIndex(t, vtok), tokenIndex(t, atok)
	require.Equal(t, vi+1, ai, "the two claims are neighbours in the log")
	mac := func(tok string) string { return tok[21:] }
	idx := func(i uint64) string {
		return strings.Repeat("0", 20-len(strconv.FormatUint(i, 10))) + strconv.FormatUint(i, 10)
	}

	forged := []string{
		atok,                                    // the attacker's own token
		idx(ai-1) + "." + mac(atok),             // its index minus one (the victim's), its MAC
		idx(ai+1) + "." + mac(atok),             // plus one
		idx(vi) + "." + strings.Repeat("0", 32), // the victim's index, a made-up MAC
		idx(vi) + "." + mac(atok),
		strconv.FormatUint(vi, 10),   // the bare raft index, as tokens were before
		strconv.FormatUint(ai-1, 10), // the same, reached from the attacker's
		strings.ToUpper(vtok[:21]) + strings.ToUpper(mac(vtok)), // the victim's token, another spelling
	}
	before := n.stateHash()
	for _, tok := range forged {
		requireProblem(t, n.complete(victim, tok, okResponse), http.StatusConflict, "token_mismatch")
		requireProblem(t, n.post("/v1/release", victim.body("token", tok)), http.StatusConflict, "token_mismatch")
		requireProblem(t, n.post("/v1/extend", victim.body("token", tok, "lease_ms", 1000)), http.StatusConflict, "token_mismatch")
		// Without a live record: not_found, as for any stale token.
		requireProblem(t, n.complete(scope{"cus_victim", "POST /payments", "none"}, tok, okResponse), http.StatusNotFound, "not_found")
	}
	require.Equal(t, before, n.stateHash(), "a refused token changed the state or went through the log")
	require.Equal(t, "in_progress", n.record(victim)["state"])

	// The attacker's token does work on its own scope, and the victim's on
	// the victim's: the refusals were about scope, not a broken MAC.
	require.Equal(t, http.StatusOK, n.complete(attacker, atok, okResponse).status)
	require.Equal(t, http.StatusOK, n.complete(victim, vtok, okResponse).status)
}

// A token is bound to the record's scope as the cluster keys it: with
// --scope principal the endpoint is not part of it, so the token completes
// the record from any endpoint, and still from no other principal or key.
func TestTokensFollowThePrincipalScopeMode(t *testing.T) {
	t.Parallel()
	n := mustNode(t, principalScope())
	a := scope{"cus_1", "POST /payments", "k1"}
	tok := n.mustClaim(a, fp1)["token"].(string)
	n.mustClaim(scope{"cus_1", "POST /payments", "k2"}, fp1)
	before := n.stateHash()
	requireProblem(t, n.complete(scope{"cus_1", "POST /payments", "k2"}, tok, okResponse), http.StatusConflict, "token_mismatch")
	require.Equal(t, before, n.stateHash())
	require.Equal(t, http.StatusOK, n.complete(scope{"cus_1", "POST /refunds", "k1"}, tok, okResponse).status)
}

// A data dir from before fencing tokens had MACs: attempts claimed then
// hold a bare raft index, and finish with it after the upgrade, but only
// the current attempt's index; a bare index of an attempt claimed after
// the cluster made its secret is refused.
func TestBareIndexTokensOfClaimsBeforeTheSecret(t *testing.T) {
	t.Parallel()
	n := mustNode(t)
	old := scope{"cus_1", "POST /payments", "before-upgrade"}
	oldScope := engine.Scope{Principal: old.principal, Endpoint: old.endpoint, Key: old.key}
	// Claims decided as the older server did: no secret in the state.
	claimOld := func() uint64 {
		res, index, err := n.node.Claim(engine.ClaimArgs{Scope: oldScope, Fingerprint: fp1, LeaseMs: 600000,
			RetentionMs: 86_400_000, MaxKeys: 100})
		require.NoError(t, err)
		require.Equal(t, engine.OutcomeClaimed, res.Outcome)
		return index
	}
	first := claimOld()
	_, err := n.node.Release(engine.TokenArgs{Scope: oldScope, Token: first})
	require.NoError(t, err)
	index := claimOld() // attempt 2: the first attempt's index is stale
	_, has, err := n.node.ClusterSecret()
	require.NoError(t, err)
	require.False(t, has)

	bare := strconv.FormatUint(index, 10)
	before := n.stateHash()
	for _, tok := range []string{strconv.FormatUint(first, 10), strconv.FormatUint(index+1, 10), bare + "0"} {
		requireProblem(t, n.post("/v1/extend", old.body("token", tok, "lease_ms", 60000)), http.StatusConflict, "token_mismatch")
	}
	require.Equal(t, before, n.stateHash(), "refused without a log entry")
	require.Equal(t, http.StatusOK, n.post("/v1/extend", old.body("token", bare, "lease_ms", 60000)).status)

	// The first claim through the API makes the secret (no other member).
	fresh := scope{"cus_1", "POST /payments", "after-upgrade"}
	tok := n.mustClaim(fresh, fp1)["token"].(string)
	sec, has, err := n.node.ClusterSecret()
	require.NoError(t, err)
	require.True(t, has)
	require.Greater(t, sec.Index, index)
	require.Less(t, sec.Index, tokenIndex(t, tok))

	// The old attempt is reachable with its bare index, and with the new
	// form a repeated claim would return.
	newForm := api.FormatToken(sec.Key, false, oldScope, index)
	require.Equal(t, http.StatusOK, n.complete(old, newForm, okResponse).status)
	require.Equal(t, http.StatusOK, n.complete(old, bare, okResponse).status, "complete is idempotent under either form")

	// The bare index of an attempt claimed after the secret is worth nothing.
	before = n.stateHash()
	requireProblem(t, n.complete(fresh, strconv.FormatUint(tokenIndex(t, tok), 10), okResponse), http.StatusConflict, "token_mismatch")
	require.Equal(t, before, n.stateHash())
	require.Equal(t, http.StatusOK, n.complete(fresh, tok, okResponse).status)
}

// A claim repeated with its claim_id returns the same token.
func TestRepeatedClaimReturnsTheSameToken(t *testing.T) {
	t.Parallel()
	n := mustNode(t)
	s := sc("same-token")
	a := n.mustClaim(s, fp1, "claim_id", "c1")["token"]
	b := n.mustClaim(s, fp1, "claim_id", "c1")["token"]
	require.Equal(t, a, b)
	ctx := context.Background()
	rec, found, err := n.node.Lookup(ctx, engine.Scope{Principal: s.principal, Endpoint: s.endpoint, Key: s.key}, false, true)
	require.NoError(t, err)
	require.True(t, found)
	require.Equal(t, rec.Token, mustUint(t, a.(string)))
}
