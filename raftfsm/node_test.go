package raftfsm

import (
	"context"
	"errors"
	"net"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idem-store/idem/engine"
)

// After an election the log ends with a no-op the FSM never sees; a node
// must still count as caught up (ready, able to serve linearizable reads)
// without waiting for some later command.
func TestReadyAfterElectionWithoutCommands(t *testing.T) {
	n := mustNode(t, func(c *Config) { c.TickInterval, c.SweepInterval = time.Hour, time.Hour })
	// Commit index 0 (the leader's no-op not committed yet) is trivially
	// caught up; wait for the no-op, which the FSM never sees.
	require.Eventually(t, func() bool { return n.raft.CommitIndex() > 0 && n.Ready() }, 10*time.Second, 10*time.Millisecond)
	require.Less(t, n.db.Meta().Applied, n.raft.CommitIndex(), "the test needs a trailing entry the FSM does not see")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, found, err := n.Lookup(ctx, engine.Scope{Principal: "p", Endpoint: "e", Key: "k"}, false, true)
	require.NoError(t, err)
	require.False(t, found)
}

// A linearizable read sees every acknowledged write.
func TestLinearizableReadSeesAcknowledgedClaims(t *testing.T) {
	n := mustNode(t)
	for i := 0; i < 50; i++ {
		s := engine.Scope{Principal: "p", Endpoint: "e", Key: string(rune('a'+i%26)) + string(rune('0'+i/26))}
		res, _, err := n.Claim(engine.ClaimArgs{Scope: s, Fingerprint: "aa", LeaseMs: 1000, RetentionMs: 60_000})
		require.NoError(t, err)
		require.Equal(t, engine.OutcomeClaimed, res.Outcome)
		r, found, err := n.Lookup(context.Background(), s, false, true)
		require.NoError(t, err)
		require.True(t, found)
		require.Equal(t, res.Record.Token, r.Token)
	}
}

// BeforeRaft runs while the node holds its data dir (a second Open of the
// store is refused) and its raft listener (the caller's RaftListener) is
// the transport's, before raft writes any state: idem serve writes
// node.json there, so a start that fails earlier fixes nothing. A hook
// that fails leaves no raft state, and the next Open bootstraps.
func TestBeforeRaftRunsUnderTheLockBeforeRaftState(t *testing.T) {
	dir := t.TempDir()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	cfg := DefaultConfig()
	cfg.DataDir, cfg.RaftAddr, cfg.RaftListener = dir, ln.Addr().String(), ln
	ran := false
	cfg.BeforeRaft = func() error {
		ran = true
		_, err := engine.Open(filepath.Join(dir, "fsm"), engine.Options{})
		require.ErrorContains(t, err, "lock held", "BeforeRaft must run under the data dir's lock")
		_, err = net.Listen("tcp", ln.Addr().String())
		require.Error(t, err, "the raft port must be held")
		return errors.New("no")
	}
	_, err = Open(cfg)
	require.EqualError(t, err, "no")
	require.True(t, ran)
	again, err := net.Listen("tcp", ln.Addr().String())
	require.NoError(t, err, "a failed Open closes the transport, and the listener with it")
	again.Close()
	ln.Close() // harmless

	cfg.RaftListener, cfg.RaftAddr, cfg.BeforeRaft = nil, "127.0.0.1:0", nil
	n, err := Open(cfg)
	require.NoError(t, err)
	defer n.Close()
	require.Eventually(t, n.IsLeader, 10*time.Second, 10*time.Millisecond, "a failed BeforeRaft must leave no raft state in the way of bootstrap")
}
