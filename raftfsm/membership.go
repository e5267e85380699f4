package raftfsm

import (
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/hashicorp/raft"
)

// Member is one node as /v1/cluster shows it.
type Member struct {
	NodeInfo
	Suffrage string `json:"suffrage"`
	Healthy  bool   `json:"healthy"`
}

// Status is the cluster as this node sees it.
type Status struct {
	Self   NodeInfo  `json:"self"`
	Leader *NodeInfo `json:"leader"`
	Nodes  []Member  `json:"nodes"`
	// WallMs is this node's wall clock, for nodes agreeing on a new
	// cluster's first time (see ttl.Clock.Correct).
	WallMs       int64  `json:"wall_ms"`
	Term         uint64 `json:"term"`
	CommitIndex  uint64 `json:"commit_index"`
	AppliedIndex uint64 `json:"applied_index"`
}

// Status returns the cluster membership and raft progress.
func (n *Node) Status() (Status, error) {
	st := Status{Self: n.self, WallMs: n.clock.WallMs(), Term: n.term(), CommitIndex: n.raft.CommitIndex(), AppliedIndex: n.raft.AppliedIndex(), Nodes: []Member{}}
	if l, ok := n.Leader(); ok {
		st.Leader = &l
	}
	f := n.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		return st, mapRaftError(err)
	}
	named, _ := n.db.Named("node/")
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, s := range f.Configuration().Servers {
		m := Member{NodeInfo: NodeInfo{ID: string(s.ID), RaftAddr: string(s.Address)}, Suffrage: s.Suffrage.String()}
		if b, ok := named["node/"+string(s.ID)]; ok {
			var info NodeInfo
			if json.Unmarshal(b, &info) == nil {
				m.HTTPAddr = info.HTTPAddr
			}
		}
		if string(s.ID) == n.self.ID {
			m.HTTPAddr = n.self.HTTPAddr
		}
		m.Healthy = !n.unhealty[s.ID]
		st.Nodes = append(st.Nodes, m)
	}
	sort.Slice(st.Nodes, func(i, j int) bool { return st.Nodes[i].ID < st.Nodes[j].ID })
	return st, nil
}

// Join adds a voter, recording its addresses in the log first so every node
// can forward to it.
func (n *Node) Join(info NodeInfo) error {
	if _, err := n.propose(&Command{Op: OpSetNode, Node: &info}); err != nil {
		return err
	}
	if err := n.raft.AddVoter(raft.ServerID(info.ID), raft.ServerAddress(info.RaftAddr), 0, n.cfg.ApplyTimeout).Error(); err != nil {
		return mapRaftError(err)
	}
	return nil
}

// Remove removes a node from the cluster.
func (n *Node) Remove(id string) error {
	if n.raft.State() != raft.Leader {
		return n.notLeader()
	}
	if err := n.raft.RemoveServer(raft.ServerID(id), 0, n.cfg.ApplyTimeout).Error(); err != nil {
		return mapRaftError(err)
	}
	_, err := n.propose(&Command{Op: OpRemoveNode, Node: &NodeInfo{ID: id}})
	if err != nil && id == n.self.ID {
		// A leader that removed itself has stepped down (raft shuts it
		// down) and can propose nothing more: the removal is committed,
		// and the address record left behind belongs to no member (a
		// later join of the same id overwrites it).
		n.log.Info("removed this node, the leader, from the cluster", "node-id", id)
		return nil
	}
	return err
}

// Bootstrap forms a new cluster of peers (this node among them). Every
// peer may call it with the same list: raft accepts identical bootstrap
// configurations. A node that already has state ignores it.
func (n *Node) Bootstrap(peers []NodeInfo) error {
	conf := raft.Configuration{}
	for _, p := range peers {
		conf.Servers = append(conf.Servers, raft.Server{ID: raft.ServerID(p.ID), Address: raft.ServerAddress(p.RaftAddr), Suffrage: raft.Voter})
	}
	err := n.raft.BootstrapCluster(conf).Error()
	if errors.Is(err, raft.ErrCantBootstrap) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("raftfsm: bootstrap: %w", err)
	}
	n.refreshMembership()
	return nil
}

func (n *Node) refreshMembership() {
	f := n.raft.GetConfiguration()
	if f.Error() != nil {
		return
	}
	in := false
	for _, s := range f.Configuration().Servers {
		if string(s.ID) == n.self.ID {
			in = true
		}
	}
	n.member.Store(in)
}

func (n *Node) watchMembership() {
	defer n.wg.Done()
	t := time.NewTicker(200 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-n.stop:
			return
		case <-t.C:
			n.refreshMembership()
		}
	}
}

func (n *Node) observe(ch chan raft.Observation) {
	defer n.wg.Done()
	for {
		select {
		case <-n.stop:
			return
		case o := <-ch:
			n.mu.Lock()
			switch v := o.Data.(type) {
			case raft.FailedHeartbeatObservation:
				n.unhealty[v.PeerID] = true
			case raft.ResumedHeartbeatObservation:
				delete(n.unhealty, v.PeerID)
			case raft.LeaderObservation:
				clear(n.unhealty)
			}
			n.mu.Unlock()
		}
	}
}

// peerState is what this node, while it leads, has measured of the other
// members (see healthLoop).
type peerState struct {
	mu sync.Mutex
}
