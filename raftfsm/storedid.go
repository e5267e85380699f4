package raftfsm

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/hashicorp/raft"
)

// StoredIDError refuses a start under an id that the data dir's stored
// raft configuration shows is not its own (Config.CheckStoredID): the
// configuration lists another member at this node's raft address, or is
// a one-node cluster of another member, and never listed NodeID. Started
// as it was, the node ran outside its configuration, never voting nor
// leading, and its caller recorded the wrong id as the data dir's.
type StoredIDError struct {
	NodeID string // the id the node was started with
	Stored string // the id the configuration holds for this data dir
	// StoredAddr is Stored's raft address in the configuration; AtOwnAddr
	// whether it is this node's own.
	StoredAddr string
	AtOwnAddr  bool
}

func (e *StoredIDError) Error() string {
	why := "its raft configuration is a one-node cluster of " + e.Stored + " (at raft address " + e.StoredAddr + ")"
	if e.AtOwnAddr {
		why = "its raft configuration lists this node's raft address " + e.StoredAddr + " as member " + e.Stored + "'s"
	}
	return fmt.Sprintf("raftfsm: this data dir is not node %s's: %s, and no configuration it holds ever listed %s; nothing was changed. Start it as %s", e.NodeID, why, e.NodeID, e.Stored)
}

// checkStoredID refuses, when cfg.CheckStoredID is set, a NodeID that the
// stored configuration shows is not this data dir's (StoredIDError). The
// id is determined only where the configuration leaves no doubt: the
// member listed at this node's raft address, or the only member of a
// one-node configuration. A node its configurations ever listed is not
// refused (a member removed while it was down starts and waits to be
// added back), nor one that is joining: catching up, it passes
// configurations of its cluster older than its admission (joining.go). A
// log or snapshot that cannot be read is left to the checks after this
// one, which say what to do about it.
func (n *Node) checkStoredID() error {
	if !n.cfg.CheckStoredID {
		return nil
	}
	if _, err := os.Stat(filepath.Join(n.cfg.DataDir, joiningFile)); err == nil {
		return nil
	}
	latest, listed, err := storedConfigurations(n.logStore, n.snaps)
	if err != nil || listed[raft.ServerID(n.cfg.NodeID)] || len(latest.Servers) == 0 {
		return nil
	}
	for _, s := range latest.Servers {
		if a := string(s.Address); a == n.cfg.RaftAdvertise || a == n.cfg.RaftAddr {
			return &StoredIDError{NodeID: n.cfg.NodeID, Stored: string(s.ID), StoredAddr: a, AtOwnAddr: true}
		}
	}
	if len(latest.Servers) == 1 {
		s := latest.Servers[0]
		return &StoredIDError{NodeID: n.cfg.NodeID, Stored: string(s.ID), StoredAddr: string(s.Address)}
	}
	return nil
}

// storedConfigurations reads the configuration raft would start with (the
// last one in the log above the newest snapshot, else that snapshot's) and
// every id that any configuration the log and the snapshots hold lists.
func storedConfigurations(logs raft.LogStore, snaps raft.SnapshotStore) (raft.Configuration, map[raft.ServerID]bool, error) {
	listed := map[raft.ServerID]bool{}
	note := func(c raft.Configuration) {
		for _, s := range c.Servers {
			listed[s.ID] = true
		}
	}
	var latest raft.Configuration
	var from uint64
	list, err := snaps.List()
	if err != nil {
		return latest, nil, err
	}
	for i, m := range list { // newest first
		note(m.Configuration)
		if i == 0 {
			latest, from = m.Configuration, m.Index
		}
	}
	first, err := logs.FirstIndex()
	if err != nil {
		return latest, nil, err
	}
	last, err := logs.LastIndex()
	if err != nil {
		return latest, nil, err
	}
	for i := first; i <= last && i > 0; i++ {
		var l raft.Log
		if err := logs.GetLog(i, &l); err != nil {
			return latest, nil, err
		}
		if l.Type != raft.LogConfiguration {
			continue
		}
		c := raft.DecodeConfiguration(l.Data)
		note(c)
		if l.Index > from {
			latest = c
		}
	}
	return latest, listed, nil
}
