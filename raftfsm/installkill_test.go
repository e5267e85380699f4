package raftfsm

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idem-store/idem/engine"
)

// A follower killed (-9) right after raft removed its whole log for a
// leader's snapshot it had installed, before the next entry was stored:
// its log is empty, its newest snapshot is the leader's, and its state is
// the leader's (past the snapshot's index). It starts again and catches
// up, holding every claim acknowledged before the kill. The whole
// cluster runs in a process of its own, which the kill ends.
func TestFollowerKilledAfterTheInstallDroppedItsLogStartsAgain(t *testing.T) {
	if os.Getenv("IDEM_TEST_INSTALL_KILL") != "" {
		installKillChild(t, strings.Split(os.Getenv("IDEM_TEST_INSTALL_KILL_DIRS"), ","), strings.Split(os.Getenv("IDEM_TEST_INSTALL_KILL_ADDRS"), ","))
		return
	}
	dirs := []string{t.TempDir(), t.TempDir(), t.TempDir()}
	addrs := testRaftAddrs(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestFollowerKilledAfterTheInstallDroppedItsLogStartsAgain$", "-test.count=1")
	cmd.Env = append(os.Environ(), "IDEM_TEST_INSTALL_KILL=1",
		"IDEM_TEST_INSTALL_KILL_DIRS="+strings.Join(dirs, ","), "IDEM_TEST_INSTALL_KILL_ADDRS="+strings.Join(addrs, ","))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	var ee *exec.ExitError
	require.True(t, errors.As(err, &ee), "the child must be killed: %v\n%s\n%.3000s", err, out, stderr.String())
	ws, _ := ee.Sys().(syscall.WaitStatus)
	require.True(t, ws.Signaled() && ws.Signal() == syscall.SIGKILL, "the child must be killed at the log's drop: %v\n%s\n%.3000s", err, out, stderr.String())
	var acked []string
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		if k, ok := strings.CutPrefix(sc.Text(), "acked "); ok {
			acked = append(acked, k)
		}
	}
	require.Contains(t, string(out), "killed at the log's drop")

	// What the kill left in n3's data dir: the window this test is about.
	st, err := ReadOfflineState(dirs[2])
	require.NoError(t, err)
	ls, err := openWAL(filepath.Join(dirs[2], logStoreDir), nil)
	require.NoError(t, err)
	first, _ := ls.FirstIndex()
	last, _ := ls.LastIndex()
	require.NoError(t, ls.Close())
	t.Logf("n3 at the kill: applied %d, log %d-%d", st.Applied, first, last)
	require.Zero(t, last, "the log is empty at the kill")
	require.NotZero(t, st.Applied)
	snaps, err := newSnapshotStore(dirs[2], nil, slog.New(slog.NewTextHandler(io.Discard, nil)))
	require.NoError(t, err)
	list, err := snaps.List()
	require.NoError(t, err)
	require.NotEmpty(t, list)
	t.Logf("n3's newest snapshot: %s (index %d)", list[0].ID, list[0].Index)
	require.Greater(t, st.Applied, list[0].Index, "the state is the leader's, past its snapshot's index: the log and snapshots end below it")

	// All three start again; n3 starts, and holds every acknowledged
	// claim and what the leader takes after.
	c := newMemCluster(t)
	var logs [3]logBuffer
	nodes := make([]*Node, 3)
	for i := range nodes {
		cfg := DefaultConfig()
		id := fmt.Sprint("n", i+1)
		cfg.NodeID, cfg.DataDir, cfg.RaftAddr, cfg.HTTPAdvertise = id, dirs[i], addrs[i], "mem-"+id
		cfg.SnapshotThreshold, cfg.TrailingLogs, cfg.SnapshotInterval = 1<<30, 4, time.Hour
		cfg.Logger = slog.New(slog.NewTextHandler(&logs[i], nil))
		n, err := Open(cfg)
		require.NoError(t, err, "%s must start again after the kill:\n%s", id, logs[i].String())
		n.SetPeerProbe(c.probe)
		c.mu.Lock()
		c.nodes[cfg.HTTPAdvertise] = n
		c.mu.Unlock()
		t.Cleanup(func() { c.stop(n) })
		nodes[i] = n
	}
	require.Contains(t, logs[2].String(), "the state was installed from the leader's snapshot past the snapshot's index")
	leader := c.leader(nodes...)
	claimFresh(t, leader, "after")
	acked = append(acked, "after")
	for _, k := range acked {
		require.Eventually(t, func() bool {
			_, ok, err := nodes[2].Lookup(context.Background(), engine.Scope{Principal: "p", Endpoint: "e", Key: k}, false, false)
			return err == nil && ok
		}, 20*time.Second, 20*time.Millisecond, "n3 lacks %s:\n%s", k, logs[2].String())
	}
}

// installKillChild runs the cluster: n3 stops, falls behind a snapshot of
// the leader's, and comes back; the process kills itself once raft has
// removed n3's log after the install.
func installKillChild(t *testing.T, dirs, addrs []string) {
	keep := spareKeep
	spareKeep = 0 // the stream n3 gets holds the leader's state as of its send
	defer func() { spareKeep = keep }()
	c := newMemCluster(t)
	var logs [3]logBuffer
	open := snapshotOpener(c, dirs, addrs, logs[:])
	n1 := open(0, true)
	c.leader(n1)
	c.join(open(1, false), n1)
	n3 := open(2, false)
	c.join(n3, n1)
	claim := func(key string) {
		t.Helper()
		claimFresh(t, n1, key)
		fmt.Println("acked " + key)
	}
	claim("before")
	c.stop(n3)
	for i := range 20 {
		claim(fmt.Sprint("a", i))
	}
	require.NoError(t, n1.Snapshot())
	for i := range 5 {
		claim(fmt.Sprint("b", i))
	}
	afterInstallDrop = func() {
		fmt.Println("killed at the log's drop")
		os.Stdout.Sync()
		syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {}
	}
	open(2, false)
	time.Sleep(30 * time.Second)
	fmt.Println("no install dropped n3's log")
	os.Exit(3)
}
