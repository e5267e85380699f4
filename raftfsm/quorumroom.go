package raftfsm

import (
	"fmt"
	"strings"
	"time"

	"github.com/hashicorp/raft"
)

// VotersFullError refuses a client write on a leader with room on its own
// disk while the voters whose disks have room are fewer than a quorum: the
// others refuse to store client entries (diskGuard.admitAppend), so the
// write could not commit until space is freed on them. Nothing was
// proposed.
//
// Only the leader's disk decided 507: with both followers of three full, a
// write was proposed, never committed, and its request waited until space
// was freed on a follower (69 s on real processes), or until the client
// gave up; a follower forwarding it answered
// 503 "leadership changed while the request was in flight" after 3 s,
// though no leadership had changed. The leader learns its followers' disks
// from its health checks (twice a second), and refuses such a write at
// once, until a quorum has room again.
type VotersFullError struct {
	// Full names each voter whose disk is under its threshold, with its
	// free space ("n2 (104853504 bytes free on /data, under 134217728)");
	// Room the voters with room, this leader among them.
	Full, Room []string
	// Voters and Quorum are the configuration's voters and its quorum.
	Voters, Quorum int
	term           uint64
	nearly         bool // a voter of Full is nearly full (refusesWrites)
	stopped        bool // a voter of Full has its raft log stopped
}

func (e *VotersFullError) Error() string { return "raftfsm: storage full: " + e.Detail() }

// Is makes a VotersFullError an ErrStorageFull: the write was refused for
// lack of disk space, and nothing changed.
func (e *VotersFullError) Is(target error) bool { return target == ErrStorageFull }

// Detail is the problem's detail: which voters are full, and what takes
// writes again.
func (e *VotersFullError) Detail() string {
	below := "below their minimum free space (--min-free-disk),"
	switch {
	case e.stopped:
		below = "too full to store the entries they are sent,"
	case e.nearly:
		below = "below their minimum free space (--min-free-disk), or too near it to apply the entries they are sent,"
	}
	const after = "so the write was refused and nothing changed; reads still work, and writes are accepted again by themselves once space is freed on %s (docs/DISK.md)"
	if e.Voters == 1 && len(e.Full) == 1 {
		// A one-node store: no quorum to speak of, and no voter with room
		// to name ("only none have room" read as a garbled message).
		below = strings.NewReplacer("their", "its", "they are", "it is").Replace(below)
		return fmt.Sprintf("the disk of %s is %s "+after, e.Full[0], below, enoughOf(1, e.Full))
	}
	room := "only " + andList(e.Room) + " " + hasHave(len(e.Room)) + " room"
	if len(e.Room) == 0 {
		room = "none has room"
	}
	return fmt.Sprintf("the disks of %s are %s so they take no writes; a write must be stored by a quorum of the voters (%d of %d), and %s, "+after,
		andList(e.Full), below, e.Quorum, e.Voters, room, enoughOf(e.Quorum-len(e.Room), e.Full))
}

func hasHave(n int) string {
	if n == 1 {
		return "has"
	}
	return "have"
}

// enoughOf is "n2", "n2 or n3", or "2 of n2, n3 and n4".
func enoughOf(need int, full []string) string {
	ids := make([]string, len(full))
	for i, f := range full {
		ids[i], _, _ = strings.Cut(f, " ")
	}
	if need <= 1 {
		return orList(ids)
	}
	return fmt.Sprintf("%d of %s", need, andList(ids))
}

func andList(s []string) string { return joinList(s, " and ") }
func orList(s []string) string  { return joinList(s, " or ") }

func joinList(s []string, last string) string {
	switch len(s) {
	case 0:
		return "none"
	case 1:
		return s[0]
	}
	return strings.Join(s[:len(s)-1], ", ") + last + s[len(s)-1]
}

// votersRoom refuses client write op while the leader's last health
// checks of this term found fewer voters than a quorum with room on their
// disks (noteVoterRoom). A voter the checks could not read is counted as
// having room: only a disk a voter says is full refuses here.
func (n *Node) votersRoom(op Op) error {
	if !clientWrite(op) {
		return nil
	}
	v := n.roomView.Load()
	if v == nil || v.term != n.term() {
		return nil
	}
	return v
}

// noteVoterRoom counts, after a round of health checks, the voters whose
// disks have room, and keeps the verdict for votersRoom: a VotersFullError
// while they are fewer than a quorum, nil otherwise. A voter is full when
// its last answer this term, within silentAfter, says its disk is under
// its threshold (it then takes no client entries); this leader, when its
// own disk is (admit refuses then anyway).
func (n *Node) noteVoterRoom() {
	f := n.raft.GetConfiguration()
	if f.Error() != nil {
		return
	}
	now, term := time.Now(), n.term()
	e := &VotersFullError{term: term}
	n.peers.mu.Lock()
	if n.peers.term != term {
		n.peers.mu.Unlock()
		return // the round measured another term: the next one decides
	}
	for _, s := range f.Configuration().Servers {
		if s.Suffrage != raft.Voter {
			continue
		}
		e.Voters++
		id := string(s.ID)
		if id == n.self.ID {
			if n.disk.full.Load() {
				e.Full = append(e.Full, fmt.Sprintf("%s (%d bytes free on %s, under %d)", id, n.disk.free.Load(), n.disk.dir, n.disk.fullBelow))
			} else {
				e.Room = append(e.Room, id)
			}
			continue
		}
		h := n.peers.byID[id]
		if h != nil && h.err == "" && !h.answeredAt.IsZero() && now.Sub(h.answeredAt) <= silentAfter && refusesWrites(h.diskFull) {
			d := h.diskFull
			switch {
			case d.RaftLogStopped:
				e.Full = append(e.Full, fmt.Sprintf("%s (its raft log is stopped: no room for its next segment, %d bytes free on %s)", id, d.FreeBytes, d.DataDir))
				e.stopped = true
			case d.FreeBytes < d.FullBelowBytes:
				e.Full = append(e.Full, fmt.Sprintf("%s (%d bytes free on %s, under %d)", id, d.FreeBytes, d.DataDir, d.FullBelowBytes))
			default:
				e.Full = append(e.Full, fmt.Sprintf("%s (%d bytes free on %s, %d needed to apply the entries it is sent)", id, d.FreeBytes, d.DataDir, d.AppendsRefusedNeedBytes))
				e.nearly = true
			}
			continue
		}
		e.Room = append(e.Room, id)
	}
	n.peers.mu.Unlock()
	e.Quorum = e.Voters/2 + 1
	if e.Voters == 0 || len(e.Room) >= e.Quorum {
		if old := n.roomView.Swap(nil); old != nil && old.term == term && e.Voters > 1 {
			n.log.Info("a quorum of the voters has room on their disks again: client writes are accepted again", "voters-with-room", strings.Join(e.Room, ","), "quorum", e.Quorum)
		}
		return
	}
	old := n.roomView.Swap(e)
	if e.Voters == 1 {
		// A one-node store: its own "disk space low" line says it all,
		// and a line of voters and quorums beside it only puzzled.
		return
	}
	remind := n.roomLog.Allow(diskRemind)
	if remind || old == nil || old.term != term {
		n.log.Warn("fewer voters than a quorum have room on their disks: this leader refuses client writes with 507 storage_full until space is freed on enough of them (they take no writes while under --min-free-disk)",
			"full", strings.Join(e.Full, ", "), "voters-with-room", strings.Join(e.Room, ","), "quorum", e.Quorum)
	}
}

// refusesWrites says whether a voter whose status says d takes no
// client entries: its disk is under its storage-full threshold, or it is
// nearly full and refuses the entries it is sent with none left to apply
// (admitAppend). A follower refusing appends only until its applies catch
// up (above the threshold), or a snapshot, goes on by itself and is not
// counted. One that has applied all it holds refuses the same entries at
// every try (raft resends them, up to 512 at a time, and never fewer):
// with two such followers of three, the leader proposed every write and
// none committed, each waiting until it gave up (a CommitWaitError),
// while the followers' status said they would go on by themselves.
//
// A voter whose raft log is stopped (the disk filled as it made the next
// segment: with --min-free-disk 0, whose threshold is 0) takes no entries
// at all until it has room again, and is counted too.
func refusesWrites(d *DiskFull) bool {
	if d != nil && d.RaftLogStopped {
		return true
	}
	if d == nil || d.FullBelowBytes == 0 {
		return false
	}
	return d.FreeBytes < d.FullBelowBytes || d.UnappliedBytes == 0 && d.AppendsRefusedNeedBytes > d.FreeBytes
}
