package raftfsm

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/stretchr/testify/require"

	"github.com/idem-store/idem/engine"
)

// fullStreams lists the IDs of the full streams (not markers) among a
// node's snapshots.
func fullStreams(t *testing.T, n *Node) []string {
	t.Helper()
	list, err := n.snaps.List()
	require.NoError(t, err)
	var ids []string
	for _, m := range list {
		if m.Size != int64(len(liveMagic)+8) {
			ids = append(ids, m.ID)
		}
	}
	return ids
}

// A follower killed right after storing the leader's snapshot, before
// raft answered the install, restores it at its next start
// (catchUpFromSnapshot). The leader, which never learnt that the install
// went through, sends it the whole state again: raft's leader moves a
// follower's next index only on an answer, and below its log's first
// entry it sends the snapshot without asking what the follower holds. A
// disk-full walk saw such a follower refuse the same snapshot for room
// (its tables and the stored stream took the disk) 45 times in 6 minutes.
// The follower now recognises a snapshot whose state it already holds and
// answers it without storing or restoring the stream again, and the
// stream it stored is removed once a marker of its state stands in for it.
func TestRestartedFollowerTakesNoSecondCopyOfASnapshotItHolds(t *testing.T) {
	c := newMemCluster(t)
	// Put back once every node is closed (TestFollowerKilledWhileInstallingStartsAgain).
	prev := beforeRestore
	t.Cleanup(func() { beforeRestore = prev })
	var logs [2]logBuffer
	dirs := []string{t.TempDir(), t.TempDir()}
	addrs := testRaftAddrs(t, 2) // n2 comes back where it was
	open := snapshotOpener(c, dirs, addrs, logs[:])
	n1 := open(0, true)
	c.leader(n1)
	claim := func(key string) { t.Helper(); claimFresh(t, n1, key) }
	for i := range 20 {
		claim(fmt.Sprint("a", i))
	}
	require.NoError(t, n1.Snapshot())
	for i := range 5 {
		claim(fmt.Sprint("b", i))
	}

	// n2 joins and is killed once the stream is stored, before the
	// restore and before raft answers the leader.
	var once sync.Once
	reached := make(chan struct{})
	beforeRestore = func() error {
		once.Do(func() { close(reached) })
		return errors.New("killed while installing")
	}
	n2 := open(1, false)
	_, err := n1.Join(n2.Self(), false, false)
	require.NoError(t, err)
	select {
	case <-reached:
	case <-time.After(20 * time.Second):
		t.Fatal("n2 was sent no snapshot")
	}
	c.stop(n2)
	beforeRestore = func() error { return nil }

	n2 = open(1, false)
	stored := fullStreams(t, n2)
	require.Len(t, stored, 1, "the stream n2 stored before it was killed")
	require.Contains(t, logs[1].String(), "state was behind the newest snapshot; restored it")

	claim("after")
	require.Eventually(t, func() bool {
		_, ok, err := n2.Lookup(context.Background(), engine.Scope{Principal: "p", Endpoint: "e", Key: "after"}, false, false)
		return err == nil && ok
	}, 20*time.Second, 20*time.Millisecond, logs[1].String())
	require.Subset(t, stored, fullStreams(t, n2), "n2 stored no second copy of the state\n%s", logs[1].String())
	require.Contains(t, logs[1].String(), "the leader sent a snapshot whose state this node already holds")
	require.Eventually(t, func() bool { return stateHash(t, n1.db) == stateHash(t, n2.db) }, 10*time.Second, 50*time.Millisecond)

	// The marker in the stream's place is a start like any other.
	c.stop(n2)
	claim("later")
	n2 = open(1, false)
	require.Eventually(t, func() bool {
		_, ok, err := n2.Lookup(context.Background(), engine.Scope{Principal: "p", Endpoint: "e", Key: "later"}, false, false)
		return err == nil && ok
	}, 20*time.Second, 20*time.Millisecond, logs[1].String())
	require.Eventually(t, func() bool { return stateHash(t, n1.db) == stateHash(t, n2.db) }, 10*time.Second, 50*time.Millisecond)
}

// At the store: a leader's snapshot whose state the node holds (applied at
// or past its index, no log or snapshot past it) takes no room, so a disk
// that cannot take a byte of the stream does not refuse it; its marker is
// installed as the state the node has, unchanged. One the node does not
// hold is received as before, here refused for room.
func TestHeldSnapshotIsAnsweredWithoutRoomForIt(t *testing.T) {
	full, srcDB := fullStream(t)
	srcDB.Close()
	dst, dstDB := mustFSM(t, t.TempDir())
	defer dstDB.Close()
	// The node restored the stream it had stored (catchUpFromSnapshot).
	require.NoError(t, dst.Restore(io.NopCloser(bytes.NewReader(full.Bytes()))))
	applied, hash := dstDB.Meta().Applied, stateHash(t, dstDB)
	require.Greater(t, applied, uint64(10))
	dir := t.TempDir()
	store := mustStore(t, dst, dir)
	logEnd := uint64(0) // raft removed the log below the snapshot (dropLogBelowSnapshot)
	store.logEnd = func() (uint64, error) { return logEnd, nil }
	store.disk = &diskGuard{dir: dir, minFree: 1 << 20, fullBelow: 1 << 62, log: slog.New(slog.DiscardHandler)}
	send := func(index uint64) (*raft.SnapshotMeta, error) {
		t.Helper()
		sink, err := store.Create(raft.SnapshotVersionMax, index, 3, raft.Configuration{}, 1, nil)
		require.NoError(t, err)
		n, err := io.Copy(sink, bytes.NewReader(full.Bytes()))
		if err != nil {
			require.NoError(t, sink.Cancel())
			return nil, err
		}
		require.Equal(t, int64(full.Len()), n, "raft checks the count against the stream's size")
		require.NoError(t, sink.Close())
		meta, rc, err := store.Open(sink.ID()) // raft's install
		require.NoError(t, err)
		return meta, dst.Restore(rc)
	}

	meta, err := send(applied - 5)
	require.NoError(t, err)
	require.Equal(t, applied-5, meta.Index)
	require.Equal(t, uint64(3), meta.Term)
	require.Equal(t, applied, dstDB.Meta().Applied)
	require.Equal(t, hash, stateHash(t, dstDB))
	// Opened again (to send it, should this node lead), it is this node's
	// state like any marker (with room to write it out).
	guard := store.disk
	store.disk = nil
	again, rc, err := store.Open(meta.ID)
	require.NoError(t, err)
	require.Greater(t, again.Size, int64(len(liveMagic)+8))
	require.NoError(t, rc.Close())
	store.disk = guard

	// Past the node's state, or with the log past the snapshot: received.
	_, err = send(applied + 1)
	require.ErrorIs(t, err, errSnapshotDiskFull)
	logEnd = applied - 4
	_, err = send(applied - 5)
	require.ErrorIs(t, err, errSnapshotDiskFull)
	// Behind a snapshot the node stored: received (and refused by the FSM).
	logEnd = 0
	_, err = send(applied - 6)
	require.ErrorIs(t, err, errSnapshotDiskFull)
}

// A marker is this node's own (Persist, a backup's or recover's): a
// leader expands its markers before it sends them, so one that arrives in
// an install is a leader that sent a held marker as it was stored (Open
// gives the first opening of a held marker's ID back unexpanded, for the
// install's restore, and a replication of a leader deposed while it
// installed one can be that opening). Taken as this node's own marker, it
// was stored as the newest snapshot, standing for the leader's state, not
// this node's: it dropped the node's older streams, and at the next start
// raft went on from its index and catchUpFromSnapshot refused a state
// older than the marker's. It is refused as it arrives, and nothing is
// stored.
func TestMarkerReceivedFromALeaderIsRefused(t *testing.T) {
	full, srcDB := fullStream(t)
	srcDB.Close()
	dst, dstDB := mustFSM(t, t.TempDir())
	defer dstDB.Close()
	require.NoError(t, dst.Restore(io.NopCloser(bytes.NewReader(full.Bytes()))))
	applied := dstDB.Meta().Applied
	store := mustStore(t, dst, t.TempDir())
	store.logEnd = func() (uint64, error) { return 0, nil }
	var marker bytes.Buffer
	require.NoError(t, writeMarker(&marker, applied-5))

	sink, err := store.Create(raft.SnapshotVersionMax, applied-5, 3, raft.Configuration{}, 1, nil)
	require.NoError(t, err)
	_, err = io.Copy(sink, bytes.NewReader(marker.Bytes())) // raft's install
	require.Error(t, err)
	require.NoError(t, sink.Cancel())
	list, err := store.List()
	require.NoError(t, err)
	require.Empty(t, list, "nothing stored")

	// This node's own markers are stored as before.
	takeSnapshot(t, dst, store)
	list, err = store.List()
	require.NoError(t, err)
	require.Len(t, list, 1)
}
