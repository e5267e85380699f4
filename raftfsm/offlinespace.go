package raftfsm

import (
	"fmt"

	"github.com/idem-store/idem/engine"
)

// offlineSlack is what an offline command writes into a data dir besides
// the raft log's segment and the state's tables: Pebble's WAL files (each
// preallocated to about 1.1 times the 4 MiB memtable; a restore left three
// of them, 13 MiB), its MANIFEST and OPTIONS, raft.db and the snapshot
// marker.
const offlineSlack = 16 << 20

// SpaceError is an offline command's refusal to start on a disk without
// room for what it writes: it failed midway with a bare "no space left on
// device" instead, an error away from saying how much room it needed.
type SpaceError struct {
	What string // "the restore", "the recovery"
	Dir  string // the data dir
	Need uint64
	Free uint64
	// Parts says what Need is made of.
	Parts string
}

func (e *SpaceError) Error() string {
	return fmt.Sprintf("not enough free disk space for %s: the disk holding %s has %s free, and %s needs %s (%s); nothing was written: free at least %s more on that disk, or use a data dir on a larger one (docs/DISK.md)",
		e.What, e.Dir, sizeText(e.Free), e.What, sizeText(e.Need), e.Parts, sizeText(e.Need-e.Free))
}

// RestoreSpace is the free space `idem snapshot restore` needs on the disk
// of its data dir for a backup file of backupBytes, and what that is made
// of: the raft log's first segment, which raft-wal preallocates whole, the
// state's tables (at most about the backup's size: the stream is
// uncompressed), and offlineSlack.
func RestoreSpace(backupBytes int64) (uint64, string) {
	b := uint64(max(backupBytes, 0))
	return segmentSize + b + offlineSlack, fmt.Sprintf("the raft log's first segment file, %s, preallocated whole; the backup's %s of state; %s for the state store's own files",
		sizeText(segmentSize), sizeText(b), sizeText(offlineSlack))
}

// RecoverSpace is the free space `idem recover --yes` needs on the disk of
// the data dir: the compaction into a snapshot starts a new raft log
// segment, preallocated whole, before the old one is removed, and the
// state store writes its WAL.
func RecoverSpace() (uint64, string) {
	return segmentSize + offlineSlack, fmt.Sprintf("a new raft log segment file, %s, preallocated whole before the old one is removed; %s for the state store's own files",
		sizeText(segmentSize), sizeText(offlineSlack))
}

// CheckSpace returns a *SpaceError when the filesystem that holds dir has
// less than need bytes free. dir need not exist yet: the nearest directory
// above it that does is asked. A free space that cannot be read is not a
// refusal: the command then meets the disk as it did before.
func CheckSpace(what, dir string, need uint64, parts string) error {
	free, _, err := engine.DiskSizeNear(dir)
	if err != nil || free >= need {
		return nil
	}
	return &SpaceError{What: what, Dir: dir, Need: need, Free: free, Parts: parts}
}
