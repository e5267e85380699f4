package raftfsm

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"runtime"

	"github.com/hashicorp/raft"
)

// Each raft log entry carries a checksum of its own, in front of its
// Extensions (which neither raft nor idem uses otherwise): raft-wal checks
// only the last batch of its newest segment, when it opens, and reads every
// other entry back unchecked. A flipped bit in an entry the node had
// already applied went unseen on that node, and its leader sent the entry
// as read to a follower catching up, which applied it: that follower then
// served, and as leader replayed to retries, a stored response that was
// not the one acknowledged. A damaged entry is now refused where it is
// read, so it is neither applied nor sent.
//
// The checksum is added as an entry is stored and removed as it is read, so
// raft, the followers and the log cache see the entry as it was proposed.
// Entries written before (empty Extensions) are read unchecked.

var entryCheckMagic = [4]byte{0, 'i', 'c', 'k'}

const entryCheckLen = 8 // magic, then CRC-32C (big-endian)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// errEntryDamaged is an entry whose bytes do not match its checksum.
var errEntryDamaged = errors.New("raftfsm: raft log entry damaged")

// entryChecksum covers what raft and the state machine use of an entry:
// its index, term, type, data and (the caller's) extensions.
func entryChecksum(l *raft.Log, ext []byte) uint32 {
	var b [17]byte
	binary.BigEndian.PutUint64(b[0:], l.Index)
	binary.BigEndian.PutUint64(b[8:], l.Term)
	b[16] = byte(l.Type)
	h := crc32.New(castagnoli)
	h.Write(b[:])
	h.Write(l.Data)
	h.Write(ext)
	return h.Sum32()
}

// sealEntries returns copies of logs carrying their checksums; logs are
// not changed (raft and the log cache keep them).
func sealEntries(logs []*raft.Log) []*raft.Log {
	out := make([]*raft.Log, len(logs))
	for i, l := range logs {
		c := *l
		ext := make([]byte, entryCheckLen+len(l.Extensions))
		copy(ext, entryCheckMagic[:])
		binary.BigEndian.PutUint32(ext[4:], entryChecksum(l, l.Extensions))
		copy(ext[entryCheckLen:], l.Extensions)
		c.Extensions = ext
		out[i] = &c
	}
	return out
}

// openEntry checks l, read from the log, against its checksum and removes
// it. An entry without one is an older idem's and is taken as read.
func openEntry(l *raft.Log) error {
	if len(l.Extensions) == 0 {
		return nil
	}
	if len(l.Extensions) < entryCheckLen || !bytes.Equal(l.Extensions[:4], entryCheckMagic[:]) {
		return fmt.Errorf("%w: entry %d has no valid checksum header", errEntryDamaged, l.Index)
	}
	want := binary.BigEndian.Uint32(l.Extensions[4:entryCheckLen])
	ext := l.Extensions[entryCheckLen:]
	if len(ext) == 0 {
		ext = nil
	}
	if got := entryChecksum(l, ext); got != want {
		return fmt.Errorf("%w: entry %d (term %d) does not match its checksum (%08x, want %08x)", errEntryDamaged, l.Index, l.Term, got, want)
	}
	l.Extensions = ext
	return nil
}

// newRaft starts raft on the node's stores. raft reads the log's entries
// above the newest snapshot as it starts (for their configurations) and
// panicked on one it could not read, with a goroutine dump and raft-wal's
// bare text ("WAL is corrupt: corrupt frame header with unknown type 183",
// "failed to read segment index: EOF" for a sealed segment damaged or cut
// short, or the entry's checksum). The panic is in NewRaft's own goroutine,
// before raft starts any of its own: such a log is refused here with what
// to do, naming the first entry that does not read.
func (n *Node) newRaft(rc *raft.Config, logs raft.LogStore, trans raft.Transport) (r *raft.Raft, err error) {
	defer func() {
		p := recover()
		if p == nil {
			return
		}
		if _, ok := p.(runtime.Error); ok {
			panic(p)
		}
		if _, ok := p.(error); !ok {
			panic(p)
		}
		from, last, _ := n.logAboveSnapshot()
		i, ierr := unreadableEntry(n.logStore, from+1, last)
		if ierr == nil {
			panic(p) // not the log's
		}
		r, err = nil, fmt.Errorf("raftfsm: the raft log in %s cannot be read at entry %d (%w): a segment file of it is damaged or cut short, and this node cannot start from it; nothing was changed. %s",
			n.logStore.path, i, ierr, lostLogAdvice(n.cfg))
	}()
	n.logStore.starting.Store(true)
	defer n.logStore.starting.Store(false)
	r, err = raft.NewRaft(rc, n.disk.gate(n.fsm, n.stop), logs, loudStable{n.stable, n.cfg.Logger, n.cfg.DataDir}, n.snaps, trans)
	if err != nil {
		return nil, fmt.Errorf("raftfsm: start raft: %w", err)
	}
	return r, nil
}

// logAboveSnapshot is the range of log entries raft reads as it starts:
// from the newest snapshot's index (0 without one) up to last; ok false
// when the log's end cannot be read (raft says why).
func (n *Node) logAboveSnapshot() (from, last uint64, ok bool) {
	last, err := n.logStore.LastIndex()
	if err != nil {
		return 0, 0, false
	}
	from, _, _ = n.snaps.newest()
	return from, last, true
}

// unreadableEntry reads the entries of s from from (or its first) to to
// and returns the first that does not read, and why.
func unreadableEntry(s *LogStore, from, to uint64) (uint64, error) {
	first, err := s.FirstIndex()
	if err != nil || first == 0 {
		return 0, nil
	}
	for i := max(from, first); i <= to; i++ {
		var l raft.Log
		if err := s.getLog(i, &l, false); err != nil {
			return i, err
		}
	}
	return 0, nil
}

// damagedLogAdvice is what to do with a running node whose log holds a
// damaged entry. A leader cannot send it to a follower that needs it, so
// that follower stays behind, and removing the leader is then refused for
// want of a healthy quorum (an operator walk): the leadership moves first,
// and the followers catch up from the new leader's log.
func damagedLogAdvice(cfg Config) string {
	return fmt.Sprintf("If this node leads, first hand the leadership to another voter (idem cluster transfer-leadership --addr %s): a follower that needs the entry then catches up from the new leader. %s",
		cfg.HTTPAdvertise, lostStateAdvice(cfg))
}
