package chaos

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"slices"
	"strings"
	"time"
)

// Nemesis kinds, in the order `--nemesis all` lists them (each cycle runs
// them in a seeded order).
var NemesisKinds = []string{"kill", "pause", "partition", "clock", "rejoin", "snapshot", "fsm-loss", "quiet-restart", "membership", "retention"}

// OneNodeKinds are the kinds a one-node cluster (--nodes 1) runs: the
// others act on followers. A one-node store paused is its whole cluster
// paused with its leader staying leader, which a cluster of three, whose
// leader steps down when its lease check finds it contacted no one for
// the pause, does not show.
var OneNodeKinds = []string{"kill", "pause", "clock", "disk"}

// NemesisHelp is one line per kind, for --help and the docs.
var NemesisHelp = map[string]string{
	"kill":          "kill -9 the leader or a random node, restart it 2-5s later",
	"pause":         "SIGSTOP the leader, or every node at once, for 1s to --pause-max (15s), then SIGCONT",
	"partition":     "isolate the leader, split majority/minority, or one-way loss from the leader",
	"clock":         "restart a node with --clock-offset +-10m for 8s",
	"rejoin":        "remove a follower, wipe its data dir, re-add it with --join",
	"snapshot":      "kill a follower while the leader writes 200+ entries and compacts, so it catches up by snapshot",
	"fsm-loss":      "stop the cluster (a minority first), delete the fsm directory of the node that takes no snapshots (raft log kept), restart it first with its clock an hour ahead",
	"quiet-restart": "pause the clients, transfer leadership, linearizable reads, stop the followers then the leader once it has snapshotted, restart all",
	"membership":    "as a careless operator: join an absent node, remove the leader and re-add it with the same id, remove the absent node",
	"retention":     "restart a node with its own --retention 1m, hand it leadership, keep it 8s, restart it with the cluster's",
	"disk":          "fill the leader's or a node's disk (its own 1 GiB filesystem) under --min-free-disk, under an eighth of it (ballast gone), or to no byte free, for 3-8s, a third of the time kill -9 and restart it while full; not in all: needs root, mkfs.ext4 and loop devices",
}

// A nemesis injects one fault and heals it before it returns. It calls
// e.healed() once the fault is undone (processes back, links restored):
// liveness is measured from then, while the nemesis may go on waiting for
// the cluster to settle.
type nemesis func(ctx context.Context, e *env) (detail string, err error)

var nemeses = map[string]nemesis{
	"kill":          killNemesis,
	"pause":         pauseNemesis,
	"partition":     partitionNemesis,
	"clock":         clockNemesis,
	"rejoin":        rejoinNemesis,
	"snapshot":      snapshotNemesis,
	"fsm-loss":      fsmLossNemesis,
	"quiet-restart": quietRestartNemesis,
	"membership":    membershipNemesis,
	"retention":     retentionNemesis,
	"disk":          diskNemesis,
}

// env is what a nemesis acts on.
type env struct {
	cl  *Cluster
	net Partitioner // nil when partitions are unavailable
	rnd *rand.Rand
	w   *Workload // paused by quiet-restart; nil when there is none
	// bound is how long a node may take to be ready after a heal; a
	// nemesis waits at most that long for the cluster between its steps.
	bound time.Duration
	// skew is the clock offset of the fsm-loss nemesis: more than the
	// retention, so a cluster time that followed it expires every record.
	skew time.Duration
	// pauseMax is the longest SIGSTOP of the pause nemesis (PauseFor).
	pauseMax time.Duration
	// healed marks the current event's heal time (set by schedule).
	healed func()
	// disks are the nodes' own filesystems; nil without the disk nemesis.
	disks *Disks
}

// ParseNemeses turns "kill,pause", "all" or "all,disk" into a list of
// kinds, each once: all is NemesisKinds, which the kinds of OptInKinds may
// be named beside.
func ParseNemeses(s string) ([]string, error) {
	if s == "" || s == "none" {
		return nil, nil
	}
	var out []string
	for _, k := range strings.Split(s, ",") {
		k = strings.TrimSpace(k)
		if k == "all" {
			for _, a := range NemesisKinds {
				if !slices.Contains(out, a) {
					out = append(out, a)
				}
			}
			continue
		}
		if _, ok := nemeses[k]; !ok {
			return nil, fmt.Errorf("unknown nemesis %q (want %s, all or none)", k, strings.Join(AllKinds(), ","))
		}
		if slices.Contains(out, k) {
			return nil, fmt.Errorf("nemesis %q is listed twice", k)
		}
		out = append(out, k)
	}
	return out, nil
}

// picker hands out nemesis kinds: every kind once per cycle, each cycle in
// a seeded order, so a run of n events covers every kind as soon as n
// reaches the number of kinds.
type picker struct {
	rnd   *rand.Rand
	kinds []string
	cycle []string
}

func (p *picker) next() string {
	if len(p.cycle) == 0 {
		p.cycle = append([]string(nil), p.kinds...)
		p.rnd.Shuffle(len(p.cycle), func(i, j int) { p.cycle[i], p.cycle[j] = p.cycle[j], p.cycle[i] })
	}
	k := p.cycle[0]
	p.cycle = p.cycle[1:]
	return k
}

// schedule runs the nemeses one after another, with interval between them,
// until ctx ends or less than reserve remains before deadline, but at
// least minEvents events.
func schedule(ctx context.Context, e *env, h *History, kinds []string, interval time.Duration, deadline time.Time, reserve time.Duration, minEvents int, current func(string)) {
	if len(kinds) == 0 {
		return
	}
	if !sleep(ctx, interval) {
		return
	}
	p := &picker{rnd: e.rnd, kinds: kinds}
	for n := 0; ctx.Err() == nil && (time.Until(deadline) > reserve || n < minEvents); n++ {
		kind := p.next()
		current(kind)
		ev := Event{Kind: kind, Start: h.Now()}
		e.healed = func() {
			if ev.Healed == 0 {
				ev.Healed = h.Now()
			}
		}
		detail, err := nemeses[kind](ctx, e)
		ev.End, ev.Detail = h.Now(), detail
		if ev.Healed == 0 {
			ev.Healed = ev.End
		}
		if err != nil {
			ev.Error = err.Error()
		}
		h.AddEvent(ev)
		current("")
		if !sleep(ctx, interval) {
			return
		}
	}
}

// victim picks the leader half of the time, another live node otherwise.
func victim(ctx context.Context, e *env) (*Node, string, error) {
	l, err := e.cl.WaitLeader(ctx, 10*time.Second)
	if err != nil {
		return nil, "", err
	}
	if e.rnd.IntN(2) == 0 {
		return l, " (leader)", nil
	}
	live := e.cl.Live()
	n := pick(e.rnd, live)
	if n == l {
		return n, " (leader)", nil
	}
	return n, "", nil
}

func killNemesis(ctx context.Context, e *env) (string, error) {
	n, role, err := victim(ctx, e)
	if err != nil {
		return "kill: no target", err
	}
	e.cl.Kill(n)
	down := 2*time.Second + time.Duration(e.rnd.IntN(3000))*time.Millisecond
	sleep(ctx, down)
	detail := fmt.Sprintf("kill -9 %s%s, restarted after %s", n.ID, role, down.Round(100*time.Millisecond))
	if err := e.cl.Start(n); err != nil {
		return detail, err
	}
	e.healed()
	return detail, e.cl.WaitReady(ctx, []*Node{n}, e.bound)
}

// Pause lengths. Up to 3 s, the pause nemesis stopped the leader for less
// than ttl.RewindAfter (5 s), and never the whole cluster: a leader that
// stays leader through a pause longer than ttl.MaxStep (10 s) stamped its
// reading on resume, and the first entries after it were decided at the
// capped time, so the records and leases they granted ran out early (the
// fix is ttl.Clock.StampMs). The idle tick and the requests queued in
// the pause take the first capped stamps: on a one-node store only pauses
// of 40 s and more had a claim called late in the pause decided at one
// (--pause-max 60s).
const (
	MinPause        = time.Second
	DefaultPauseMax = 15 * time.Second
	// MaxPauseMax bounds --pause-max: a whole-cluster pause longer than
	// this is an outage, not a pause, and the run would be mostly that.
	MaxPauseMax = 2 * time.Minute
)

// PauseFor picks a pause length from MinPause to max (at least MinPause),
// uniformly in steps of 100 ms.
func PauseFor(rnd *rand.Rand, max time.Duration) time.Duration {
	steps := int64((max - MinPause) / (100 * time.Millisecond))
	if steps <= 0 {
		return MinPause
	}
	return MinPause + time.Duration(rnd.Int64N(steps+1))*100*time.Millisecond
}

// pauseNemesis stops the leader alone (the others elect another and the
// old leader comes back a follower), or every node at once, for PauseFor.
// A whole cluster stopped resumes with its leader first, which can then
// stay leader: it stamps after a pause in which nothing was applied, the
// case a paused one-node store, a docker pause or a paused VM host make.
//
// While the whole cluster is stopped the clients are held (once their
// requests in flight have timed out) until just before SIGCONT: the
// requests that would have timed out meanwhile queue up at the leader and
// are decided first on resume, so the claims called late in the pause,
// the only ones whose callers could see a record or lease cut short by
// the first entries' times (ClockChecks), would be decided after cluster
// time had caught up and show nothing.
func pauseNemesis(ctx context.Context, e *env) (string, error) {
	l, err := e.cl.WaitLeader(ctx, 10*time.Second)
	if err != nil {
		return "pause: no leader", err
	}
	d := PauseFor(e.rnd, cmp.Or(e.pauseMax, DefaultPauseMax))
	victims, what := []*Node{l}, fmt.Sprintf("%s (leader)", l.ID)
	whole := false
	if others := without(e.cl.Live(), l); len(others) == 0 {
		what, whole = fmt.Sprintf("%s (leader, the whole cluster)", l.ID), true
	} else if e.rnd.IntN(2) == 0 {
		// The leader first, then the rest; resumed in the same order.
		victims = append(victims, others...)
		what, whole = fmt.Sprintf("every node (%s, leader %s)", ids(victims), l.ID), true
	}
	var errs []error
	var paused []*Node
	for _, n := range victims {
		if err := e.cl.Pause(n); err != nil {
			errs = append(errs, err)
			continue
		}
		paused = append(paused, n)
	}
	detail := fmt.Sprintf("SIGSTOP %s for %s, then SIGCONT", what, d.Round(100*time.Millisecond))
	if len(paused) > 0 {
		if hold := d - pauseRelease; whole && e.w != nil && hold >= e.w.cfg.Timeout+time.Second {
			held := make(chan struct{})
			go func() { e.w.Pause(); close(held) }()
			sleep(ctx, hold)
			<-held // the requests in flight have timed out by now
			e.w.Resume()
			sleep(ctx, pauseRelease)
			detail += fmt.Sprintf(" (clients held from their timeouts to %s before it)", pauseRelease)
		} else {
			sleep(ctx, d)
		}
	}
	for _, n := range paused {
		if err := e.cl.Resume(n); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return detail, errors.Join(errs...)
	}
	e.healed()
	return detail, e.cl.WaitReady(ctx, victims, e.bound)
}

// pauseRelease is how long before the SIGCONT of a whole cluster the held
// clients go on.
const pauseRelease = 500 * time.Millisecond

func partitionNemesis(ctx context.Context, e *env) (string, error) {
	if e.net == nil {
		return "partition skipped: " + netUnavailable, nil
	}
	l, err := e.cl.WaitLeader(ctx, 10*time.Second)
	if err != nil {
		return "partition: no leader", err
	}
	others := without(e.cl.Nodes, l)
	var detail string
	switch e.rnd.IntN(3) {
	case 0: // isolate the leader
		err = e.net.Split([]*Node{l}, others)
		detail = fmt.Sprintf("isolate leader %s from %s", l.ID, ids(others))
	case 1: // majority/minority split, the leader in either
		nodes := append([]*Node(nil), e.cl.Nodes...)
		e.rnd.Shuffle(len(nodes), func(i, j int) { nodes[i], nodes[j] = nodes[j], nodes[i] })
		minority := nodes[:(len(nodes)-1)/2]
		majority := nodes[(len(nodes)-1)/2:]
		err = e.net.Split(minority, majority)
		detail = fmt.Sprintf("split %s | %s (leader %s)", ids(minority), ids(majority), l.ID)
	default: // one-way: the leader's packets to the others are lost
		err = e.net.Cut([]*Node{l}, others)
		detail = fmt.Sprintf("one-way loss %s -> %s (leader %s)", l.ID, ids(others), l.ID)
	}
	if err != nil {
		e.net.Heal()
		return detail, err
	}
	hold := 5*time.Second + time.Duration(e.rnd.IntN(3000))*time.Millisecond
	sleep(ctx, hold)
	detail += fmt.Sprintf(" for %s", hold.Round(100*time.Millisecond))
	detail += " via " + e.net.Name()
	if err := e.net.Heal(); err != nil {
		return detail, err
	}
	e.healed()
	return detail, e.cl.WaitReady(ctx, e.cl.Live(), e.bound)
}

func clockNemesis(ctx context.Context, e *env) (string, error) {
	n, role, err := victim(ctx, e)
	if err != nil {
		return "clock: no target", err
	}
	off := 10 * time.Minute
	if e.rnd.IntN(2) == 0 {
		off = -off
	}
	detail := fmt.Sprintf("restart %s%s with --clock-offset %s for 8s", n.ID, role, off)
	e.cl.SetClockOffset(n, off)
	if err := e.cl.Restart(n); err != nil {
		return detail, err
	}
	err = e.cl.WaitReady(ctx, []*Node{n}, e.bound)
	sleep(ctx, 8*time.Second)
	e.cl.SetClockOffset(n, 0)
	if err2 := e.cl.Restart(n); err2 != nil {
		return detail, err2
	}
	e.healed()
	return detail, errors.Join(err, e.cl.WaitReady(ctx, []*Node{n}, e.bound))
}

// retentionNemesis: a node restarted with a --retention of its own (a
// copy-pasted unit file, a forgotten flag), then made the leader. Review
// finding: a claim got the retention of the leader that decided it, so a
// client's window changed with leadership. RetentionChecks flags any claim
// acknowledged with a retention other than the cluster's.
func retentionNemesis(ctx context.Context, e *env) (string, error) {
	n, role, err := victim(ctx, e)
	if err != nil {
		return "retention: no target", err
	}
	own := time.Minute
	detail := fmt.Sprintf("restart %s%s with --retention %s", n.ID, role, own)
	e.cl.SetRetention(n, own)
	if err := e.cl.Restart(n); err != nil {
		e.cl.SetRetention(n, 0)
		return detail, err
	}
	err = e.cl.WaitReady(ctx, []*Node{n}, e.bound)
	// A transfer names n: one to no voter in particular went to the most
	// up to date, which after the first is the old leader, so it ran
	// between two others ("which did not take leadership" in 2 of 8 in a
	// soak).
	led := false
	for try := 0; try < 6 && err == nil && ctx.Err() == nil; try++ {
		l, lerr := e.cl.WaitLeader(ctx, e.bound)
		if lerr != nil {
			err = lerr
			break
		}
		if led = l == n; led {
			break
		}
		e.cl.TransferTo(ctx, l, n) // refused (n catching up) or not, the next round looks again
		sleep(ctx, time.Second)
	}
	if led {
		detail += ", which led for 8s"
	} else {
		detail += ", which did not take leadership"
	}
	sleep(ctx, 8*time.Second)
	e.cl.SetRetention(n, 0)
	if err2 := e.cl.Restart(n); err2 != nil {
		return detail, errors.Join(err, err2)
	}
	e.healed()
	return detail, errors.Join(err, e.cl.WaitReady(ctx, []*Node{n}, e.bound))
}

// rejoinNemesis is the careful way to replace a node's data: remove it
// first, wipe it, start it empty with --join.
func rejoinNemesis(ctx context.Context, e *env) (string, error) {
	fs, l, err := e.cl.Followers(ctx)
	if err != nil || len(fs) == 0 {
		return "rejoin: no follower", err
	}
	f := pick(e.rnd, fs)
	detail := fmt.Sprintf("remove %s, wipe its data, re-add it with --join", f.ID)
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	_, err = l.Client.Remove(rctx, f.ID)
	cancel()
	if err != nil {
		return detail, fmt.Errorf("remove %s: %w", f.ID, err)
	}
	e.cl.Kill(f)
	if err := e.cl.Wipe(f); err != nil {
		return detail, err
	}
	sleep(ctx, time.Second)
	if err := e.cl.Start(f); err != nil {
		return detail, err
	}
	err = e.cl.WaitMember(ctx, f, 45*time.Second)
	e.healed()
	if err != nil {
		return detail, err
	}
	return detail, e.cl.WaitReady(ctx, []*Node{f}, e.bound)
}

// WaitMember polls until the leader's configuration lists the node.
func (c *Cluster) WaitMember(ctx context.Context, n *Node, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for !c.IsMember(ctx, n) {
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("%s did not rejoin within %s", n.ID, timeout)
		}
		sleep(ctx, 300*time.Millisecond)
	}
	return nil
}

// Rejoin starts a node that has no state and waits until it is a member
// again and ready.
func (c *Cluster) Rejoin(ctx context.Context, n *Node) error {
	if err := c.Start(n); err != nil {
		return err
	}
	if err := c.WaitMember(ctx, n, 45*time.Second); err != nil {
		return err
	}
	return c.WaitReady(ctx, []*Node{n}, 30*time.Second)
}

func snapshotNemesis(ctx context.Context, e *env) (string, error) {
	fs, l, err := e.cl.Followers(ctx)
	if err != nil || len(fs) == 0 {
		return "snapshot: no follower", err
	}
	f := pick(e.rnd, fs)
	before := countInLog(f.LogPath, "restored snapshot")
	e.cl.Kill(f)
	st, err := e.cl.Status(ctx, l)
	if err != nil {
		e.cl.Start(f)
		e.healed()
		return "snapshot: leader status", err
	}
	// Enough entries for the leader to compact past the follower
	// (--trailing-logs 16), then a snapshot interval (2s, randomised up
	// to 2x) for it to happen.
	start := st.CommitIndex
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		sleep(ctx, 500*time.Millisecond)
		if ll, err := e.cl.Leader(ctx); err == nil {
			if s, err := e.cl.Status(ctx, ll); err == nil && s.CommitIndex >= start+200 {
				break
			}
		}
	}
	sleep(ctx, 5*time.Second)
	var target uint64
	if ll, err := e.cl.Leader(ctx); err == nil {
		if s, err := e.cl.Status(ctx, ll); err == nil {
			target = s.CommitIndex
		}
	}
	if err := e.cl.Start(f); err != nil {
		return "snapshot: restart " + f.ID, err
	}
	e.healed()
	// Not /readyz alone: it can answer 200 before a restarted follower has
	// caught up (see the report of issue #4), so wait for the index too.
	err = errors.Join(e.cl.WaitReady(ctx, []*Node{f}, e.bound), e.cl.WaitApplied(ctx, f, target, e.bound))
	by := "from the log"
	if countInLog(f.LogPath, "restored snapshot") > before {
		by = "by snapshot"
	}
	return fmt.Sprintf("kill follower %s, leader wrote 200+ entries, %s caught up %s", f.ID, f.ID, by), err
}

func countInLog(path, s string) int {
	b, _ := os.ReadFile(path)
	return bytes.Count(b, []byte(s))
}

func without(nodes []*Node, x *Node) []*Node {
	var out []*Node
	for _, n := range nodes {
		if n != x {
			out = append(out, n)
		}
	}
	return out
}

func ids(nodes []*Node) string {
	var s []string
	for _, n := range nodes {
		s = append(s, n.ID)
	}
	return strings.Join(s, ",")
}

// Net cuts raft links between nodes with iptables rules in a chain of its
// own (IDEM-CHAOS-<raft port>), jumped to from INPUT and OUTPUT, matching the nodes'
// loopback addresses and the raft port. Client and forwarding traffic (HTTP)
// is left alone.
type Net struct {
	raftPort int
	chain    string
}

var netUnavailable = "partitions need root and iptables"

// SetupNet prepares the chain, installing iptables with apt-get when it is
// missing and the harness runs as root. It returns an error saying why
// partitions are unavailable otherwise.
func SetupNet(raftPort int, logf func(string, ...any)) (*Net, error) {
	if os.Geteuid() != 0 {
		netUnavailable = "not running as root (iptables needs it); the partition nemesis is skipped"
		return nil, errors.New(netUnavailable)
	}
	if _, err := exec.LookPath("iptables"); err != nil {
		logf("iptables is missing: apt-get install -y iptables")
		out, err := exec.Command("sh", "-c", "apt-get install -y -qq iptables || (apt-get update -qq && apt-get install -y -qq iptables)").CombinedOutput()
		if err != nil {
			netUnavailable = "iptables is missing and apt-get could not install it; the partition nemesis is skipped"
			return nil, fmt.Errorf("%s: %s", netUnavailable, lastLine(out))
		}
	}
	// One chain per raft port, so runs on different ports never touch
	// each other's rules.
	n := &Net{raftPort: raftPort, chain: fmt.Sprintf("IDEM-CHAOS-%d", raftPort)}
	n.Teardown() // a chain left by a killed run
	if err := ipt("-N", n.chain); err != nil {
		netUnavailable = "iptables does not work here (" + err.Error() + "); the partition nemesis is skipped"
		return nil, errors.New(netUnavailable)
	}
	for _, hook := range []string{"INPUT", "OUTPUT"} {
		if err := ipt("-I", hook, "-j", n.chain); err != nil {
			n.Teardown()
			netUnavailable = "iptables does not work here (" + err.Error() + "); the partition nemesis is skipped"
			return nil, errors.New(netUnavailable)
		}
	}
	return n, nil
}

// Cut drops every raft packet from each node of from to each node of to
// (one way).
func (n *Net) Cut(from, to []*Node) error {
	port := fmt.Sprint(n.raftPort)
	for _, a := range from {
		for _, b := range to {
			for _, dir := range []string{"--dport", "--sport"} {
				if err := ipt("-A", n.chain, "-p", "tcp", "-s", a.IP, "-d", b.IP, dir, port, "-j", "DROP"); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// Split cuts both ways between the two sides.
func (n *Net) Split(a, b []*Node) error {
	return errors.Join(n.Cut(a, b), n.Cut(b, a))
}

// Heal removes every rule of the chain.
func (n *Net) Heal() error { return ipt("-F", n.chain) }

// Name is "iptables".
func (n *Net) Name() string { return PartitionIPTables }

// Teardown removes the jumps and the chain, and nothing else.
func (n *Net) Teardown() {
	for _, hook := range []string{"INPUT", "OUTPUT"} {
		for ipt("-D", hook, "-j", n.chain) == nil {
		}
	}
	ipt("-F", n.chain)
	ipt("-X", n.chain)
}

func ipt(args ...string) error {
	out, err := exec.Command("iptables", append([]string{"-w"}, args...)...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("iptables %s: %s", strings.Join(args, " "), lastLine(out))
	}
	return nil
}

func lastLine(b []byte) string {
	s := strings.TrimSpace(string(b))
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		s = s[i+1:]
	}
	return s
}
