package raftfsm

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/hashicorp/raft"
	"github.com/stretchr/testify/require"
)

// Raft refuses a membership change decided on a configuration another
// change replaced since ("configuration changed since N (latest is M)"),
// before anything is appended: a plain error of raft's, which
// mapRaftError made "outcome unknown", 503 "leadership changed while the
// request was in flight", for a change certainly not made. It is
// ErrNotProposed now (ErrMembershipChanged): retried, it is decided again.
func TestMembershipChangeOnAReplacedConfigurationIsNotProposed(t *testing.T) {
	c := newMemCluster(t)
	n1, n2, n3 := c.threeAt()
	all := []*Node{n1, n2, n3}
	absent := testRaftAddrs(t, 2)
	for i, change := range []string{"join", "remove"} {
		t.Run(change, func(t *testing.T) {
			l := c.leader(all...)
			var other *Node
			for _, n := range all {
				if n != l {
					other = n
				}
			}
			// The change asks the nodes (the joiner, the voters' health)
			// after it read the configuration and before raft takes it:
			// there another change, not this node's (a leader of a term
			// between), replaces that configuration.
			var armed atomic.Bool
			armed.Store(true)
			l.SetPeerProbe(func(ctx context.Context, addr string) (Status, error) {
				if armed.CompareAndSwap(true, false) {
					id := raft.ServerID("x" + change)
					require.NoError(t, l.raft.AddNonvoter(id, raft.ServerAddress(absent[i]), 0, 0).Error())
				}
				return c.probe(ctx, addr)
			})
			t.Cleanup(func() { l.SetPeerProbe(c.probe) })
			var err error
			if change == "join" {
				_, err = l.Join(NodeInfo{ID: "n4", RaftAddr: testRaftAddrs(t, 1)[0], HTTPAddr: "mem-n4"}, false, false)
			} else {
				err = l.Remove(other.self.ID, false)
			}
			require.False(t, armed.Load(), "the other change was made")
			require.ErrorContains(t, err, "configuration changed since")
			require.NotErrorIs(t, err, ErrUnknownOutcome, "nothing was changed")
			require.ErrorIs(t, err, ErrNotProposed)
			require.ErrorIs(t, err, ErrMembershipChanged)
			l.SetPeerProbe(c.probe)
		})
	}
}
