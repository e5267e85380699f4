package raftfsm

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// recoveringFile marks a data dir that Recover has begun to change and not
// finished. A recover stopped part-way (killed, a lost ssh session, a power
// cut) can leave the old configuration in place, or the new one without the
// record of the members it leaves out (superseded.go); a plain start then
// served as if nothing had happened, and an operator who saw the other
// survivors start recovered had one node on the old membership beside them.
// Open refuses the data dir while the file is there; running the same
// recover again finishes the work and removes it.
const recoveringFile = "recovering.json"

// recoverHook is called at each step of Recover after recoveringFile is
// written; a test makes it fail there, as a recover killed at that step.
var recoverHook = func(step string) error { return nil }

// ErrRecoverUnfinished is returned by Open for a data dir whose idem
// recover did not finish.
var ErrRecoverUnfinished = errors.New("raftfsm: an idem recover of this data dir did not finish")

// RecoveringFile is recoveringFile, for the CLI's messages and tests.
const RecoveringFile = recoveringFile

// Recovering is recoveringFile: the recovery that began.
type Recovering struct {
	Node  string    `json:"node"`
	Peers []Peer    `json:"peers"`
	At    time.Time `json:"started_at"`
	// Before are the ids of the members before the recovery: a recover
	// stopped after it rewrote the configuration and run again finds only
	// the new one there, and would record no member as left out.
	Before []string `json:"members_before,omitempty"`
	// BeforeAddrs are the addresses of the members of Before, as the data
	// dir recorded them when the recovery began: a run again must probe
	// them as the first run did (idem recover refuses while a member
	// answers), and after the rewrite the configuration no longer holds
	// them. A marker of an earlier release has none: the state's node
	// records (node/<id>) stand in (OfflineState.UnfinishedMembers).
	BeforeAddrs []MemberAddrs `json:"members_before_addrs,omitempty"`
}

// MemberAddrs are a member's raft and HTTP addresses ("" when unknown).
type MemberAddrs struct {
	ID       string `json:"id"`
	RaftAddr string `json:"raft_addr,omitempty"`
	HTTPAddr string `json:"http_addr,omitempty"`
}

// markRecovering writes recoveringFile before Recover changes anything.
func markRecovering(dir, node string, peers []Peer, before []string, addrs []MemberAddrs) error {
	b, _ := json.MarshalIndent(Recovering{Node: node, Peers: peers, At: time.Now().UTC(), Before: before, BeforeAddrs: addrs}, "", "  ")
	return replaceSynced(dir, recoveringFile, append(b, '\n'))
}

// unmarkRecovering removes recoveringFile once Recover is done.
func unmarkRecovering(dir string) error {
	return removeSynced(dir, recoveringFile)
}

// ReadRecovering returns the unfinished recovery recoveringFile records in
// dir, nil when there is none. A damaged file is still an unfinished
// recovery: its peers are then unknown.
func ReadRecovering(dir string) (*Recovering, error) {
	b, err := os.ReadFile(filepath.Join(dir, recoveringFile))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("raftfsm: read %s: %w", filepath.Join(dir, recoveringFile), err)
	}
	var r Recovering
	if json.Unmarshal(b, &r) != nil {
		r = Recovering{}
	}
	return &r, nil
}

// message says what an operator does about an unfinished recovery of dir.
func (r *Recovering) message(dir string) string {
	var peers []string
	for _, p := range r.Peers {
		peers = append(peers, p.ID+"="+p.RaftAddr)
	}
	run := "run the same idem recover (--data-dir, --node-id, --peers) again with --yes"
	if r.Node != "" && len(peers) > 0 {
		run = fmt.Sprintf("run it again: idem recover --data-dir %s --node-id %s --peers %s --yes", dir, r.Node, strings.Join(peers, ","))
	}
	when := "it was stopped, or it failed"
	if !r.At.IsZero() {
		when = "it began " + r.At.Format(time.RFC3339) + " and was stopped, or failed"
	}
	return fmt.Sprintf("%s; the data dir may hold the old membership, or the new one without the record of the members it leaves out. "+
		"It is not served until the recovery is finished: %s. That removes %s. "+
		"Only to give the recovery up (the node then starts on whatever membership the data dir holds), delete that file instead",
		when, run, filepath.Join(dir, recoveringFile))
}
