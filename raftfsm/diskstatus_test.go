package raftfsm

import (
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idem-store/idem/engine"
)

// A follower whose disk is full takes no raft entries and falls behind;
// the leader's health check and `idem cluster status` said only "falling
// behind: had applied 235 when the leader had committed 1404", and the
// follower's /readyz only that it had not applied the leader's commit
// index: an operator had to find the node's log to learn its disk was
// full (a disk-full walk on real processes). Its status now says so, with
// the free space and the path, and the leader's reason quotes it. On a
// private tmpfs filled by another file, as another process would.
func TestFullFollowerIsNamedFullByTheLeader(t *testing.T) {
	mnt := smallTmpfs(t, "512m")
	c := newMemCluster(t)
	n1 := c.open("n1", "", true)
	c.leader(n1)
	n2 := c.open("n2", "", false)
	c.join(n2, n1)
	cfg := DefaultConfig() // --min-free-disk 256MiB: the writes stop under it
	cfg.NodeID, cfg.DataDir, cfg.Bootstrap = "n3", filepath.Join(mnt, "n3"), false
	cfg.RaftAddr, cfg.HTTPAdvertise = "127.0.0.1:0", "mem-n3"
	n3 := c.start(cfg)
	c.join(n3, n1)
	write(t, n1, "before")
	require.Nil(t, n3.DiskFull(), "a disk with room is not full")

	filler := filepath.Join(mnt, "filler")
	out, err := exec.Command("fallocate", "-l", "200m", filler).CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.Eventually(t, func() bool { return n3.DiskFull() != nil }, 5*time.Second, 50*time.Millisecond)
	st, err := n3.Status()
	require.NoError(t, err)
	require.NotNil(t, st.DiskFull, "the follower's own status says its disk is full")
	require.Equal(t, cfg.DataDir, st.DiskFull.DataDir)

	// The follower falls behind while the leader goes on with n2.
	var why string
	for i := 0; ; i++ {
		write(t, n1, fmt.Sprint("during-", i))
		m := member(t, n1, "n3")
		why = m.UnhealthyReason
		if strings.Contains(why, "falling behind") {
			break
		}
		require.Less(t, i, 200, "n3 never judged behind: %q", why)
		time.Sleep(100 * time.Millisecond)
	}
	require.Contains(t, why, "its disk is full", "the leader's reason names the cause")
	require.Contains(t, why, cfg.DataDir, "and the path")

	// Space back: it catches up by itself and is no longer full.
	require.NoError(t, os.Remove(filler))
	require.Eventually(t, func() bool { return n3.DiskFull() == nil }, 5*time.Second, 50*time.Millisecond)
	waitApplied(t, n1, n3)
}

// Only the leader's disk decides 507, and a leader whose applies wait for
// space answers no linearizable read: a leader whose disk filled kept the
// whole cluster refusing writes (507) and reads (503 "no leader is
// available") while both followers had room, until an operator moved the
// leadership by hand (a disk-full walk on real processes). A full leader
// now hands it to a voter with room, and the cluster takes writes again.
func TestFullLeaderHandsTheLeadershipToAVoterWithRoom(t *testing.T) {
	mnt, c, n1, logs := fullDiskLeader(t)
	n2 := c.open("n2", "", false)
	c.join(n2, n1)
	n3 := c.open("n3", "", false)
	c.join(n3, n1)
	write(t, n1, "before")
	require.True(t, n1.IsLeader())

	out, err := exec.Command("fallocate", "-l", "200m", filepath.Join(mnt, "filler")).CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.Eventually(t, func() bool { return n1.DiskFull() != nil }, 5*time.Second, 50*time.Millisecond)
	_, _, err = n1.Claim(engine.ClaimArgs{Scope: engine.Scope{Principal: "cus_1", Endpoint: "POST /pay", Key: "refused"}, Fingerprint: "aa", LeaseMs: 60_000, RetentionMs: 3_600_000})
	require.ErrorIs(t, err, ErrStorageFull, "the full leader refuses writes")

	require.Eventually(t, func() bool { return n2.IsLeader() || n3.IsLeader() }, 15*time.Second, 50*time.Millisecond,
		"the full leader kept the leadership while two voters had room")
	require.Contains(t, logs.String(), "handed the leadership to a voter with room")
	l := c.leader(n2, n3)
	require.Eventually(t, func() bool {
		_, _, err := l.Claim(engine.ClaimArgs{Scope: engine.Scope{Principal: "cus_1", Endpoint: "POST /pay", Key: "after"}, Fingerprint: "aa", LeaseMs: 60_000, RetentionMs: 3_600_000})
		return err == nil
	}, 10*time.Second, 100*time.Millisecond, "the cluster takes writes again")
}

// A follower whose disk is full refused every append, a new leader's
// first entry of its term and expiry's ticks and drops included. In a
// cluster whose disks were all full, a leader elected after a restart (or
// any election) never committed that entry: every linearizable read on
// every node was answered 503 "no leader is available" until space was
// freed by hand, and no bucket drop could free it (a disk-full walk, kill
// -9 of three full nodes and a restart). Here n1 leads with room, n2 and
// n3 are full; n1 stops, and whichever of them leads serves reads.
func TestFullVotersElectALeaderThatServesReads(t *testing.T) {
	c := newMemCluster(t)
	n1 := c.open("n1", "", true)
	c.leader(n1)
	s, _, _ := write(t, n1, "before")
	var full []*Node
	var mnts []string
	for _, id := range []string{"n2", "n3"} {
		mnt := smallTmpfs(t, "512m")
		cfg := DefaultConfig() // --min-free-disk 256MiB
		cfg.NodeID, cfg.DataDir, cfg.Bootstrap = id, filepath.Join(mnt, id), false
		cfg.RaftAddr, cfg.HTTPAdvertise = "127.0.0.1:0", "mem-"+id
		n := c.start(cfg)
		c.join(n, n1)
		full, mnts = append(full, n), append(mnts, mnt)
	}
	waitApplied(t, n1, full...)
	for i, n := range full {
		out, err := exec.Command("fallocate", "-l", "200m", filepath.Join(mnts[i], "filler")).CombinedOutput()
		require.NoError(t, err, "%s", out)
		require.Eventually(t, func() bool { return n.DiskFull() != nil }, 5*time.Second, 50*time.Millisecond)
	}
	c.stop(n1)
	l := c.leader(full...)
	require.Eventually(t, func() bool {
		r, ok, err := l.Lookup(t.Context(), s, false, true)
		return err == nil && ok && r.Response != nil
	}, 20*time.Second, 200*time.Millisecond, "the leader of two full voters serves no linearizable read")
}

// A one-node store has no voter to hand the leadership to, yet its full
// disk logged, every 30 s to a minute beside its own "disk space still
// low" line, that "no other voter is healthy, caught up and with room on
// its disk" (an operator walk on a 300 MB tmpfs): a line about voters that
// do not exist, for the operator to puzzle over at 3 am. It tries no
// hand-off and says nothing of it there.
func TestFullOneNodeStoreSpeaksOfNoOtherVoter(t *testing.T) {
	mnt, c, n1, logs := fullDiskLeader(t)
	write(t, n1, "before")

	out, err := exec.Command("fallocate", "-l", "200m", filepath.Join(mnt, "filler")).CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.Eventually(t, func() bool { return n1.DiskFull() != nil }, 5*time.Second, 50*time.Millisecond)
	time.Sleep(fullHandOffAfter + 2*time.Second) // past the hand-off's first try
	require.True(t, n1.IsLeader())
	require.Contains(t, logs.String(), "disk space low", "the node says its disk is full")
	require.NotContains(t, logs.String(), "no other voter", "a one-node store has none to speak of")
	require.NotContains(t, logs.String(), "fewer voters than a quorum", "nor of a quorum of voters")
	// Its ERROR line spoke of leading and of followers ("while this node
	// leads, ... a follower's writes go to the leader"): a one-node store
	// has no follower, and leads whenever it runs.
	requireLowLine(t, logs.String())

	// Restarted on the still-full disk, it says the same: the disk is
	// read before its raft configuration is.
	cfg := n1.cfg
	logs = new(logBuffer)
	cfg.Logger = slog.New(slog.NewTextHandler(logs, nil))
	c.stop(n1)
	n1 = c.start(cfg)
	c.leader(n1)
	require.Eventually(t, func() bool { return strings.Contains(logs.String(), "disk space low") }, 5*time.Second, 50*time.Millisecond)
	requireLowLine(t, logs.String())
}

// requireLowLine requires one-node store's "disk space low" line, once.
func requireLowLine(t *testing.T, logs string) {
	t.Helper()
	lines := regexp.MustCompile(`(?m)^.*disk space low.*$`).FindAllString(logs, -1)
	require.Len(t, lines, 1, "%s", logs)
	require.Contains(t, lines[0], `level=ERROR msg="disk space low: writes are refused with 507 storage_full until space is freed; reads still work"`)
	require.NotContains(t, lines[0], "follower")
	require.NotContains(t, lines[0], "while this node leads")
}

// fullDiskLeader is a memCluster whose bootstrapped leader n1 keeps the
// default --min-free-disk (256MiB: its writes stop under it) on a 512 MiB
// tmpfs, mounted at mnt, logging into logs.
func fullDiskLeader(t *testing.T) (mnt string, c *memCluster, n1 *Node, logs *logBuffer) {
	t.Helper()
	mnt = smallTmpfs(t, "512m")
	c = newMemCluster(t)
	cfg := DefaultConfig()
	cfg.NodeID, cfg.DataDir, cfg.Bootstrap = "n1", filepath.Join(mnt, "n1"), true
	cfg.RaftAddr, cfg.HTTPAdvertise = freeRaftAddr(t), "mem-n1" // a fixed port: a restart takes it again
	logs = new(logBuffer)
	cfg.Logger = slog.New(slog.NewTextHandler(logs, nil))
	n1 = c.start(cfg)
	c.leader(n1)
	return mnt, c, n1, logs
}

// A member of a larger cluster says what its full disk does as a follower
// too: it takes no client writes, and the leader refuses writes while
// fewer than a quorum of voters have room. The line said "only the
// leader's disk decides", which the leader's count of the voters with
// room (quorumroom.go) made untrue.
func TestFullFollowerSaysWhatItsFullDiskDoes(t *testing.T) {
	c := newMemCluster(t)
	n1 := c.open("n1", freeRaftAddr(t), true)
	c.leader(n1)
	mnt := smallTmpfs(t, "512m")
	cfg := DefaultConfig() // --min-free-disk 256MiB
	cfg.NodeID, cfg.DataDir, cfg.Bootstrap = "n2", filepath.Join(mnt, "n2"), false
	cfg.RaftAddr, cfg.HTTPAdvertise = freeRaftAddr(t), "mem-n2"
	logs := new(logBuffer)
	cfg.Logger = slog.New(slog.NewTextHandler(logs, nil))
	n2 := c.start(cfg)
	c.join(n2, n1)
	out, err := exec.Command("fallocate", "-l", "200m", filepath.Join(mnt, "filler")).CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.Eventually(t, func() bool { return strings.Contains(logs.String(), "disk space low") }, 5*time.Second, 50*time.Millisecond)
	line := regexp.MustCompile(`(?m)^.*disk space low.*$`).FindString(logs.String())
	require.Contains(t, line, `level=ERROR msg="disk space low: while this node leads, writes are refused with 507 storage_full until space is freed; as a follower it takes no client writes from the leader meanwhile`)
	require.NotContains(t, line, "only the leader's disk decides")
}
