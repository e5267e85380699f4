package chaos

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Config is one chaos run.
type Config struct {
	Binary     string        `json:"binary"`
	Nodes      int           `json:"nodes"`
	Duration   time.Duration `json:"duration"`
	Clients    int           `json:"clients"`
	Rate       float64       `json:"rate"`
	Nemeses    []string      `json:"nemeses"`
	Interval   time.Duration `json:"interval"`
	Seed       uint64        `json:"seed"`
	InjectBug  string        `json:"inject_bug,omitempty"`
	InjectInto string        `json:"inject_into,omitempty"`
	Out        string        `json:"out"`
	KeepData   bool          `json:"keep_data"`
	HTTPPort   int           `json:"http_port"`
	RaftPort   int           `json:"raft_port"`
	// PartitionMode is how the partition nemesis cuts links: auto
	// (iptables when root and iptables works, else proxy), iptables or
	// proxy.
	PartitionMode string        `json:"partition_mode,omitempty"`
	Timeout       time.Duration `json:"request_timeout"`
	CheckTimeout  time.Duration `json:"check_timeout"`
	// ReadyBound is how long a node may stay unready (GET /readyz not
	// 200) after a nemesis heals, not counting time inside the next
	// nemeses' windows, before it is a liveness violation.
	ReadyBound time.Duration `json:"ready_bound"`
	// PauseMax is the longest SIGSTOP of the pause nemesis; zero picks
	// DefaultPauseMax.
	PauseMax time.Duration `json:"pause_max,omitempty"`
	// EveryNemesis keeps the run going past Duration until every nemesis
	// kind has run once.
	EveryNemesis bool `json:"every_nemesis,omitempty"`
	// Retention is the nodes' --retention; zero picks RetentionFor.
	Retention time.Duration `json:"retention"`
	// TLS runs the nodes with TLS everywhere, with a CA and certificates
	// the run makes in Out/tls (tls.go).
	TLS bool `json:"tls,omitempty"`
	// Batch, when positive, has the workload send through the Go client's
	// Batcher (POST /v1/batch), at most Batch ops a request.
	Batch int `json:"batch,omitempty"`
	// Progress, when set, receives a progress line while the run goes on;
	// TTY rewrites one line in place.
	Progress io.Writer `json:"-"`
	TTY      bool      `json:"-"`
}

// Validate reports every bad setting.
func (c *Config) Validate() error {
	var errs []error
	bad := func(f string, a ...any) { errs = append(errs, fmt.Errorf(f, a...)) }
	if c.Nodes != 1 && c.Nodes != 3 && c.Nodes != 5 {
		bad("--nodes %d must be 1, 3 or 5", c.Nodes)
	}
	if c.Nodes == 1 {
		if k := slices.DeleteFunc(slices.Clone(c.Nemeses), func(k string) bool { return slices.Contains(OneNodeKinds, k) }); len(k) > 0 {
			bad("--nodes 1 runs only the nemeses %s (the others need followers): not %s", strings.Join(OneNodeKinds, ","), strings.Join(k, ","))
		}
	}
	if slices.Contains(c.Nemeses, "disk") {
		if why := diskUnusable(); why != "" {
			bad("--nemesis disk cannot run here: %s", why)
		}
	}
	if c.Duration < 5*time.Second {
		bad("--duration %s must be at least 5s", c.Duration)
	}
	if c.Clients < 1 || c.Clients > 256 {
		bad("--clients %d must be between 1 and 256", c.Clients)
	}
	if c.Batch < 0 {
		bad("--batch %d must not be negative", c.Batch)
	}
	if c.Rate <= 0 {
		bad("--rate must be positive")
	}
	if c.Interval < 0 {
		bad("--interval must not be negative")
	}
	if c.PauseMax != 0 && (c.PauseMax < MinPause || c.PauseMax > MaxPauseMax) {
		bad("--pause-max %s must be from %s to %s", c.PauseMax, MinPause, MaxPauseMax)
	}
	if c.ReadyBound < 5*time.Second {
		bad("--ready-bound %s must be at least 5s (an election and a catch-up take seconds)", c.ReadyBound)
	}
	if c.Retention != 0 && c.Retention < RetentionFor(c.Duration) {
		bad("--retention %s must be at least %s: no record may expire during a run of --duration %s (the checker has no clock)", c.Retention, RetentionFor(c.Duration), c.Duration)
	}
	if c.Binary == "" {
		bad("--binary is required")
	} else if st, err := os.Stat(c.Binary); err != nil || st.IsDir() {
		bad("--binary %s is not a file", c.Binary)
	} else if st.Mode().Perm()&0o111 == 0 {
		// Found only when the first node failed to start, after the
		// run had cleared --out and made its certificates.
		bad("--binary %s is not executable (mode %s): give the idem binary, or chmod +x it", c.Binary, st.Mode().Perm())
	}
	if c.InjectBug != "" && c.InjectBug != "local-reads" && c.InjectBug != "skip-uniqueness" {
		bad("--inject-bug %q must be local-reads or skip-uniqueness", c.InjectBug)
	}
	if c.InjectInto != "all" && !strings.HasPrefix(c.InjectInto, "n") {
		bad("--inject-into %q must be all or a node id (n1..n%d)", c.InjectInto, c.Nodes)
	}
	if c.Out == "" {
		bad("--out is required")
	} else if why := outDirProblem(c.Out); why != "" {
		bad("--out %s %s: give a directory, or a path where one can be made", c.Out, why)
	}
	switch c.PartitionMode {
	case "", PartitionAuto, PartitionIPTables, PartitionProxy:
	default:
		bad("--partition-mode %q must be auto, iptables or proxy", c.PartitionMode)
	}
	// Ports, timeouts and the node to break were found wrong only once the
	// harness ran: --http-port 0 (or --raft-port equal to it) as "the
	// cluster did not form", exit 3; --request-timeout 0 as a run in which
	// every operation was indeterminate; --inject-into n9 of 3 nodes as a
	// run that broke no node and so proved nothing.
	for _, p := range []struct {
		flag string
		port int
	}{{"--http-port", c.HTTPPort}, {"--raft-port", c.RaftPort}} {
		if p.port < 1 || p.port > 65535 {
			bad("%s %d must be a port from 1 to 65535", p.flag, p.port)
		}
	}
	if c.HTTPPort == c.RaftPort {
		bad("--http-port and --raft-port are both %d: HTTP and raft need a port each", c.HTTPPort)
	}
	if c.Timeout <= 0 {
		bad("--request-timeout %s must be positive", c.Timeout)
	}
	if c.CheckTimeout <= 0 {
		bad("--check-timeout %s must be positive", c.CheckTimeout)
	}
	if c.InjectBug != "" && c.InjectInto != "all" && strings.HasPrefix(c.InjectInto, "n") && (c.Nodes == 1 || c.Nodes == 3 || c.Nodes == 5) {
		if n, err := strconv.Atoi(c.InjectInto[1:]); err != nil || n < 1 || n > c.Nodes {
			bad("--inject-into %q must be all or a node id (n1..n%d)", c.InjectInto, c.Nodes)
		}
	}
	if c.PartitionMode == PartitionProxy || c.PartitionMode == PartitionAuto || c.PartitionMode == "" {
		if c.RaftPort+ProxyRaftOffset > 65535 {
			bad("--raft-port %d: the proxy mode needs --raft-port+%d free as well", c.RaftPort, ProxyRaftOffset)
		} else if c.RaftPort+ProxyRaftOffset == c.HTTPPort {
			bad("--raft-port %d: the proxy mode moves raft to --raft-port+%d, which is --http-port", c.RaftPort, ProxyRaftOffset)
		}
	}
	return errors.Join(errs...)
}

// RetentionFor is the retention a run of duration d gives its nodes: short
// enough that a cluster time pushed an hour ahead expires every record
// (the fsm-loss nemesis skews a clock by at least an hour), long enough
// that nothing expires during the run, its healing and its final checks.
func RetentionFor(d time.Duration) time.Duration {
	return max(10*time.Minute, (d + 10*time.Minute).Round(time.Minute))
}

// SkewFor is the clock offset of the fsm-loss nemesis for a retention.
func SkewFor(retention time.Duration) time.Duration { return max(time.Hour, 2*retention) }

// ErrHarness wraps failures of the harness itself (the cluster did not
// start), as opposed to violations by the store.
var ErrHarness = errors.New("chaos")

// outDirProblem says why dir cannot be the run's output directory (it,
// or the nearest of its parents that exists, is not a directory), or "".
// MkdirAll found it only at the start of the run.
func outDirProblem(dir string) string {
	for p := filepath.Clean(dir); ; p = filepath.Dir(p) {
		st, err := os.Stat(p)
		switch {
		case err == nil && st.IsDir():
			return ""
		case err == nil && p == filepath.Clean(dir):
			return "is an existing file, not a directory"
		case err == nil:
			return "is inside " + p + ", which is a file, not a directory"
		case errors.Is(err, os.ErrPermission):
			return "cannot be checked: " + err.Error()
		}
		// Absent, or below a file (ENOTDIR): look at the parent.
		if filepath.Dir(p) == p {
			return ""
		}
	}
}

// lockOut holds --out for a run, until the returned func: a second run
// given the same --out, started while the first went on, cleared the
// first's data dirs under its running nodes (their disk images deleted
// under the mounts), and the first could neither heal nor check.
func lockOut(dir string) (unlock func(), err error) {
	f, err := os.OpenFile(filepath.Join(dir, ".chaos.lock"), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("%w: --out: %w", ErrHarness, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		pid, _ := io.ReadAll(io.LimitReader(f, 32))
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("%w: --out %s is in use by another idem chaos run (pid %s): wait for it to end, or give this one another --out (it would clear that run's data under its nodes)", ErrHarness, dir, strings.TrimSpace(string(pid)))
		}
		return nil, fmt.Errorf("%w: --out: lock %s: %w", ErrHarness, dir, err)
	}
	f.Truncate(0)
	f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	return func() { f.Close() }, nil
}

// Run starts the cluster, runs the workload and the nemeses, heals, checks
// and writes the results into cfg.Out. The report says what was found; an
// error means the run itself could not be carried out.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	if err := os.MkdirAll(cfg.Out, 0o755); err != nil {
		return nil, fmt.Errorf("%w: --out: %w", ErrHarness, err)
	}
	unlock, err := lockOut(cfg.Out)
	if err != nil {
		return nil, err
	}
	defer unlock()
	dataDir, diagDir := filepath.Join(cfg.Out, "data"), filepath.Join(cfg.Out, "diag")
	for _, d := range []string{dataDir, diagDir} {
		if err := os.RemoveAll(d); err != nil {
			return nil, fmt.Errorf("%w: clear %s: %w", ErrHarness, d, err)
		}
	}
	rep := &Report{Config: cfg}
	progress := func(format string, a ...any) {
		if cfg.Progress != nil {
			if cfg.TTY {
				fmt.Fprintf(cfg.Progress, "\r\033[K"+format, a...)
			} else {
				fmt.Fprintf(cfg.Progress, format+"\n", a...)
			}
		}
	}
	logf := func(format string, a ...any) {
		if cfg.Progress != nil {
			if cfg.TTY {
				fmt.Fprint(cfg.Progress, "\r\033[K")
			}
			fmt.Fprintf(cfg.Progress, "chaos: "+format+"\n", a...)
		}
	}

	// Partitions: iptables rules, or a proxy in front of every raft
	// listener, which must be in place before the nodes start.
	var nw Partitioner
	useProxy, why := false, ""
	if slices.Contains(cfg.Nemeses, "partition") {
		switch cfg.PartitionMode {
		case PartitionProxy:
			useProxy = true
		case PartitionIPTables:
			ipt, err := SetupNet(cfg.RaftPort, logf)
			if err != nil {
				return nil, fmt.Errorf("%w: --partition-mode iptables: %w", ErrHarness, err)
			}
			defer ipt.Teardown()
			nw = ipt
		default:
			if ipt, err := SetupNet(cfg.RaftPort, logf); err != nil {
				why = strings.TrimSuffix(err.Error(), "; the partition nemesis is skipped")
				useProxy = true
			} else {
				defer ipt.Teardown()
				nw = ipt
			}
		}
	}

	if cfg.Retention == 0 {
		cfg.Retention = RetentionFor(cfg.Duration)
		rep.Config.Retention = cfg.Retention
	}
	ccfg := ClusterConfig{Binary: cfg.Binary, Nodes: cfg.Nodes, Dir: dataDir,
		HTTPPort: cfg.HTTPPort, RaftPort: cfg.RaftPort, RaftProxy: useProxy, InjectBug: cfg.InjectBug, InjectInto: cfg.InjectInto,
		ExtraArgs: []string{"--retention", cfg.Retention.String()}}
	if cfg.TLS {
		ccfg.TLSDir = filepath.Join(cfg.Out, "tls")
		if err := MakeTLS(ccfg.TLSDir, cfg.Nodes); err != nil {
			return nil, fmt.Errorf("%w: --tls: %w", ErrHarness, err)
		}
		rep.Notes = append(rep.Notes, "TLS everywhere (HTTPS, mutual TLS on raft): the run's CA and certificates are in "+ccfg.TLSDir)
	}
	if slices.Contains(cfg.Nemeses, "fsm-loss") {
		ccfg.NoSnapshots = fmt.Sprintf("n%d", cfg.Nodes)
		rep.Notes = append(rep.Notes, ccfg.NoSnapshots+" takes no snapshots of its own (the fsm-loss nemesis's node: its raft log goes back to index 1)")
	}
	withDisks := slices.Contains(cfg.Nemeses, "disk")
	if withDisks {
		ccfg.ExtraArgs = append(ccfg.ExtraArgs, "--min-free-disk", strconv.Itoa(DiskMinFree))
	}
	cl, err := NewCluster(ccfg)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrHarness, err)
	}
	var disks *Disks
	if withDisks {
		if disks, err = SetupDisks(cl.Nodes, dataDir); err != nil {
			return nil, fmt.Errorf("%w: --nemesis disk: %w", ErrHarness, err)
		}
		// Unmounted once the nodes are stopped (deferred calls run last
		// first); the images stay in the data dir, removed with it.
		defer disks.Teardown(true)
		rep.Notes = append(rep.Notes, fmt.Sprintf("each node on a %d MiB ext4 filesystem of its own (%s/nN.ext4, loop-mounted), --min-free-disk %d MiB, for the disk nemesis",
			DiskImageSize>>20, dataDir, DiskMinFree>>20))
	}
	defer cl.StopAll()
	if useProxy {
		pn, err := SetupProxyNet(cl.Nodes)
		if err != nil {
			return nil, fmt.Errorf("%w: partition proxies: %w", ErrHarness, err)
		}
		defer pn.Teardown()
		nw = pn
	}
	if nw != nil {
		note := fmt.Sprintf("partitions by iptables (chain IDEM-CHAOS-%d)", cfg.RaftPort)
		if useProxy {
			note = fmt.Sprintf("partitions by a TCP proxy on each node's raft port %d (nodes listen on %d)", cfg.RaftPort, cfg.RaftPort+ProxyRaftOffset)
			if why != "" {
				note += "; iptables: " + why
			}
		}
		rep.Notes = append(rep.Notes, note)
		logf("%s", note)
	}
	// Another cluster on these ports would answer for ours and its answers
	// would read as violations.
	for _, n := range cl.Nodes {
		for _, addr := range []string{n.HTTPAddr, n.RaftListen} {
			if answers(addr) {
				return nil, fmt.Errorf("%w: %s is already in use by another process: stop it or choose --http-port and --raft-port", ErrHarness, addr)
			}
		}
	}
	logf("starting %d nodes of %s (data and logs in %s)", cfg.Nodes, cfg.Binary, dataDir)
	if err := cl.StartAll(); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrHarness, err)
	}
	if err := cl.WaitReady(ctx, cl.Nodes, 60*time.Second); err != nil {
		return nil, fmt.Errorf("%w: the cluster did not form (see %s/n*.log): %w", ErrHarness, dataDir, err)
	}

	h := NewHistory()
	cl.clock = h.Now
	mon := NewMonitor(cl, h, 250*time.Millisecond)
	mon.diag = newDiagnoser(cl, h, diagDir, cfg.ReadyBound/2)
	mctx, mcancel := context.WithCancel(context.WithoutCancel(ctx))
	defer mcancel()
	monDone := make(chan struct{})
	go func() { defer close(monDone); mon.Run(mctx) }()
	w := NewWorkload(WorkloadConfig{Clients: cfg.Clients, Rate: cfg.Rate, Seed: cfg.Seed, Timeout: cfg.Timeout,
		LeaseMs: 300_000, Epoch: 15 * time.Second, Batch: cfg.Batch}, cl, h)
	deadline := time.Now().Add(cfg.Duration)
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()

	var current sync.Map
	setCurrent := func(k string) { current.Store("k", k) }
	e := &env{cl: cl, net: nw, rnd: rand.New(rand.NewPCG(cfg.Seed, 0x6e656d)), w: w,
		bound: cfg.ReadyBound, skew: SkewFor(cfg.Retention), pauseMax: cfg.PauseMax, disks: disks}
	workStart := h.Now()
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); w.Run(wctx) }()
	go func() {
		defer wg.Done()
		// The clients stop at the deadline, or when the last nemesis has
		// healed if that is later: every fault heals under load.
		defer func() {
			sleep(ctx, time.Until(deadline))
			cancel()
		}()
		minEvents := 0
		if cfg.EveryNemesis {
			minEvents = len(cfg.Nemeses)
		}
		schedule(ctx, e, h, cfg.Nemeses, cfg.Interval, deadline, 8*time.Second, minEvents, setCurrent)
	}()
	stopProgress := make(chan struct{})
	go func() {
		every := time.Second
		if !cfg.TTY {
			every = 10 * time.Second
		}
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-stopProgress:
				return
			case <-t.C:
				k, _ := current.Load("k")
				nem, _ := k.(string)
				if nem == "" {
					nem = "-"
				}
				progress("[%4.0fs/%.0fs] ops %d (indeterminate %d), nemesis events %d, now: %s",
					time.Duration(h.Now()).Seconds(), cfg.Duration.Seconds(), w.Count.Load(), w.Infos.Load(), len(h.Events()), nem)
			}
		}
	}()
	wg.Wait()
	workEnd := h.Now()
	close(stopProgress)
	if cfg.TTY && cfg.Progress != nil {
		fmt.Fprintln(cfg.Progress)
	}
	interrupted := ctx.Err() != nil
	var diverged *Violation

	// Heal everything, then check what only a healed cluster can show.
	hctx, hcancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Minute)
	defer hcancel()
	logf("healing: network, paused and dead nodes, clocks")
	healWin := Window{Label: "final healing", Start: h.Now()}
	notes, herr := heal(hctx, cl, nw, cfg.ReadyBound)
	healWin.End = h.Now()
	rep.Notes = append(rep.Notes, notes...)
	if herr != nil {
		rep.Notes = append(rep.Notes, "healing: "+herr.Error())
	}
	if !interrupted {
		logf("final checks: replay every completed scope, compare replicas")
		rep.FinalScopes, rep.Unreached = FinalChecks(hctx, w, cl, h, 400)
		detail, v := Converge(hctx, cl, 30*time.Second)
		rep.Converged, diverged = detail, v
		if v != nil {
			v.At = h.Now()
			rep.Converged = v.Kind + ": " + v.Detail
		}
		// A node the final checks found unready gets the rest of its bound.
		mon.Settle(hctx, healWin.End, cfg.ReadyBound)
	} else {
		rep.Notes = append(rep.Notes, "interrupted: no final checks")
	}
	monEnd := h.Now()
	mcancel()
	<-monDone
	cl.StopAll()
	if err := disks.Teardown(true); err != nil {
		rep.Notes = append(rep.Notes, "the nodes' filesystems: "+err.Error())
	}
	rep.ForcedStops, rep.Exits = cl.ForcedStops(), cl.Exits()
	rep.Elapsed = time.Duration(h.Now())
	rep.Ops, rep.Events, rep.Readiness = h.Ops(), h.Events(), mon.Samples()
	rep.Diags = mon.diag.Diags()
	for _, k := range cfg.Nemeses {
		if !slices.ContainsFunc(rep.Events, func(e Event) bool { return e.Kind == k }) {
			rep.Missing = append(rep.Missing, k)
		}
	}

	logf("checking %d operations", len(rep.Ops))
	rep.Check = Check(rep.Ops, cfg.CheckTimeout, true)
	rep.Check.Violations = append(rep.Check.Violations, RetentionChecks(rep.Ops, cfg.Retention)...)
	rep.Check.Violations = append(rep.Check.Violations, ClockChecks(rep.Ops)...)
	if diverged != nil {
		rep.Check.Violations = append(rep.Check.Violations, *diverged)
	}
	windows := append(Windows(rep.Events), healWin)
	if !interrupted {
		for _, v := range Liveness(rep.Readiness, windows, cfg.ReadyBound, monEnd) {
			if dirs := diagsFor(rep.Diags, v.Scope, v.At, cfg.ReadyBound); len(dirs) > 0 {
				v.Detail += "; goroutine dumps and status of every node while it was stuck: " + strings.Join(dirs, ", ")
			}
			rep.Check.Violations = append(rep.Check.Violations, v)
		}
		rep.Check.Violations = append(rep.Check.Violations, Progress(rep.Ops, windows, cfg.ReadyBound, workStart, workEnd)...)
		sort.SliceStable(rep.Check.Violations, func(i, j int) bool { return rep.Check.Violations[i].At < rep.Check.Violations[j].At })
	}
	return rep, nil
}

// Finish adds the replica check's verdict and writes history.json and
// timeline.html; it keeps the data dir when asked or when something was
// found.
func Finish(rep *Report) error {
	cfg := rep.Config
	rep.HistoryPath = filepath.Join(cfg.Out, "history.json")
	rep.HTMLPath = filepath.Join(cfg.Out, "timeline.html")
	var errs []error
	if err := rep.writeHistory(); err != nil {
		errs = append(errs, err)
	}
	if err := rep.WriteHTML(rep.HTMLPath); err != nil {
		rep.HTMLPath = ""
		errs = append(errs, fmt.Errorf("timeline: %w", err))
	}
	dataDir := filepath.Join(cfg.Out, "data")
	switch {
	case cfg.KeepData:
		rep.Notes = append(rep.Notes, "data dirs and node logs kept in "+dataDir)
	case len(rep.Violations()) > 0:
		rep.Notes = append(rep.Notes, "violations found: data dirs and node logs kept in "+dataDir)
	case slices.ContainsFunc(rep.Events, func(e Event) bool { return e.Error != "" }):
		rep.Notes = append(rep.Notes, "a nemesis event failed: data dirs and node logs kept in "+dataDir)
	default:
		os.RemoveAll(dataDir)
	}
	return errors.Join(errs...)
}

func (r *Report) writeHistory() error {
	ops := r.Ops
	h := &History{ops: ops, events: r.Events}
	return h.WriteJSON(r.HistoryPath, r.Config, r.Readiness, r.Violations())
}

// heal undoes every fault: network rules, SIGSTOP, dead and removed nodes,
// clock offsets, members the harness does not run (an absent node a
// membership event joined); then waits for a leader and every node ready,
// restarting once a node that is running but stays unready (as an operator
// would). It returns what it had to do beyond the usual.
func heal(ctx context.Context, cl *Cluster, nw Partitioner, bound time.Duration) ([]string, error) {
	var errs []error
	var notes []string
	if nw != nil {
		if err := nw.Heal(); err != nil {
			errs = append(errs, err)
		}
	}
	for _, n := range cl.Nodes {
		if n.Paused() {
			cl.Resume(n)
		}
		n.mu.Lock()
		skewed := n.clockOffset != 0
		n.mu.Unlock()
		if skewed {
			cl.SetClockOffset(n, 0)
			cl.Kill(n)
		}
		if !n.Running() {
			if err := cl.Start(n); err != nil {
				errs = append(errs, err)
			}
		}
	}
	l, err := cl.WaitLeader(ctx, 30*time.Second)
	if err != nil {
		// A node stuck unready can be what keeps the quorum away.
		notes = append(notes, restartUnready(ctx, cl)...)
		if l, err = cl.WaitLeader(ctx, 30*time.Second); err != nil {
			return notes, errors.Join(append(errs, err)...)
		}
	}
	if st, err := cl.Status(ctx, l); err == nil {
		for _, m := range st.Nodes {
			if cl.Node(m.ID) != nil {
				continue
			}
			rctx, cancel := context.WithTimeout(ctx, 15*time.Second)
			_, err := l.Client.Remove(rctx, m.ID)
			cancel()
			notes = append(notes, fmt.Sprintf("healing removed %s, a member no process of the harness runs (%v)", m.ID, errOr(err, "ok")))
		}
	}
	for _, n := range cl.Nodes {
		if !cl.IsMember(ctx, n) {
			// Removed by a membership event that did not finish.
			cl.Kill(n)
			if err := cl.Wipe(n); err != nil {
				errs = append(errs, err)
				continue
			}
			notes = append(notes, fmt.Sprintf("healing wiped %s and joined it again: it was not a member", n.ID))
			if err := cl.Rejoin(ctx, n); err != nil {
				errs = append(errs, err)
			}
		}
	}
	if err := cl.WaitReady(ctx, cl.Nodes, bound); err != nil {
		notes = append(notes, restartUnready(ctx, cl)...)
		if err := cl.WaitReady(ctx, cl.Nodes, bound); err != nil {
			errs = append(errs, err)
		}
	}
	return notes, errors.Join(errs...)
}

// restartUnready stops (SIGTERM) and starts every node that does not
// answer /readyz 200 now.
func restartUnready(ctx context.Context, cl *Cluster) []string {
	var notes []string
	for _, n := range cl.Nodes {
		rctx, cancel := context.WithTimeout(ctx, time.Second)
		err := n.Client.Readyz(rctx)
		cancel()
		if err == nil {
			continue
		}
		cl.Stop(n)
		notes = append(notes, fmt.Sprintf("healing restarted %s: not ready (%v)", n.ID, err))
		cl.Start(n)
	}
	return notes
}

func errOr(err error, ok string) string {
	if err != nil {
		return err.Error()
	}
	return ok
}
