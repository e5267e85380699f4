package raftfsm

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/stretchr/testify/require"
)

// A voter whose auth file lost the nodes' entry (reloaded without it)
// refuses the leader's health checks. Led by it, the other nodes could not
// learn their readiness from it and answered /readyz 503 (an operator walk
// transferred the leadership there, and a load balancer would have sent
// nothing to the two others). A transfer naming it is refused, saying why;
// a transfer to no voter in particular goes to one that takes the token
// (raft picks the most up-to-date, which may be the refuser), and with
// every other voter refusing it is refused too.
func TestTransferAvoidsAVoterRefusingTheNodeToken(t *testing.T) {
	c := newMemCluster(t)
	n1, n2, n3 := c.three()

	var mu sync.Mutex
	refusing := map[string]bool{}
	refuse := func(ids ...string) {
		mu.Lock()
		defer mu.Unlock()
		refusing = map[string]bool{}
		for _, id := range ids {
			refusing["mem-"+id] = true
		}
	}
	for _, n := range []*Node{n1, n2, n3} {
		n.SetPeerProbe(func(ctx context.Context, addr string) (Status, error) {
			mu.Lock()
			r := refusing[addr]
			mu.Unlock()
			if r {
				// What api's probe returns for a 401 to the node token.
				return Status{}, fmt.Errorf("%s answered 401 Unauthorized: it refused this node's token%w", addr, ErrTokenRefused)
			}
			return c.probe(ctx, addr)
		})
	}
	measuredRefusing := func(l *Node, id string) {
		t.Helper()
		require.Eventually(t, func() bool { return l.refusesNodes(raft.ServerID(id)) }, 10*time.Second, 20*time.Millisecond,
			"the leader's health checks see %s refuse the token", id)
	}

	refuse("n3")
	measuredRefusing(n1, "n3")
	err := n1.TransferLeadershipTo("n3")
	require.ErrorIs(t, err, ErrRefusesNodes)
	require.Contains(t, err.Error(), "n3 refuses the cluster's node token")
	require.Contains(t, err.Error(), "would answer /readyz 503")
	require.True(t, n1.IsLeader(), "a refused transfer moves nothing")

	// n2 refuses, n3 takes it: with no id, raft's pick (n2 on a tie, the
	// first of the most up-to-date) would be the refuser.
	refuse("n2")
	measuredRefusing(n1, "n2")
	require.Eventually(t, func() bool {
		ok, _ := func() (bool, string) {
			n1.peers.mu.Lock()
			defer n1.peers.mu.Unlock()
			h := n1.peers.byID["n3"]
			if h == nil {
				return false, ""
			}
			return n1.judge(h, "n3", time.Now())
		}()
		return ok
	}, 10*time.Second, 20*time.Millisecond, "the leader measures n3 healthy again")
	require.NoError(t, n1.TransferLeadershipTo(""))
	l := c.leader(n1, n2, n3)
	require.Equal(t, "n3", l.self.ID, "the transfer went to the voter refusing the node token")

	// Every other voter refuses: refused.
	refuse("n1", "n2")
	measuredRefusing(n3, "n1")
	measuredRefusing(n3, "n2")
	err = n3.TransferLeadershipTo("")
	require.ErrorIs(t, err, ErrRefusesNodes)
	require.Contains(t, err.Error(), "n1 and n2 refuse the cluster's node token")
	require.True(t, n3.IsLeader())

	// A leader stopping hands over all the same: one of them would be
	// elected anyway, after an election timeout with no leader.
	require.NoError(t, n3.TransferLeadership())
	l = c.leader(n1, n2)
	require.NotEqual(t, "n3", l.self.ID)
}
