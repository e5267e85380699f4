package raftfsm

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/hashicorp/raft"
)

// Two survivors of a cluster that lost its quorum, each given to idem
// recover alone (an operator who ran the documented command on every
// survivor, with its own id), become two one-node clusters. Each leaves
// the other out, so neither ever sends the other a raft RPC: both serve,
// each its own copy of the records, and a key claimed on one is claimed
// again on the other. The guard of superseded.go only hears from a
// left-out member that still runs the old configuration.
//
// So a node that a recovery made the cluster probes the members it left
// out: a pre-vote of term 0 (no candidate asks in term 0, and raft never
// sees it: the guard answers it, see answerProbe). A left-out member that
// was itself recovered without this node answers with leftOutError, as it
// answers any RPC of a member it left out. Then both are recoveries of one
// cluster and neither may serve: this node records it in supersededFile,
// answers every request 503 from then on and will not start on this data
// dir again, and the other does the same when its own probe is answered.
// The probed node learns it too, from the probe itself (probedByTwin).
// Which copy to keep is the operator's choice (twinMessage).
const (
	recoveryProbeTerm  = 0
	recoveryProbeEvery = 5 * time.Second
)

// answerProbe answers a recovery probe that check let through (the prober
// is not a member this node's recovery left out): refused, with this
// node's term, and never handed to raft, which would log a warning for
// every probe of a node not in its configuration.
func (g *foreignGuard) answerProbe(rpc raft.RPC) bool {
	c, ok := rpc.Command.(*raft.RequestPreVoteRequest)
	if !ok || c.Term != recoveryProbeTerm {
		return false
	}
	resp := &raft.RequestPreVoteResponse{RPCHeader: raft.RPCHeader{ProtocolVersion: c.ProtocolVersion}}
	if r := g.r.Load(); r != nil {
		resp.Term = r.CurrentTerm()
	}
	rpc.Respond(resp, nil)
	return true
}

// watchTwins probes, every recoveryProbeEvery, the members this data dir's
// recoveries left out and that are not members again, at the raft
// addresses the state records for them, until one answers that it was
// recovered without this node, or the node stops.
func (n *Node) watchTwins(rec recoveryRecord, self raft.ServerAddress) {
	defer n.wg.Done()
	for {
		for _, id := range rec.LeftOut {
			if n.closing.Load() || n.Superseded() != "" {
				return
			}
			addr := n.leftOutAddr(id, self)
			if addr == "" {
				continue
			}
			req := &raft.RequestPreVoteRequest{
				RPCHeader: raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte(n.cfg.NodeID), Addr: []byte(self)},
				Term:      recoveryProbeTerm,
			}
			// The RPC runs apart: to an address that drops packets it
			// takes the transport's whole timeout (10 s), which Close
			// would otherwise wait out. Left behind, it ends by then.
			done := make(chan error, 1)
			go func() {
				var resp raft.RequestPreVoteResponse
				done <- n.trans.RequestPreVote(raft.ServerID(id), addr, req, &resp)
			}()
			var err error
			select {
			case err = <-done:
			case <-n.stop:
				return
			}
			if err != nil && strings.Contains(err.Error(), supersededMarker) {
				n.recoveredTwice(id, addr, err)
				return
			}
		}
		select {
		case <-n.stop:
			return
		case <-time.After(recoveryProbeEvery):
		}
	}
}

// leftOutAddr is the raft address to probe left-out member id at: the one
// the state records for it, unless it is a member again (it rejoined) or
// the address is this node's own.
func (n *Node) leftOutAddr(id string, self raft.ServerAddress) raft.ServerAddress {
	if !knownNonMember(n.raft, id) {
		return ""
	}
	v, err := n.db.Named("node/" + id)
	if err != nil {
		return ""
	}
	var info NodeInfo
	if b, ok := v["node/"+id]; !ok || json.Unmarshal(b, &info) != nil || info.RaftAddr == "" || raft.ServerAddress(info.RaftAddr) == self {
		return ""
	}
	return raft.ServerAddress(info.RaftAddr)
}

// recoveredTwice is called when left-out member id answered a probe that
// it was itself recovered without this node: it records it as superseded
// does, with what the operator must choose.
func (n *Node) recoveredTwice(id string, addr raft.ServerAddress, err error) {
	rec := supersededRecord{From: id, Address: string(addr), At: time.Now().UTC(), Detail: markerDetail(err), Twin: true}
	n.markSuperseded(rec, "this node and "+id+" were each made the cluster by idem recover (or idem snapshot restore in a member's place), each without the other: it answers every request 503 from now on, and will not start on this data dir again")
}

// probedByTwin is called when left-out member id probed this node: only a
// recovery that left this node out probes it, so the two are twins. The
// prober learns it from this node's answer, and this node at once, not at
// its own next probe.
func (n *Node) probedByTwin(id string, addr raft.ServerAddress) {
	n.recoveredTwice(id, addr, fmt.Errorf("%s %s probed this node as a member that its recovery left out", supersededMarker, id))
}

// twinMessage is supersededRecord.message for a twin recovery.
func (r supersededRecord) twinMessage(dir string) string {
	return fmt.Sprintf("this node and %s (%s) were each made the cluster by idem recover (or idem snapshot restore in a member's place), each without the other (learned on %s): "+
		"they are two clusters with diverging copies of the records, and a key claimed on one could be claimed again on the other, so neither serves. "+
		"Choose the copy to keep. Stop the other node, move its data dir aside and keep it (records acknowledged only there are not in the copy you keep), "+
		"on the node you keep, stop it, delete %s and start it again, then start the other with an empty data dir and --join naming the kept node's HTTP address",
		r.From, r.Address, r.At.Format(time.RFC3339), filepath.Join(dir, supersededFile))
}
