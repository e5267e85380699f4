package raftfsm

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"sort"
)

// raft-wal opens its newest segment by reading its frames up to the first
// header it cannot read, and takes that for the end of the log: a write
// torn by a crash. A flipped bit in a frame header in the middle of the
// segment so cut the log there, silently, dropping every entry after it,
// entries this node had stored and acknowledged (an operator walk: a flip
// 50 KB into a segment of 185 KB cut a log of 936 entries at 280). A torn
// write cannot be followed by a whole batch: raft-wal syncs each batch
// before it writes the next. tornTail finds such a batch after the point
// where raft-wal stops, and the log is then refused as damaged.

// raft-wal's segment format (segment/format.go).
const (
	walFileHeader  = 32
	walFrameHeader = 8
	walFrameEntry  = 1
	walFrameIndex  = 2
	walFrameCommit = 3
	walMaxEntry    = 64 << 20
)

var walCRC = crc32.MakeTable(crc32.Castagnoli)

// tailState says what raft-wal will make of the newest segment in dir:
// damaged, why it is damaged before its end ("" when it is whole or only
// its end is torn, or it cannot be read: raft-wal says so); torn, what a
// crash left unsynced at its end, which raft-wal leaves out as it opens
// ("" when nothing), for the log.
func tailState(dir string) (damaged, torn string) {
	segs, _ := filepath.Glob(filepath.Join(dir, "*.wal"))
	if len(segs) == 0 {
		return "", ""
	}
	sort.Strings(segs) // fixed-width base indexes
	tail := segs[len(segs)-1]
	b, err := readWritten(tail)
	if err != nil {
		return "", ""
	}
	stop := walStop(b)
	if off, ok := wholeBatchAfter(b, stop); ok {
		return fmt.Sprintf("%s cannot be read past byte %d, but holds a whole batch of entries at byte %d, written and synced after it: the bytes before are damaged, not a write torn by a crash",
			filepath.Base(tail), stop, off), ""
	}
	keep, first, dropped := tornEnd(b, stop)
	if dropped == 0 {
		return "", ""
	}
	return "", fmt.Sprintf("%s holds %d entries from index %d after its last synced batch (byte %d): a write cut short by a crash (this one or an earlier one, until an append writes over them), never acknowledged and not part of the log",
		filepath.Base(tail), dropped, first, keep)
}

// tornEnd is where raft-wal's recovery of a segment's tail (its
// Writer.recoverTail) keeps b up to, reading frames up to stop, and the
// entry frames it drops after that point (the index of the first, and how
// many): entries after the last commit frame, or the last batch when its
// commit's checksum does not cover it. Frames left over from a torn write
// that a later append wrote over in part are not counted: their indexes do
// not follow the kept entries'.
func tornEnd(b []byte, stop int) (keep int, first uint64, dropped int) {
	type commit struct{ off, entries int }
	var prev, last *commit
	var entries []int
	for off := walFileHeader; off < stop; {
		typ, next, ok := frame(b, off, false)
		if !ok {
			break
		}
		switch typ {
		case walFrameEntry:
			entries = append(entries, off)
		case walFrameCommit:
			prev, last = last, &commit{off, len(entries)}
		}
		off = next
	}
	kept := 0
	switch {
	case last == nil:
		keep = walFileHeader
	case last.entries < len(entries):
		keep, kept = last.off+walFrameHeader, last.entries
	default:
		from := 0 // the first batch's checksum covers the file header
		if prev != nil {
			from = prev.off + walFrameHeader
		}
		if crc32.Checksum(b[from:last.off], walCRC) == binary.LittleEndian.Uint32(b[last.off+4:last.off+8]) {
			return last.off + walFrameHeader, 0, 0
		}
		keep = walFileHeader
		if prev != nil {
			keep, kept = prev.off+walFrameHeader, prev.entries
		}
	}
	if kept == len(entries) {
		return keep, 0, 0
	}
	// An entry frame's payload starts with the entry's index (raft-wal's
	// binary codec).
	index := func(off int) uint64 {
		i, _ := binary.Uvarint(b[off+walFrameHeader:])
		return i
	}
	first = index(entries[kept])
	if kept > 0 && first != index(entries[kept-1])+1 {
		return keep, 0, 0
	}
	return keep, first, len(entries) - kept
}

// readWritten reads path up to the first MiB that is all zeros (the
// preallocated rest of a segment) or its end.
func readWritten(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []byte
	chunk := make([]byte, 1<<20)
	for {
		n, err := io.ReadFull(f, chunk)
		if n > 0 && bytes.Count(chunk[:n], []byte{0}) == n {
			return out, nil
		}
		out = append(out, chunk[:n]...)
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return out, nil
		}
		if err != nil {
			return nil, err
		}
	}
}

// frame reads the frame header at off in b: its type and the offset of the
// next frame; ok false where raft-wal's reading stops (strict: also where
// raft-wal never writes, a non-zero reserved byte or an entry over its
// maximum, for the search of a whole batch).
func frame(b []byte, off int, strict bool) (typ byte, next int, ok bool) {
	if off+walFrameHeader > len(b) {
		return 0, 0, false
	}
	h := b[off : off+walFrameHeader]
	if strict && (h[1] != 0 || h[2] != 0 || h[3] != 0) {
		return 0, 0, false
	}
	n := int(binary.LittleEndian.Uint32(h[4:8]))
	switch h[0] {
	case walFrameCommit:
		return h[0], off + walFrameHeader, true
	case walFrameEntry, walFrameIndex:
		if strict && n > walMaxEntry {
			return 0, 0, false
		}
		next = off + walFrameHeader + n + (walFrameHeader-n%walFrameHeader)%walFrameHeader
		if next > len(b) {
			return 0, 0, false
		}
		return h[0], next, true
	}
	return 0, 0, false
}

// walStop is where raft-wal's reading of b stops.
func walStop(b []byte) int {
	off := walFileHeader
	for {
		_, next, ok := frame(b, off, false)
		if !ok {
			return off
		}
		off = next
	}
}

// wholeBatchAfter finds, after from, a commit frame followed by entries
// and a commit frame whose checksum covers them: a batch written whole.
func wholeBatchAfter(b []byte, from int) (int, bool) {
	start := from + (walFrameHeader-from%walFrameHeader)%walFrameHeader
	for c1 := start; c1+walFrameHeader <= len(b); c1 += walFrameHeader {
		if typ, _, ok := frame(b, c1, true); !ok || typ != walFrameCommit {
			continue
		}
		off, entries := c1+walFrameHeader, 0
		for {
			typ, next, ok := frame(b, off, true)
			if !ok {
				break
			}
			if typ == walFrameCommit {
				want := binary.LittleEndian.Uint32(b[off+4 : off+8])
				if entries > 0 && crc32.Checksum(b[c1+walFrameHeader:off], walCRC) == want {
					return c1 + walFrameHeader, true
				}
				break
			}
			entries++
			off = next
		}
	}
	return 0, false
}
