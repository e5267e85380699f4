package raftfsm

import (
	"fmt"
	"log/slog"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/stretchr/testify/require"
)

// testRaftListener listens on 127.0.0.1 and a port of the kernel's, or on
// IDEM_TEST_IP and a free port of IDEM_TEST_PORTS ("27000-27999") when
// set, for a machine shared with other runs (as the cmd/idem tests do).
func testRaftListener(t *testing.T) net.Listener {
	t.Helper()
	ip := "127.0.0.1"
	if v := os.Getenv("IDEM_TEST_IP"); v != "" {
		ip = v
	}
	lo, hi := 0, 0
	if v := os.Getenv("IDEM_TEST_PORTS"); v != "" {
		a, b, _ := strings.Cut(v, "-")
		lo, _ = strconv.Atoi(a)
		hi, _ = strconv.Atoi(b)
	}
	// testRaftAddrs closes its listeners before the nodes bind: a
	// parallel test scanning from lo took the same port meanwhile
	// ("address already in use"). The range is taken round the clock, and
	// the kernel's ports once each per process (it may hand a port just
	// closed again).
	if lo > 0 {
		n := int64(hi - lo + 1)
		for range n {
			p := lo + int((nextRaftPort.Add(1)-1)%n)
			if ln, err := net.Listen("tcp", net.JoinHostPort(ip, strconv.Itoa(p))); err == nil {
				return ln
			}
		}
		t.Fatalf("no free port on %s in %d-%d", ip, lo, hi)
	}
	for range 1000 {
		ln, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
		require.NoError(t, err)
		_, port, _ := net.SplitHostPort(ln.Addr().String())
		givenRaftPortsMu.Lock()
		taken := givenRaftPorts[port]
		givenRaftPorts[port] = true
		givenRaftPortsMu.Unlock()
		if !taken {
			return ln
		}
		ln.Close()
	}
	t.Fatalf("no port on %s the kernel had not given before", ip)
	return nil
}

var (
	nextRaftPort     atomic.Int64
	givenRaftPortsMu sync.Mutex
	givenRaftPorts   = map[string]bool{}
)

// A follower that refuses appends now and then (a log store that failed a
// write, a log that does not match after a restart, a newer term) must not
// stop the leader from replicating to it. With raft's pipelined
// replication it could: the pipeline's decoder returns at the refusal,
// its send loop races that exit against new entries, and with the
// transport's default of 2 RPCs in flight one more send parks for ever on
// a channel nobody reads any more. The follower then got heartbeats (so
// nobody held an election) and no entry again, the leader committed
// nothing when it needed that follower for a quorum, and raft's Shutdown
// waited for the parked goroutine for ever: a chaos run saw graceful
// stops hang until SIGKILL, a goroutine dump of one showed
// pipelineReplicate parked in netPipeline.AppendEntries with its decoder
// parked on doneCh (hashicorp/raft issue 612).
func TestReplicationSurvivesAFollowerThatRefusesAppends(t *testing.T) {
	quiet := slog.New(slog.DiscardHandler)
	lnA, lnB := testRaftListener(t), testRaftListener(t)
	sA, err := newStreamLayer(lnA.Addr().String(), lnA.Addr().String(), lnA, nil, quiet)
	require.NoError(t, err)
	sB, err := newStreamLayer(lnB.Addr().String(), lnB.Addr().String(), lnB, nil, quiet)
	require.NoError(t, err)
	transA, transB := newRaftTransport(sA, quiet), newRaftTransport(sB, quiet)
	t.Cleanup(func() { transB.Close() })
	var rp atomic.Pointer[raft.Raft]
	ready, stop := make(chan struct{}), make(chan struct{})
	g := newForeignGuard(transA, "a", &rp, ready, stop, quiet)

	// b: a follower that keeps a log of indexes only, and refuses every
	// fifth append that carries entries while refusing is on.
	var refusing atomic.Bool
	var last, refused atomic.Uint64
	refusing.Store(true)
	bDone := make(chan struct{})
	t.Cleanup(func() { close(bDone) })
	go func() {
		appends := 0
		for {
			var rpc raft.RPC
			select {
			case <-bDone:
				return
			case rpc = <-transB.Consumer():
			}
			switch c := rpc.Command.(type) {
			case *raft.RequestPreVoteRequest:
				rpc.Respond(&raft.RequestPreVoteResponse{Term: c.Term, Granted: true}, nil)
			case *raft.RequestVoteRequest:
				rpc.Respond(&raft.RequestVoteResponse{Term: c.Term, Granted: true}, nil)
			case *raft.AppendEntriesRequest:
				resp := &raft.AppendEntriesResponse{Term: c.Term, LastLog: last.Load()}
				if len(c.Entries) > 0 {
					appends++
					// A follower that takes a moment to write: the
					// leader has the next append in flight meanwhile.
					time.Sleep(2 * time.Millisecond)
				}
				switch {
				case c.PrevLogEntry > last.Load(): // a gap: refused, as raft does
				case len(c.Entries) > 0 && refusing.Load() && appends%5 == 0:
					refused.Add(1)
				default:
					if len(c.Entries) > 0 {
						last.Store(c.PrevLogEntry + uint64(len(c.Entries)))
					}
					resp.Success, resp.LastLog = true, last.Load()
				}
				rpc.Respond(resp, nil)
			case *raft.TimeoutNowRequest:
				rpc.Respond(&raft.TimeoutNowResponse{}, nil)
			default:
				rpc.Respond(nil, fmt.Errorf("unexpected %T", c))
			}
		}
	}()

	rc := raft.DefaultConfig()
	rc.LocalID = "a"
	rc.Logger = newHCLog(quiet)
	// Timeouts of raft's default (1 s, 500 ms lease): a loaded machine
	// (a CI run beside others) cost the leader its lease at 100 ms, and the
	// entry after the refusals failed "node is not the leader". The wedge
	// does not depend on them: heartbeats go on a connection of their own.
	rc.HeartbeatTimeout, rc.ElectionTimeout, rc.LeaderLeaseTimeout = time.Second, time.Second, 500*time.Millisecond
	rc.CommitTimeout = 5 * time.Millisecond
	logs, stable, snaps := raft.NewInmemStore(), raft.NewInmemStore(), raft.NewInmemSnapshotStore()
	conf := raft.Configuration{Servers: []raft.Server{
		{ID: "a", Address: transA.LocalAddr(), Suffrage: raft.Voter},
		{ID: "b", Address: transB.LocalAddr(), Suffrage: raft.Voter},
	}}
	require.NoError(t, raft.BootstrapCluster(rc, logs, stable, snaps, g, conf))
	ra, err := raft.NewRaft(rc, countFSM{}, logs, stable, snaps, g)
	require.NoError(t, err)
	rp.Store(ra)
	close(ready)
	shutDown := false
	t.Cleanup(func() {
		if !shutDown {
			go ra.Shutdown() // may never return: do not wait
		}
		close(stop)
	})
	require.Eventually(t, func() bool { return ra.State() == raft.Leader }, 10*time.Second, 10*time.Millisecond, "a never led")

	// Writers keep new entries coming, so the replication loop always has
	// something to send when the pipeline's decoder gives up.
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
				f := ra.Apply([]byte("x"), time.Second)
				select { // a wedged follower means no commit: do not wait for ever
				case <-done:
					return
				case <-errCh(f):
				}
			}
		}()
	}
	t.Cleanup(func() { close(done); wg.Wait() })
	for deadline := time.Now().Add(3 * time.Second); time.Now().Before(deadline) && refused.Load() < 100; {
		time.Sleep(10 * time.Millisecond)
	}
	refusing.Store(false)
	t.Logf("b refused %d appends", refused.Load())

	// Once b stops refusing, it must catch up with the leader and
	// commits must go on.
	f := ra.Apply([]byte("after"), time.Second)
	select {
	case err := <-errCh(f):
		require.NoError(t, err)
	case <-time.After(5 * time.Second):
		t.Fatalf("an entry applied after the refusals never committed: replication to b is wedged (b has %d, the leader %d)", last.Load(), ra.LastIndex())
	}
	require.Eventually(t, func() bool { return last.Load() >= f.Index() }, 5*time.Second, 10*time.Millisecond)
	require.Greater(t, refused.Load(), uint64(20), "the follower refused too few appends for the test to mean anything")

	// And raft must shut down.
	close(done)
	wg.Wait()
	done = make(chan struct{}) // for the cleanup
	sd := make(chan error, 1)
	go func() { sd <- ra.Shutdown().Error() }()
	select {
	case err := <-sd:
		shutDown = true
		require.NoError(t, err)
	case <-time.After(5 * time.Second):
		t.Fatal("raft's Shutdown did not return within 5s: a replication goroutine is parked")
	}
}

func errCh(f raft.Future) <-chan error {
	ch := make(chan error, 1)
	go func() { ch <- f.Error() }()
	return ch
}
