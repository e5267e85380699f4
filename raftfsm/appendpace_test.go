package raftfsm

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/stretchr/testify/require"

	"github.com/idem-store/idem/engine"
)

// A follower refusing appends for lack of disk space made raft's leader
// back off, doubling its wait after each refusal up to about 10 s: once
// space was freed, the follower waited up to 10 s for the leader's next try
// (10.3 to 11.0 s in four of five tries on real processes). Its refusals
// now ask the leader not to back off and reach it once space has returned,
// or after 2 s: the leader tries about that often while the disk is full,
// and the follower catches up within about a second of space returning.
func TestFullFollowerIsTriedAtASteadyPaceAndCatchesUpSoonAfterSpaceReturns(t *testing.T) {
	c := newMemCluster(t)
	n1 := c.open("n1", freeRaftAddr(t), true)
	c.leader(n1)
	n2 := c.open("n2", freeRaftAddr(t), false)
	c.join(n2, n1)
	mnt := smallTmpfs(t, "512m")
	cfg := DefaultConfig() // --min-free-disk 256MiB
	cfg.NodeID, cfg.DataDir, cfg.Bootstrap = "n3", filepath.Join(mnt, "n3"), false
	cfg.RaftAddr, cfg.HTTPAdvertise = freeRaftAddr(t), "mem-n3"
	n3 := c.start(cfg)
	c.join(n3, n1)
	write(t, n1, "before")
	waitApplied(t, n1, n2, n3)

	// Count the appends with entries n3 is sent.
	var sent atomic.Int64
	hook := func(self raft.ServerID, rpc raft.RPC) error {
		if c, ok := rpc.Command.(*raft.AppendEntriesRequest); ok && self == "n3" && len(c.Entries) > 0 {
			sent.Add(1)
		}
		return nil
	}
	rpcHook.Store(&hook)
	t.Cleanup(func() { rpcHook.Store(nil) })

	filler := filepath.Join(mnt, "filler")
	out, err := exec.Command("fallocate", "-l", "200m", filler).CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.Eventually(t, func() bool { return n3.DiskFull() != nil }, 5*time.Second, 50*time.Millisecond)

	// Writes go on through n1 and n2, and n3 refuses them.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-time.After(50 * time.Millisecond):
			}
			n1.Claim(engine.ClaimArgs{Scope: engine.Scope{Principal: "cus_1", Endpoint: "POST /pay", Key: fmt.Sprint("during-", i)}, Fingerprint: "aa", LeaseMs: 60_000, RetentionMs: 3_600_000})
		}
	}()
	defer func() { close(stop); wg.Wait() }()

	// Past the first 12 s of refusals raft's back-off alone waits 5 s and
	// then 10 s between tries; a try every half second (this fix's first
	// form) resent 512 entries 20 times as often.
	time.Sleep(12 * time.Second)
	from := sent.Load()
	time.Sleep(6 * time.Second)
	tries := sent.Load() - from
	require.LessOrEqual(t, tries, int64(4), "the leader tried the full follower %d times in 6 s: it resends its entries too often", tries)
	require.NotZero(t, n3.DiskFull(), "n3 is still full")

	// Space back: n3 catches up within about a second.
	commit := n1.raft.CommitIndex()
	require.NoError(t, os.Remove(filler))
	freed := time.Now()
	require.Eventually(t, func() bool { return n3.raft.AppliedIndex() >= commit }, 10*time.Second, 20*time.Millisecond, "n3 never caught up")
	took := time.Since(freed)
	t.Logf("n3 caught up %s after its space was freed; %d tries in 6 s while full", took.Round(time.Millisecond), tries)
	require.Less(t, took, 2*time.Second, "n3 waited out the leader's back-off")
}
