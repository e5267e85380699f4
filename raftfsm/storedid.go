package raftfsm

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/hashicorp/raft"
)

// StoredIDError refuses a start under an id that the data dir's stored
// raft configurations never listed (Config.CheckStoredID). Started as it
// was, the node ran outside its configuration, never voting nor leading,
// and its caller recorded the wrong id as the data dir's.
type StoredIDError struct {
	NodeID string // the id the node was started with
	// Stored is the id the configuration holds for this data dir: the
	// member at this node's raft address (AtOwnAddr), else the only member
	// of a one-node configuration; "" when neither tells.
	Stored    string
	AtOwnAddr bool
	// Members is the latest configuration.
	Members []Peer
}

// StoredAddr is Stored's raft address in the configuration.
func (e *StoredIDError) StoredAddr() string {
	for _, p := range e.Members {
		if p.ID == e.Stored {
			return p.RaftAddr
		}
	}
	return ""
}

func (e *StoredIDError) Error() string {
	switch {
	case e.AtOwnAddr:
		return fmt.Sprintf("raftfsm: this data dir is not node %s's: its raft configuration lists this node's raft address %s as member %s's, and none it holds ever listed %s; nothing was changed. Start it as %s", e.NodeID, e.StoredAddr(), e.Stored, e.NodeID, e.Stored)
	case e.Stored != "":
		return fmt.Sprintf("raftfsm: this data dir is not node %s's: its raft configuration is a one-node cluster of %s (at raft address %s), and none it holds ever listed %s; nothing was changed. Start it as %s", e.NodeID, e.Stored, e.StoredAddr(), e.NodeID, e.Stored)
	}
	return fmt.Sprintf("raftfsm: this data dir is not node %s's: no raft configuration it holds ever listed %s (its members: %s); nothing was changed. Start it as the member whose data dir it is", e.NodeID, e.NodeID, PeerList(e.Members))
}

// PeerList names peers as "id at raft address", comma-separated.
func PeerList(peers []Peer) string {
	var b strings.Builder
	for i, p := range peers {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(p.ID + " at " + p.RaftAddr)
	}
	return b.String()
}

// checkStoredID refuses, when cfg.CheckStoredID is set, a NodeID that no
// configuration the data dir holds ever listed and that its state records
// no member under (StoredIDError), naming the id the latest configuration
// gives this data dir where it leaves no doubt: the member listed at this
// node's raft address, or the only member of a one-node configuration. A
// member removed while it was down is not refused (its configurations
// listed it, and it starts and waits to be added back), nor a fresh data
// dir, nor one that is joining: catching up, it passes configurations of
// its cluster older than its admission (joining.go). A log or snapshot
// that cannot be read is left to the checks after this one, which say
// what to do about it.
func (n *Node) checkStoredID() error {
	if !n.cfg.CheckStoredID {
		return nil
	}
	if _, err := os.Stat(filepath.Join(n.cfg.DataDir, joiningFile)); err == nil {
		return nil
	}
	latest, known, err := storedConfigurations(n.logStore, n.snaps)
	if err != nil || len(latest.Servers) == 0 {
		return nil
	}
	named, err := n.db.Named("node/")
	if err != nil {
		return nil
	}
	for k := range named {
		known[raft.ServerID(strings.TrimPrefix(k, "node/"))] = true
	}
	if known[raft.ServerID(n.cfg.NodeID)] {
		return nil
	}
	e := &StoredIDError{NodeID: n.cfg.NodeID}
	for _, s := range latest.Servers {
		e.Members = append(e.Members, Peer{ID: string(s.ID), RaftAddr: string(s.Address), Suffrage: s.Suffrage.String()})
		if a := string(s.Address); e.Stored == "" && (a == n.cfg.RaftAdvertise || a == n.cfg.RaftAddr) {
			e.Stored, e.AtOwnAddr = string(s.ID), true
		}
	}
	if e.Stored == "" && len(e.Members) == 1 {
		e.Stored = e.Members[0].ID
	}
	return e
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
