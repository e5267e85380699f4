package raftfsm

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idem-store/idem/engine"
)

// A node whose state was applied from a raft log that is gone used to
// start with an empty log and no cluster configuration: raft.db holds a
// term, so raft refused to bootstrap it (and serve logged "bootstrapped
// the cluster" every second), and it never led. Ops walk: a three-node
// cluster of a development build that kept its log in raft-log/ (a Pebble
// log store, 08c16c6..6363399) restarted on this release stayed leaderless
// for good. Such a start is refused with what to do, and changes nothing.
func TestStartRefusesALogItDoesNotRead(t *testing.T) {
	for _, tc := range []struct {
		name string
		lose func(dir string) error
		want string
	}{
		{"log in raft-log", func(dir string) error {
			return os.Rename(filepath.Join(dir, logStoreDir), filepath.Join(dir, oldLogDir))
		}, "raft-log holds this node's raft log in the layout of a development build"},
		{"log deleted", func(dir string) error {
			return os.RemoveAll(filepath.Join(dir, logStoreDir))
		}, "holds no raft log and there is no snapshot"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := mustNode(t, func(c *Config) { c.TickInterval, c.SweepInterval = time.Hour, time.Hour })
			s := engine.Scope{Principal: "p", Endpoint: "e", Key: "k"}
			res, _, err := n.Claim(engine.ClaimArgs{Scope: s, Fingerprint: "aa", LeaseMs: 1000, RetentionMs: 3_600_000})
			require.NoError(t, err)
			require.Equal(t, engine.OutcomeClaimed, res.Outcome)
			cfg := n.cfg
			require.NoError(t, n.Close())
			require.NoError(t, tc.lose(cfg.DataDir))

			for range 2 { // the refusal changed nothing: the second start says the same
				m, err := Open(cfg)
				if err == nil {
					m.Close()
				}
				require.Error(t, err, "a node whose raft log is gone must refuse to start: it would never lead")
				require.Contains(t, err.Error(), tc.want)
				require.Contains(t, err.Error(), "idem recover")
				require.NotContains(t, err.Error(), "rm ")
				// A member is replaced removed first (docs/MEMBERSHIP.md).
				require.Contains(t, err.Error(), "idem cluster remove --id "+cfg.NodeID)
			}
		})
	}
}

// A raft log deleted beside a snapshot older than the state used to start:
// raft's log ended at the snapshot, the node proposed new entries at the
// indexes its state had applied already, and the FSM skipped them, so
// every claim was answered 503 until the log passed the state (ops walk:
// about 20). It is refused with what to do; idem recover (which extends
// the log to the state) then starts it with every record.
func TestStartRefusesALogDeletedBesideAnOlderSnapshot(t *testing.T) {
	n := mustNode(t, func(c *Config) { c.TickInterval, c.SweepInterval = time.Hour, time.Hour })
	claim := func(n *Node, key string) {
		t.Helper()
		res, _, err := n.Claim(engine.ClaimArgs{Scope: engine.Scope{Principal: "p", Endpoint: "e", Key: key}, Fingerprint: "aa", LeaseMs: 3_600_000, RetentionMs: 3_600_000})
		require.NoError(t, err)
		require.Equal(t, engine.OutcomeClaimed, res.Outcome, key)
	}
	claim(n, "before")
	require.NoError(t, n.Snapshot())
	for i := range 5 {
		claim(n, fmt.Sprint("after-", i))
	}
	cfg := n.cfg
	require.NoError(t, n.Close())
	require.NoError(t, os.RemoveAll(filepath.Join(cfg.DataDir, logStoreDir)))

	for range 2 { // the refusal changed nothing: the second start says the same
		m, err := Open(cfg)
		if err == nil {
			m.Close()
		}
		require.Error(t, err, "a node whose log lost entries its state applied must not start from it")
		require.Contains(t, err.Error(), "entries this node applied are gone from its log")
		require.Contains(t, err.Error(), "idem recover")
		require.NotContains(t, err.Error(), "rm ")
		require.Contains(t, err.Error(), "idem cluster remove --id "+cfg.NodeID)
	}

	_, err := Recover(cfg.DataDir, cfg.NodeID, []Peer{{ID: cfg.NodeID, RaftAddr: cfg.RaftAddr}}, nil)
	require.NoError(t, err)
	m, err := Open(cfg)
	require.NoError(t, err)
	defer m.Close()
	require.Eventually(t, m.IsLeader, 10*time.Second, 10*time.Millisecond)
	for _, key := range []string{"before", "after-0", "after-4"} {
		res, _, err := m.Claim(engine.ClaimArgs{Scope: engine.Scope{Principal: "p", Endpoint: "e", Key: key}, Fingerprint: "aa", LeaseMs: 3_600_000, RetentionMs: 3_600_000})
		require.NoError(t, err)
		require.NotEqual(t, engine.OutcomeClaimed, res.Outcome, "%s was claimed before the log was lost", key)
	}
	claim(m, "new") // and new claims are decided, not skipped
}

// A node stopped after installing its leader's snapshot but before raft
// removed its older log (raft-wal takes no gaps, so raft empties the log
// then) keeps a log that ends below the newest snapshot. raft appended the
// entries after the snapshot to it and raft-wal refused every one, so the
// node never stored an entry again ("no leader" here). The same state is
// made by cutting the log's tail below the node's own snapshot.
func TestStartDropsALogThatEndsBelowTheSnapshot(t *testing.T) {
	n := mustNode(t, func(c *Config) { c.TickInterval, c.SweepInterval = time.Hour, time.Hour })
	claim := func(n *Node, key string) engine.Outcome {
		t.Helper()
		res, _, err := n.Claim(engine.ClaimArgs{Scope: engine.Scope{Principal: "p", Endpoint: "e", Key: key}, Fingerprint: "aa", LeaseMs: 3_600_000, RetentionMs: 3_600_000})
		require.NoError(t, err)
		return res.Outcome
	}
	for i := range 5 {
		require.Equal(t, engine.OutcomeClaimed, claim(n, fmt.Sprint("k-", i)))
	}
	require.NoError(t, n.Snapshot())
	list, err := n.snaps.List()
	require.NoError(t, err)
	snapIndex := list[0].Index
	cfg := n.cfg
	require.NoError(t, n.Close())

	ls, err := openWAL(filepath.Join(cfg.DataDir, logStoreDir), nil)
	require.NoError(t, err)
	last, err := ls.LastIndex()
	require.NoError(t, err)
	require.GreaterOrEqual(t, last, snapIndex)
	require.NoError(t, ls.DeleteRange(snapIndex-2, last))
	require.NoError(t, ls.Close())

	m, err := Open(cfg)
	require.NoError(t, err)
	defer m.Close()
	require.Eventually(t, m.IsLeader, 10*time.Second, 10*time.Millisecond)
	for i := range 5 {
		require.NotEqual(t, engine.OutcomeClaimed, claim(m, fmt.Sprint("k-", i)), "k-%d was claimed before the restart", i)
	}
	require.Equal(t, engine.OutcomeClaimed, claim(m, "new"), "a new claim is decided: the node stores entries again")
	first, err := m.logStore.FirstIndex()
	require.NoError(t, err)
	require.Greater(t, first, snapIndex, "the entries below the snapshot are gone from the log")
}

// A compacted raft log whose covering snapshot is gone (snapshots/*
// deleted to free space, or only the newest, or its meta.json garbled)
// used to panic at start: raft read the log from index 1, or from the
// older snapshot kept, and "log not found" ended the process (an operator
// walk). The state in Pebble is whole. The start is refused with what to
// do, changing nothing; idem recover, which failed the same way ("failed
// to get log at index 1"), then rebuilds the node from its state.
func TestStartRefusesACompactedLogWhoseSnapshotIsGone(t *testing.T) {
	for _, tc := range []struct {
		name string
		lose func(t *testing.T, snapDir string, newest string)
	}{
		{"all snapshots deleted", func(t *testing.T, snapDir, _ string) {
			ents, err := os.ReadDir(snapDir)
			require.NoError(t, err)
			for _, e := range ents {
				require.NoError(t, os.RemoveAll(filepath.Join(snapDir, e.Name())))
			}
		}},
		{"newest snapshot deleted", func(t *testing.T, snapDir, newest string) {
			require.NoError(t, os.RemoveAll(filepath.Join(snapDir, newest)))
		}},
		{"newest meta.json garbled", func(t *testing.T, snapDir, newest string) {
			require.NoError(t, os.WriteFile(filepath.Join(snapDir, newest, "meta.json"), []byte("{garbled"), 0o600))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := mustNode(t, func(c *Config) {
				c.TickInterval, c.SweepInterval = time.Hour, time.Hour
				c.SnapshotInterval, c.TrailingLogs = time.Hour, 4
			})
			claim := func(n *Node, key string) engine.Outcome {
				t.Helper()
				res, _, err := n.Claim(engine.ClaimArgs{Scope: engine.Scope{Principal: "p", Endpoint: "e", Key: key}, Fingerprint: "aa", LeaseMs: 3_600_000, RetentionMs: 3_600_000})
				require.NoError(t, err)
				return res.Outcome
			}
			for i := range 30 {
				require.Equal(t, engine.OutcomeClaimed, claim(n, fmt.Sprint("k-", i)))
				if i == 9 || i == 19 {
					require.NoError(t, n.Snapshot()) // two snapshots, the log compacted to 4 entries below each
				}
			}
			list, err := n.snaps.List()
			require.NoError(t, err)
			require.Len(t, list, 2)
			first, err := n.logStore.FirstIndex()
			require.NoError(t, err)
			require.Greater(t, first, list[1].Index+1, "the log was compacted past the older snapshot")
			cfg := n.cfg
			require.NoError(t, n.Close())
			tc.lose(t, filepath.Join(cfg.DataDir, "snapshots"), list[0].ID)

			for range 2 { // the refusal changed nothing: the second start says the same
				m, err := Open(cfg)
				if err == nil {
					m.Close()
				}
				require.Error(t, err, "a compacted log without the snapshot that covers it must be refused, not panic in raft")
				msg := err.Error()
				require.Contains(t, msg, filepath.Join(cfg.DataDir, "snapshots"))
				require.Contains(t, msg, "no snapshot in")
				require.Contains(t, msg, "Nothing was changed")
				require.Contains(t, msg, "idem recover --data-dir "+cfg.DataDir)
				require.Contains(t, msg, "idem cluster remove --id "+cfg.NodeID)
				require.NotContains(t, msg, "rm ")
			}

			st, err := ReadOfflineState(cfg.DataDir)
			require.NoError(t, err)
			require.Equal(t, first, st.LogHeadLost, "the dry run says the log's head has no snapshot")
			_, err = Recover(cfg.DataDir, cfg.NodeID, []Peer{{ID: cfg.NodeID, RaftAddr: cfg.RaftAddr}}, nil)
			require.NoError(t, err)
			m, err := Open(cfg)
			require.NoError(t, err)
			defer m.Close()
			require.Eventually(t, m.IsLeader, 10*time.Second, 10*time.Millisecond)
			for i := range 30 {
				require.NotEqual(t, engine.OutcomeClaimed, claim(m, fmt.Sprint("k-", i)), "k-%d was claimed before the snapshots were lost", i)
			}
			require.Equal(t, engine.OutcomeClaimed, claim(m, "new"), "a new claim is decided")
		})
	}
}

// With the covering snapshot gone, the state must still reach the index
// below the log's first entry: a state older than that (the fsm directory
// replaced by an older copy as well) is missing entries that only the lost
// snapshot stood for. Start and recover then refuse and change nothing:
// recover must not cover the gap with a marker of a state that lacks them.
func TestRecoverRefusesACompactedLogWhoseSnapshotAndStateAreGone(t *testing.T) {
	n := mustNode(t, func(c *Config) {
		c.TickInterval, c.SweepInterval = time.Hour, time.Hour
		c.SnapshotInterval, c.TrailingLogs = time.Hour, 4
	})
	claim := func(n *Node, key string) {
		t.Helper()
		res, _, err := n.Claim(engine.ClaimArgs{Scope: engine.Scope{Principal: "p", Endpoint: "e", Key: key}, Fingerprint: "aa", LeaseMs: 3_600_000, RetentionMs: 3_600_000})
		require.NoError(t, err)
		require.Equal(t, engine.OutcomeClaimed, res.Outcome, key)
	}
	claim(n, "old")
	cfg := n.cfg
	require.NoError(t, n.Close())
	old := filepath.Join(t.TempDir(), "fsm")
	copyDir(t, filepath.Join(cfg.DataDir, "fsm"), old)
	m, err := Open(cfg)
	require.NoError(t, err)
	require.Eventually(t, m.IsLeader, 10*time.Second, 10*time.Millisecond)
	for i := range 20 {
		claim(m, fmt.Sprint("k-", i))
	}
	require.NoError(t, m.Snapshot())
	claim(m, "last")
	require.NoError(t, m.Close())

	snapDir := filepath.Join(cfg.DataDir, "snapshots")
	require.NoError(t, os.RemoveAll(snapDir))
	require.NoError(t, os.Mkdir(snapDir, 0o700))
	require.NoError(t, os.RemoveAll(filepath.Join(cfg.DataDir, "fsm")))
	copyDir(t, old, filepath.Join(cfg.DataDir, "fsm"))

	for range 2 { // the refusals changed nothing: the second say the same
		o, err := Open(cfg)
		if err == nil {
			o.Close()
		}
		require.Error(t, err)
		require.Contains(t, err.Error(), "was applied only up to index")
		require.Contains(t, err.Error(), "Nothing was changed")
		require.Contains(t, err.Error(), "idem snapshot restore")
		require.NotContains(t, err.Error(), "idem recover", "recover cannot rebuild this state")
		require.Contains(t, err.Error(), "idem cluster remove --id "+cfg.NodeID)

		_, err = Recover(cfg.DataDir, cfg.NodeID, []Peer{{ID: cfg.NodeID, RaftAddr: cfg.RaftAddr}}, nil)
		require.Error(t, err, "a state older than the log's head must not be covered by a new snapshot")
		require.Contains(t, err.Error(), "was applied only up to index")
		require.Contains(t, err.Error(), "Nothing was changed")
		require.Contains(t, err.Error(), "idem snapshot restore")
		ents, err := os.ReadDir(snapDir)
		require.NoError(t, err)
		require.Empty(t, ents, "no snapshot was written")
	}
}
