package raftfsm

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"log/slog"
	"math"
	"path/filepath"
	"strings"
	"time"

	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"

	"github.com/idem-store/idem/engine"
	"github.com/idem-store/idem/partition"
)

// Backup file format (what GET /v1/admin/snapshot streams and `idem
// snapshot save` stores):
//
//	"IDEMBACK"
//	u32 BE format version (1)
//	u32 BE header length, header (JSON, BackupHeader)
//	frames: u32 BE length (1..maxFrame), that many bytes of the engine's
//	        snapshot stream ("IDEMSNP1"..., CRC-checked on its own)
//	u32 BE 0 (end of frames)
//	SHA-256 of every byte before it
//
// The frames let a reader find the end of the engine stream without
// parsing it, and the trailer makes any truncation or damaged byte, header
// included, detectable: a file is good only if it reads to its last byte.
var backupMagic = []byte("IDEMBACK")

// BackupFormat is the format version this binary writes and reads.
const BackupFormat = 1

const (
	maxBackupHeader = 64 << 10
	maxFrame        = 4 << 20
)

// maxBackupApplied bounds a backup's applied index. A restore continues the
// raft log above it (RestoredIndex: a million per second of the clock,
// at most about 1e16), and a cluster appends far fewer than 1e18 entries
// in its life; a backup claiming 2^64-1 (a hostile header and state, with
// valid checksums) was restored with its log going on "at index 0", and
// the node it made panicked at every start (raft: "log not found").
const maxBackupApplied = 1 << 62

// ErrBackup means a backup file is not a whole, intact idem backup.
var ErrBackup = errors.New("raftfsm: bad backup")

// BackupHeader describes a backup; it is readable before the data.
type BackupHeader struct {
	Format    int       `json:"format"`
	CreatedAt time.Time `json:"created_at"`
	// NodeID is the leader that took it.
	NodeID       string `json:"node_id"`
	AppliedIndex uint64 `json:"applied_index"`
	// ClusterTimeMs is cluster time as of the last applied command: a node
	// restored from the backup continues from it.
	ClusterTimeMs  int64 `json:"cluster_time_ms"`
	BucketWidthMs  int64 `json:"bucket_width_ms"`
	MaxRetentionMs int64 `json:"max_retention_ms"`
	// Scope is the uniqueness scope the state pinned (endpoint or
	// principal; empty before its first write): a restored node keeps it.
	Scope string `json:"scope,omitempty"`
	// RetentionMs is the cluster's retention of new records (0 before its
	// first claim): a restored node keeps it.
	RetentionMs int64 `json:"retention_ms,omitempty"`
	Records     int64 `json:"records"`
	// Auth is AuthTokens when the node that took it checked bearer tokens
	// (--auth-file), AuthNone when it answered anyone; empty in a backup
	// of an earlier release. A data dir restored from a backup of a
	// cluster that checked tokens records it (node.json), and serve then
	// refuses to start it without --auth-file, as it refuses a data dir
	// last served with one: the backup holds every tenant's records.
	Auth string `json:"auth,omitempty"`
}

// BackupInfo is what reading a whole backup found.
type BackupInfo struct {
	Header BackupHeader
	Stream engine.StreamInfo // filled by VerifyBackup
	Bytes  int64             // length of the file
	SHA256 string
	// Members are the members the backup's state records (its node/
	// records, with their addresses); filled by RestoreBackup.
	Members []NodeInfo
}

// Backup takes a consistent snapshot of the whole state for a backup. It
// runs on the leader after a linearizable read barrier, so the snapshot
// holds every write acknowledged before the call. The caller closes it.
func (n *Node) Backup(ctx context.Context) (*engine.Snapshot, error) {
	if err := n.readBarrier(ctx); err != nil {
		return nil, err
	}
	s, err := n.db.Snapshot()
	if err != nil {
		return nil, fmt.Errorf("raftfsm: backup: %w", err)
	}
	return s, nil
}

// NewBackupHeader describes snap, taken by node nodeID.
func NewBackupHeader(snap *engine.Snapshot, nodeID string) (BackupHeader, error) {
	records, err := snap.Records()
	if err != nil {
		return BackupHeader{}, err
	}
	m := snap.Meta()
	return BackupHeader{
		Format: BackupFormat, CreatedAt: time.Now().UTC(), NodeID: nodeID,
		AppliedIndex: m.Applied, ClusterTimeMs: m.NowMs, BucketWidthMs: int64(m.Width),
		MaxRetentionMs: m.MaxRetentionMs, Scope: m.Scope.String(), RetentionMs: m.RetentionMs, Records: records,
	}, nil
}

// WriteBackup streams a backup of snap with header h to w and returns the
// bytes written. It holds at most a few MiB in memory whatever the state's
// size.
func WriteBackup(w io.Writer, h BackupHeader, snap *engine.Snapshot) (int64, error) {
	sum := sha256.New()
	cw := &countingWriter{w: io.MultiWriter(w, sum)}
	hb, err := json.Marshal(h)
	if err != nil {
		return 0, fmt.Errorf("raftfsm: backup header: %w", err)
	}
	head := append([]byte(nil), backupMagic...)
	head = binary.BigEndian.AppendUint32(head, BackupFormat)
	head = binary.BigEndian.AppendUint32(head, uint32(len(hb)))
	head = append(head, hb...)
	if _, err := cw.Write(head); err != nil {
		return cw.n, fmt.Errorf("raftfsm: write backup: %w", err)
	}
	if _, err := snap.WriteTo(&frameWriter{w: cw}); err != nil {
		return cw.n, fmt.Errorf("raftfsm: write backup: %w", err)
	}
	if _, err := cw.Write([]byte{0, 0, 0, 0}); err != nil {
		return cw.n, fmt.Errorf("raftfsm: write backup: %w", err)
	}
	if _, err := w.Write(sum.Sum(nil)); err != nil {
		return cw.n, fmt.Errorf("raftfsm: write backup: %w", err)
	}
	return cw.n + sha256.Size, nil
}

type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// frameWriter writes each Write as frames of at most maxFrame bytes.
type frameWriter struct{ w io.Writer }

func (f *frameWriter) Write(p []byte) (int, error) {
	done := 0
	for len(p) > 0 {
		n := min(len(p), maxFrame)
		if _, err := f.w.Write(binary.BigEndian.AppendUint32(nil, uint32(n))); err != nil {
			return done, err
		}
		if _, err := f.w.Write(p[:n]); err != nil {
			return done, err
		}
		done += n
		p = p[n:]
	}
	return done, nil
}

// BackupReader reads a backup: the header at once, the engine stream
// through Read, then Finish checks the trailer.
type BackupReader struct {
	Header BackupHeader
	br     *bufio.Reader
	sum    hash.Hash
	n      int64 // bytes consumed
	frame  int   // bytes left in the current frame
	ended  bool  // the end-of-frames marker was read
	// frameAt and frameLen are the offset and the length of the frame
	// being read (frameLen 0 between frames).
	frameAt  int64
	frameLen uint32
	// tail is the last backupTrailer bytes read (fewer at the start).
	tail []byte
}

// backupTrailer is the length of a backup's end: the end-of-frames marker
// (u32 0) and the SHA-256.
const backupTrailer = 4 + sha256.Size

// OpenBackup reads and checks the head of a backup.
func OpenBackup(r io.Reader) (*BackupReader, error) {
	b := &BackupReader{br: bufio.NewReaderSize(r, 1<<20), sum: sha256.New()}
	head := make([]byte, len(backupMagic)+8)
	if err := b.read(head); err != nil {
		return nil, err
	}
	if !bytes.Equal(head[:len(backupMagic)], backupMagic) {
		return nil, fmt.Errorf("%w: not an idem backup (it starts with %q, not %q)%s", ErrBackup, printable(head[:len(backupMagic)]), backupMagic, otherFormat(head))
	}
	if v := binary.BigEndian.Uint32(head[len(backupMagic):]); v != BackupFormat {
		return nil, fmt.Errorf("%w: format version %d; this idem reads version %d", ErrBackup, v, BackupFormat)
	}
	hl := binary.BigEndian.Uint32(head[len(backupMagic)+4:])
	if hl == 0 || hl > maxBackupHeader {
		return nil, fmt.Errorf("%w: header length %d is out of range (damaged file)", ErrBackup, hl)
	}
	hb := make([]byte, hl)
	if err := b.read(hb); err != nil {
		return nil, err
	}
	if err := json.Unmarshal(hb, &b.Header); err != nil {
		return nil, fmt.Errorf("%w: header does not decode (damaged file): %w", ErrBackup, err)
	}
	// The data's applied index must equal the header's (checked at the
	// end), so the header's bounds both, before the data is read.
	if b.Header.AppliedIndex > maxBackupApplied {
		return nil, fmt.Errorf("%w: header says applied index %d, beyond any a cluster reaches (at most %d: a restore starts its log at about 1.8e15 today): damaged, or not a file idem wrote", ErrBackup, b.Header.AppliedIndex, uint64(maxBackupApplied))
	}
	return b, nil
}

// compressedMagic are the first bytes of the formats backups are
// compressed with (a backup is stored uncompressed: logrotate, a
// cron job's gzip, an object store's upload step compress it).
var compressedMagic = []struct{ magic, name, undo string }{
	{"\x1f\x8b", "gzip", "gunzip -k"},
	{"\x28\xb5\x2f\xfd", "zstd", "zstd -d"},
	{"\xfd7zXZ\x00", "xz", "xz -dk"},
	{"BZh", "bzip2", "bunzip2 -k"},
	{"\x04\x22\x4d\x18", "lz4", "lz4 -d"},
}

// otherFormat names what a file that is not a backup is, when its first
// bytes say: a compressed backup was refused only as starting with
// ".......k", and a node's raft snapshot file (a marker, or a state
// stream) as starting with "IDEMLIVE" or "IDEMSNP1", neither saying what
// to do.
func otherFormat(head []byte) string {
	for _, c := range compressedMagic {
		if bytes.HasPrefix(head, []byte(c.magic)) {
			return fmt.Sprintf(": it is %s-compressed; decompress it (%s FILE) and give the result", c.name, c.undo)
		}
	}
	if bytes.HasPrefix(head, []byte("IDEMSNP1")) || bytes.HasPrefix(head, []byte("IDEMLIVE")) {
		return ": it is a file of a node's raft snapshots (snapshots/*/state.bin), not a backup; take a backup of a running cluster with idem snapshot save"
	}
	return ""
}

func printable(b []byte) string {
	out := make([]byte, len(b))
	for i, c := range b {
		if c < 0x20 || c > 0x7e {
			c = '.'
		}
		out[i] = c
	}
	return string(out)
}

// read fills p from the file, into the checksum.
func (b *BackupReader) read(p []byte) error {
	n, err := io.ReadFull(b.br, p)
	b.sum.Write(p[:n])
	b.n += int64(n)
	b.keepTail(p[:n])
	if err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return b.endedEarly()
		}
		return fmt.Errorf("raftfsm: read backup: %w", err)
	}
	return nil
}

func (b *BackupReader) keepTail(p []byte) {
	if len(p) >= backupTrailer {
		b.tail = append(b.tail[:0], p[len(p)-backupTrailer:]...)
		return
	}
	b.tail = append(b.tail, p...)
	if over := len(b.tail) - backupTrailer; over > 0 {
		b.tail = append(b.tail[:0], b.tail[over:]...)
	}
}

// endedEarly says why the file ended where more was due. A file cut short
// (a copy stopped, a disk filled) ends anywhere. A frame whose length was
// damaged claims more bytes than follow, so the reader runs to the end of
// the file inside it, as in a cut file: but that file still ends as every
// backup does, with the end-of-frames marker and a checksum. Both were
// called "truncated", sending the operator to look for the rest of a file
// that was whole (an operator walk flipped one bit of a frame's length).
// The marker's four zero bytes, exactly where the whole file's would be,
// are the sign; a file cut where its data happens to hold them is called
// damaged too, which is as true of it (it is not a backup either way),
// and the message says both.
func (b *BackupReader) endedEarly() error {
	if b.frameLen > 0 && len(b.tail) == backupTrailer && bytes.Equal(b.tail[:4], []byte{0, 0, 0, 0}) {
		return fmt.Errorf("%w: damaged: the frame at offset %d says it holds %d bytes, but only %d bytes follow, ending as a whole backup ends "+
			"(an end-of-frames marker and a checksum): the frame's length is damaged (or the file was cut exactly there)",
			ErrBackup, b.frameAt, b.frameLen, b.n-b.frameAt-4)
	}
	return fmt.Errorf("%w: truncated: the file ends after %d bytes", ErrBackup, b.n)
}

// Read returns the engine stream, frame by frame; io.EOF at its end.
func (b *BackupReader) Read(p []byte) (int, error) {
	for b.frame == 0 {
		if b.ended {
			return 0, io.EOF
		}
		var l [4]byte
		b.frameLen = 0
		if err := b.read(l[:]); err != nil {
			return 0, err
		}
		n := binary.BigEndian.Uint32(l[:])
		if n == 0 {
			b.ended = true
			return 0, io.EOF
		}
		if n > maxFrame {
			return 0, fmt.Errorf("%w: frame of %d bytes at offset %d (damaged file)", ErrBackup, n, b.n-4)
		}
		b.frame, b.frameAt, b.frameLen = int(n), b.n-4, n
	}
	if len(p) > b.frame {
		p = p[:b.frame]
	}
	if err := b.read(p); err != nil {
		return 0, err
	}
	b.frame -= len(p)
	return len(p), nil
}

// Finish reads what is left of the stream and checks the trailer: the
// SHA-256 of everything before it, and nothing after it. It returns the
// file's length and checksum.
func (b *BackupReader) Finish() (int64, string, error) {
	if _, err := io.Copy(io.Discard, b); err != nil {
		return b.n, "", err
	}
	want := b.sum.Sum(nil)
	var got [sha256.Size]byte
	n, err := io.ReadFull(b.br, got[:])
	if err != nil {
		return b.n + int64(n), "", fmt.Errorf("%w: truncated: the file ends after %d bytes, inside its checksum", ErrBackup, b.n+int64(n))
	}
	if !bytes.Equal(got[:], want) {
		return b.n + sha256.Size, "", fmt.Errorf("%w: SHA-256 mismatch: the file was changed or damaged after it was written", ErrBackup)
	}
	if _, err := b.br.ReadByte(); err == nil {
		return b.n + sha256.Size, "", fmt.Errorf("%w: data after the checksum (two files joined?)", ErrBackup)
	}
	return b.n + sha256.Size, hex.EncodeToString(want), nil
}

// VerifyBackup reads a whole backup and checks it: the trailer's SHA-256,
// the engine stream's own checksum and structure, and that the header
// agrees with the data.
func VerifyBackup(r io.Reader) (BackupInfo, error) {
	b, err := OpenBackup(r)
	if err != nil {
		return BackupInfo{}, err
	}
	info := BackupInfo{Header: b.Header}
	info.Stream, err = engine.ScanStream(b)
	if err != nil {
		// A damaged byte shows as a bad engine stream before the trailer
		// is reached; say which it is when the trailer is readable.
		if _, _, ferr := b.Finish(); ferr != nil {
			return info, ferr
		}
		return info, fmt.Errorf("%w: %w", ErrBackup, err)
	}
	if info.Bytes, info.SHA256, err = b.Finish(); err != nil {
		return info, err
	}
	if info.Stream.Meta.Applied != b.Header.AppliedIndex {
		return info, fmt.Errorf("%w: header says applied index %d, the data holds %d", ErrBackup, b.Header.AppliedIndex, info.Stream.Meta.Applied)
	}
	if err := headerAgrees(b.Header, info.Stream.Meta); err != nil {
		return info, err
	}
	return info, nil
}

// headerAgrees checks the settings a backup's header shows (inspect
// prints them, restore writes them into node.json) against its data's: a
// header rewritten with a valid checksum made inspect show a bucket width
// and scope the state did not have. A header of a release that wrote no
// scope leaves it empty.
func headerAgrees(h BackupHeader, m engine.Meta) error {
	if h.BucketWidthMs != int64(m.Width) {
		return fmt.Errorf("%w: header says bucket width %d ms, the data holds %d ms", ErrBackup, h.BucketWidthMs, int64(m.Width))
	}
	if h.Scope != "" && h.Scope != m.Scope.String() {
		return fmt.Errorf("%w: header says scope %q, the data holds %q", ErrBackup, h.Scope, m.Scope.String())
	}
	return nil
}

// RestoreOptions say which node a restored data dir is for.
type RestoreOptions struct {
	NodeID string
	// RaftAddr is the raft address the node will advertise: the address
	// of the one-node configuration written into the data dir.
	RaftAddr string
	Logger   *slog.Logger
	// Now is the time the restore runs at (zero: time.Now), which sets
	// how far above the backup's applied index the restored log starts
	// (RestoredIndex).
	Now time.Time
	// Offline is engine.Options.Offline for the restored store: how the
	// stop on a failed write of its files words the restore's failure.
	Offline string
}

// The raft log of a restored data dir goes on far above the backup's
// applied index J: the lost cluster went on after the backup and gave out
// fencing tokens (the raft index of each claim) above J. Continued at J+1,
// the restored cluster gave out the same numbers again, so tokens of one
// scope no longer ordered by attempt across the restore, and a fence
// downstream that had seen a lost attempt's token refused the new ones
// while taking an older one. No cluster appends anywhere near
// restoreIndexRate entries a second (a claim, a batch, a no-op is one
// each), so the restored log starts at restoreIndexRate times the
// restoring machine's clock in Unix seconds, plus restoreMarginSeconds'
// worth (for a clock behind the lost cluster's), and at least that margin
// above J: above every index a cluster started from scratch (at index 1)
// or by an earlier restore (on this formula) can have reached by now.
//
// It was J plus restoreIndexRate per second since the backup's cluster
// time, at least an hour's worth: relative to J, so a second restore from
// an older backup (the newer one turned out to hold the damage) within the
// hour started below the first restored cluster's log, and gave out its
// tokens again, byte for byte (same secret, same scope: an operator walk).
// A clock reading counts for every backup alike.
const (
	restoreIndexRate     = 1_000_000
	restoreMarginSeconds = 3600
	// restoreMaxUnixSeconds caps the clock's part (a clock centuries
	// ahead): 1e10 seconds is the year 2286, and 1e16 an index still far
	// from overflowing (and exact as a float64 metric).
	restoreMaxUnixSeconds = 10_000_000_000
)

// RestoredIndex is the index a restore of a backup of applied index
// applied starts the raft log and the state at when it runs at now.
func RestoredIndex(applied uint64, now time.Time) uint64 {
	margin := uint64(restoreMarginSeconds) * restoreIndexRate
	if applied > math.MaxUint64/2 { // never in practice: keep the index sane
		return applied
	}
	at := applied + margin
	if secs := now.Unix(); secs > 0 {
		if c := uint64(min(secs, restoreMaxUnixSeconds))*restoreIndexRate + margin; c > at {
			at = c
		}
	}
	return at
}

// RestoreBackup builds, in the empty directory dir, the data dir of a
// one-node cluster holding the backup's state, from which Open starts. The
// caller builds into a temporary directory and renames it when this
// returns nil: on error dir holds a partial build.
//
// The state's applied index is first moved up from the backup's J to
// RestoredIndex R, far above J, so that fencing tokens go on above the
// lost cluster's. The raft log must continue above R: a fresh
// BootstrapCluster would start it at 1, and the FSM would skip every entry
// up to R as already applied. So dir gets what a node that had taken its
// own snapshot at R would have: a snapshot marker at index R, term 1,
// holding the one-node configuration, and a stable store whose current
// term is 1. raft then starts with its last index at R.
func RestoreBackup(r io.Reader, dir string, o RestoreOptions) (BackupInfo, error) {
	log := o.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if o.NodeID == "" || o.RaftAddr == "" {
		return BackupInfo{}, fmt.Errorf("%w: restore needs a node id and a raft address", ErrConfig)
	}
	b, err := OpenBackup(r)
	if err != nil {
		return BackupInfo{}, err
	}
	info := BackupInfo{Header: b.Header}
	db, err := engine.Open(filepath.Join(dir, "fsm"), engine.Options{Logger: log, Offline: o.Offline})
	if err != nil {
		return info, err
	}
	defer func() {
		if db != nil {
			db.Close()
		}
	}()
	if err := db.RestoreChecked(b); err != nil {
		if !errors.Is(err, engine.ErrSnapshot) {
			// Not the stream's fault: the data dir's (writing its
			// tables: a full disk, a quota, an I/O error). Called a bad
			// backup, a good one would be thrown away.
			return info, fmt.Errorf("raftfsm: restore: %w", err)
		}
		if _, _, ferr := b.Finish(); ferr != nil {
			return info, ferr
		}
		return info, fmt.Errorf("%w: %w", ErrBackup, err)
	}
	if info.Bytes, info.SHA256, err = b.Finish(); err != nil {
		return info, err
	}
	meta := db.Meta()
	if meta.Applied != b.Header.AppliedIndex {
		return info, fmt.Errorf("%w: header says applied index %d, the data holds %d", ErrBackup, b.Header.AppliedIndex, meta.Applied)
	}
	if err := headerAgrees(b.Header, meta); err != nil {
		return info, err
	}
	now := o.Now
	if now.IsZero() {
		now = time.Now()
	}
	// The state's applied index moves up with the log (RestoredIndex): the
	// raft snapshot below stands for this state, at this index.
	if at := RestoredIndex(meta.Applied, now); at > meta.Applied {
		if err := db.Begin().Commit(at); err != nil {
			return info, fmt.Errorf("raftfsm: restore: %w", err)
		}
		if err := db.Sync(); err != nil {
			return info, fmt.Errorf("raftfsm: restore: %w", err)
		}
		meta = db.Meta()
	}
	info.Stream.Meta = meta
	// Bounded: the backup may hold GBs of them (damaged, or hostile), and
	// every one was held in memory at once. Every named value counts, as
	// in inspect's bound: the restored node reads the others (key use)
	// whole at start.
	named, err := db.NamedWithin("")
	if errors.Is(err, engine.ErrSnapshot) {
		return info, fmt.Errorf("%w: %w", ErrBackup, err)
	}
	if err != nil {
		return info, fmt.Errorf("raftfsm: restore: read the members' addresses: %w", err)
	}
	for name, v := range named {
		var m NodeInfo
		if strings.HasPrefix(name, "node/") && json.Unmarshal(v, &m) == nil && m.ID != "" {
			info.Members = append(info.Members, m)
		}
	}

	stable, err := raftboltdb.New(raftboltdb.Options{Path: filepath.Join(dir, "raft.db")})
	if err != nil {
		return info, fmt.Errorf("raftfsm: restore: create raft log: %w", err)
	}
	defer stable.Close()
	logStore, err := openLogStore(dir, stable, log)
	if err != nil {
		return info, fmt.Errorf("raftfsm: restore: %w", err)
	}
	defer logStore.Close()
	snaps, err := newSnapshotStore(dir, db, log)
	if err != nil {
		return info, fmt.Errorf("raftfsm: restore: create snapshot store: %w", err)
	}
	_, trans := raft.NewInmemTransport(raft.ServerAddress(o.RaftAddr))
	defer trans.Close()
	conf := raft.Configuration{Servers: []raft.Server{{
		ID: raft.ServerID(o.NodeID), Address: raft.ServerAddress(o.RaftAddr), Suffrage: raft.Voter,
	}}}
	const term = 1
	if err := stable.SetUint64([]byte("CurrentTerm"), term); err != nil {
		return info, fmt.Errorf("raftfsm: restore: write raft term: %w", err)
	}
	sink, err := snaps.Create(raft.SnapshotVersionMax, meta.Applied, term, conf, meta.Applied, trans)
	if err != nil {
		return info, fmt.Errorf("raftfsm: restore: create raft snapshot: %w", err)
	}
	if err := writeMarker(sink, meta.Applied); err != nil {
		sink.Cancel()
		return info, fmt.Errorf("raftfsm: restore: write raft snapshot: %w", err)
	}
	if err := sink.Close(); err != nil {
		return info, fmt.Errorf("raftfsm: restore: write raft snapshot: %w", err)
	}
	err = db.Close()
	db = nil
	if err != nil {
		return info, fmt.Errorf("raftfsm: restore: close state: %w", err)
	}
	log.Info("restored a backup into a new data dir", "dir", dir, "applied-index", meta.Applied, "records", b.Header.Records)
	return info, nil
}

// backupPeekWindow is how much of a backup's end PeekBackupMembers reads.
const backupPeekWindow = 4 << 20

// PeekBackupMembers finds, without reading the whole backup, the members
// its state records (what RestoreBackup's Members are once the whole file
// is read): their entries (named meta values "node/<id>") sort after every
// record, so they lie in the file's last bytes. It reads the last 4 MiB
// of r (size bytes long) and picks out the entries there, unchecked: the
// file is not verified, an entry split across a frame boundary is missed,
// and nil is a good answer ("none seen"). A restore probes these before it
// reads a backup of GBs, so that an operator is told at once that the
// cluster is running; RestoreBackup's Members stay the checked answer.
//
// Only the last run of entries stored one right after the other counts:
// the state's own entries are consecutive pairs, after every record and
// after the other meta values, while bytes shaped as an entry inside a
// record's value (a tenant's stored response, on a node without
// encryption at rest) are followed by the rest of that record and the
// pairs after it. Counted, such a forged entry could have sent the probe
// to any address and refused a restore as "that cluster is running".
func PeekBackupMembers(r io.ReaderAt, size int64) []NodeInfo {
	off := max(size-backupPeekWindow, 0)
	buf := make([]byte, size-off)
	n, _ := r.ReadAt(buf, off)
	// Every member entry sorts before every principal's key count ("q/"
	// and the principal's name, in plain text even with encryption at
	// rest): bytes shaped as an entry inside a name would be the last run.
	// Nothing from the first such pair on counts.
	buf = buf[:firstQuotaPair(buf[:n])]
	pat := []byte("m/x/node/")
	var out []NodeInfo
	runEnd := -1 // where the last entry taken ends: the next must start there
	for i := 0; i < len(buf); {
		j := bytes.Index(buf[i:], pat)
		if j < 0 {
			break
		}
		j += i
		i = j + 1
		if j == 0 {
			continue
		}
		// The stream's pair: uvarint key length (one byte: ids are at most
		// 64 bytes), key, uvarint value length, value (JSON NodeInfo).
		kl := int(buf[j-1])
		if kl <= len(pat) || kl >= 0x80 || j+kl > len(buf) {
			continue
		}
		vl, w := binary.Uvarint(buf[j+kl:])
		if w <= 0 || vl > 64<<10 || uint64(len(buf)-j-kl-w) < vl {
			continue
		}
		var m NodeInfo
		end := j + kl + w + int(vl)
		if json.Unmarshal(buf[j+kl+w:end], &m) != nil || m.ID == "" || m.ID != string(buf[j+len(pat):j+kl]) {
			continue
		}
		if j-1 != runEnd || (len(out) > 0 && m.ID <= out[len(out)-1].ID) {
			out = out[:0] // a new run (keys within one ascend)
		}
		out = append(out, m)
		runEnd, i = end, end
	}
	return out
}

// firstQuotaPair is where in buf the first pair of a principal's key count
// (engine's "q/" key: uvarint key length, "q/", uvarint name length, the
// name) seems to start, len(buf) when none does. Bytes that only look like
// one (inside a stored response) end the peek early: it then finds fewer
// members or none, which the check on the restored state makes good.
func firstQuotaPair(buf []byte) int {
	for i := 0; i < len(buf); {
		j := bytes.Index(buf[i:], []byte("q/"))
		if j < 0 {
			break
		}
		j += i
		i = j + 1
		pl, pw := binary.Uvarint(buf[j+2:])
		if pw <= 0 || pl == 0 || j >= 10 && buf[j-10] == partition.KeyPrefix && buf[j-1] == '/' {
			// A bucket's quota key ("b", 8 bytes of bucket, "/q/", the
			// name) sorts before the members: its "/" read as a key length.
			continue
		}
		for w := 1; w <= 2 && w <= j; w++ {
			if kl, kw := binary.Uvarint(buf[j-w : j]); kw == w && kl == 2+uint64(pw)+pl {
				return j - w
			}
		}
	}
	return len(buf)
}
