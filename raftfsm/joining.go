package raftfsm

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/hashicorp/raft"
)

// joiningFile marks a data dir whose node started empty and asked a
// cluster to take it in (MarkJoining), until the node's configuration
// lists another member (refreshMembership removes it then).
//
// It is for one case raft cannot tell from a node's files: a fresh node
// under the id of its cluster's bootstrap node (a member replaced by an
// empty node under the same id, as docs/MEMBERSHIP.md shows) replays the
// cluster's log from its start, and that log begins with a configuration
// of this id alone, for as many entries as the cluster ran as one node.
// Stopped in the middle of that stretch, the node restarted with a
// configuration of itself alone, as a one-node store does: it elected
// itself leader over a prefix of the cluster's log and answered claims
// from it (keys the cluster holds claimed again), and foreignGuard, armed
// by that configuration, refused the real leader for good. With the file
// present, such a node instead sets its state aside and starts empty: what
// it holds is a copy of part of its cluster's log, and it joins again and
// replays the whole of it.
const joiningFile = "joining"

// setAsideState names what a node's state is made of in its data dir;
// node.json, the ballast and the key files stay.
var setAsideState = []string{"fsm", "fsm.filters", logStoreDir, "raft.db", "snapshots"}

// errStartEmpty is open's answer for a node that must start empty (above).
var errStartEmpty = errors.New("raftfsm: restart empty")

// MarkJoining records that this node, empty, asks a cluster to take it in:
// call it before the join request. It does nothing for a node with state.
func (n *Node) MarkJoining() error {
	if n.HasState() || n.joining.Load() {
		return nil
	}
	if err := writeSynced(filepath.Join(n.cfg.DataDir, joiningFile), []byte("this node started empty and asked a cluster to take it in; idem removes this file once the node has caught up past the cluster's first configuration\n")); err != nil {
		return err
	}
	if err := syncDir(n.cfg.DataDir); err != nil {
		return err
	}
	n.joining.Store(true)
	return nil
}

// forgetJoining removes the joining file once conf lists a member other
// than this node: from there on, a configuration of this node alone can
// only be one the cluster made (every other member removed), and must
// never be discarded.
func (n *Node) forgetJoining(conf raft.Configuration) {
	if !n.joining.Load() {
		return
	}
	for _, s := range conf.Servers {
		if string(s.ID) != n.self.ID {
			if err := removeJoining(n.cfg.DataDir); err != nil {
				n.log.Warn("could not remove the joining marker; retrying", "error", err)
				return
			}
			n.joining.Store(false)
			return
		}
	}
}

func removeJoining(dir string) error {
	if err := os.Remove(filepath.Join(dir, joiningFile)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("raftfsm: remove %s: %w", filepath.Join(dir, joiningFile), err)
	}
	return syncDir(dir)
}

// checkJoining decides, with the stores open and before raft starts, what
// the joining file means: for a node without raft state, that it is still
// joining (the leader may have taken it in, and its entries may arrive
// before the node asks again), unless it bootstraps a one-node cluster now,
// which the file must not outlive; errStartEmpty for a node whose latest
// configuration is itself alone.
func (n *Node) checkJoining(existing bool) error {
	if _, err := os.Stat(filepath.Join(n.cfg.DataDir, joiningFile)); err != nil {
		return nil
	}
	if !existing {
		if n.cfg.Bootstrap {
			return removeJoining(n.cfg.DataDir)
		}
		n.joining.Store(true)
		return nil
	}
	conf, err := latestConfiguration(n.logStore, n.snaps)
	if err != nil {
		return err
	}
	if len(conf.Servers) == 1 && string(conf.Servers[0].ID) == n.self.ID {
		return errStartEmpty
	}
	n.joining.Store(true)
	return nil
}

// latestConfiguration is the configuration raft starts with: the last one
// in the log, else the newest snapshot's.
func latestConfiguration(logs raft.LogStore, snaps raft.SnapshotStore) (raft.Configuration, error) {
	first, err := logs.FirstIndex()
	if err != nil {
		return raft.Configuration{}, fmt.Errorf("raftfsm: read the raft log: %w", err)
	}
	last, err := logs.LastIndex()
	if err != nil {
		return raft.Configuration{}, fmt.Errorf("raftfsm: read the raft log: %w", err)
	}
	for i := last; i >= first && i > 0; i-- {
		var l raft.Log
		if err := logs.GetLog(i, &l); err != nil {
			return raft.Configuration{}, fmt.Errorf("raftfsm: read raft log entry %d: %w", i, err)
		}
		if l.Type == raft.LogConfiguration {
			return raft.DecodeConfiguration(l.Data), nil
		}
	}
	list, err := snaps.List()
	if err != nil || len(list) == 0 {
		return raft.Configuration{}, err
	}
	return list[0].Configuration, nil
}

// setAside moves a node's state into a new directory of its data dir, kept
// for inspection, and returns its path.
func setAside(dir string, log *slog.Logger) (string, error) {
	aside := filepath.Join(dir, "set-aside-"+time.Now().UTC().Format("20060102T150405Z"))
	if err := os.Mkdir(aside, 0o700); err != nil {
		return "", fmt.Errorf("raftfsm: set aside this node's partial copy: %w", err)
	}
	for _, name := range setAsideState {
		err := os.Rename(filepath.Join(dir, name), filepath.Join(aside, name))
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return "", fmt.Errorf("raftfsm: set aside this node's partial copy (%s is partly moved; move the rest of %s into it to start empty): %w", aside, setAsideState, err)
		}
	}
	if err := removeJoining(dir); err != nil {
		return "", err
	}
	log.Warn("this node joined its cluster empty and was stopped before it had replayed the cluster's first configuration, which lists this node alone: started as it was, it would have led a cluster of its own over part of the log. "+
		"Its partial copy is set aside and it starts empty, to join and replay the log again. Delete the set-aside directory once the node has caught up",
		"set-aside", aside)
	return aside, nil
}
