package raftfsm

import (
	"bytes"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/stretchr/testify/require"

	"github.com/idem-store/idem/engine"
)

func mustStore(t *testing.T, f *FSM, dir string) *snapshotStore {
	t.Helper()
	s, err := newSnapshotStore(dir, f.db, slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	return s
}

// takeSnapshot does what raft's takeSnapshot does with this store.
func takeSnapshot(t *testing.T, f *FSM, s *snapshotStore) *raft.SnapshotMeta {
	t.Helper()
	applied := f.db.Meta().Applied
	snap, err := f.Snapshot()
	require.NoError(t, err)
	sink, err := s.Create(raft.SnapshotVersionMax, applied, 1, raft.Configuration{}, 1, nil)
	require.NoError(t, err)
	require.NoError(t, snap.Persist(sink))
	snap.Release()
	list, err := s.List()
	require.NoError(t, err)
	require.Equal(t, applied, list[0].Index)
	return list[0]
}

// A node's own snapshot is a marker of a few bytes, whatever the state;
// opening it streams the current state, which restores to a replica that
// then continues exactly like the source, the entries between the marker
// and the stream's state being skipped.
func TestMarkerSnapshotExpandsToTheCurrentState(t *testing.T) {
	logs := genLog(21, 600)
	src, srcDB := mustFSM(t, t.TempDir())
	defer srcDB.Close()
	dir := t.TempDir()
	store := mustStore(t, src, dir)
	applyInBatches(src, logs[:300], 1, 16)
	meta := takeSnapshot(t, src, store)
	require.Less(t, meta.Size, int64(64), "a marker, not the state")
	applyInBatches(src, logs[300:400], 1, 16) // after the snapshot

	openMeta, rc, err := store.Open(meta.ID)
	require.NoError(t, err)
	stream, err := io.ReadAll(rc)
	require.NoError(t, err)
	require.NoError(t, rc.Close())
	require.Equal(t, int64(len(stream)), openMeta.Size, "raft sends exactly Size bytes")
	require.Equal(t, meta.Index, openMeta.Index)
	left, _ := filepath.Glob(filepath.Join(dir, "send-*.snap"))
	require.Len(t, left, 1, "the expanded stream is kept on Close, for raft's next try")
	store.dropSpareApplied(meta.Index)
	left, _ = filepath.Glob(filepath.Join(dir, "send-*.snap"))
	require.Empty(t, left, "the expanded stream is removed once every member has applied past it")

	dst, dstDB := mustFSM(t, t.TempDir())
	defer dstDB.Close()
	applyInBatches(dst, genLog(99, 40), 1, 8) // unrelated state, replaced
	require.NoError(t, dst.Restore(io.NopCloser(bytes.NewReader(stream))))
	require.Equal(t, uint64(400), dstDB.Meta().Applied, "the state as of Open, not as of the marker")
	require.Equal(t, stateHash(t, srcDB), stateHash(t, dstDB))
	// raft replays from the marker's index: the FSM skips what it holds.
	applyInBatches(dst, logs[300:], 3, 7)
	applyInBatches(src, logs[400:], 2, 16)
	require.Equal(t, stateHash(t, srcDB), stateHash(t, dstDB))
}

// fullStream is the full snapshot stream of a state of 200 entries, as a
// leader sends it, and that state.
func fullStream(t *testing.T) (*bytes.Buffer, *engine.DB) {
	t.Helper()
	src, srcDB := mustFSM(t, t.TempDir())
	applyInBatches(src, genLog(5, 200), 1, 16)
	snap, err := srcDB.Snapshot()
	require.NoError(t, err)
	var full bytes.Buffer
	_, err = snap.WriteTo(&full)
	require.NoError(t, err)
	snap.Close()
	return &full, srcDB
}

// A snapshot installed from a leader is a full stream: stored and opened
// byte for byte, and restored by a node whose state lags it.
func TestInstalledSnapshotIsKeptAsSent(t *testing.T) {
	full, srcDB := fullStream(t)
	defer srcDB.Close()

	dst, dstDB := mustFSM(t, t.TempDir())
	defer dstDB.Close()
	store := mustStore(t, dst, t.TempDir())
	sink, err := store.Create(raft.SnapshotVersionMax, 200, 1, raft.Configuration{}, 1, nil)
	require.NoError(t, err)
	_, err = io.Copy(sink, bytes.NewReader(full.Bytes())) // what installSnapshot does
	require.NoError(t, err)
	require.NoError(t, sink.Close())
	list, err := store.List()
	require.NoError(t, err)
	meta, rc, err := store.Open(list[0].ID)
	require.NoError(t, err)
	got, err := io.ReadAll(rc)
	require.NoError(t, err)
	require.NoError(t, rc.Close())
	require.Equal(t, full.Bytes(), got)
	require.Equal(t, int64(full.Len()), meta.Size)

	n := &Node{db: dstDB, fsm: dst, snaps: store, log: slog.New(slog.DiscardHandler)}
	require.NoError(t, n.catchUpFromSnapshot())
	require.Equal(t, stateHash(t, srcDB), stateHash(t, dstDB))
}

// A snapshot from the leader is refused once writing it would take the
// disk under the storage-full threshold (the install fails and the leader
// tries again later); this node's own marker, which lets raft truncate its
// log and so frees space, is always written. Here the threshold is above
// any disk's free space.
func TestInstalledSnapshotStopsOnAFullDisk(t *testing.T) {
	full, srcDB := fullStream(t)
	srcDB.Close()

	dst, dstDB := mustFSM(t, t.TempDir())
	defer dstDB.Close()
	dir := t.TempDir()
	store := mustStore(t, dst, dir)
	var logs bytes.Buffer
	store.disk = &diskGuard{dir: dir, minFree: 1 << 20, fullBelow: 1 << 62, log: slog.New(slog.NewTextHandler(&logs, nil))}
	sink, err := store.Create(raft.SnapshotVersionMax, 200, 1, raft.Configuration{}, 1, nil)
	require.NoError(t, err)
	_, err = io.Copy(sink, bytes.NewReader(full.Bytes())) // what installSnapshot does
	require.ErrorIs(t, err, errSnapshotDiskFull)
	require.NoError(t, sink.Cancel())
	list, err := store.List()
	require.NoError(t, err)
	require.Empty(t, list, "a refused install left a snapshot")
	require.Contains(t, logs.String(), "refused a snapshot from the leader for lack of disk space")

	// The node's own marker goes through.
	takeSnapshot(t, dst, store)

	// With room for the stream and its restore, the same install is taken.
	store.disk.fullBelow = 1 << 20
	sink, err = store.Create(raft.SnapshotVersionMax, 200, 1, raft.Configuration{}, 1, nil)
	require.NoError(t, err)
	_, err = io.Copy(sink, bytes.NewReader(full.Bytes()))
	require.NoError(t, err)
	require.NoError(t, sink.Close())
}

// A leader writes its whole state out for a follower that needs a
// snapshot (expand); on a disk without room for it above the storage-full
// threshold it stops there instead of taking its own disk to 0 bytes free,
// where its raft log could not start its next segment. Nothing is left of
// the file, and the send goes through once there is room.
func TestExpandedSnapshotStopsOnAFullDisk(t *testing.T) {
	f, db := mustFSM(t, t.TempDir())
	defer db.Close()
	applyInBatches(f, genLog(5, 200), 1, 16)
	dir := t.TempDir()
	store := mustStore(t, f, dir)
	var logs bytes.Buffer
	store.disk = &diskGuard{dir: dir, minFree: 1 << 20, fullBelow: 1 << 62, log: slog.New(slog.NewTextHandler(&logs, nil))}
	meta := takeSnapshot(t, f, store)

	// Raft asks again at once after a snapshot it could not open: each
	// refusal holds it for the pause, and the next ones, while the disk has
	// no more room than the last try used, write nothing.
	defer func(d time.Duration) { expandRetryPause = d }(expandRetryPause)
	expandRetryPause = 200 * time.Millisecond
	start := time.Now()
	_, _, err := store.Open(meta.ID)
	require.ErrorIs(t, err, errExpandDiskFull)
	require.GreaterOrEqual(t, time.Since(start), expandRetryPause, "a refusal holds raft's next try")
	left, _ := filepath.Glob(filepath.Join(dir, "send-*.snap"))
	require.Empty(t, left, "a refused expansion left its file")
	require.Contains(t, logs.String(), "sent no snapshot to a follower")
	require.Positive(t, store.refused.Load())
	_, _, err = store.Open(meta.ID)
	require.ErrorIs(t, err, errExpandDiskFull)
	require.ErrorContains(t, err, "the last try stopped after", "refused before writing anything")
	require.Equal(t, 1, strings.Count(logs.String(), "sent no snapshot to a follower"), "said once a minute")
	stop := make(chan struct{})
	close(stop)
	store.stop = stop
	expandRetryPause = time.Hour
	_, _, err = store.Open(meta.ID) // a closing node does not wait out the pause
	require.ErrorIs(t, err, errExpandDiskFull)

	store.disk.fullBelow = 1 << 20
	m, rc, err := store.Open(meta.ID)
	require.NoError(t, err)
	defer rc.Close()
	require.Positive(t, m.Size)
	dst, dstDB := mustFSM(t, t.TempDir())
	defer dstDB.Close()
	require.NoError(t, dst.Restore(rc))
	require.Equal(t, db.Meta().Applied, dstDB.Meta().Applied)
	require.Zero(t, store.refused.Load(), "a send that went through forgets the refusal")
}

// A marker cannot rebuild a state older than itself: the node says so
// instead of starting on a state that misses acknowledged writes.
func TestMarkerNewerThanStateIsRefused(t *testing.T) {
	f, db := mustFSM(t, t.TempDir())
	applyInBatches(f, genLog(8, 100), 1, 16)
	dir := t.TempDir()
	store := mustStore(t, f, dir)
	takeSnapshot(t, f, store)
	require.NoError(t, db.Close())

	// The fsm directory is replaced by an empty one under the same raft dir.
	f2, db2 := mustFSM(t, t.TempDir())
	defer db2.Close()
	store2 := mustStore(t, f2, dir)
	list, err := store2.List()
	require.NoError(t, err)
	_, _, err = store2.Open(list[0].ID)
	require.ErrorIs(t, err, errNoData)
	n := &Node{db: db2, fsm: f2, snaps: store2, log: slog.New(slog.DiscardHandler), cfg: Config{DataDir: dir}}
	err = n.catchUpFromSnapshot()
	require.ErrorContains(t, err, "Nothing was changed")
	require.NotContains(t, strings.ToLower(err.Error()), "remove", "never advise deleting what may be the only copy")
	require.NotContains(t, strings.ToLower(err.Error()), "delete")
	left, _ := filepath.Glob(filepath.Join(dir, "send-*.snap"))
	require.Empty(t, left)
}

func TestLeftoverExpandedStreamsAreRemoved(t *testing.T) {
	f, db := mustFSM(t, t.TempDir())
	defer db.Close()
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "send-123.snap"), []byte("x"), 0o644))
	mustStore(t, f, dir)
	left, _ := filepath.Glob(filepath.Join(dir, "send-*.snap"))
	require.Empty(t, left)
}

// A snapshot whose write failed (no space left for its meta.json, seen once
// per --snapshot-interval on a full disk) or was cut short by a crash leaves
// its "*.tmp" directory in snapshots/: raft never removes one, and DISK.md
// tells operators to delete nothing in the data dir. They are removed when
// the store opens, as the leftover expanded streams are.
func TestLeftoverSnapshotTempDirsAreRemoved(t *testing.T) {
	f, db := mustFSM(t, t.TempDir())
	defer db.Close()
	dir := t.TempDir()
	s := mustStore(t, f, dir)
	kept := takeSnapshot(t, f, s)
	tmp := filepath.Join(dir, "snapshots", "4-303-1796196149297.tmp")
	require.NoError(t, os.MkdirAll(tmp, 0o700))
	require.NoError(t, os.WriteFile(filepath.Join(tmp, "meta.json"), nil, 0o600))
	s = mustStore(t, f, dir)
	_, err := os.Stat(tmp)
	require.True(t, os.IsNotExist(err), "the failed snapshot's directory is left: %v", err)
	list, err := s.List()
	require.NoError(t, err)
	require.Len(t, list, 1)
	require.Equal(t, kept.ID, list[0].ID)
}

// A byte of the leader's newest snapshot flipped on disk (a marker: the
// applied index of its state). raft refused to open it (CRC mismatch), and
// a new node that needed a snapshot asked for it again and again, behind,
// until the leader took its next one. The current state now stands in for
// the damaged marker, and the node catches up.
func TestDamagedMarkerSnapshotIsSentAsTheCurrentState(t *testing.T) {
	t.Parallel()
	c := newMemCluster(t)
	var logs [2]logBuffer
	dir := t.TempDir()
	n1 := c.openAt("n1", dir, "127.0.0.1:0", true, &logs[0])
	c.leader(n1)
	for i := range 40 {
		require.NoError(t, claim(n1, fmt.Sprintf("k%d", i)))
	}
	var newest string
	require.Eventually(t, func() bool {
		list, err := n1.snaps.List()
		if err != nil || len(list) == 0 || list[0].Index < n1.raft.LastIndex()-1 {
			return false
		}
		first, err := n1.logStore.FirstIndex()
		newest = list[0].ID
		return err == nil && first > 1 // the log's start is compacted away: a new node needs the snapshot
	}, 15*time.Second, 50*time.Millisecond, "no snapshot")
	// No snapshot after this one (8192 entries later by default): the join
	// adds entries, and a new snapshot would hide the damaged one.
	require.NoError(t, n1.raft.ReloadConfig(raft.ReloadableConfig{TrailingLogs: 16, SnapshotInterval: time.Hour, SnapshotThreshold: 1 << 30,
		HeartbeatTimeout: n1.raft.ReloadableConfig().HeartbeatTimeout, ElectionTimeout: n1.raft.ReloadableConfig().ElectionTimeout}))
	time.Sleep(300 * time.Millisecond) // a snapshot under way ends
	list, err := n1.snaps.List()
	require.NoError(t, err)
	newest = list[0].ID
	state := filepath.Join(dir, "snapshots", newest, "state.bin")
	b, err := os.ReadFile(state)
	require.NoError(t, err)
	require.Len(t, b, len(liveMagic)+8, "a marker")
	b[15] ^= 0xff
	require.NoError(t, os.WriteFile(state, b, 0o600))

	n2 := c.openAt("n2", t.TempDir(), "127.0.0.1:0", false, &logs[1])
	_, err = n1.Join(n2.Self(), false, true)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		_, found := n2.db.Lookup(engine.Scope{Principal: "p", Endpoint: "e", Key: "k39"}, false, n2.db.Meta().NowMs)
		return found
	}, 20*time.Second, 50*time.Millisecond, "n2 never caught up: %s", lastLines(logs[0].String(), 5))
	require.Contains(t, logs[0].String(), "is damaged on disk")
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// A leader's expansion stops with room to spare above the storage-full
// threshold: the free space is read every 4 MiB and other writes go on
// meanwhile. A leader's expansion that went to the threshold itself took
// its disk under it, and the leader answered writes 507 for a second at
// each try (an operator walk). On a private tmpfs, whose free space only
// this test changes.
func TestSnapshotStreamsKeepAMarginAboveTheThreshold(t *testing.T) {
	mnt := smallTmpfs(t, "64m")
	g := &diskGuard{dir: mnt, minFree: 1 << 20, log: slog.New(slog.DiscardHandler)}
	require.NoError(t, g.read())
	g.fullBelow = g.free.Load() - 1<<20 // 1 MiB above the threshold
	r := streamRoom{g: g, margin: streamMargin(g.fullBelow)}
	_, ok := r.take(512<<10, false)
	require.False(t, ok, "half a MiB would leave less than the margin above the threshold")

	g.fullBelow = g.free.Load() - streamMargin(g.free.Load()) - 1<<20
	r = streamRoom{g: g, margin: streamMargin(g.fullBelow)}
	_, ok = r.take(512<<10, false)
	require.True(t, ok, "with the margin and more free, it goes on")
}

// A leader whose follower needed a snapshot and did not take it (down,
// killed while it received, its disk full) wrote the whole state out again
// at each of raft's tries, every few seconds: a walk with a 900 MB state
// found it writing 900 MB every 7 s for as long as the follower stayed
// down. A stream whose send stopped before its end is kept and sent again
// as it is; one read to its end is removed, and the next send expands the
// state anew.
func TestAnExpandedStreamNotSentToItsEndIsSentAgain(t *testing.T) {
	logs := genLog(23, 400)
	src, srcDB := mustFSM(t, t.TempDir())
	defer srcDB.Close()
	dir := t.TempDir()
	var out bytes.Buffer
	store, err := newSnapshotStore(dir, src.db, slog.New(slog.NewTextHandler(&out, nil)))
	require.NoError(t, err)
	applyInBatches(src, logs[:200], 1, 16)
	meta := takeSnapshot(t, src, store)
	sendFiles := func() []string {
		left, _ := filepath.Glob(filepath.Join(dir, "send-*.snap"))
		return left
	}
	expansions := func() int { return strings.Count(out.String(), "snapshot expanded from the current state") }

	// The follower stops answering 10 bytes into the stream.
	first, rc, err := store.Open(meta.ID)
	require.NoError(t, err)
	_, err = io.ReadFull(rc, make([]byte, 10))
	require.NoError(t, err)
	require.NoError(t, rc.Close())
	require.Len(t, sendFiles(), 1, "the stream is kept for the next try")
	applyInBatches(src, logs[200:300], 1, 16) // the state moves on meanwhile

	// The next try sends the same stream, whole, without writing it again.
	again, rc, err := store.Open(meta.ID)
	require.NoError(t, err)
	stream, err := io.ReadAll(rc)
	require.NoError(t, err)
	require.NoError(t, rc.Close())
	require.Equal(t, 1, expansions(), out.String())
	require.Equal(t, first.Size, again.Size)
	require.Equal(t, int64(len(stream)), again.Size, "raft sends exactly Size bytes")
	require.Len(t, sendFiles(), 1, "a stream read to its end is kept too: the follower may have refused it midway")
	dst, dstDB := mustFSM(t, t.TempDir())
	defer dstDB.Close()
	require.NoError(t, dst.Restore(io.NopCloser(bytes.NewReader(stream))))
	require.Equal(t, uint64(200), dstDB.Meta().Applied, "the state as of the first try")
	applyInBatches(dst, logs[200:300], 1, 16) // raft replays from the marker
	require.Equal(t, stateHash(t, srcDB), stateHash(t, dstDB))

	// Once every member has applied its index, the stream is gone: the
	// next send writes the state anew.
	store.dropSpareApplied(meta.Index - 1)
	require.Len(t, sendFiles(), 1, "a member not yet past it may need it")
	store.dropSpareApplied(meta.Index)
	require.Empty(t, sendFiles(), "removed once every member has applied past it")
	_, rc, err = store.Open(meta.ID)
	require.NoError(t, err)
	stream, err = io.ReadAll(rc)
	require.NoError(t, err)
	require.NoError(t, rc.Close())
	require.Equal(t, 2, expansions())
	dst2, dst2DB := mustFSM(t, t.TempDir())
	defer dst2DB.Close()
	require.NoError(t, dst2.Restore(io.NopCloser(bytes.NewReader(stream))))
	require.Equal(t, uint64(300), dst2DB.Meta().Applied, "the current state")
}

// A follower that refuses the leader's snapshot for lack of room is often
// above the storage-full threshold (the snapshot and its restore need more
// than is left above it): its status named no full disk, so the leader's
// health check and its /readyz said only that it had applied nothing (a
// walk: a 144 MB state to a follower with 193 MB free). Its status now says
// so until an install goes through.
func TestRefusedSnapshotIsNamedInTheStatus(t *testing.T) {
	full, srcDB := fullStream(t)
	srcDB.Close()

	dst, dstDB := mustFSM(t, t.TempDir())
	defer dstDB.Close()
	dir := t.TempDir()
	store := mustStore(t, dst, dir)
	store.disk = &diskGuard{dir: dir, minFree: 1 << 20, fullBelow: 1 << 62, log: slog.New(slog.DiscardHandler)}
	require.Nil(t, store.disk.fullStatus())
	sink, err := store.Create(raft.SnapshotVersionMax, 200, 1, raft.Configuration{}, 1, nil)
	require.NoError(t, err)
	_, err = io.Copy(sink, bytes.NewReader(full.Bytes()))
	require.ErrorIs(t, err, errSnapshotDiskFull)
	require.NoError(t, sink.Cancel())

	// Above the threshold (the guard's full flag unset), it is named.
	store.disk.fullBelow = 1 << 20
	store.disk.free.Store(1 << 30)
	st := store.disk.fullStatus()
	require.NotNil(t, st, "a follower refusing the leader's snapshot says so in its status")
	require.Positive(t, st.SnapshotRefusedAfterBytes)
	require.Contains(t, st.String(), "no room for the leader's snapshot")
	require.Contains(t, st.String(), dir)

	// The install that goes through once there is room clears it.
	sink, err = store.Create(raft.SnapshotVersionMax, 200, 1, raft.Configuration{}, 1, nil)
	require.NoError(t, err)
	_, err = io.Copy(sink, bytes.NewReader(full.Bytes()))
	require.NoError(t, err)
	require.NoError(t, sink.Close())
	require.Nil(t, store.disk.fullStatus())
}

// A leader that sends a follower no snapshot for lack of room on its own
// disk says so in the reason it gives for that follower's lag: its
// status read only "falling behind: had applied 0 …" while the follower's
// disk had room, and only the leader's log said why (a walk of
// docs/DISK.md: a node joined to a leader on a nearly full disk).
func TestLeaderWithNoRoomToSendASnapshotSaysSoForTheFollower(t *testing.T) {
	f, db := mustFSM(t, t.TempDir())
	defer db.Close()
	applyInBatches(f, genLog(5, 200), 1, 16)
	dir := t.TempDir()
	store := mustStore(t, f, dir)
	store.disk = &diskGuard{dir: dir, minFree: 1 << 20, fullBelow: 1 << 62, log: slog.New(slog.DiscardHandler)}
	meta := takeSnapshot(t, f, store)
	defer func(d time.Duration) { expandRetryPause = d }(expandRetryPause)
	expandRetryPause = time.Millisecond

	require.Empty(t, store.disk.expandRefused())
	_, _, err := store.Open(meta.ID)
	require.ErrorIs(t, err, errExpandDiskFull)
	why := store.disk.expandRefused()
	require.Contains(t, why, "the leader sends it no snapshot, for lack of disk space on the leader")
	require.Contains(t, why, dir)

	store.disk.fullBelow = 1 << 20
	store.refused.Store(0)
	_, rc, err := store.Open(meta.ID)
	require.NoError(t, err)
	rc.Close()
	require.Empty(t, store.disk.expandRefused(), "a snapshot written out clears it")
}

// A follower that refuses the leader's snapshot midway for lack of disk
// space answers at once, and raft's transport still sends the rest of the
// stream: read to its end, it was removed, and each of raft's tries wrote
// the whole state out again (a walk of docs/DISK.md: a 129 MB state
// written 13 times in 40 s). It is sent again as it is.
func TestAStreamRefusedByTheFollowerIsNotWrittenOutAgain(t *testing.T) {
	src, srcDB := mustFSM(t, t.TempDir())
	defer srcDB.Close()
	dir := t.TempDir()
	var out bytes.Buffer
	store, err := newSnapshotStore(dir, src.db, slog.New(slog.NewTextHandler(&out, nil)))
	require.NoError(t, err)
	applyInBatches(src, genLog(29, 200), 1, 16)
	meta := takeSnapshot(t, src, store)
	for range 3 {
		_, rc, err := store.Open(meta.ID)
		require.NoError(t, err)
		_, err = io.Copy(io.Discard, rc) // the transport sends it all
		require.NoError(t, err)
		require.NoError(t, rc.Close())
	}
	require.Equal(t, 1, strings.Count(out.String(), "snapshot expanded from the current state"), out.String())
	require.Equal(t, 2, strings.Count(out.String(), "snapshot sent again from the stream expanded for an earlier try"))
}
