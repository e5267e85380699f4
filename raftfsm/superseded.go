package raftfsm

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/raft"
)

// After idem recover makes a survivor the cluster, the members it left out
// still hold the old configuration. Started again with their data dirs
// (systemd's Restart=always after a kill -9 does it), two of three are a
// majority of that configuration: they elect a leader and serve their
// older records, so keys the recovered cluster holds are claimed again,
// and load balancers route to them (the recovered node, refusing their
// entries as another cluster's, was the one that looked unready).
//
// So Recover records whom it left out (recoveredFile). The recovered node
// answers an append from one of them, while it is not a member again, with
// an error that says so (supersededMarker) and stays ready. A leader that
// gets that answer writes supersededFile into its own data dir, answers
// every request 503 from then on (Node.Superseded), and refuses to start
// on that data dir again: its cluster was replaced, and only an operator
// may decide what becomes of its records.
const (
	recoveredFile  = "recovered.json"
	supersededFile = "superseded.json"
	// supersededMarker starts the error a recovered node answers a
	// left-out member's append with; the leader that gets it learns so.
	supersededMarker = "raftfsm: left out of a recovery:"
)

// ErrSuperseded is returned by Open for a data dir whose node learned that
// its cluster was recovered without it.
var ErrSuperseded = errors.New("raftfsm: this node was left out of a recovery of its cluster")

// err is the error a superseded record stands for: ErrSuperseded, which a
// twin recovery (twins.go) wraps with its own words (the node was not left
// out: it was recovered beside another member).
func (r supersededRecord) err() error {
	if r.Twin {
		return twinRecovery{}
	}
	if r.Diverged {
		return divergedState{}
	}
	return ErrSuperseded
}

type divergedState struct{}

func (divergedState) Error() string {
	return "raftfsm: this node's state holds entries its cluster does not"
}
func (divergedState) Unwrap() error { return ErrSuperseded }

type twinRecovery struct{}

func (twinRecovery) Error() string { return "raftfsm: two recoveries of this cluster" }
func (twinRecovery) Unwrap() error { return ErrSuperseded }

// RecoveredFile and SupersededFile name the two files in a data dir.
const (
	RecoveredFile  = recoveredFile
	SupersededFile = supersededFile
)

// recoveryRecord is recoveredFile: the members recoveries of this data dir
// left out, by id.
type recoveryRecord struct {
	LeftOut []string  `json:"left_out"`
	At      time.Time `json:"recovered_at"`
	Node    string    `json:"node"`
	Applied uint64    `json:"applied_index"`
	// Via is "restore" when idem snapshot restore made this data dir in
	// the place of a member of the backup's cluster (RecordRestoreInPlace),
	// and empty for idem recover.
	Via string `json:"via,omitempty"`
}

// leftOut reports whether a recovery of this data dir left out id.
func (r recoveryRecord) leftOut(id string) bool { return slices.Contains(r.LeftOut, id) }

// by names what made this data dir the cluster without the members it
// lists, for the messages those members and the operator read.
func (r recoveryRecord) by() string {
	if r.Via == viaRestore {
		return "idem snapshot restore, from a backup, in the place of a member"
	}
	return "idem recover"
}

const viaRestore = "restore"

func readRecoveryRecord(dir string) (recoveryRecord, error) {
	var rec recoveryRecord
	b, err := os.ReadFile(filepath.Join(dir, recoveredFile))
	if errors.Is(err, os.ErrNotExist) {
		return rec, nil
	}
	if err != nil {
		return rec, fmt.Errorf("raftfsm: read %s: %w", filepath.Join(dir, recoveredFile), err)
	}
	if err := json.Unmarshal(b, &rec); err != nil {
		return rec, fmt.Errorf("raftfsm: %s is damaged (%v): it lists the members a recovery left out; restore it from a copy, or delete it if no member was left out", filepath.Join(dir, recoveredFile), err)
	}
	return rec, nil
}

// recordRecovery adds to recoveredFile the members of before that the new
// configuration leaves out; members it names again are taken off the list.
func recordRecovery(dir, node string, before []string, peers []Peer, applied uint64, via string) error {
	rec, err := readRecoveryRecord(dir)
	if err != nil {
		return err
	}
	kept := func(id string) bool { return slices.ContainsFunc(peers, func(p Peer) bool { return p.ID == id }) }
	// Members an earlier recovery or restore left out, still left out,
	// were cut off at that one's state: keep its index and what made it.
	// A recover after a restore in place recorded its own applied index
	// (the restored one, far above the backup's, restore.go) and "idem
	// recover", so a left-out member holding records acknowledged after
	// the backup was told its records were older than the recovered
	// cluster's (an operator walk). The lowest index errs toward "ahead":
	// keep the data dir.
	earlier := slices.ContainsFunc(rec.LeftOut, func(id string) bool { return !kept(id) })
	for _, id := range before {
		if !kept(id) && !slices.Contains(rec.LeftOut, id) {
			rec.LeftOut = append(rec.LeftOut, id)
		}
	}
	rec.LeftOut = slices.DeleteFunc(rec.LeftOut, kept)
	if len(rec.LeftOut) == 0 {
		return removeSynced(dir, recoveredFile)
	}
	slices.Sort(rec.LeftOut)
	rec.Node = node
	if !earlier || applied < rec.Applied {
		rec.At, rec.Applied, rec.Via = time.Now().UTC(), applied, via
	}
	b, _ := json.MarshalIndent(rec, "", "  ")
	return replaceSynced(dir, recoveredFile, append(b, '\n'))
}

// leftOutError is the recovered node's answer to an append from leader
// from, a member its recovery left out.
func leftOutError(self raft.ServerID, rec recoveryRecord, from raft.RPCHeader) error {
	return fmt.Errorf("%s node %s was made the cluster by %s on %s (state at index %d) without %s: %s's data dir holds a state the recovery did not start from, which must not serve; "+
		"move it aside and start %s with an empty data dir and --join naming %s's HTTP address",
		supersededMarker, self, rec.by(), rec.At.Format(time.RFC3339), rec.Applied, from.ID, from.ID, from.ID, self)
}

// RecordRestoreInPlace records in dir, a data dir idem snapshot restore
// made at the raft address of a member of the backup's cluster, that the
// backup's other members (others, by id) are left out: started again on
// their old data dirs, they would hold a quorum of the old cluster and
// serve its state at the addresses its clients know. As after idem
// recover (superseded.go), the restored node answers their appends and
// votes with leftOutError, and the one that hears it stops serving.
func RecordRestoreInPlace(dir, node string, others []string, applied uint64) error {
	return recordRecovery(dir, node, others, []Peer{{ID: node}}, applied, viaRestore)
}

// recoveredFromIndex is the state index a leftOutError names, or 0.
func recoveredFromIndex(detail string) uint64 {
	_, rest, ok := strings.Cut(detail, "(state at index ")
	if !ok {
		return 0
	}
	n, _, _ := strings.Cut(rest, ")")
	i, err := strconv.ParseUint(n, 10, 64)
	if err != nil {
		return 0
	}
	return i
}

// supersededRecord is supersededFile: what this node learned, from whom.
type supersededRecord struct {
	From    string    `json:"from"`
	Address string    `json:"raft_address"`
	At      time.Time `json:"learned_at"`
	Detail  string    `json:"detail"`
	// Twin: this node was itself made the cluster by a recovery that left
	// From out, and From by one that left this node out (twins.go).
	Twin bool `json:"twin_recovery,omitempty"`
	// Applied is this node's state index when it learned it, and
	// RecoveredFrom the index of the state the recovery started from.
	Applied       uint64 `json:"applied_index,omitempty"`
	RecoveredFrom uint64 `json:"recovered_from_index,omitempty"`
	// Diverged: the leader From replaced entries of this node's log that
	// its state had applied, from index CutFrom (Node.tailCut).
	Diverged bool   `json:"diverged,omitempty"`
	CutFrom  uint64 `json:"cut_from_index,omitempty"`
}

func (r supersededRecord) message(dir string) string {
	if r.Twin {
		return r.twinMessage(dir)
	}
	if r.Diverged {
		return fmt.Sprintf("the leader %s replaced this node's raft log from index %d on (learned on %s), but this node's state had applied it up to index %d: "+
			"entries the cluster never committed are in its state, and the cluster's own entries there would be skipped. This data dir is not this cluster's member's: "+
			"an older copy, or one a recovery left out that was started again at a member's address (idem recover made a survivor the cluster, and a node rejoined at these addresses since). "+
			"Served, it would answer from a state that lacks records the cluster acknowledged. Move this data dir aside and keep it (it may hold records acknowledged only there), "+
			"then start this node with an empty data dir and --join naming a member. Only if this copy is to be served as it is, delete %s",
			r.by(), r.CutFrom, r.At.Format(time.RFC3339), r.Applied, filepath.Join(dir, supersededFile))
	}
	if r.RecoveredFrom > 0 && r.Applied > r.RecoveredFrom {
		// The operator recovered a survivor whose log ended lower than
		// this one's: the message called this newer copy older and said
		// to start empty, throwing away acknowledged records (an
		// operator walk).
		return fmt.Sprintf("%s (%s) answered on %s that its cluster was recovered without this node (%s). "+
			"This data dir's state (index %d) is ahead of the state that recovery started from (index %d): the recovery (or restore) started from a state that lacked records this data dir holds, and they may have been acknowledged. "+
			"Do not delete this data dir. It does not serve, because the recovered cluster may have taken claims since, and serving both would claim keys twice. "+
			"If the recovered cluster has taken no writes that matter, stop it and run idem recover on this data dir instead (its log ends highest) and delete %s; otherwise keep this data dir aside, "+
			"start this node with an empty data dir and --join naming a member of the recovered cluster, and look up what only this copy holds. "+
			"Only if this data dir is the copy to keep and %s is stopped for good (its records are then given up), delete %s to serve this data dir again",
			r.From, r.Address, r.At.Format(time.RFC3339), strings.TrimPrefix(r.Detail, supersededMarker+" "), r.Applied, r.RecoveredFrom, filepath.Join(dir, supersededFile), r.From, filepath.Join(dir, supersededFile))
	}
	return fmt.Sprintf("%s (%s) answered on %s that its cluster was recovered without this node (%s). "+
		"The records here are older than the recovered cluster's: served, they would let keys it holds be claimed again. "+
		"Move this data dir aside and keep it (it may hold records acknowledged after that recovery, which the recovered cluster lacks), then start this node with an empty data dir and --join naming a member of the recovered cluster. "+
		"Only if that recovery was the mistake and %s is stopped for good, delete %s to serve this data dir again",
		r.From, r.Address, r.At.Format(time.RFC3339), strings.TrimPrefix(r.Detail, supersededMarker+" "), r.From, filepath.Join(dir, supersededFile))
}

// by names the member that told this node: "id (raft address)".
func (r supersededRecord) by() string {
	if r.Address == "" {
		return r.From
	}
	return r.From + " (" + r.Address + ")"
}

func readSuperseded(dir string) (*supersededRecord, error) {
	b, err := os.ReadFile(filepath.Join(dir, supersededFile))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("raftfsm: read %s: %w", filepath.Join(dir, supersededFile), err)
	}
	var r supersededRecord
	if json.Unmarshal(b, &r) != nil {
		r = supersededRecord{From: "a recovered member", Detail: "(the file is damaged)"}
	}
	return &r, nil
}

// superseded is called when a member answered this node's append with
// leftOutError: the first time, it writes supersededFile and makes the
// node answer every request 503 (Superseded).
func (n *Node) superseded(to raft.ServerID, addr raft.ServerAddress, err error) {
	if n.supersededBy.Load() != nil {
		return
	}
	rec := supersededRecord{From: string(to), Address: string(addr), At: time.Now().UTC(), Detail: markerDetail(err),
		Applied: n.db.Meta().Applied}
	rec.RecoveredFrom = recoveredFromIndex(rec.Detail)
	n.markSuperseded(rec, "this node was left out of a recovery of its cluster: it answers every request 503 from now on, and will not start on this data dir again")
}

// tailCut is called when raft deletes this node's log from min to its
// end, the leader's entries replacing a conflicting tail. Raft never
// replaces a committed entry, and the state applies only committed ones:
// a state that applied min already holds entries of another history.
// That is a data dir that is not this member's (an older copy, or that of
// a member idem recover left out, started at the addresses of the member
// that joined the recovered cluster in its place): raft went on, the
// state skipped the cluster's entries up to its own applied index, and the
// replicas' state hashes differed. Such a node stops serving, as one left
// out of a recovery does. r is raft (nil before it runs).
func (n *Node) tailCut(r *raft.Raft, min, max uint64) {
	applied := n.db.Meta().Applied
	if min > applied {
		return
	}
	n.divergedFrom(r, min, applied, fmt.Sprintf("log entries %d-%d replaced by the leader's; the state had applied %d", min, max, applied))
}

// unverifiedEntry is called when the leader sends, at index, an entry of
// a term later than any of the entries this node's state applied up to
// there (guardedLogStore.checkApplied): the log held none to compare, and
// the state holds another history, as after a tail cut.
func (n *Node) unverifiedEntry(r *raft.Raft, index, term uint64) {
	applied := n.db.Meta().Applied
	if index > applied {
		return
	}
	n.divergedFrom(r, index, applied, fmt.Sprintf("the leader's log entry %d is of term %d, later than the entries this node's state applied up to %d, which its log did not hold", index, term, applied))
}

// divergedFrom stops the node for a state that holds another history than
// its leader's from index from on (tailCut, unverifiedEntry).
func (n *Node) divergedFrom(r *raft.Raft, from, applied uint64, detail string) {
	if n.supersededBy.Load() != nil {
		return
	}
	rec := supersededRecord{From: "of this cluster", At: time.Now().UTC(), Diverged: true, CutFrom: from, Applied: applied, Detail: detail}
	if r != nil {
		if addr, id := r.LeaderWithID(); id != "" {
			rec.From, rec.Address = string(id), string(addr)
		}
	}
	n.diverged.Store(true)
	n.markSuperseded(rec, "the leader replaced entries this node's state had applied: this data dir holds another history than the cluster's; it answers every request 503 from now on, and will not start on this data dir again")
}

// markerDetail is err's text from supersededMarker on (a transport wraps
// the member's answer in words of its own).
func markerDetail(err error) string {
	detail := err.Error()
	if i := strings.Index(detail, supersededMarker); i >= 0 {
		detail = detail[i:]
	}
	return detail
}

// markSuperseded makes the node answer every request 503 with rec's
// message, and writes rec into supersededFile so that it does not start
// on this data dir again. The first call wins.
func (n *Node) markSuperseded(rec supersededRecord, what string) {
	msg := fmt.Sprintf("%v: %s", rec.err(), rec.message(n.cfg.DataDir))
	if !n.supersededBy.CompareAndSwap(nil, &msg) {
		return
	}
	b, _ := json.MarshalIndent(rec, "", "  ")
	if werr := writeSynced(filepath.Join(n.cfg.DataDir, supersededFile), append(b, '\n')); werr != nil {
		n.log.Error("could not record that this node was left out of a recovery; it refuses requests until it stops, and a restart would serve this data dir again", "error", werr)
	} else if werr := syncDir(n.cfg.DataDir); werr != nil {
		n.log.Error("could not sync the data dir after recording that this node was left out of a recovery", "error", werr)
	}
	n.log.Error(what, "recovered-member", rec.From, "error", msg)
}

// Superseded is why this node answers every request 503: a member of
// its cluster was recovered without it (superseded.go). "" otherwise.
func (n *Node) Superseded() string {
	if m := n.supersededBy.Load(); m != nil {
		return *m
	}
	return ""
}
