package raftfsm

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Right after three nodes formed a cluster, idem cluster status warned
// "fewer healthy voters than a quorum: writes fail" while every write went
// through: the leader had not asked two of them yet, because their HTTP
// addresses reached the log a moment after their raft ones, and that
// reason did not read as "not measured yet" (README: a NOTE, not the
// quorum warning). It does for the first silentAfter; after that it is
// the fault it was.
func TestMemberWithoutHTTPAddressYetIsNotMeasuredYet(t *testing.T) {
	n := &Node{}
	now := time.Now()
	h := &peerHealth{firstAt: now.Add(-time.Second), checkedAt: now, err: errNoHTTPAddr.Error()}
	ok, why := n.judge(h, "n2", now)
	require.False(t, ok)
	require.True(t, strings.HasPrefix(why, NotMeasuredYet), why)
	require.Contains(t, why, "its HTTP address is not in the log yet")

	h.firstAt = now.Add(-silentAfter - time.Second)
	ok, why = n.judge(h, "n2", now)
	require.False(t, ok)
	require.Equal(t, "has never answered this leader: its HTTP address is not in the log", why)

	h = &peerHealth{firstAt: now, checkedAt: now, err: "connection refused"}
	_, why = n.judge(h, "n2", now)
	require.Equal(t, "has never answered this leader: connection refused", why, "a node that does not answer is no NOTE")
}
