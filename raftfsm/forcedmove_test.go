package raftfsm

import (
	"context"
	"net"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"
)

// sameEndpoint (DNS lookups of up to a second) decides only whether a
// voter moving to another raft address counts towards the quorum check;
// a forced move checks none, and asked nothing.
func TestForcedVoterMoveLooksNoNameUp(t *testing.T) {
	c := newMemCluster(t)
	n1, n2, n3 := c.threeAt()
	l := c.leader(n1, n2, n3)
	var moved *Node
	for _, n := range []*Node{n1, n2, n3} {
		if n != l {
			moved = n
		}
	}
	_, port, err := net.SplitHostPort(moved.self.RaftAddr)
	require.NoError(t, err)
	// Stopped at its old address, as a voter that moved is. (Answering
	// there, the leader's replication to it read the member's address
	// unlocked as the move changed it: a data race of hashicorp/raft's
	// updateLastAppended under -race.)
	c.stop(moved)
	var lookups atomic.Int32
	was := lookupIP
	lookupIP = func(ctx context.Context, network, host string) ([]net.IP, error) {
		lookups.Add(1)
		return was(ctx, network, host)
	}
	t.Cleanup(func() { lookupIP = was })
	info := moved.Self()
	info.RaftAddr = net.JoinHostPort("idem-moved.invalid", port) // a name, same port: sameEndpoint would look it up
	_, err = l.Join(info, true, false)
	require.NoError(t, err)
	require.Zero(t, lookups.Load(), "a forced move looked a name up for a decision it does not make")
}
