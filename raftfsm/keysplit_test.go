package raftfsm

import (
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"testing"
	"time"

	"github.com/idem-store/idem/engine"
	"github.com/stretchr/testify/require"
)

// A rotation's new key generated on each node instead of once (three
// different keys under id k4) and made the first on every node (step 2):
// no voter's k4 is held by most, so none may seal with it. Each leader
// refused, handed the leadership to a voter with another k4, which did the
// same: the leadership went round for as long as the operator took (an
// operator walk: term 13 to 179 in a minute), and the refusal said the key
// was not the one "the cluster recorded" while none was. The leader now
// keeps the leadership and says the voters hold different keys.
func TestKeysGeneratedOnEachNodeDoNotBounceTheLeadership(t *testing.T) {
	c, n1, n2, n3 := keyedThree(t)
	b64 := func(seed string) string {
		k := sha256.Sum256([]byte(seed))
		return base64.StdEncoding.EncodeToString(k[:])
	}
	for _, n := range []*Node{n1, n2, n3} {
		kr, err := ParseKeyring([]byte(`{"keys":[{"id":"k4","key":"` + b64("k4 generated on "+n.self.ID) + `"},{"id":"k1","key":"` + b64("test key k1") + `"}]}`))
		require.NoError(t, err)
		n.setKeyring(kr)
	}
	l := c.leader(n1, n2, n3)
	require.Eventually(t, func() bool {
		return len(member(t, l, "n2").Keys) == 2 && len(member(t, l, "n3").Keys) == 2
	}, 10*time.Second, 20*time.Millisecond, "the leader's health checks see every voter's k4")

	s := engine.Scope{Principal: "cus_1", Endpoint: "POST /pay", Key: "split-keys"}
	res, _, err := l.Claim(engine.ClaimArgs{Scope: s, Fingerprint: "aa", LeaseMs: 60_000, RetentionMs: 3_600_000})
	require.NoError(t, err, "a claim seals nothing")
	_, err = l.Complete(engine.TokenArgs{Scope: s, Token: res.Record.Token}, &engine.Response{Status: 201, Body: secretBody})
	var refused *SealRefusedError
	require.True(t, errors.As(err, &refused), "%v", err)
	require.True(t, refused.Split, "%v", err)
	require.Contains(t, refused.Detail(), `the voters hold different keys under id "k4"`)
	require.NotContains(t, refused.Detail(), "recorded")
	require.Nil(t, l.fsm.keys.check("k4"), "no check value recorded for a key most voters do not share")

	term := l.term()
	require.Never(t, func() bool { return !l.IsLeader() || l.term() != term }, 3*time.Second, 50*time.Millisecond,
		"the leadership left %s: a voter with another k4 can seal no more than it", l.self.ID)
}
