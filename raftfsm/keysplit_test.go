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

	// Bouncing, the leadership moved every health round (half a second):
	// a dozen terms here. One election (a loaded machine) is allowed.
	term := l.term()
	time.Sleep(3 * time.Second)
	now := c.leader(n1, n2, n3)
	require.LessOrEqual(t, now.term(), term+1, "the leadership went round: a voter with another k4 can seal no more than %s", l.self.ID)
}

// Rotation step 2 on one node before step 1 reached the others: a
// transfer to it reported "leadership moved", and the leadership came
// straight back (its first key held by too few voters, it refused to
// encrypt and handed over; an operator walk). The transfer is refused,
// saying why; once the others hold the key it goes through.
func TestTransferToAVoterWhoseFirstKeyFewHoldIsRefused(t *testing.T) {
	c, n1, n2, n3 := keyedThree(t)
	n2.setKeyring(testRing(t, "k2", "k1")) // step 2 on n2 alone
	keysOf := func(id string) []NodeKey { return member(t, n1, id).Keys }
	require.Eventually(t, func() bool { return len(keysOf("n2")) == 2 }, 10*time.Second, 20*time.Millisecond,
		"the leader's health checks see n2's k2")
	err := n1.TransferLeadershipTo("n2")
	require.ErrorIs(t, err, ErrLacksKey)
	require.Contains(t, err.Error(), `n2's first key "k2" (the one it would encrypt with) is held by 1 of the cluster's 3 voters`)
	require.True(t, n1.IsLeader())

	n1.setKeyring(testRing(t, "k1", "k2")) // step 1 on the others
	n3.setKeyring(testRing(t, "k1", "k2"))
	require.Eventually(t, func() bool { return len(keysOf("n3")) == 2 }, 10*time.Second, 20*time.Millisecond,
		"the leader's health checks see n3's k2")
	require.NoError(t, n1.TransferLeadershipTo("n2"))
	require.Equal(t, "n2", c.leader(n1, n2, n3).self.ID)
}
