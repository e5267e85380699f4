package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/idem-store/idem/raftfsm"
)

func init() {
	extraCommands["recover"] = command{Run: runRecover, Summary: "offline: rewrite a stopped node's membership after the cluster lost its quorum for good"}
}

const recoverUsage = `Usage: idem recover --data-dir DIR --node-id ID --peers ID=RAFTADDR[,ID=RAFTADDR...] [--yes] [--force]

For a cluster that lost its quorum for good (most voters destroyed). Run it
on a survivor whose 'idem serve' is STOPPED: it rewrites the raft
configuration in DIR to the --peers given, after applying every entry of the
node's own log to its state. It changes membership only: no record is
deleted. Without --yes it only prints what it would do and exits 0 (1 if --yes would
be refused, 2 for a bad flag or a --data-dir that holds no node).

Every other member of the node's current configuration must be stopped
first. Before it changes anything, it tries a TCP connection (1 s) to each
other member's raft address and the HTTP address its state records; if any
answers it refuses and changes nothing: that cluster may still have its
quorum, and a recovered node beside it would form a second cluster that
claims the same keys again. Ask the live members instead (idem cluster
status, remove, join). --force skips this check. A run that finishes a
recover stopped part-way (recovering.json in DIR) also tries the members
before that recover, which the file records: after the rewrite the
configuration no longer lists them.

Safest: recover ONE survivor (the one whose raft log ends highest: the
latest term, then the highest index; this command prints both) with --peers
naming only itself, start it, then join the other nodes with empty data dirs
(move their old ones aside). If several survivors are named in --peers, run
the same command on each of them before starting any.

It also rebuilds the only node (or one of several all in that state) whose
raft log was truncated behind snapshots that are gone (snapshots/ emptied,
or its newest snapshot deleted or damaged), which idem serve refuses: it
first writes a snapshot of the state in fsm/ below the log's first entry.
The lost snapshot held the configuration, so every member the state records
is checked as above.

Flags:
`

func runRecover(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	const name = "idem recover"
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard) // parseArgs prints errors and help, once
	dataDir := fs.String("data-dir", "", "data dir of the stopped node")
	nodeID := fs.String("node-id", "", "id of that node")
	peersFlag := fs.String("peers", "", "the new voters: comma-separated ID=RAFTADDR, this node included (its RAFTADDR is the --raft-addr it will start with)")
	yes := fs.Bool("yes", false, "do it (without: print the plan and change nothing)")
	force := fs.Bool("force", false, "skip the check that no other member of the current configuration answers at its raft or HTTP address\n(only when they are known to be gone for good and their addresses now belong to something else)")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), recoverUsage)
		printFlags(fs.Output(), fs)
	}
	if code, done := parseArgs(fs, args, name, stdout, stderr); done {
		return code
	}
	var bad []string
	if *dataDir == "" {
		bad = append(bad, "--data-dir is required")
	}
	switch {
	case *nodeID == "":
		bad = append(bad, "--node-id is required: the id of the stopped node (its idem serve --node-id, which node.json in the data dir records)")
	case !nodeIDPattern.MatchString(*nodeID):
		bad = append(bad, fmt.Sprintf("--node-id %q must be 1-64 letters, digits, '.', '_' or '-'", *nodeID))
	}
	peers, err := parsePeers(*peersFlag)
	if err != nil {
		bad = append(bad, err.Error())
	} else if *nodeID != "" && !hasPeer(peers, *nodeID) {
		bad = append(bad, fmt.Sprintf("--peers must include this node (%s), with the raft address it will start with", *nodeID))
	}
	if len(bad) > 0 {
		fmt.Fprintf(stderr, "%s: %s\n", name, strings.Join(bad, "\n"+name+": "))
		return 2
	}
	if err := noNodeAt(*dataDir); err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", name, err)
		return 2
	}
	if err := checkNodeFile(*dataDir, *nodeID); err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", name, permissionHint(err, *dataDir))
		var other *otherNodeIDError
		if errors.As(err, &other) {
			return 2 // a bad flag, as idem serve's refusal of the same id
		}
		return 1
	}
	restrictUmask() // what it writes into the data dir is the user's alone, as idem serve's

	// A failed write of the state store's files stops the process from
	// inside Pebble: recover exited 1 saying nothing (its store logged to
	// a discarding logger), and would have used a running node's words.
	// With no logger here, the stop goes to slog's default (stderr).
	st, err := raftfsm.ReadOfflineStateWith(*dataDir, raftfsm.OfflineOptions{
		Stop: fmt.Sprintf("%s: stopped reading %s before it changed anything in it", name, *dataDir)})
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", name, permissionHint(err, *dataDir))
		return 1
	}
	// A member's HTTP address given as its raft address (the flag most
	// often confused) recorded a configuration no node can start with: the
	// start command printed after it was refused (--http-addr and
	// --raft-addr the same).
	if bad := httpAddrsAsRaft(peers, st.HTTPAddrs, st.Configuration); len(bad) > 0 {
		fmt.Fprintf(stderr, "%s: %s\n%s: nothing was changed\n", name, strings.Join(bad, "\n"+name+": "), name)
		return 2
	}
	if bad := peersNotMembers(peers, st); bad != "" {
		fmt.Fprintf(stderr, "%s: %s\n%s: nothing was changed\n", name, bad, name)
		return 2
	}
	fmt.Fprintf(stdout, "data dir:              %s (node %s)\n", *dataDir, *nodeID)
	fmt.Fprintf(stdout, "raft log ends at:      index %d, term %d (state applied to %d; the rest is applied on recovery)\n", st.LastIndex, st.LastTerm, st.Applied)
	fmt.Fprintf(stdout, "current configuration: %s\n", fmtPeers(st.Configuration))
	superseded := supersededNote(*dataDir, st.SupersededBy)
	if superseded != "" {
		fmt.Fprintf(stdout, "superseded:            %s\n", superseded)
	}
	if note := keptBackNote(*dataDir, *nodeID, st); note != "" {
		fmt.Fprintf(stdout, "kept back:             %s\n", note)
	}
	if u := st.Unfinished; u != nil {
		what := "a recover (its " + raftfsm.RecoveringFile + " is damaged or unreadable)"
		if len(u.Peers) > 0 {
			what = fmt.Sprintf("a recover to %s (begun %s)", fmtPeers(u.Peers), u.At.Format(time.RFC3339))
		}
		fmt.Fprintf(stdout, "unfinished recover:    %s did not finish; idem serve refuses this data dir until a recover finishes\n", what)
	}
	if st.LogUnreadable != "" {
		fmt.Fprintf(stdout, "raft log:              cannot be read (%s): recovery sets it aside (raft-wal.unreadable-*, kept) and starts a new log at the state's index %d; what the old log held above that index (writes committed but not yet applied, if any) is lost\n", st.LogUnreadable, st.Applied)
	}
	if st.LogHeadLost > 0 {
		fmt.Fprintf(stdout, "snapshots:             none covers the raft log, which starts at index %d (snapshots/ was emptied, or its newest snapshot deleted or damaged): the configuration above is only what the log's remaining entries hold; recovery writes a snapshot of the state at index %d first\n", st.LogHeadLost, st.LogHeadLost-1)
	}
	if st.LogHeadLost > 0 || st.LogUnreadable != "" {
		var recorded []raftfsm.Peer
		for _, p := range st.RecordedMembers {
			if p.ID != *nodeID {
				recorded = append(recorded, p)
			}
		}
		if len(recorded) > 0 {
			fmt.Fprintf(stdout, "recorded members:      %s (the state records them, so they are checked as members)\n", fmtPeers(recorded))
		}
	}
	if len(st.UnfinishedMembers) > 0 {
		fmt.Fprintf(stdout, "members before:        %s (the unfinished recover lists them, so they are checked as members)\n", fmtPeers(st.UnfinishedMembers))
	}
	fmt.Fprintf(stdout, "new configuration:     %s\n", fmtPeers(peers))
	var live []liveMember
	if *force {
		fmt.Fprintf(stdout, "other members alive:   not checked (--force)\n")
	} else {
		live = probeMembers(ctx, st, *nodeID, recoverProbeTimeout)
		if len(live) == 0 {
			fmt.Fprintf(stdout, "other members alive:   none answered at their raft or HTTP addresses\n")
		} else {
			fmt.Fprintf(stdout, "other members alive:   %s\n", fmtLive(live))
		}
		if ids := unprobedMembers(st, *nodeID); len(ids) > 0 {
			fmt.Fprintf(stdout, "not checked:           %s: no address known (the unfinished recover's file, of an earlier release, lists ids only, and the state records none for them): make sure they are stopped\n", strings.Join(ids, ", "))
		}
	}
	// The compaction starts a new raft log segment, preallocated whole,
	// before it removes the old one: on a nearly full disk --yes failed
	// midway with a bare ENOSPC.
	need, parts := raftfsm.RecoverSpace()
	noRoom := raftfsm.CheckSpace("the recovery", *dataDir, need, parts)
	if noRoom == nil {
		fmt.Fprintf(stdout, "free disk space:       enough (it needs %s)\n", fmtMiB(need))
	} else {
		fmt.Fprintf(stdout, "free disk space:       too little (it needs %s)\n", fmtMiB(need))
	}
	if !*yes {
		fmt.Fprintf(stdout, "\nThis rewrites the membership recorded in %s: every entry of its raft log, committed or not, is applied to its state, then the log is compacted into a snapshot carrying the new configuration. Records are not deleted. Make sure the nodes left out are gone for good: if they came back they would not be part of this cluster.\n", *dataDir)
		if len(peers) > 1 {
			fmt.Fprintf(stdout, "Every node in the new configuration must be recovered with the same --peers before any is started.\n")
		}
		fmt.Fprintf(stdout, "Every other member of the %s must be stopped first: with --yes, it refuses and changes nothing if any of them answers at its raft or HTTP address (--force skips this check).\n", membersWhat(st, nil))
		if len(live) > 0 {
			fmt.Fprintf(stdout, "\n")
			printLiveRefusal(stderr, name, membersWhat(st, live), live)
			fmt.Fprintf(stderr, "%s: nothing was changed; --yes would be refused while they answer\n", name)
			return 1
		}
		if noRoom != nil {
			fmt.Fprintf(stderr, "%s: %v; --yes would be refused\n", name, noRoom)
			return 1
		}
		// A dry run that found nothing in the way only reports: exit 0, so a
		// script can tell it from a refusal or an error (exit 1 or 2).
		fmt.Fprintf(stderr, "%s: nothing was changed; run again with --yes to do it\n", name)
		return 0
	}
	if len(live) > 0 {
		printLiveRefusal(stderr, name, membersWhat(st, live), live)
		fmt.Fprintf(stderr, "%s: refused; nothing was changed\n", name)
		return 1
	}
	if noRoom != nil {
		fmt.Fprintf(stderr, "%s: %v\n", name, noRoom)
		return 1
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	// A stopped recover is finished by a run again with the same --peers
	// (raftfsm's recovering file); the page cache is a failed write's.
	stop := fmt.Sprintf("%s: stopped before it finished in %s; restart the machine before running it again with the same --peers (it finishes what a stopped run began): the page cache may still hold writes the disk does not, which that run would read back as done", name, *dataDir)
	if _, err := raftfsm.RecoverWith(*dataDir, *nodeID, peers, raftfsm.OfflineOptions{Logger: log, Stop: stop}); err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", name, permissionHint(err, *dataDir))
		return 1
	}
	after, err := raftfsm.ReadOfflineStateWith(*dataDir, raftfsm.OfflineOptions{
		Stop: fmt.Sprintf("%s: rewrote the configuration in %s, then stopped reading the result back", name, *dataDir)})
	if err != nil {
		fmt.Fprintf(stderr, "%s: recovered, but reading the result failed: %v\n", name, err)
		return 1
	}
	var self raftfsm.Peer
	for _, p := range peers {
		if p.ID == *nodeID {
			self = p
		}
	}
	fmt.Fprintf(stdout, "\nrecovered: configuration is now %s, state applied to index %d\n", fmtPeers(after.Configuration), after.Applied)
	printStartHint(stdout, *dataDir, *nodeID, self.RaftAddr, st.HTTPAddrs[*nodeID])
	if superseded != "" {
		fmt.Fprintf(stdout, "but first: %s\n", superseded)
	}
	if len(peers) == 1 {
		fmt.Fprintf(stdout, "it elects itself; then add nodes with empty data dirs (%s serve ... --join %s's HTTP address)\n", raftfsm.CommandName, *nodeID)
	}
	return 0
}

// peersNotMembers names the peers that are no member of the configuration
// st records (nor of an unfinished recover's, nor recorded by the state),
// or returns "". Such a peer, a typo (n6 for n3) or a new node, became a
// voter of the recovered cluster that holds nothing and can never be
// recovered with the same --peers: with two peers, the survivor alone
// could elect no leader. New nodes join the recovered one with --join. A
// log that cannot be read tells no configuration: nothing is checked.
func peersNotMembers(peers []raftfsm.Peer, st raftfsm.OfflineState) string {
	if st.LogUnreadable != "" || len(st.Configuration) == 0 {
		return ""
	}
	known := map[string]bool{}
	var members []string
	add := func(ps []raftfsm.Peer) {
		for _, p := range ps {
			if !known[p.ID] {
				known[p.ID] = true
				members = append(members, p.ID)
			}
		}
	}
	add(st.Configuration)
	add(st.RecordedMembers)
	add(st.UnfinishedMembers)
	if st.Unfinished != nil {
		add(st.Unfinished.Peers)
	}
	var bad, ids []string
	for _, p := range peers {
		if !known[p.ID] {
			bad = append(bad, p.ID+"="+p.RaftAddr)
			ids = append(ids, p.ID)
		}
	}
	if len(bad) == 0 {
		return ""
	}
	slices.Sort(members)
	// Refused also when the peer is a member this node missed the joining
	// of (its log lacks the entry that added it): this data dir cannot
	// tell that from a typo. The way out is the survivor that lists it,
	// which holds everything this one committed (the refusal read only
	// "check the id for a typo").
	them := strings.Join(ids, ", ")
	return fmt.Sprintf("--peers %s: not a member of this data dir's configuration (%s), whose raft log ends at index %d. "+
		"If %s joined the cluster after that, another survivor's configuration lists it (idem recover's dry run on that survivor's data dir prints it): "+
		"this node's log lacks the entry that added it, and holds nothing committed that survivor's lacks. Recover that survivor instead, with --peers naming it and any other survivor that lists %s, not this node; "+
		"then start this node with an empty data dir and --join naming a recovered node. "+
		"Otherwise check the id for a typo; new nodes are added once the recovered cluster runs, with idem serve --join. "+
		"--peers names survivors, this node and any other member whose data dir is recovered with the same --peers before any starts; a node that holds nothing would be a voter the recovered cluster waits for",
		strings.Join(bad, ", "), strings.Join(members, ", "), st.LastIndex, them, them)
}

// httpAddrsAsRaft names every peer whose raft address is the HTTP address
// the state records for a member, with that member's raft address in the
// current configuration when it has one.
func httpAddrsAsRaft(peers []raftfsm.Peer, httpAddrs map[string]string, conf []raftfsm.Peer) []string {
	raftOf := map[string]string{}
	for _, p := range conf {
		raftOf[p.ID] = p.RaftAddr
	}
	var bad []string
	for _, p := range peers {
		for id, h := range httpAddrs {
			if h == "" || !strings.EqualFold(h, p.RaftAddr) {
				continue
			}
			msg := fmt.Sprintf("--peers %s=%s: %s is the HTTP address the state records for %s (its --http-addr); --peers takes raft addresses (--raft-addr)", p.ID, p.RaftAddr, p.RaftAddr, id)
			if r := raftOf[p.ID]; r != "" && r != p.RaftAddr {
				msg += fmt.Sprintf(": %s's is %s in the current configuration", p.ID, r)
			}
			bad = append(bad, msg)
			break
		}
	}
	return bad
}

// printStartHint prints the command that starts a node recovered or
// restored into dataDir. httpAddr is the HTTP address the state records
// for the node ("" when it records none): given, the command holds it,
// since a node started without --http-addr would serve on the default
// while its members and clients use the recorded one.
func printStartHint(w io.Writer, dataDir, nodeID, raftAddr, httpAddr string) {
	if httpAddr == "" {
		fmt.Fprintf(w, "start it with: %s serve --data-dir %s --node-id %s --raft-addr %s\n", raftfsm.CommandName, raftfsm.ShellWord(dataDir), nodeID, raftfsm.ShellWord(raftAddr))
		fmt.Fprintln(w, "  plus the --http-addr it serves on (127.0.0.1:7070 if left out) and every other flag it runs with (TLS, --auth-file, --encryption-key-file)")
		return
	}
	fmt.Fprintf(w, "start it with: %s serve --data-dir %s --node-id %s --raft-addr %s --http-addr %s\n", raftfsm.CommandName, raftfsm.ShellWord(dataDir), nodeID, raftfsm.ShellWord(raftAddr), raftfsm.ShellWord(httpAddr))
	fmt.Fprintf(w, "  (%s is the HTTP address the state records for %s, where its members and clients call it: if the node listened elsewhere, such as 0.0.0.0:7070, give that as --http-addr and %s as --http-advertise)\n", httpAddr, nodeID, httpAddr)
	fmt.Fprintln(w, "  plus every other flag it runs with (TLS, --auth-file, --encryption-key-file)")
}

// recoverProbeTimeout bounds each connection attempt of probeMembers.
const recoverProbeTimeout = time.Second

// liveMember is an address of a member of the current configuration that
// accepted a TCP connection.
type liveMember struct {
	id, kind, addr string // kind: "raft" or "HTTP"
}

// probeMembers tries a TCP connection to the raft address of every member
// of st's configuration but self, and to the HTTP address the state records
// for it, all at once, each within timeout. It returns those that answered,
// in the configuration's order. A member answering means the cluster recover
// is about to fork may still be running: recovering this node beside it
// gives two clusters that each elect a leader and accept the same keys.
func probeMembers(ctx context.Context, st raftfsm.OfflineState, self string, timeout time.Duration) []liveMember {
	var cands []liveMember
	// With the snapshot that held the configuration lost, the members the
	// state records may be members still; after an unfinished recover's
	// rewrite, the members before it (raftfsm.OfflineState).
	for _, p := range st.Members() {
		if p.ID == self {
			continue
		}
		if p.RaftAddr != "" {
			cands = append(cands, liveMember{p.ID, "raft", p.RaftAddr})
		}
		if a := st.HTTPAddrs[p.ID]; a != "" && a != p.RaftAddr {
			cands = append(cands, liveMember{p.ID, "HTTP", a})
		}
	}
	answered := make([]bool, len(cands))
	var wg sync.WaitGroup
	for i, c := range cands {
		wg.Add(1)
		go func() {
			defer wg.Done()
			d := net.Dialer{Timeout: timeout}
			conn, err := d.DialContext(ctx, "tcp", c.addr)
			if err == nil {
				conn.Close()
				answered[i] = true
			}
		}()
	}
	wg.Wait()
	var out []liveMember
	for i, c := range cands {
		if answered[i] {
			out = append(out, c)
		}
	}
	return out
}

// unprobedMembers are the ids of the members probeMembers could not try:
// neither a raft nor an HTTP address known (a member before an unfinished
// recover whose file, of an earlier release, lists ids only, and of which
// the state holds no record).
func unprobedMembers(st raftfsm.OfflineState, self string) []string {
	var ids []string
	for _, p := range st.Members() {
		if p.ID != self && p.RaftAddr == "" && st.HTTPAddrs[p.ID] == "" {
			ids = append(ids, p.ID)
		}
	}
	return ids
}

func fmtLive(live []liveMember) string {
	parts := make([]string, len(live))
	for i, l := range live {
		parts[i] = fmt.Sprintf("%s (%s %s)", l.id, l.kind, l.addr)
	}
	return strings.Join(parts, ", ")
}

// membersWhat names the members recover checks: those of the current
// configuration, and, after a recover stopped past its rewrite, those
// before it, which the current configuration no longer lists. With live
// given, it names only what those that answered are.
func membersWhat(st raftfsm.OfflineState, live []liveMember) string {
	if len(st.UnfinishedMembers) == 0 {
		return "current configuration"
	}
	before := func(id string) bool {
		return slices.ContainsFunc(st.UnfinishedMembers, func(p raftfsm.Peer) bool { return p.ID == id })
	}
	if len(live) > 0 && !slices.ContainsFunc(live, func(l liveMember) bool { return before(l.id) }) {
		return "current configuration"
	}
	if len(live) > 0 && !slices.ContainsFunc(live, func(l liveMember) bool { return !before(l.id) }) {
		return "configuration before the unfinished recover"
	}
	return "current configuration, or of the one before the unfinished recover,"
}

// printLiveRefusal says which members answered and what to do instead;
// what names the configuration they are members of (membersWhat).
func printLiveRefusal(w io.Writer, name, what string, live []liveMember) {
	fmt.Fprintf(w, "%s: members of the %s are alive: each of these addresses accepted a connection:\n", name, what)
	for _, l := range live {
		fmt.Fprintf(w, "  %s: %s address %s\n", l.id, l.kind, l.addr)
	}
	fmt.Fprintf(w, "%s: recover is only for a cluster that lost its quorum for good. Recovering this node while they run makes a second cluster beside theirs: both elect leaders and the same key is claimed twice.\n", name)
	fmt.Fprintf(w, "%s: ask the live members instead: idem cluster status --addr HTTPADDR, then idem cluster remove / idem cluster join (or start this node as it was and let it rejoin).\n", name)
	fmt.Fprintf(w, "%s: if the cluster really is lost, stop every other member before recovering. --force skips this check (only if those addresses now belong to something else).\n", name)
}

// parsePeers parses ID=RAFTADDR[,ID=RAFTADDR...].
func parsePeers(s string) ([]raftfsm.Peer, error) {
	if strings.TrimSpace(s) == "" {
		return nil, errors.New("--peers is required (ID=RAFTADDR[,ID=RAFTADDR...])")
	}
	var out []raftfsm.Peer
	ids, addrs := map[string]bool{}, map[string]bool{}
	for _, part := range strings.Split(s, ",") {
		id, addr, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok || !nodeIDPattern.MatchString(id) {
			return nil, fmt.Errorf("--peers: %q is not ID=RAFTADDR with a valid node id", part)
		}
		if err := checkDialableRaftAddr(addr); err != nil {
			return nil, fmt.Errorf("--peers: raft address %q of %s %v", addr, id, err)
		}
		if ids[id] || addrs[addr] {
			return nil, fmt.Errorf("--peers: %s or %s is named twice", id, addr)
		}
		ids[id], addrs[addr] = true, true
		out = append(out, raftfsm.Peer{ID: id, RaftAddr: addr})
	}
	return out, nil
}

func hasPeer(peers []raftfsm.Peer, id string) bool {
	for _, p := range peers {
		if p.ID == id {
			return true
		}
	}
	return false
}

func fmtPeers(peers []raftfsm.Peer) string {
	if len(peers) == 0 {
		return "(none)"
	}
	parts := make([]string, len(peers))
	for i, p := range peers {
		parts[i] = p.ID + "=" + p.RaftAddr
		if p.RaftAddr == "" {
			parts[i] = p.ID + " (no raft address known)"
		}
		if p.Suffrage != "" && p.Suffrage != "Voter" {
			parts[i] += " (" + p.Suffrage + ")"
		}
	}
	return strings.Join(parts, ", ")
}

// noNodeAt says, for a --data-dir that holds no node (it does not exist,
// is not a directory, or holds none of node.json, fsm/ and raft.db: an
// empty directory, a typo, the parent of the node dirs), that it is the
// flag that is wrong, and which directories near it hold nodes; nil when
// it holds one. Such a run exited 1, as a refusal to recover a node does,
// with raftfsm's "holds no node's state"; a wrong flag exits 2.
func noNodeAt(dir string) error {
	if hasRestoreMarker(dir) {
		// Part of a backup, or none: no node to recover.
		return errors.New(unfinishedRestoreProblem(dir))
	}
	fi, err := os.Stat(dir)
	var what string
	switch {
	case errors.Is(err, os.ErrNotExist):
		what = "it does not exist"
	case err != nil:
		return nil // unreadable: the error that follows says why (permissionHint)
	case !fi.IsDir():
		what = "it is not a directory"
	case holdsNode(dir), !surelyNoNode(dir):
		return nil
	default:
		what = "it holds no node.json, fsm/ or raft.db"
	}
	hint := ""
	var under []string
	if entries, err := os.ReadDir(dir); err == nil {
		for _, e := range entries {
			if e.IsDir() && holdsNode(filepath.Join(dir, e.Name())) {
				under = append(under, filepath.Join(dir, e.Name()))
			}
		}
	}
	if len(under) == 0 {
		if parent := filepath.Dir(filepath.Clean(dir)); holdsNode(parent) {
			under = []string{parent}
		} else {
			under, _ = nodesBeside(dir)
		}
	}
	if len(under) > 0 {
		hint = " (these hold nodes: " + strings.Join(under, ", ") + ")"
	}
	return fmt.Errorf("--data-dir %s: no node is there (%s): give the data dir of the stopped node, its idem serve --data-dir%s; nothing was changed", dir, what, hint)
}

// surelyNoNode says that none of node.json, fsm/ and raft.db is in dir,
// each known absent: a dir the user may not enter (another user's, mode
// 0700) fails every look inside with permission denied, which is not
// "no node is there" (the error that follows says what to do).
func surelyNoNode(dir string) bool {
	for _, name := range []string{"node.json", "fsm", "raft.db"} {
		if _, err := os.Stat(filepath.Join(dir, name)); !errors.Is(err, os.ErrNotExist) {
			return false
		}
	}
	return true
}

// checkNodeFile refuses a --node-id that differs from the one the data dir
// was created for.
func checkNodeFile(dir, nodeID string) error {
	b, err := os.ReadFile(filepath.Join(dir, "node.json"))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	var nf nodeFile
	if err := json.Unmarshal(b, &nf); err != nil {
		return corruptNodeFile(filepath.Join(dir, "node.json"), err)
	}
	if nf.NodeID != "" && nf.NodeID != nodeID {
		return &otherNodeIDError{given: nodeID, recorded: nf.NodeID, dir: dir}
	}
	return nil
}

// otherNodeIDError is a --node-id that is not the one node.json records:
// a usage error (exit 2), which exited 1 as if the data dir were at fault.
type otherNodeIDError struct{ given, recorded, dir string }

func (e *otherNodeIDError) Error() string {
	return fmt.Sprintf("--node-id %q differs from %q, the node %s was created for: run it with --node-id %s (and check that --data-dir is the survivor's)", e.given, e.recorded, e.dir, e.recorded)
}

// supersededNote says, for a data dir holding superseded.json (a member
// that a recovery or restore left out, told so by from), that idem serve
// refuses it until the file is deleted, and when to delete it; "" when
// from is "" (no file). The message such a node answers advises idem
// recover on its data dir when its log ends highest, but recover left the
// file, and the serve it printed next was refused (an operator walk).
func supersededNote(dataDir, from string) string {
	if from == "" {
		return ""
	}
	path := filepath.Join(dataDir, raftfsm.SupersededFile)
	return fmt.Sprintf("%s is there: %s said this node was left out of a recovery or restore, and idem serve refuses this data dir until the file is deleted (recovering does not delete it). "+
		"Delete it only if this copy is the one to keep and %s is stopped for good: its cluster may have taken claims since, which this copy lacks", path, from, from)
}

// keptBackNote says, for a data dir whose node the leader kept a
// non-voter when it last heard (raftfsm.KeptFile, while its configuration
// lists it as one), that recovering makes it a voter, and idem serve then
// removes the file: a cluster recovered from a node whose state lacks
// records lacks them too, and claims their keys again. "" otherwise (no
// file, or a stale one of a voter, which idem serve removes anyway).
// The operator picking the survivor whose log ends highest, which a
// caught-up non-voter's may, was told nothing of it.
func keptBackNote(dataDir, nodeID string, st raftfsm.OfflineState) string {
	if st.KeptBack == "" {
		return ""
	}
	for _, p := range st.Configuration {
		if p.ID != nodeID {
			continue
		}
		if p.Suffrage != "Nonvoter" {
			return ""
		}
		return fmt.Sprintf("%s is there: the leader %s kept this node a non-voter, and it still is one: %s. "+
			"Recovered, it is a voter, and idem serve removes the file: if its state lacks records, so does every node recovered from it or joined to it, and their keys are claimed again. "+
			"Prefer another survivor if one is left (one whose log ends lower lacks the writes above its end instead: weigh which loses less)", filepath.Join(dataDir, raftfsm.KeptFile), st.KeptBackBy, st.KeptBack)
	}
	return ""
}

// fmtMiB writes a size in MiB, to a tenth where it is not whole.
func fmtMiB(n uint64) string {
	if n%(1<<20) == 0 {
		return fmt.Sprintf("%d MiB", n>>20)
	}
	return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
}
