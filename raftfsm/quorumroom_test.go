package raftfsm

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idem-store/idem/engine"
)

// With both followers of three under --min-free-disk and the leader's
// disk roomy, the followers take no client entries, so nothing the
// leader proposed could commit: only the leader's disk decided 507, and a
// claim on the leader waited until space was freed on a follower (69 s on
// real processes), or for ever. The leader now
// refuses it at once with storage full, naming the full voters, and takes
// writes again by itself once one of them has room.
func TestLeaderRefusesWritesWhileFewerThanAQuorumOfVotersHaveRoom(t *testing.T) {
	c := newMemCluster(t)
	n1 := c.open("n1", freeRaftAddr(t), true)
	c.leader(n1)
	write(t, n1, "before")
	full, fillers := smallDiskFollowers(c, n1)
	fillDisks(t, full, fillers)
	require.Nil(t, n1.DiskFull(), "the leader's disk has room")
	// The leader's health checks read the followers' disks.
	require.Eventually(t, func() bool {
		n1.peers.mu.Lock()
		defer n1.peers.mu.Unlock()
		for _, id := range []string{"n2", "n3"} {
			if h := n1.peers.byID[id]; h == nil || h.diskFull == nil {
				return false
			}
		}
		return true
	}, 10*time.Second, 50*time.Millisecond, "the leader never read the followers' full disks")
	time.Sleep(probeEvery) // and counted them, after that round

	claim := func(key string) <-chan error {
		done := make(chan error, 1)
		go func() {
			_, _, err := n1.Claim(engine.ClaimArgs{Scope: engine.Scope{Principal: "cus_1", Endpoint: "POST /pay", Key: key}, Fingerprint: "aa", LeaseMs: 60_000, RetentionMs: 3_600_000})
			done <- err
		}()
		return done
	}
	start := time.Now()
	var err error
	select {
	case err = <-claim("refused"):
	case <-time.After(5 * time.Second):
		t.Fatal("a claim on a leader whose two followers' disks are full waited 5 s with no answer")
	}
	require.ErrorIs(t, err, ErrStorageFull)
	var vf *VotersFullError
	require.ErrorAs(t, err, &vf)
	require.Less(t, time.Since(start), time.Second, "refused at once")
	require.Len(t, vf.Full, 2)
	require.Contains(t, vf.Detail(), "n2 (")
	require.Contains(t, vf.Detail(), "n3 (")
	require.Contains(t, vf.Detail(), "only n1 has room")

	// A batch's writes are refused the same way; nothing changed.
	rs := n1.Batch([]BatchOp{{Op: OpClaim, Claim: &engine.ClaimArgs{Scope: engine.Scope{Principal: "cus_1", Endpoint: "POST /pay", Key: "batched"}, Fingerprint: "aa", LeaseMs: 60_000, RetentionMs: 3_600_000}}})
	require.ErrorAs(t, rs[0].Err, &vf)
	_, ok, err := n1.Lookup(context.Background(), engine.Scope{Principal: "cus_1", Endpoint: "POST /pay", Key: "refused"}, false, false)
	require.NoError(t, err)
	require.False(t, ok, "a refused claim changed nothing")

	// The leader's status says so: the followers lag nothing (nothing is
	// proposed), and its table alone read as a healthy cluster.
	st, err := n1.Status()
	require.NoError(t, err)
	require.Contains(t, st.WritesRefused, "only n1 has room")

	// Room on one follower is a quorum again: writes go through by
	// themselves.
	require.NoError(t, os.Remove(fillers[0]))
	require.Eventually(t, func() bool {
		select {
		case err := <-claim("after"):
			return err == nil
		case <-time.After(15 * time.Second):
			return false
		}
	}, 30*time.Second, 100*time.Millisecond, "writes are not accepted again once a quorum has room")
	st, err = n1.Status()
	require.NoError(t, err)
	require.Empty(t, st.WritesRefused)
}

// A client write proposed before the leader's health checks read that
// both followers' disks are full (a second at most) waited until space was
// freed on one of them: the wait for its commit had no bound, so a client
// on the leader waited for minutes, and one that gave up, or a follower
// that forwarded it and gave up after 3 s, left the leader's handler
// holding its request (and its --max-inflight slot) until then. It now
// answers an unknown outcome after ApplyTimeout; the entry stays in the
// log, commits once space is freed, and a retry with the same claim_id
// gets the same claim.
func TestClientWriteProposedBeforeTheLeaderSawFullFollowersIsBounded(t *testing.T) {
	c := newMemCluster(t)
	n1 := c.leaderWith(func(cfg *Config) { cfg.ApplyTimeout = 2 * time.Second })
	// The leader's health checks see the followers' disks with room: as in
	// the second before a round reads them full.
	var hide atomic.Bool
	n1.SetPeerProbe(func(ctx context.Context, addr string) (Status, error) {
		st, err := c.probe(ctx, addr)
		if hide.Load() {
			st.DiskFull = nil
		}
		return st, err
	})
	hide.Store(true)
	write(t, n1, "before")
	full, fillers := smallDiskFollowers(c, n1)
	fillDisks(t, full, fillers)
	time.Sleep(2 * probeEvery)
	require.Nil(t, n1.votersRoom(OpClaim), "the leader has not seen the full followers")

	args := engine.ClaimArgs{Scope: engine.Scope{Principal: "cus_1", Endpoint: "POST /pay", Key: "in-the-second"}, Fingerprint: "aa", ClaimID: "c-1", LeaseMs: 60_000, RetentionMs: 3_600_000}
	claim := func() <-chan error {
		done := make(chan error, 1)
		go func() {
			_, _, err := n1.Claim(args)
			done <- err
		}()
		return done
	}
	start := time.Now()
	var err error
	select {
	case err = <-claim():
	case <-time.After(4 * n1.cfg.ApplyTimeout):
		t.Fatalf("a claim proposed while both followers' disks are full waited %s with no answer", 4*n1.cfg.ApplyTimeout)
	}
	require.ErrorIs(t, err, ErrUnknownOutcome)
	var cw *CommitWaitError
	require.ErrorAs(t, err, &cw)
	require.Equal(t, n1.cfg.ApplyTimeout, cw.Waited)
	require.GreaterOrEqual(t, time.Since(start), n1.cfg.ApplyTimeout)
	require.Greater(t, n1.disk.proposing.Load(), uint64(0), "its entry is still in flight, and still counted")

	// Once the leader's checks read the full disks, the retry is refused
	// at once; nothing was lost: the entry commits once space is freed, and
	// the retry with the same claim_id gets the same claim.
	hide.Store(false)
	require.Eventually(t, func() bool { return n1.votersRoom(OpClaim) != nil }, 5*time.Second, 50*time.Millisecond)
	require.ErrorIs(t, <-claim(), ErrStorageFull)
	require.NoError(t, os.Remove(fillers[0]))
	require.Eventually(t, func() bool {
		_, ok, err := n1.Lookup(context.Background(), args.Scope, false, false)
		return err == nil && ok
	}, 30*time.Second, 100*time.Millisecond, "the claim left in the log was never applied")
	require.Eventually(t, func() bool { return n1.disk.proposing.Load() == 0 }, 5*time.Second, 10*time.Millisecond, "its reservation is returned once it is applied")
	res, _, err := n1.Claim(args)
	require.NoError(t, err)
	require.Equal(t, engine.OutcomeClaimed, res.Outcome, "the same claim_id gets the same claim")
}

// Two followers of three nearly full, each with all it holds applied,
// refuse an entry whose applying would take their disks under the
// threshold, at every try: raft resends it, and never fewer entries. The
// leader counted them as having room (they are above their threshold),
// proposed every write behind it, and none committed; their status said
// they would go on by themselves. It now counts them full, and refuses
// writes 507 at once, saying what they need, until space is freed.
func TestLeaderCountsNearlyFullFollowersThatRefuseForGood(t *testing.T) {
	c := newMemCluster(t)
	n1 := c.leaderWith(func(cfg *Config) { cfg.ApplyTimeout = 2 * time.Second })
	write(t, n1, "before")
	nearly, fillers := smallDiskFollowers(c, n1)
	// 8 MiB above the threshold: room for entries of 4 MiB, applied.
	for i, n := range nearly {
		require.NoError(t, n.disk.read())
		size := n.disk.free.Load() - n.disk.fullBelow - 8<<20
		out, err := exec.Command("fallocate", "-l", fmt.Sprint(size), fillers[i]).CombinedOutput()
		require.NoError(t, err, "%s", out)
		require.NoError(t, n.disk.read())
		require.GreaterOrEqual(t, n.disk.free.Load(), n.disk.fullBelow, "%s is above its threshold", n.self.ID)
	}

	// A 6 MiB response: applying it writes 12 MiB.
	res, _, err := n1.Claim(engine.ClaimArgs{Scope: engine.Scope{Principal: "cus_1", Endpoint: "POST /pay", Key: "large"}, Fingerprint: "aa", LeaseMs: 60_000, RetentionMs: 3_600_000})
	require.NoError(t, err)
	large := engine.Scope{Principal: "cus_1", Endpoint: "POST /pay", Key: "large"}
	_, err = n1.Complete(engine.TokenArgs{Scope: large, Token: res.Record.Token}, &engine.Response{Status: 200, Body: bytes.Repeat([]byte("r"), 6<<20)})
	var cw *CommitWaitError
	require.ErrorAs(t, err, &cw, "no follower stores it")
	for _, n := range nearly {
		require.Eventually(t, func() bool {
			d := n.DiskFull()
			return d != nil && d.AppendsRefusedNeedBytes != 0 && d.UnappliedBytes == 0
		}, 10*time.Second, 50*time.Millisecond, "%s never refused the entry with nothing left to apply", n.self.ID)
		why := n.DiskFull().String()
		require.Contains(t, why, "it takes them once space is freed there")
		require.NotContains(t, why, "by itself", "it refuses the same entries at every try")
	}
	require.Eventually(t, func() bool { return n1.votersRoom(OpClaim) != nil }, 10*time.Second, 50*time.Millisecond,
		"the leader counts the followers that refuse its entries for good as having room")
	_, _, err = n1.Claim(engine.ClaimArgs{Scope: engine.Scope{Principal: "cus_1", Endpoint: "POST /pay", Key: "refused"}, Fingerprint: "aa", LeaseMs: 60_000, RetentionMs: 3_600_000})
	var vf *VotersFullError
	require.ErrorAs(t, err, &vf)
	require.Contains(t, vf.Detail(), "needed to apply the entries it is sent")
	require.Contains(t, vf.Detail(), "or too near it to apply the entries they are sent")

	// Space freed on one: the entry commits, and writes are taken again.
	require.NoError(t, os.Remove(fillers[0]))
	require.Eventually(t, func() bool {
		r, ok, err := n1.Lookup(context.Background(), large, false, false)
		return err == nil && ok && r.State == engine.StateCompleted
	}, 30*time.Second, 100*time.Millisecond, "the completion left in the log was never applied")
	require.Eventually(t, func() bool {
		_, _, err := n1.Claim(engine.ClaimArgs{Scope: engine.Scope{Principal: "cus_1", Endpoint: "POST /pay", Key: "after"}, Fingerprint: "aa", LeaseMs: 60_000, RetentionMs: 3_600_000})
		return err == nil
	}, 30*time.Second, 100*time.Millisecond, "writes are not accepted again once a quorum has room")
}

// A voter whose raft log is stopped (its disk filled as it made the log's
// next segment, which --min-free-disk 0 leaves unguarded) takes no
// entries until it has room again; its threshold is 0, so the leader never
// counted it full: with two such followers of three it proposed every
// write and none committed. Its status now says its log is stopped, and
// the leader counts it.
func TestLeaderCountsFollowersWhoseRaftLogIsStopped(t *testing.T) {
	c := newMemCluster(t)
	// Nothing but the test's writes is proposed: an entry would reopen
	// the followers' logs, which have room here.
	n1 := c.leaderWith(func(cfg *Config) { cfg.TickInterval, cfg.SweepInterval = time.Hour, time.Hour })
	write(t, n1, "before")
	var stopped []*Node
	for _, id := range []string{"n2", "n3"} {
		cfg := DefaultConfig()
		cfg.NodeID, cfg.DataDir, cfg.Bootstrap = id, t.TempDir(), false
		cfg.RaftAddr, cfg.HTTPAdvertise = freeRaftAddr(t), "mem-"+id
		cfg.MinFreeDisk = 0
		n := c.start(cfg)
		c.join(n, n1)
		stopped = append(stopped, n)
	}
	waitApplied(t, n1, stopped...)
	for _, n := range stopped {
		n.logStore.sealed.Store(true) // as a failed segment rotation leaves it
		st, err := n.Status()
		require.NoError(t, err)
		require.NotNil(t, st.DiskFull)
		require.True(t, st.DiskFull.RaftLogStopped)
		require.Contains(t, st.DiskFull.String(), "its raft log is stopped")
	}
	require.Eventually(t, func() bool { return n1.votersRoom(OpClaim) != nil }, 5*time.Second, 50*time.Millisecond,
		"the leader counts the followers whose raft log is stopped as having room")
	_, _, err := n1.Claim(engine.ClaimArgs{Scope: engine.Scope{Principal: "cus_1", Endpoint: "POST /pay", Key: "refused"}, Fingerprint: "aa", LeaseMs: 60_000, RetentionMs: 3_600_000})
	var vf *VotersFullError
	require.ErrorAs(t, err, &vf)
	require.Contains(t, vf.Detail(), "n2 (its raft log is stopped")
	require.Contains(t, vf.Detail(), "too full to store the entries they are sent")

	// One reopened (it had room at its next append): writes go through.
	stopped[0].logStore.sealed.Store(false)
	require.Eventually(t, func() bool {
		_, _, err := n1.Claim(engine.ClaimArgs{Scope: engine.Scope{Principal: "cus_1", Endpoint: "POST /pay", Key: "after"}, Fingerprint: "aa", LeaseMs: 60_000, RetentionMs: 3_600_000})
		return err == nil
	}, 10*time.Second, 100*time.Millisecond, "writes are not accepted again once a quorum takes entries")
}

// leaderWith starts n1, bootstrapping a cluster, with the configuration
// set changes, and returns it once it leads.
func (c *memCluster) leaderWith(set func(*Config)) *Node {
	c.t.Helper()
	cfg := DefaultConfig()
	cfg.NodeID, cfg.DataDir, cfg.Bootstrap = "n1", c.t.TempDir(), true
	cfg.RaftAddr, cfg.HTTPAdvertise = freeRaftAddr(c.t), "mem-n1"
	set(&cfg)
	return c.leader(c.start(cfg))
}

// smallDiskFollowers starts n2 and n3, each with its data dir alone on a
// 512 MiB tmpfs (--min-free-disk 256MiB), joins them through n1 and
// waits until they applied what n1 has; fillers are where a file fills
// each one's disk.
func smallDiskFollowers(c *memCluster, n1 *Node) (nodes []*Node, fillers []string) {
	c.t.Helper()
	for _, id := range []string{"n2", "n3"} {
		mnt := smallTmpfs(c.t, "512m")
		cfg := DefaultConfig() // --min-free-disk 256MiB
		cfg.NodeID, cfg.DataDir, cfg.Bootstrap = id, filepath.Join(mnt, id), false
		cfg.RaftAddr, cfg.HTTPAdvertise = freeRaftAddr(c.t), "mem-"+id
		n := c.start(cfg)
		c.join(n, n1)
		nodes, fillers = append(nodes, n), append(fillers, filepath.Join(mnt, "filler"))
	}
	waitApplied(c.t, n1, nodes...)
	return nodes, fillers
}

// fillDisks takes each node's disk under its threshold (200 MiB of its
// 512) and waits until the node says it is full.
func fillDisks(t *testing.T, nodes []*Node, fillers []string) {
	t.Helper()
	for i, n := range nodes {
		out, err := exec.Command("fallocate", "-l", "200m", fillers[i]).CombinedOutput()
		require.NoError(t, err, "%s", out)
		require.Eventually(t, func() bool { return n.DiskFull() != nil }, 5*time.Second, 50*time.Millisecond)
	}
}

// A one-node store whose disk is full, or a cluster whose voters are all
// full, was told "only none have room" (and the one-node store that "a
// quorum of the voters (1 of 1)" must store a write): the WARNING of idem
// cluster status, read by the operator at 3 am.
func TestVotersFullDetailReadsWhenNoVoterHasRoom(t *testing.T) {
	one := &VotersFullError{Full: []string{"n1 (49460224 bytes free on /data, under 100663296)"}, Voters: 1, Quorum: 1}
	require.Equal(t, "the disk of n1 (49460224 bytes free on /data, under 100663296) is below its minimum free space (--min-free-disk), "+
		"so the write was refused and nothing changed; reads still work, and writes are accepted again by themselves once space is freed on n1 (docs/DISK.md)", one.Detail())
	all := &VotersFullError{Full: []string{"n1 (1 bytes free on /a, under 9)", "n2 (2 bytes free on /b, under 9)", "n3 (3 bytes free on /c, under 9)"}, Voters: 3, Quorum: 2}
	d := all.Detail()
	require.NotContains(t, d, "only none")
	require.Contains(t, d, "a write must be stored by a quorum of the voters (2 of 3), and none has room, so the write was refused")
	require.Contains(t, d, "once space is freed on 2 of n1, n2 and n3")
}
