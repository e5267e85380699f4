package raftfsm

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/hashicorp/raft"

	"github.com/idem-store/idem/engine"
	"github.com/idem-store/idem/internal/mono"
)

// snapshotStore keeps raft's snapshots cheap whatever the size of the state.
//
// Pebble already holds the whole state durably (engine.Snapshot syncs it,
// and the FSM skips entries at or below its stored applied index), so a
// snapshot this node takes of itself only has to let raft truncate its log.
// It is stored as a marker of a few bytes: taking one costs the same at 50 M
// records as at none, which lets snapshots run often enough to keep the
// raft log (and bolt's memory map of it) small.
//
// The data is produced only when a snapshot is opened: a leader sending it
// to a follower that fell behind the log. Open then streams the current
// state, at an applied index J at least the marker's index I, into a
// temporary file (raft must know the size before sending). The follower
// restores state J and raft replays the entries above I onto it; the FSM
// skips those up to J, which it already holds, exactly as after a restart.
//
// Snapshots received from a leader are full streams and are stored and
// opened as they are.
type snapshotStore struct {
	*raft.FileSnapshotStore
	dir string
	db  *engine.DB
	log *slog.Logger
	// disk, when set, refuses a snapshot received from a leader that would
	// take the disk under the storage-full threshold (markerSink.Write),
	// and stops expanding one for a follower there (expand).
	disk *diskGuard
	// stop ends refuseExpand's pause (the node is closing); nil: never.
	stop <-chan struct{}
	// refused is how many bytes the last expansion had written when it
	// stopped for lack of space (refusedAt: mono.Now() then); 0 after one
	// that went through, or expandForget after the refusal.
	refused   atomic.Uint64
	refusedAt atomic.Int64

	// spare is the last expanded stream whose send stopped before its
	// end (the follower did not answer, died or refused it midway), kept
	// for spareKeep so that raft's next try sends it again instead of
	// writing the whole state out once more (spareMu guards it).
	spareMu sync.Mutex
	spare   *spareStream

	// sends are the snapshots opened to be sent and those whose send
	// ended less than sendHoldAfter ago (sendsMu guards it): the log
	// keeps the entries above the oldest of them (keepLogFrom).
	sendsMu sync.Mutex
	sends   map[*snapshotSend]struct{}

	// logEnd reads the raft log's last index (the node's log store); nil
	// recognises no snapshot from a leader as held (holds).
	logEnd func() (uint64, error)
	// held are the IDs of the markers stored in place of a leader's
	// snapshot whose state this node already held (markerSink.Write),
	// until raft opens them to install them (heldMu guards it): Open
	// returns the marker as it is, which FSM.Restore takes as nothing to
	// restore.
	heldMu sync.Mutex
	held   map[string]struct{}
}

// snapshotSend is one opened snapshot: its raft index and metadata, and
// when its stream was closed (mono; 0 while open).
type snapshotSend struct {
	index  uint64
	meta   raft.SnapshotMeta
	closed int64
}

// sendHoldAfter is how long the log keeps the entries above a snapshot
// after its stream was closed: raft sends the follower the entries from
// the snapshot's index on as soon as the install is answered. Longer, a
// cluster that just took a node in kept its whole log meanwhile.
var sendHoldAfter = 5 * time.Second

// duringExpand is called as a marker's expansion begins (a variable for
// tests).
var duringExpand = func() {}

// spareStream is an expanded stream kept for another send.
type spareStream struct {
	path string
	meta raft.SnapshotMeta // of the send it was written for, Size its length
}

// spareKeep is how long an expanded stream whose send stopped midway is
// kept for raft's next try. Raft tries a follower that needs a snapshot
// again every few seconds (its back-off stops at about 10 s), and each try
// wrote the whole state out: a walk with a 900 MB state and a follower
// killed during its install found the leader writing 900 MB every 7 s,
// one core and the disk busy, for as long as the follower stayed down.
// The state it holds is older than the current one by at most this: the
// follower replays the log from the snapshot's index either way. 0 keeps
// none.
var spareKeep = 2 * time.Minute

// expandForget is how long a refused expansion keeps the next ones from
// writing while the disk has no more room than it used.
const expandForget = 10 * time.Minute

// expandRetryPause is how long a refused expansion holds the follower's
// replication before raft tries again. Raft counts a snapshot it could
// not open as no failure and asks again at once (every 50-100 ms): each
// ask wrote the state out until the threshold and deleted it, some ten
// times a second (a review).
var expandRetryPause = 5 * time.Second

// liveMagic starts a marker; it cannot start an engine stream ("IDEMSNP1").
var liveMagic = []byte("IDEMLIVE")

// errNoData is opening a marker when the state is older than the state it
// stands for: Pebble was lost or replaced under a node whose raft log was
// kept.
var errNoData = errors.New("the snapshot is a marker of this node's own state, which is now older than it")

func newSnapshotStore(dir string, db *engine.DB, log *slog.Logger) (*snapshotStore, error) {
	fs, err := raft.NewFileSnapshotStore(dir, 2, writerFunc(func(p []byte) (int, error) {
		log.Debug("raft snapshots: " + string(bytes.TrimSpace(p)))
		return len(p), nil
	}))
	if err != nil {
		return nil, err
	}
	// Streams left by a send that was cut short by a crash.
	old, _ := filepath.Glob(filepath.Join(dir, "send-*.snap"))
	for _, f := range old {
		os.Remove(f)
	}
	// Snapshots whose write failed (a full disk) or was cut short by a
	// crash: raft builds each in NAME.tmp and never removes one.
	tmps, _ := filepath.Glob(filepath.Join(dir, "snapshots", "*.tmp"))
	for _, d := range tmps {
		os.RemoveAll(d)
	}
	return &snapshotStore{FileSnapshotStore: fs, dir: dir, db: db, log: log}, nil
}

// newest is the index and term of the newest snapshot stored, false for
// none.
func (s *snapshotStore) newest() (uint64, uint64, bool) {
	m, ok := s.newestMeta()
	if !ok {
		return 0, 0, false
	}
	return m.Index, m.Term, true
}

// newestMeta is the metadata of the newest snapshot stored, false for none
// (guardedLogStore.snapshotHead).
func (s *snapshotStore) newestMeta() (*raft.SnapshotMeta, bool) {
	list, err := s.FileSnapshotStore.List()
	if err != nil || len(list) == 0 {
		return nil, false
	}
	return list[0], true
}

// writeMarker is what Persist writes into a sink of this store: the magic
// and the applied index of the state the marker stands for. That index can
// be below the snapshot's raft index, which also counts the no-op and
// barrier entries the FSM never sees.
func writeMarker(w io.Writer, applied uint64) error {
	if s, ok := w.(*markerSink); ok && !s.seen {
		s.own = true
	}
	_, err := w.Write(binary.BigEndian.AppendUint64(append([]byte(nil), liveMagic...), applied))
	return err
}

// readMarker returns the applied index a marker at the head of br stands
// for, and false when br holds a full engine stream instead.
func readMarker(br *bufio.Reader) (uint64, bool, error) {
	head, _ := br.Peek(len(liveMagic) + 8)
	if len(head) < len(liveMagic) || !bytes.Equal(head[:len(liveMagic)], liveMagic) {
		return 0, false, nil
	}
	if len(head) < len(liveMagic)+8 {
		return 0, true, fmt.Errorf("raftfsm: snapshot marker is truncated (%d bytes)", len(head))
	}
	return binary.BigEndian.Uint64(head[len(liveMagic):]), true, nil
}

// Open returns a full engine stream: a stored one as it is, a marker
// expanded from the current state. From the moment its metadata is read
// (before an expansion, which writes the whole state out and takes
// seconds for a large one), while it is open, and for sendHoldAfter
// after, the log keeps the entries above the snapshot's index
// (keepLogFrom).
func (s *snapshotStore) Open(id string) (*raft.SnapshotMeta, io.ReadCloser, error) {
	if s.takeHeld(id) {
		return s.FileSnapshotStore.Open(id)
	}
	var h *snapshotSend
	meta, rc, err := s.open(id, func(m *raft.SnapshotMeta) {
		if h == nil {
			h = s.hold(m)
		}
	})
	if err != nil {
		if h != nil {
			s.sendsMu.Lock()
			delete(s.sends, h) // nothing is sent
			s.sendsMu.Unlock()
		}
		return nil, nil, err
	}
	if h == nil {
		h = s.hold(meta)
	}
	return meta, &heldStream{ReadCloser: rc, release: func() {
		s.sendsMu.Lock()
		h.closed = mono.Now()
		s.sendsMu.Unlock()
	}}, nil
}

// hold registers a send of the snapshot meta, open until its closed time
// is set.
func (s *snapshotStore) hold(meta *raft.SnapshotMeta) *snapshotSend {
	h := &snapshotSend{index: meta.Index, meta: *meta}
	s.sendsMu.Lock()
	if s.sends == nil {
		s.sends = map[*snapshotSend]struct{}{}
	}
	s.sends[h] = struct{}{}
	s.sendsMu.Unlock()
	return h
}

// heldStream is an opened snapshot's stream; Close ends its hold on the
// log. Only Read and Close, as tempStream.
type heldStream struct {
	io.ReadCloser
	once    sync.Once
	release func()
}

func (h *heldStream) Close() error {
	err := h.ReadCloser.Close()
	h.once.Do(h.release)
	return err
}

// keepLogFrom is the lowest index of a snapshot being sent or sent less
// than sendHoldAfter ago, false for none. A follower that installed a
// snapshot at index I goes on from entry I+1, and the leader reads entry
// I to send it: compacted away meanwhile, the follower was sent the whole
// state again. Under steady writes a leader snapshots and compacts its
// log many times during a long install (a walk: with --trailing-logs 500
// a joiner got a 72 MB state twice), and a follower whose install takes
// longer than the leader's writes take to fill --trailing-logs never
// caught up.
func (s *snapshotStore) keepLogFrom() (uint64, bool) {
	s.sendsMu.Lock()
	defer s.sendsMu.Unlock()
	var low uint64
	for h := range s.sends {
		if h.closed != 0 && mono.Since(h.closed) > sendHoldAfter {
			delete(s.sends, h)
			continue
		}
		if low == 0 || h.index < low {
			low = h.index
		}
	}
	return low, low != 0
}

// sentMeta is the metadata of a snapshot at index being sent or sent less
// than sendHoldAfter ago (keepLogFrom), false for none: the log answers
// the entry at its index from it (guardedLogStore.snapshotHead) when it
// goes on right after it. raft reads that entry to send the follower that
// installed it the entries above, and the log may hold none there: cut up
// to the snapshot's own index (more than --trailing-logs entries appended
// while it was written), it answered it from the newest snapshot only, and
// once the leader took a newer one during the install, the follower was
// sent the whole state again.
func (s *snapshotStore) sentMeta(index uint64) (*raft.SnapshotMeta, bool) {
	s.sendsMu.Lock()
	defer s.sendsMu.Unlock()
	for h := range s.sends {
		if h.index == index && (h.closed == 0 || mono.Since(h.closed) <= sendHoldAfter) {
			m := h.meta
			return &m, true
		}
	}
	return nil, false
}

// open is Open without the hold: it calls known with the snapshot's
// metadata as soon as it has read it, before any expansion.
func (s *snapshotStore) open(id string, known func(*raft.SnapshotMeta)) (*raft.SnapshotMeta, io.ReadCloser, error) {
	meta, rc, err := s.FileSnapshotStore.Open(id)
	if err != nil {
		if m, ok := s.damagedMarker(id, err); ok {
			known(m)
			return s.expand(m, 0)
		}
		return nil, nil, err
	}
	known(meta)
	br := bufio.NewReaderSize(rc, 1<<20)
	stateIndex, marker, err := readMarker(br)
	if err != nil || !marker {
		if err != nil {
			rc.Close()
			return nil, nil, err
		}
		return meta, struct {
			io.Reader
			io.Closer
		}{br, rc}, nil
	}
	rc.Close()
	return s.expand(meta, stateIndex)
}

// damagedMarker reads the metadata of snapshot id, which raft refused to
// open for a checksum that does not match (a byte of the marker flipped on
// disk), when its data is a marker's size: a marker holds nothing but the
// applied index of a state this node had then, so the current state, which
// holds at least that one, stands in for it. Refused, a follower that
// needed a snapshot asked for it again and again, and stayed behind until
// the leader took its next one (8192 entries later by default).
func (s *snapshotStore) damagedMarker(id string, openErr error) (*raft.SnapshotMeta, bool) {
	if !strings.Contains(openErr.Error(), "CRC mismatch") { // raft's FileSnapshotStore has no sentinel for it
		return nil, false
	}
	// raft's own listing reads the metadata without the data's checksum.
	list, err := s.FileSnapshotStore.List()
	if err != nil {
		return nil, false
	}
	i := slices.IndexFunc(list, func(m *raft.SnapshotMeta) bool { return m.ID == id })
	if i < 0 || list[i].Size != int64(len(liveMagic)+8) {
		return nil, false
	}
	meta := list[i]
	s.log.Warn("raft snapshot "+id+" is damaged on disk (its checksum does not match); it is a marker of this node's state, so the current state is sent in its place", "error", openErr)
	return meta, true
}

// expand writes the current state, which must hold at least the state of
// the marker (applied index stateIndex), to a temporary file and returns
// it with meta's size set to its length; closing it removes the file. It
// stops once the file would take the disk under the storage-full
// threshold (refuseExpand).
func (s *snapshotStore) expand(meta *raft.SnapshotMeta, stateIndex uint64) (*raft.SnapshotMeta, io.ReadCloser, error) {
	if m, rc, ok := s.openSpare(meta.ID); ok {
		return m, rc, nil
	}
	err := s.roomToExpand()
	if err != nil {
		err = fmt.Errorf("raftfsm: expand snapshot %s: %w", meta.ID, err)
	} else {
		var m *raft.SnapshotMeta
		var rc io.ReadCloser
		if m, rc, err = s.writeOut(meta, stateIndex); err == nil || !errors.Is(err, errExpandDiskFull) {
			return m, rc, err
		}
	}
	// Refused for space: the Pebble snapshot is released before the pause
	// (held, it would keep what compactions free meanwhile).
	return nil, nil, s.refuseExpand(err)
}

// expandRoom follows an expansion against the storage-full threshold, with
// streamMargin above it.
func (s *snapshotStore) expandRoom() streamRoom {
	r := streamRoom{g: s.disk}
	if s.disk != nil {
		r.margin = streamMargin(s.disk.fullBelow)
	}
	return r
}

// writeOut is expand's work: the current state into a temporary file.
func (s *snapshotStore) writeOut(meta *raft.SnapshotMeta, stateIndex uint64) (*raft.SnapshotMeta, io.ReadCloser, error) {
	duringExpand()
	snap, err := s.db.Snapshot()
	if err != nil {
		return nil, nil, fmt.Errorf("raftfsm: expand snapshot %s: %w", meta.ID, err)
	}
	defer snap.Close()
	if snap.Meta().Applied < stateIndex {
		return nil, nil, fmt.Errorf("raftfsm: snapshot %s (index %d, state applied %d): %w (applied %d)", meta.ID, meta.Index, stateIndex, errNoData, snap.Meta().Applied)
	}
	f, err := os.CreateTemp(s.dir, "send-*.snap")
	if err != nil {
		return nil, nil, fmt.Errorf("raftfsm: expand snapshot: %w", err)
	}
	fail := func(err error) (*raft.SnapshotMeta, io.ReadCloser, error) {
		f.Close()
		os.Remove(f.Name())
		return nil, nil, fmt.Errorf("raftfsm: expand snapshot %s: %w", meta.ID, err)
	}
	rw := &roomWriter{f: f, room: s.expandRoom()}
	bw := bufio.NewWriterSize(rw, 1<<20)
	n, err := snap.WriteTo(bw)
	if err == nil {
		err = bw.Flush()
	}
	if err == nil {
		_, err = f.Seek(0, io.SeekStart)
	}
	if err != nil {
		if errors.Is(err, errExpandDiskFull) {
			s.refused.Store(max(rw.room.written, 1))
			s.refusedAt.Store(mono.Now())
		}
		return fail(err)
	}
	s.refused.Store(0)
	s.disk.expandSent()
	s.log.Info("snapshot expanded from the current state", "id", meta.ID, "snapshot-index", meta.Index,
		"applied-index", snap.Meta().Applied, "bytes", n)
	m := *meta
	m.Size = n
	return &m, &tempStream{f: f, s: s, meta: m}, nil
}

// openSpare opens the kept stream for another send of snapshot id.
func (s *snapshotStore) openSpare(id string) (*raft.SnapshotMeta, io.ReadCloser, bool) {
	s.spareMu.Lock()
	defer s.spareMu.Unlock()
	sp := s.spare
	if sp == nil {
		return nil, nil, false
	}
	if sp.meta.ID != id {
		// A newer snapshot: the kept stream is of no use any more.
		s.dropSpareLocked()
		return nil, nil, false
	}
	f, err := os.Open(sp.path)
	if err != nil {
		s.dropSpareLocked()
		return nil, nil, false
	}
	s.log.Info("snapshot sent again from the stream expanded for an earlier try, not written out anew", "id", id, "snapshot-index", sp.meta.Index, "bytes", sp.meta.Size)
	m := sp.meta
	return &m, &tempStream{f: f, s: s, meta: m}, true
}

// dropSpareLocked removes the kept stream (a send reading it keeps its
// open file); the caller holds spareMu.
func (s *snapshotStore) dropSpareLocked() {
	if s.spare != nil {
		os.Remove(s.spare.path)
		s.spare = nil
	}
}

// sent is a stream's Close: it is kept as the spare for spareKeep, in
// place of any other, until every member has applied past its index
// (dropSpareApplied). Read to its end is no sign that the follower has
// it: one that refused it midway for lack of disk space answers at once,
// and raft's transport still sends the rest, which it reads and drops.
// Such a stream was removed, and each of raft's tries (every 1 to 10 s)
// wrote the whole state out again (a 129 MB state, 13 times in 40 s).
func (s *snapshotStore) sent(t *tempStream) {
	s.spareMu.Lock()
	defer s.spareMu.Unlock()
	path := t.f.Name()
	if s.spare != nil && s.spare.path == path {
		return
	}
	s.dropSpareLocked()
	if spareKeep <= 0 {
		os.Remove(path)
		return
	}
	sp := &spareStream{path: path, meta: t.meta}
	s.spare = sp
	time.AfterFunc(spareKeep, func() {
		s.spareMu.Lock()
		defer s.spareMu.Unlock()
		if s.spare == sp {
			s.dropSpareLocked()
		}
	})
}

// dropSpareApplied removes the kept stream once every member has applied
// its index (applied is the least of their applied indexes): no follower
// needs it any more.
func (s *snapshotStore) dropSpareApplied(applied uint64) {
	s.spareMu.Lock()
	defer s.spareMu.Unlock()
	if s.spare != nil && s.spare.meta.Index <= applied {
		s.dropSpareLocked()
	}
}

// roomToExpand refuses, without writing anything, an expansion that the
// last one showed there is no room for: the disk has no more room above
// the threshold than that one had written when it stopped.
func (s *snapshotStore) roomToExpand() error {
	refused := s.refused.Load()
	if refused == 0 {
		return nil
	}
	if mono.Since(s.refusedAt.Load()) > expandForget {
		// The state may have shrunk since (expiry): try it again.
		s.refused.Store(0)
		return nil
	}
	r := s.expandRoom()
	if free, ok := r.take(int(refused), false); !ok {
		return fmt.Errorf("%w: the last try stopped after %d bytes of the state; %d bytes free, writes stop under %d: free space, and raft sends it again",
			errExpandDiskFull, refused, free, r.g.fullBelow)
	}
	return nil
}

// refuseExpand says why no snapshot went to a follower (once a minute) and
// holds raft's replication to it for expandRetryPause, or until the node
// stops, before raft asks again.
func (s *snapshotStore) refuseExpand(err error) error {
	s.disk.logExpandRefused(err)
	t := time.NewTimer(expandRetryPause)
	defer t.Stop()
	select {
	case <-t.C:
	case <-s.stop:
	}
	return err
}

// tempStream is an expanded snapshot; Close removes it, or keeps it for
// another send when it was not read to its end (snapshotStore.sent).
// Only Read and Close: an *os.File's WriteTo, promoted, would let io.Copy
// read past the count of what was sent.
type tempStream struct {
	f    *os.File
	s    *snapshotStore
	meta raft.SnapshotMeta
	read int64
}

func (t *tempStream) Read(p []byte) (int, error) {
	n, err := t.f.Read(p)
	t.read += int64(n)
	return n, err
}

func (t *tempStream) Close() error {
	err := t.f.Close()
	t.s.sent(t)
	return err
}

// markerSink is a sink of this store: the FSM writes a marker into it
// instead of the state. Snapshots installed from a leader come through
// Create too, but raft writes the received stream into them directly.
type markerSink struct {
	raft.SnapshotSink
	room streamRoom // of a received stream (not used for a marker)
	// seen and marker: the first write was this node's own marker, a few
	// bytes that let raft truncate its log (which frees space).
	seen, marker bool
	store        *snapshotStore
	// index is the snapshot's raft index; held: it is a leader's snapshot
	// whose state this node already holds, stored as a marker of that
	// state while the stream is read and dropped (snapshotStore.holds).
	index uint64
	held  bool
	// own: the sink's first write is a marker this node wrote
	// (writeMarker); any other marker came from a leader (Write).
	own bool
}

// errSnapshotDiskFull refuses a snapshot from the leader that the disk has
// no room for: raft cancels the install and the leader tries again later,
// as for a follower that fell behind.
var errSnapshotDiskFull = errors.New("raftfsm: disk full: this node takes no snapshot from the leader until space is freed")

// errExpandDiskFull stops a leader writing out its state for a follower
// when the file would take its own disk under the storage-full threshold:
// raft gives up this send and tries again later.
var errExpandDiskFull = errors.New("raftfsm: disk full: this node sends no snapshot to a follower until space is freed")

// snapshotReadEvery is how many bytes of a snapshot stream are written
// between two reads of the free space.
const snapshotReadEvery = 4 << 20

// streamMargin is the room a leader's expansion leaves above the
// threshold: the free space is read every snapshotReadEvery bytes, and
// the node's other writes go on meanwhile. Without it the expansion
// stopped just under the threshold, and the leader answered writes 507
// until the file was removed (an operator walk: 96 claims in 30 s). A
// follower's install keeps none: only the leader's disk decides 507, and
// a small follower disk must still take what fits.
func streamMargin(fullBelow uint64) uint64 { return max(fullBelow/8, 2*snapshotReadEvery) }

// streamRoom follows a snapshot stream written to the data dir's disk
// against the storage-full threshold. A nil or switched-off guard (no
// --min-free-disk) lets everything through.
type streamRoom struct {
	g *diskGuard
	// margin is room kept above the threshold besides (a leader's
	// expansion: streamMargin).
	margin  uint64
	unread  int    // bytes written since the free space was last read
	written uint64 // bytes of the stream written so far
}

// take counts n more bytes of the stream and reports whether they leave
// the disk above the threshold, with again bytes more still to come for
// each byte of the stream (a received snapshot's restore writes it again
// as the store's tables): free now, less what was written since it was
// read, must hold that. It returns the free space it went by.
func (r *streamRoom) take(n int, again bool) (uint64, bool) {
	g := r.g
	if g == nil || g.minFree == 0 {
		return 0, true
	}
	if r.unread == 0 || r.unread+n > snapshotReadEvery {
		g.read() // on error, the last value read
		r.unread = 0
	}
	r.unread += n
	r.written += uint64(n)
	need := g.fullBelow + r.margin + uint64(r.unread)
	if again {
		need += r.written
	}
	free := g.free.Load()
	return free, free >= need
}

// Write refuses to go on once the stream, and the restore that writes it
// again as the store's tables, would take the disk under the storage-full
// threshold. A follower that fell behind while its disk was full was sent
// the whole state, and writing it took the disk to 0 bytes free (an
// operator walk): the raft log could then not start its next segment,
// which stops it for good (appendFloor).
func (s *markerSink) Write(p []byte) (int, error) {
	if !s.seen {
		s.seen, s.marker = true, bytes.HasPrefix(p, liveMagic)
		if s.marker && !s.own {
			// A leader expands its markers (Open) but the first opening of
			// a held one, which is its install's: a replication of a leader
			// deposed while it installed one. Stored, it would be this
			// node's newest snapshot, standing for a state it does not hold.
			return 0, errors.New("raftfsm: the leader sent a marker of its state instead of the state; refused (it sends the state on its next try)")
		}
		if !s.marker && s.store != nil {
			if applied, ok := s.store.holds(s.index); ok {
				if err := writeMarker(s.SnapshotSink, applied); err != nil {
					return 0, err
				}
				s.held = true
			}
		}
	}
	if s.held {
		return len(p), nil // raft counts the bytes read against the stream's size
	}
	if !s.marker {
		if free, ok := s.room.take(len(p), true); !ok {
			err := fmt.Errorf("%w: %d bytes of the leader's snapshot received, and restoring them writes as much again; %d bytes free, writes stop under %d: free space, and the leader sends it again",
				errSnapshotDiskFull, s.room.written, free, s.room.g.fullBelow)
			s.room.g.logSnapshotRefused(err, s.room.written)
			return 0, err
		}
	}
	return s.SnapshotSink.Write(p)
}

// roomWriter writes an expanded snapshot to its file while the disk has
// room for it above the storage-full threshold.
type roomWriter struct {
	f    *os.File
	room streamRoom
}

func (w *roomWriter) Write(p []byte) (int, error) {
	if free, ok := w.room.take(len(p), false); !ok {
		return 0, fmt.Errorf("%w: %d bytes of the state written out for a follower; %d bytes free, writes stop under %d: free space, and raft sends it again",
			errExpandDiskFull, w.room.written, free, w.room.g.fullBelow)
	}
	return w.f.Write(p)
}

// Create is FileSnapshotStore's, with the sink marked as this store's.
func (s *snapshotStore) Create(version raft.SnapshotVersion, index, term uint64, conf raft.Configuration,
	confIndex uint64, trans raft.Transport) (raft.SnapshotSink, error) {
	sink, err := s.FileSnapshotStore.Create(version, index, term, conf, confIndex, trans)
	if err != nil {
		s.removeUncreated(err)
		return nil, err
	}
	return &markerSink{SnapshotSink: sink, room: streamRoom{g: s.disk}, store: s, index: index}, nil
}

// holds reports whether this node already holds the state of a snapshot
// at raft index that a leader is sending it, and the applied index of that
// state, made durable: its state is applied at or past index, and neither
// its raft log nor a snapshot it stored goes past index.
//
// Raft's leader moves a follower's next index only on an answer, and when
// that index is below its log's first entry it sends its snapshot without
// asking what the follower has. A follower stopped after it stored the
// snapshot, before raft answered (it restores it at its next start,
// catchUpFromSnapshot), or after the restore, was sent the whole state
// again, which it had to store and restore once more: a disk-full walk saw
// one refuse the same snapshot for room (its tables and the stored stream
// took the disk) 45 times in 6 minutes, and one with room restored it
// only once the leader's state had moved past its own (FSM.Restore
// refuses a state that is not newer).
//
// Such a node holds every entry up to index in its state (only committed
// entries are applied, and a leader's stream holds its state at or past
// the snapshot's index), so installing the snapshot would change nothing:
// it stores a marker of its state at the snapshot's index and term in its
// place, and raft goes on from there as after an install, the FSM skipping
// the entries up to its applied index as they come. With log entries or a
// snapshot past index, raft's install would drop them (it removes the
// whole log, and goes back to the older snapshot): such a snapshot is left
// to FSM.Restore, which refuses it.
func (s *snapshotStore) holds(index uint64) (uint64, bool) {
	if s.logEnd == nil || index == 0 {
		return 0, false
	}
	applied := s.db.Meta().Applied
	if applied < index {
		return 0, false
	}
	if last, err := s.logEnd(); err != nil || last > index {
		return 0, false
	}
	list, err := s.FileSnapshotStore.List()
	if err != nil {
		return 0, false
	}
	for _, m := range list {
		if m.Index > index {
			return 0, false
		}
	}
	// The marker stands for this state from now on: raft removes its log
	// once the install is answered.
	if err := s.db.Sync(); err != nil {
		return 0, false
	}
	s.log.Info("the leader sent a snapshot whose state this node already holds (it stopped after it had stored or installed it, before raft answered the leader): kept this node's state, stored a marker of it in the snapshot's place and dropped the stream",
		"snapshot-index", index, "applied-index", applied)
	return applied, true
}

// markHeld records id as a marker stored in place of a held snapshot,
// which Open returns as it is (takeHeld).
func (s *snapshotStore) markHeld(id string) {
	s.heldMu.Lock()
	defer s.heldMu.Unlock()
	if s.held == nil {
		s.held = map[string]struct{}{}
	}
	s.held[id] = struct{}{}
}

// takeHeld reports whether id is a marker stored in place of a held
// snapshot that raft has not opened yet, and forgets it.
func (s *snapshotStore) takeHeld(id string) bool {
	s.heldMu.Lock()
	defer s.heldMu.Unlock()
	_, ok := s.held[id]
	delete(s.held, id)
	return ok
}

// Close persists the snapshot (raft keeps the two newest) and, when it is
// a marker (this node's own, or one in place of a held snapshot, which
// Open then returns as it is for raft's install: holds), removes the full
// streams older than it: a stream received from a leader (the whole
// state, uncompressed: often several times the store's tables) is read
// only while it is the newest snapshot (catchUpFromSnapshot rebuilds a
// lost fsm from the newest alone, and raft opens the newest), so once a
// marker follows it, it only takes disk. It stayed until a second marker,
// hours on a quiet cluster (a walk: a 918 MB stream beside 217 MB of
// tables).
func (s *markerSink) Close() error {
	err := s.SnapshotSink.Close()
	if err != nil {
		s.removeUnfinished() // raft's leaves it when its meta or rename fails
	}
	if err == nil && s.seen && !s.marker && s.room.g != nil {
		s.room.g.snapshotInstalled()
	}
	if err != nil || !(s.marker || s.held) || s.store == nil {
		return err
	}
	if s.held {
		s.store.markHeld(s.ID())
	}
	s.store.dropStreamsBefore(s.ID())
	return nil
}

// Cancel is raft's, which leaves the snapshot's NAME.tmp when its buffer
// cannot be flushed: after a write the disk failed (EIO), a follower kept
// each leader's stream it had received part of, up to the whole state,
// until its next start (a walk: 4 MB left by a failed install, and one
// more per retry every 10 s while the disk failed). It is removed.
func (s *markerSink) Cancel() error {
	err := s.SnapshotSink.Cancel()
	if err != nil {
		s.removeUnfinished()
	}
	return err
}

// removeUnfinished removes the snapshot's NAME.tmp, which raft builds it
// in (newSnapshotStore removes those left at the start).
func (s *markerSink) removeUnfinished() {
	closeStateFile(s.SnapshotSink)
	if s.store == nil {
		return
	}
	s.store.removeTmp(filepath.Join(s.store.dir, "snapshots", s.ID()+".tmp"))
}

// removeUncreated removes the NAME.tmp of a snapshot whose creation
// failed, named by the path in err: raft's Create returns at a failed
// write or fsync of its meta.json, or creation of its state.bin, with the
// directory made, and a node whose disk failed its own snapshot (EIO)
// kept one more at each try, every --snapshot-interval, until its next
// start (an operator walk: six in 7 s). The name holds the millisecond of
// the try, so only the path in the error tells it.
func (s *snapshotStore) removeUncreated(err error) {
	var pe *fs.PathError
	if !errors.As(err, &pe) {
		return
	}
	snaps := filepath.Join(s.dir, "snapshots")
	tmp := filepath.Dir(pe.Path)
	if filepath.Dir(tmp) != snaps || !strings.HasSuffix(tmp, ".tmp") {
		return
	}
	s.removeTmp(tmp)
}

// removeTmp removes tmp, an unfinished snapshot's NAME.tmp.
func (s *snapshotStore) removeTmp(tmp string) {
	if err := os.RemoveAll(tmp); err != nil && s.log != nil {
		s.log.Warn("could not remove an unfinished snapshot (it is removed at the next start)", "path", tmp, "error", err)
	}
}

// closeStateFile closes the file of a raft.FileSnapshotSink whose close
// or cancel failed: raft's returns at the failed flush or fsync with the
// file still open, so the node kept a descriptor, and the disk the space
// of what was written (a removed file's blocks are freed at its last
// close), for each failure until it stopped. raft exports no way to it:
// its field is read by reflection, and nothing is done if raft's sink has
// no such field (another version of raft).
func closeStateFile(sink raft.SnapshotSink) {
	v := reflect.ValueOf(sink)
	if v.Kind() != reflect.Pointer || v.IsNil() || v.Elem().Kind() != reflect.Struct {
		return
	}
	fv := v.Elem().FieldByName("stateFile")
	if !fv.IsValid() || fv.Type() != reflect.TypeFor[*os.File]() {
		return
	}
	if f := *(**os.File)(unsafe.Pointer(fv.UnsafeAddr())); f != nil {
		_ = f.Close() // os.ErrClosed when raft had closed it
	}
}

// dropStreamsBefore removes the full streams among the snapshots older
// than the snapshot id, which must be the newest.
func (s *snapshotStore) dropStreamsBefore(id string) {
	list, err := s.FileSnapshotStore.List()
	if err != nil || len(list) == 0 || list[0].ID != id {
		return
	}
	for _, m := range list[1:] {
		if m.Size == int64(len(liveMagic)+8) {
			continue // a marker
		}
		// The data first: a crash midway leaves a snapshot raft still
		// lists (its meta.json), which its own pruning removes later; a
		// directory left without meta.json would be listed by nothing
		// and never removed.
		dir := filepath.Join(s.dir, "snapshots", m.ID)
		err := os.Remove(filepath.Join(dir, "state.bin"))
		if err == nil || errors.Is(err, os.ErrNotExist) {
			err = os.RemoveAll(dir)
		}
		if err != nil {
			s.log.Warn("could not remove a snapshot stream older than this node's newest snapshot", "snapshot", m.ID, "bytes", m.Size, "error", err)
			continue
		}
		s.log.Info("removed a snapshot stream older than this node's own newest snapshot", "snapshot", m.ID, "bytes", m.Size)
	}
}
