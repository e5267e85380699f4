package raftfsm

import (
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/stretchr/testify/require"
)

type countFSM struct{}

func (countFSM) Apply(*raft.Log) any                 { return nil }
func (countFSM) Snapshot() (raft.FSMSnapshot, error) { return nil, io.EOF }
func (countFSM) Restore(io.ReadCloser) error         { return nil }

// A leader that takes a newer term from a heartbeat must not append an
// entry of that term. raft answers heartbeats outside its main loop, so a
// heartbeat's newer term once landed between the leader loop's check that
// it still led and its stamping of a batch with the current term: the
// leader appended its own entry under the newer term, at an index where
// that term's real leader had appended another, and raft's log matching
// then kept both (a chaos run found two replicas at one applied index with
// different states).
func TestHeartbeatOfANewerTermNeverStampsALeadersEntries(t *testing.T) {
	inner, err := raft.NewTCPTransport("127.0.0.1:0", nil, 4, time.Second, io.Discard)
	require.NoError(t, err)
	var r atomic.Pointer[raft.Raft]
	ready, stop := make(chan struct{}), make(chan struct{})
	g := newForeignGuard(inner, "a", &r, ready, stop, slog.New(slog.DiscardHandler))
	t.Cleanup(func() { close(stop); inner.Close() })

	rc := raft.DefaultConfig()
	rc.LocalID = "a"
	rc.HeartbeatTimeout, rc.ElectionTimeout, rc.LeaderLeaseTimeout = 30*time.Millisecond, 30*time.Millisecond, 30*time.Millisecond
	rc.CommitTimeout = 5 * time.Millisecond
	rc.LogOutput = io.Discard
	logs, stable, snaps := raft.NewInmemStore(), raft.NewInmemStore(), raft.NewInmemSnapshotStore()
	conf := raft.Configuration{Servers: []raft.Server{{ID: "a", Address: inner.LocalAddr(), Suffrage: raft.Voter}}}
	require.NoError(t, raft.BootstrapCluster(rc, logs, stable, snaps, g, conf))
	ra, err := raft.NewRaft(rc, countFSM{}, logs, stable, snaps, g)
	require.NoError(t, err)
	r.Store(ra)
	close(ready)
	t.Cleanup(func() { ra.Shutdown().Error() })

	other, err := raft.NewTCPTransport("127.0.0.1:0", nil, 4, time.Second, io.Discard)
	require.NoError(t, err)
	t.Cleanup(func() { other.Close() })

	var wg sync.WaitGroup
	done := make(chan struct{})
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-done:
					return
				default:
				}
				ra.Apply([]byte("x"), time.Second).Error()
			}
		}()
	}
	heartbeats := map[uint64]bool{} // terms only the heartbeats' sender led
	checked := uint64(0)
	check := func() {
		last, _ := logs.LastIndex()
		for ; checked < last; checked++ {
			var l raft.Log
			if logs.GetLog(checked+1, &l) != nil {
				continue
			}
			require.False(t, heartbeats[l.Term], "entry %d (type %s) carries term %d, which only the heartbeats' sender led: the leader stamped it with a term it took from a heartbeat", l.Index, l.Type, l.Term)
		}
	}
	defer func() { close(done); wg.Wait() }()
	deadline := time.Now().Add(3 * time.Second)
	for time.Now().Before(deadline) {
		check()
		if ra.State() != raft.Leader {
			time.Sleep(time.Millisecond)
			continue
		}
		time.Sleep(time.Duration(len(heartbeats)%7) * time.Millisecond)
		term := ra.CurrentTerm() + 1
		heartbeats[term] = true
		req := raft.AppendEntriesRequest{
			RPCHeader: raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte("b"), Addr: []byte(other.LocalAddr())},
			Term:      term,
		}
		var resp raft.AppendEntriesResponse
		other.AppendEntries("a", inner.LocalAddr(), &req, &resp)
	}
	time.Sleep(100 * time.Millisecond) // the last batches
	check()
	t.Logf("%d heartbeats of newer terms, %d entries checked", len(heartbeats), checked)
}
