package raftfsm

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idem-store/idem/engine"
)

// Headers stored as arrays (two Set-Cookie) go through the raft log and
// Pebble, in plaintext and sealed at rest, and come back in their form; a
// repeat of the same complete is still recognised.
func TestHeaderListsThroughTheLog(t *testing.T) {
	for name, cfg := range map[string]func(*Config){
		"plaintext": func(*Config) {},
		"encrypted": func(c *Config) { c.Keyring = testRing(t, "k1") },
	} {
		t.Run(name, func(t *testing.T) {
			n := mustNode(t, cfg)
			s := engine.Scope{Principal: "cus_1", Endpoint: "POST /login", Key: "two-cookies"}
			res, _, err := n.Claim(engine.ClaimArgs{Scope: s, Fingerprint: "aa", LeaseMs: 60_000, RetentionMs: 3_600_000})
			require.NoError(t, err)
			mk := func() *engine.Response {
				return &engine.Response{Status: 200, ContentType: "text/plain", Headers: map[string]string{"Location": "/home"},
					HeaderLists: map[string][]string{"Set-Cookie": {"session=SECRET_COOKIE_1; HttpOnly", "theme=dark"}, "Vary": {"Cookie"}},
					Body:        []byte("welcome")}
			}
			c, err := n.Complete(engine.TokenArgs{Scope: s, Token: res.Record.Token}, mk())
			require.NoError(t, err)
			require.Equal(t, engine.OutcomeCompleted, c.Outcome)
			require.True(t, mk().Equal(lookup(t, n, s).Response), "%+v", lookup(t, n, s).Response)
			raw := engine.EncodeRecord(stored(t, n, s))
			require.Equal(t, name == "encrypted", !bytes.Contains(raw, []byte("SECRET_COOKIE_1")), "a sealed record holds no header value in plaintext")

			again, err := n.Complete(engine.TokenArgs{Scope: s, Token: res.Record.Token}, mk())
			require.NoError(t, err)
			require.Equal(t, engine.OutcomeCompleted, again.Outcome, "the same complete again")
			other := mk()
			delete(other.HeaderLists, "Vary")
			other.Headers["Vary"] = "Cookie" // the same value as a string is another response
			diff, err := n.Complete(engine.TokenArgs{Scope: s, Token: res.Record.Token}, other)
			require.NoError(t, err)
			require.Equal(t, engine.OutcomeAlreadyCompleted, diff.Outcome)
		})
	}
}
