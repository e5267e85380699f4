package raftfsm

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/idem-store/idem/engine"
)

// A member replaced by a fresh node with the same id (the documented way:
// idem cluster remove --id n1, then join n1 again on an empty data dir)
// replays the cluster's log from its start. The log begins with n1's own
// bootstrap, a configuration of n1 alone, and here 600 entries follow
// before n2 joined (a one-node store grown later): after the leader's
// first batch of 512 entries, the fresh n1's latest configuration is
// itself alone, and foreignGuard then refused the leader's further
// entries and heartbeats as another cluster's. n1 then never caught up,
// and, hearing no leader, elected itself leader of a cluster of its own
// over a prefix of the real log.
func TestFreshNodeRejoiningUnderTheBootstrapIDCatchesUp(t *testing.T) {
	t.Parallel()
	c := newMemCluster(t)
	n1 := c.open("n1", "", true)
	c.leader(n1)
	for i := range 600 {
		require.NoError(t, claim(n1, fmt.Sprintf("k%d", i)))
	}
	n2 := c.open("n2", "", false)
	c.join(n2, n1)
	n3 := c.open("n3", "", false)
	c.join(n3, n1)
	c.stop(n1)
	l := c.leader(n2, n3)
	c.removeStopped(l, "n1")
	require.NoError(t, claim(l, "after"))

	fresh := c.open("n1", "", false)
	_, err := l.Join(fresh.Self(), false, true)
	require.NoError(t, err)
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) && fresh.db.Meta().Applied < l.db.Meta().Applied {
		require.False(t, fresh.IsLeader(), "the fresh n1 elected itself leader of a cluster of its own at applied index %d", fresh.db.Meta().Applied)
		time.Sleep(50 * time.Millisecond)
	}
	require.False(t, fresh.IsLeader(), "the fresh n1 leads a cluster of its own")
	require.GreaterOrEqual(t, fresh.db.Meta().Applied, l.db.Meta().Applied, "the fresh n1 never caught up")
}

// openIn starts node id on dir, on any port, with the default snapshot
// settings (the log keeps its first entries) and its own metrics registry,
// as idem serve gives it.
func (c *memCluster) openIn(id, dir string, bootstrap bool, logs *logBuffer) *Node {
	c.t.Helper()
	cfg := DefaultConfig()
	cfg.NodeID, cfg.DataDir, cfg.Bootstrap, cfg.RaftAddr, cfg.HTTPAdvertise = id, dir, bootstrap, "127.0.0.1:0", "mem-"+id
	cfg.Registry = prometheus.NewRegistry()
	if logs != nil {
		cfg.Logger = slog.New(slog.NewTextHandler(logs, nil))
	} else {
		// Kept for a failure only, with raft's own lines: an election that
		// never came (ci-60) said no more than "no leader".
		own := &logBuffer{}
		cfg.Logger = slog.New(slog.NewTextHandler(own, &slog.HandlerOptions{Level: slog.LevelDebug}))
		c.t.Cleanup(func() {
			if c.t.Failed() {
				c.t.Logf("%s's log:\n%s", id, own.String())
			}
		})
	}
	return c.start(cfg)
}

// The same fresh n1, stopped in the middle of its replay while its log
// ended in the cluster's one-node stretch (here: a copy of the first n1's
// data dir from that stretch, which holds the same entries), restarted
// with a configuration of itself alone: it elected itself leader of a
// cluster of its own and, armed by that configuration, refused the real
// leader for good. Having joined empty (the joining file), it now sets
// that partial copy aside, starts empty, joins again and catches up.
func TestFreshNodeRestartedInTheOneNodeStretchStartsEmpty(t *testing.T) {
	t.Parallel()
	c := newMemCluster(t)
	dirA, stretch := t.TempDir(), t.TempDir()
	n1 := c.openIn("n1", dirA, true, nil)
	c.leader(n1)
	for i := range 20 {
		require.NoError(t, claim(n1, fmt.Sprintf("k%d", i)))
	}
	c.stop(n1)
	copyDir(t, dirA, stretch)
	n1 = c.openIn("n1", dirA, true, nil)
	c.leader(n1)
	n2 := c.openIn("n2", t.TempDir(), false, nil)
	c.join(n2, n1)
	n3 := c.openIn("n3", t.TempDir(), false, nil)
	c.join(n3, n1)
	c.stop(n1)
	l := c.leader(n2, n3)
	c.removeStopped(l, "n1")
	require.NoError(t, claim(l, "after"))

	require.NoError(t, os.WriteFile(filepath.Join(stretch, joiningFile), []byte(admissionPrefix+"1000000\n"), 0o600)) // admitted further on
	var logs logBuffer
	fresh := c.openIn("n1", stretch, false, &logs)
	require.False(t, fresh.HasState(), "the partial copy was not set aside")
	require.Contains(t, logs.String(), "set-aside")
	aside, err := filepath.Glob(filepath.Join(stretch, "set-aside-*", "fsm"))
	require.NoError(t, err)
	require.Len(t, aside, 1, "the partial copy is kept")
	require.NoError(t, fresh.MarkJoining())
	res, err := l.Join(fresh.Self(), false, true)
	require.NoError(t, err)
	require.NoError(t, fresh.Admitted(res.AdmittedIndex)) // as idem serve's join does
	require.Eventually(t, func() bool {
		require.False(t, fresh.IsLeader(), "the fresh n1 leads a cluster of its own")
		_, found := fresh.db.Lookup(engine.Scope{Principal: "p", Endpoint: "e", Key: "after"}, false, fresh.db.Meta().NowMs)
		return found
	}, 20*time.Second, 50*time.Millisecond, "the fresh n1 never caught up")
	require.Eventually(t, func() bool {
		_, err := os.Stat(filepath.Join(stretch, joiningFile))
		return os.IsNotExist(err)
	}, 5*time.Second, 50*time.Millisecond, "the joining file outlived the catch-up")
}

// The joining file never costs a node its state otherwise: a node that
// joins as another id removes it once it has caught up past the first
// configuration; a node that has no state keeps it over a restart (the
// leader may have taken it in already, and send entries before it asks
// again), and removes it when it bootstraps a one-node cluster instead.
func TestJoiningFileIsForgotten(t *testing.T) {
	t.Parallel()
	c := newMemCluster(t)
	n1 := c.openIn("n1", t.TempDir(), true, nil)
	c.leader(n1)
	dir := t.TempDir()
	n2 := c.openIn("n2", dir, false, nil)
	require.NoError(t, n2.MarkJoining())
	require.FileExists(t, filepath.Join(dir, joiningFile))
	c.join(n2, n1)
	require.Eventually(t, func() bool {
		_, err := os.Stat(filepath.Join(dir, joiningFile))
		return os.IsNotExist(err)
	}, 5*time.Second, 50*time.Millisecond, "the joining file outlived the catch-up")
	c.stop(n2)
	n2 = c.openIn("n2", dir, false, nil)
	require.True(t, n2.HasState())

	empty := t.TempDir()
	n4 := c.openIn("n4", empty, false, nil)
	require.NoError(t, n4.MarkJoining())
	c.stop(n4)
	n4 = c.openIn("n4", empty, false, nil)
	require.FileExists(t, filepath.Join(empty, joiningFile))
	c.stop(n4)
	c.openIn("n4", empty, true, nil) // started alone instead
	require.NoFileExists(t, filepath.Join(empty, joiningFile))
}

// The joining file must outlive a configuration of the cluster's past. A
// fresh n1 replaying the log from its start passes every configuration the
// cluster ever had: a cluster that ran as n1 alone, took in n2 and removed
// it (a node joined by mistake, or replaced) ran as n1 alone again. The
// fresh n1 forgot its file at {n1, n2}, the first configuration it met
// that lists another member; stopped later in the second one-node stretch
// it restarted as a one-node cluster of its own over part of the log, as
// before the file existed. Here its copy of the log up to {n1, n2} is the
// first n1's data dir from then.
func TestJoiningFileOutlivesAPastConfiguration(t *testing.T) {
	t.Parallel()
	c := newMemCluster(t)
	dirA, past := t.TempDir(), t.TempDir()
	n1 := c.openIn("n1", dirA, true, nil)
	c.leader(n1)
	for i := range 10 {
		require.NoError(t, claim(n1, fmt.Sprintf("k%d", i)))
	}
	n2 := c.openIn("n2", t.TempDir(), false, nil)
	c.join(n2, n1)
	c.stop(n2)
	c.stop(n1)
	copyDir(t, dirA, past) // its log ends in {n1, n2}

	require.NoError(t, os.WriteFile(filepath.Join(past, joiningFile), nil, 0o600))
	fresh := c.openIn("n1", past, false, nil)
	require.True(t, fresh.HasState())
	time.Sleep(time.Second) // refreshMembership runs every 200 ms
	require.FileExists(t, filepath.Join(past, joiningFile), "the joining file was forgotten at a configuration of the cluster's past")
	// Admitted later than that configuration (the leader's answer), it
	// keeps it all the same; restarted there, it sets the copy aside.
	index := fresh.raft.LastIndex()
	require.NoError(t, fresh.Admitted(index+100))
	time.Sleep(time.Second)
	require.FileExists(t, filepath.Join(past, joiningFile), "the joining file was forgotten before the node's admission")
	c.stop(fresh)
	require.Equal(t, index+100, readAdmission(past))
}

// A node joined by hand before it started (docs/MEMBERSHIP.md: "the node
// may start before or after") may get the leader's first entries before
// it asks to join, and its join then found it with state: it wrote no
// joining file, and a fresh n1 restarted in the cluster's one-node stretch
// led a cluster of its own. An empty node that does not bootstrap has the
// file from its start.
func TestJoiningFileBeforeTheFirstEntry(t *testing.T) {
	t.Parallel()
	c := newMemCluster(t)
	dir := t.TempDir()
	n := c.openIn("n2", dir, false, nil)
	require.False(t, n.HasState())
	require.FileExists(t, filepath.Join(dir, joiningFile))
	other := t.TempDir()
	c.openIn("n3", other, true, nil)
	require.NoFileExists(t, filepath.Join(other, joiningFile), "a node that bootstraps is not joining")
}

// The same partial copy, started without --join (idem serve then asks for
// a one-node cluster when the data dir is empty): set aside, the node
// bootstrapped an empty cluster of its own and took claims of keys its
// cluster holds. It now starts empty without bootstrapping, to be joined.
func TestPartialCopyStartedAloneDoesNotBootstrap(t *testing.T) {
	t.Parallel()
	c := newMemCluster(t)
	dirA, stretch := t.TempDir(), t.TempDir()
	n1 := c.openIn("n1", dirA, true, nil)
	c.leader(n1)
	require.NoError(t, claim(n1, "k"))
	c.stop(n1)
	copyDir(t, dirA, stretch)

	require.NoError(t, os.WriteFile(filepath.Join(stretch, joiningFile), []byte(admissionPrefix+"1000000\n"), 0o600)) // admitted further on
	var logs logBuffer
	fresh := c.openIn("n1", stretch, true, &logs)
	require.Contains(t, logs.String(), "set-aside")
	time.Sleep(2 * time.Second)
	require.False(t, fresh.HasState(), "the node bootstrapped a cluster of its own after setting its copy aside")
	require.False(t, fresh.IsLeader())
	require.FileExists(t, filepath.Join(stretch, joiningFile))
	// Nor on its next start: the data dir is empty, but was emptied.
	c.stop(fresh)
	fresh = c.openIn("n1", stretch, true, nil)
	time.Sleep(2 * time.Second)
	require.False(t, fresh.HasState(), "restarted, the node bootstrapped a cluster of its own")
	require.FileExists(t, filepath.Join(stretch, joiningFile))
}

// A node that joined empty but never learned where it was admitted, whose
// configuration lists it alone, may hold a stretch of its cluster's past
// or be its cluster's last member: it changes nothing and says both.
func TestJoiningFileWithoutAdmissionRefusesToGuess(t *testing.T) {
	t.Parallel()
	c := newMemCluster(t)
	dir := t.TempDir()
	n1 := c.openIn("n1", dir, true, nil)
	c.leader(n1)
	require.NoError(t, claim(n1, "k"))
	c.stop(n1)
	require.NoError(t, os.WriteFile(filepath.Join(dir, joiningFile), nil, 0o600))
	cfg := DefaultConfig()
	cfg.NodeID, cfg.DataDir, cfg.RaftAddr, cfg.HTTPAdvertise = "n1", dir, "127.0.0.1:0", "mem-n1"
	_, err := Open(cfg)
	require.ErrorContains(t, err, "never learned where it was admitted")
	matches, _ := filepath.Glob(filepath.Join(dir, "set-aside-*"))
	require.Empty(t, matches, "a state that may be the cluster's only copy was set aside")
	require.DirExists(t, filepath.Join(dir, "fsm"))
}

// Two set-asides in one second (the second after one that failed part-way)
// each get a directory: the second failed, the name taken.
func TestSetAsideTwiceInOneSecond(t *testing.T) {
	dir := t.TempDir()
	for range 2 {
		require.NoError(t, os.Mkdir(filepath.Join(dir, "fsm"), 0o700))
		_, err := setAside(dir, slog.New(slog.DiscardHandler))
		require.NoError(t, err)
	}
	aside, err := filepath.Glob(filepath.Join(dir, "set-aside-*", "fsm"))
	require.NoError(t, err)
	require.Len(t, aside, 2)
}
