package raftfsm

import (
	"bytes"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"github.com/hashicorp/raft"
	"github.com/stretchr/testify/require"
)

// A node's own marker removes the older full streams of its snapshot
// store (markerSink.Close). A leader that installed its stream from the
// previous leader sends that stream, while it is the newest, to a follower
// that needs it; the send holds the file open, and its own marker,
// persisted meanwhile, removes it from the store: the send goes on to its
// end with the stream whole, and the follower restores the state it holds.
func TestAStreamBeingSentOutlivesItsRemovalByANewerMarker(t *testing.T) {
	full, srcDB := fullStream(t)
	defer srcDB.Close()
	dst, dstDB := mustFSM(t, t.TempDir())
	defer dstDB.Close()
	dir := t.TempDir()
	store := mustStore(t, dst, dir)
	sink, err := store.Create(raft.SnapshotVersionMax, 200, 1, raft.Configuration{}, 1, nil)
	require.NoError(t, err)
	_, err = io.Copy(sink, bytes.NewReader(full.Bytes()))
	require.NoError(t, err)
	require.NoError(t, sink.Close())
	n := &Node{db: dstDB, fsm: dst, snaps: store, log: slog.New(slog.DiscardHandler)}
	require.NoError(t, n.catchUpFromSnapshot())
	list, err := store.List()
	require.NoError(t, err)
	streamID := list[0].ID

	// The send opens the stream and has sent part of it.
	meta, rc, err := store.Open(streamID)
	require.NoError(t, err)
	head := make([]byte, 100)
	_, err = io.ReadFull(rc, head)
	require.NoError(t, err)

	// The node's own marker follows, and removes the stream.
	applyInBatches(dst, genLog(5, 300)[200:], 1, 16)
	takeSnapshot(t, dst, store)
	_, err = os.Stat(filepath.Join(dir, "snapshots", streamID))
	require.ErrorIs(t, err, os.ErrNotExist, "the stream was removed")

	rest, err := io.ReadAll(rc)
	require.NoError(t, err)
	require.NoError(t, rc.Close())
	sent := append(head, rest...)
	require.Equal(t, meta.Size, int64(len(sent)))
	require.Equal(t, full.Bytes(), sent, "the send read the stream whole")

	f, fDB := mustFSM(t, t.TempDir())
	defer fDB.Close()
	require.NoError(t, f.Restore(io.NopCloser(bytes.NewReader(sent))))
	require.Equal(t, stateHash(t, srcDB), stateHash(t, fDB))
}

// The stream kept from a send cut short (the spare) belongs to the
// snapshot it was expanded for. A leader compacts its log only past a
// newer snapshot of its own, so once its log no longer holds the entries
// after the spare's index the newest snapshot is another: its send is
// expanded anew, never the spare, whose state the follower could not go
// on from (raft asks for the entry after the spare's index, which the
// leader no longer has).
func TestTheSpareStreamIsNeverSentForANewerSnapshot(t *testing.T) {
	logs := genLog(23, 400)
	src, srcDB := mustFSM(t, t.TempDir())
	defer srcDB.Close()
	dir := t.TempDir()
	store := mustStore(t, src, dir)
	applyInBatches(src, logs[:200], 1, 16)
	older := takeSnapshot(t, src, store)
	_, rc, err := store.Open(older.ID)
	require.NoError(t, err)
	_, err = io.ReadFull(rc, make([]byte, 10))
	require.NoError(t, err)
	require.NoError(t, rc.Close())
	spares, _ := filepath.Glob(filepath.Join(dir, "send-*.snap"))
	require.Len(t, spares, 1, "the cut send's stream is kept")

	applyInBatches(src, logs[200:300], 1, 16)
	newer := takeSnapshot(t, src, store)
	meta, rc, err := store.Open(newer.ID)
	require.NoError(t, err)
	stream, err := io.ReadAll(rc)
	require.NoError(t, err)
	require.NoError(t, rc.Close())
	require.Equal(t, newer.Index, meta.Index)
	_, err = os.Stat(spares[0])
	require.ErrorIs(t, err, os.ErrNotExist, "the older snapshot's spare is dropped")
	dst, dstDB := mustFSM(t, t.TempDir())
	defer dstDB.Close()
	require.NoError(t, dst.Restore(io.NopCloser(bytes.NewReader(stream))))
	require.GreaterOrEqual(t, dstDB.Meta().Applied, newer.Index, "the stream holds the newer snapshot's state")
	require.Equal(t, stateHash(t, srcDB), stateHash(t, dstDB))
}
