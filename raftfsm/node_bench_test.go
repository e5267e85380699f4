package raftfsm

import (
	"fmt"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idem-store/idem/engine"
)

func mustNode(tb testing.TB, opts ...func(*Config)) *Node {
	tb.Helper()
	cfg := DefaultConfig()
	// The kernel's port, on the test's own address on a shared machine.
	ip := "127.0.0.1"
	if v := os.Getenv("IDEM_TEST_IP"); v != "" {
		ip = v
	}
	cfg.DataDir, cfg.RaftAddr = tb.TempDir(), net.JoinHostPort(ip, "0")
	for _, o := range opts {
		o(&cfg)
	}
	n, err := Open(cfg)
	require.NoError(tb, err)
	tb.Cleanup(func() { n.Close() })
	deadline := time.Now().Add(10 * time.Second)
	for !n.IsLeader() {
		require.True(tb, time.Now().Before(deadline), "no leadership")
		time.Sleep(10 * time.Millisecond)
	}
	return n
}

// BenchmarkNodeClaims64 measures claims through a real one-node raft (bolt
// log fsynced, FSM on Pebble) from 64 concurrent callers, without HTTP.
func BenchmarkNodeClaims64(b *testing.B) {
	n := mustNode(b)
	var next atomic.Int64
	var wg sync.WaitGroup
	b.ResetTimer()
	for w := 0; w < 64; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1)
				if i > int64(b.N) {
					return
				}
				res, _, err := n.Claim(engine.ClaimArgs{
					Scope:       engine.Scope{Principal: "p", Endpoint: "POST /x", Key: fmt.Sprint("k", i)},
					Fingerprint: "aa", LeaseMs: 30000, RetentionMs: 86_400_000})
				if err != nil || res.Outcome != engine.OutcomeClaimed {
					b.Errorf("claim %d: %v %v", i, res.Outcome, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "claims/s")
}
