package raftfsm

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idem-store/idem/engine"
)

// keptCluster starts n1 (leading) and n2, voters, and n3, a non-voter
// that n1 keeps back while lacking says its state records no capped claim
// (it skipped them on an earlier release), and waits until n3 knows it.
func keptCluster(t *testing.T) (c *memCluster, n1, n2, n3 *Node, probe func(context.Context, string) (Status, error), setLacking func(bool), scope engine.Scope) {
	return keptClusterWith(t, nil)
}

// keptClusterWith is keptCluster, calling before with n3 before it joins.
func keptClusterWith(t *testing.T, before func(n3 *Node)) (c *memCluster, n1, n2, n3 *Node, probe func(context.Context, string) (Status, error), setLacking func(bool), scope engine.Scope) {
	c = newMemCluster(t)
	var mu sync.Mutex
	lacking := true
	probe = func(ctx context.Context, addr string) (Status, error) {
		st, err := c.probe(ctx, addr)
		mu.Lock()
		defer mu.Unlock()
		if addr == "mem-n3" && lacking {
			st.Gated = ptr(uint64(0))
		}
		return st, err
	}
	setLacking = func(v bool) { mu.Lock(); lacking = v; mu.Unlock() }
	n1 = c.open("n1", "", true)
	n1.SetPeerProbe(probe)
	c.leader(n1)
	n2 = c.open("n2", "", false)
	c.join(n2, n1)
	require.Eventually(t, func() bool { return n1.membersHave(FeatureCredentialCap) }, 10*time.Second, 20*time.Millisecond)
	a := capClaim("cus_1", "k", 5, "cus_")
	require.Equal(t, engine.OutcomeClaimed, mustClaim(t, n1, a).Outcome)
	n3 = c.open("n3", "", false)
	if before != nil {
		before(n3)
	}
	res, err := n1.Join(n3.Self(), false, false)
	require.NoError(t, err)
	require.NoError(t, n3.Admitted(res.AdmittedIndex))
	require.Eventually(t, func() bool { return n3.KeptBack() != nil }, 10*time.Second, 20*time.Millisecond,
		"n3 never learned that the leader keeps it a non-voter")
	return c, n1, n2, n3, probe, setLacking, a.Scope
}

// restart stops n and starts it again on its data dir and raft address.
func (c *memCluster) restart(n *Node) *Node {
	c.t.Helper()
	cfg := n.cfg
	cfg.RaftAddr, cfg.RaftAdvertise = n.self.RaftAddr, ""
	c.stop(n)
	return c.start(cfg)
}

func staleRead(n *Node, s engine.Scope) error {
	_, _, err := n.Lookup(context.Background(), s, false, false)
	return err
}

// A kept non-voter restarted while no leader answers it (its leader down,
// the other voter alone without a quorum) was not kept: the mark lived in
// memory, and the leader that would name it again was gone, so it served
// stale reads from a state that may lack records, and /readyz 200 (its
// KeptBack), exactly when stale reads are the only reads it serves. The
// mark is now recorded in the data dir, and read back at start.
func TestKeptBackOutlivesARestartWithoutALeader(t *testing.T) {
	c, n1, _, n3, _, _, scope := keptCluster(t)
	dir := n3.cfg.DataDir
	// The mark is in memory (KeptBack) a moment before it is on disk:
	// set publishes it, then writes and syncs the file.
	var b []byte
	require.Eventually(t, func() bool {
		var err error
		b, err = os.ReadFile(filepath.Join(dir, KeptFile))
		return err == nil
	}, 5*time.Second, 5*time.Millisecond, "the kept mark is not recorded in the data dir")
	var rec keptRecord
	require.NoError(t, json.Unmarshal(b, &rec))
	require.Equal(t, "n1", rec.Leader)
	require.Contains(t, rec.Reason, "upgraded on its data dir")

	c.stop(n1) // n2 alone has no quorum: no leader answers n3
	n3 = c.restart(n3)
	var kept *KeptBackError
	require.True(t, errors.As(n3.KeptBack(), &kept), "a kept node restarted without a leader is not kept")
	require.Equal(t, "n1", kept.Leader)
	require.Contains(t, kept.Reason, "upgraded on its data dir")
	require.True(t, errors.As(staleRead(n3, scope), &kept), "a kept node restarted without a leader serves stale reads")
	// It stays so while no leader answers.
	time.Sleep(4 * probeEvery)
	require.Error(t, n3.KeptBack())
	require.Error(t, staleRead(n3, scope))
	_, ok := n3.Leader()
	require.False(t, ok, "a leader was elected without n1")
}

// Once the kept node is promoted, the record goes, and a restart serves
// stale reads; a record left behind (a removal that failed, a crash right
// after the promotion) is removed at start by a voter.
func TestKeptBackRecordGoesOnPromotion(t *testing.T) {
	c, n1, _, n3, _, setLacking, scope := keptCluster(t)
	path := filepath.Join(n3.cfg.DataDir, KeptFile)
	// The mark is published, then written: waited for (a loaded machine).
	require.Eventually(t, func() bool { _, err := os.Stat(path); return err == nil }, 5*time.Second, 5*time.Millisecond,
		"the kept mark is not recorded in the data dir")

	setLacking(false) // rebuilt: its state records them
	c.waitSuffrage(n1, "n3", "Voter")
	require.Eventually(t, func() bool { return n3.KeptBack() == nil }, 10*time.Second, 20*time.Millisecond)
	require.Eventually(t, func() bool { _, err := os.Stat(path); return errors.Is(err, os.ErrNotExist) }, 5*time.Second, 20*time.Millisecond,
		"the record outlived the promotion")
	n3 = c.restart(n3)
	require.NoError(t, n3.KeptBack())
	require.NoError(t, staleRead(n3, scope))

	// A stale record beside a voter's state goes at start.
	b, err := json.Marshal(keptRecord{Leader: "n1", Reason: "stale", Since: time.Now()})
	require.NoError(t, err)
	cfg := n3.cfg
	cfg.RaftAddr, cfg.RaftAdvertise = n3.self.RaftAddr, ""
	c.stop(n3)
	require.NoError(t, os.WriteFile(path, b, 0o600))
	n3 = c.start(cfg)
	require.NoError(t, n3.KeptBack(), "a voter was kept by a stale record")
	require.NoError(t, staleRead(n3, scope))
	_, err = os.Stat(path)
	require.ErrorIs(t, err, os.ErrNotExist, "a voter kept a stale record")
}

// A record that cannot be written (a full disk; here its temporary name
// is taken by a directory) changes nothing else: the node is kept in
// memory, and the write is tried again at the next round.
func TestKeptBackRecordThatFailsKeepsTheMark(t *testing.T) {
	var tmp string
	_, _, _, n3, _, _, scope := keptClusterWith(t, func(n3 *Node) {
		tmp = filepath.Join(n3.cfg.DataDir, KeptFile+".tmp")
		require.NoError(t, os.Mkdir(tmp, 0o700))
	})
	path := filepath.Join(n3.cfg.DataDir, KeptFile)
	var kept *KeptBackError
	require.True(t, errors.As(staleRead(n3, scope), &kept), "a kept node whose record failed serves stale reads")
	_, err := os.Stat(path)
	require.ErrorIs(t, err, os.ErrNotExist)
	require.NoError(t, os.Remove(tmp))
	require.Eventually(t, func() bool { _, err := os.Stat(path); return err == nil }, 5*time.Second, 20*time.Millisecond,
		"the failed write was not tried again")
	require.Error(t, n3.KeptBack())
}

// idem recover, run on a kept non-voter (a caught-up one's log may end
// highest among the survivors, which recover advises to pick), made it a
// voter and said nothing of the mark, which its start then removed: a
// cluster recovered from a state lacking records lacks them too. The
// offline state now names the mark, for recover to print.
func TestOfflineStateNamesTheKeptMark(t *testing.T) {
	c, _, _, n3, _, _, _ := keptCluster(t)
	dir := n3.cfg.DataDir
	c.stop(n3)
	st, err := ReadOfflineState(dir)
	require.NoError(t, err)
	require.Equal(t, "n1", st.KeptBackBy)
	require.Contains(t, st.KeptBack, "upgraded on its data dir")
	require.Contains(t, st.Configuration, Peer{ID: "n3", RaftAddr: n3.self.RaftAddr, Suffrage: "Nonvoter"})

	// Damaged, it is still named.
	require.NoError(t, os.WriteFile(filepath.Join(dir, KeptFile), []byte("{"), 0o600))
	st, err = ReadOfflineState(dir)
	require.NoError(t, err)
	require.Contains(t, st.KeptBack, "cannot be read")
}

// A voter's record is stale, and goes unread: one that cannot be read
// (here a directory in its place; its mode, for a user other than root)
// refused the voter's start.
func TestKeptBackUnreadableRecordOfAVoterDoesNotRefuseItsStart(t *testing.T) {
	c, n1, _, n3, _, setLacking, scope := keptCluster(t)
	path := filepath.Join(n3.cfg.DataDir, KeptFile)
	setLacking(false)
	c.waitSuffrage(n1, "n3", "Voter")
	require.Eventually(t, func() bool { _, err := os.Stat(path); return errors.Is(err, os.ErrNotExist) }, 5*time.Second, 20*time.Millisecond)
	cfg := n3.cfg
	cfg.RaftAddr, cfg.RaftAdvertise = n3.self.RaftAddr, ""
	c.stop(n3)
	require.NoError(t, os.Mkdir(path, 0o700))
	n3 = c.start(cfg)
	require.NoError(t, n3.KeptBack())
	require.NoError(t, staleRead(n3, scope))
	_, err := os.Stat(path)
	require.ErrorIs(t, err, os.ErrNotExist, "the stale record stayed")
}
