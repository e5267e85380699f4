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
	"strings"
	"sync"
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
	// Progress, when set, receives a progress line while the run goes on;
	// TTY rewrites one line in place.
	Progress io.Writer `json:"-"`
	TTY      bool      `json:"-"`
}

// Validate reports every bad setting.
func (c *Config) Validate() error {
	var errs []error
	bad := func(f string, a ...any) { errs = append(errs, fmt.Errorf(f, a...)) }
	if c.Nodes != 3 && c.Nodes != 5 {
		bad("--nodes %d must be 3 or 5", c.Nodes)
	}
	if c.Duration < 5*time.Second {
		bad("--duration %s must be at least 5s", c.Duration)
	}
	if c.Clients < 1 || c.Clients > 256 {
		bad("--clients %d must be between 1 and 256", c.Clients)
	}
	if c.Rate <= 0 {
		bad("--rate must be positive")
	}
	if c.Interval < 0 {
		bad("--interval must not be negative")
	}
	if c.Binary == "" {
		bad("--binary is required")
	} else if st, err := os.Stat(c.Binary); err != nil || st.IsDir() {
		bad("--binary %s is not a file", c.Binary)
	}
	if c.InjectBug != "" && c.InjectBug != "local-reads" && c.InjectBug != "skip-uniqueness" {
		bad("--inject-bug %q must be local-reads or skip-uniqueness", c.InjectBug)
	}
	if c.InjectInto != "all" && !strings.HasPrefix(c.InjectInto, "n") {
		bad("--inject-into %q must be all or a node id (n1..n%d)", c.InjectInto, c.Nodes)
	}
	if c.Out == "" {
		bad("--out is required")
	}
	switch c.PartitionMode {
	case "", PartitionAuto, PartitionIPTables, PartitionProxy:
	default:
		bad("--partition-mode %q must be auto, iptables or proxy", c.PartitionMode)
	}
	if c.PartitionMode == PartitionProxy || c.PartitionMode == PartitionAuto || c.PartitionMode == "" {
		if c.RaftPort+ProxyRaftOffset > 65535 {
			bad("--raft-port %d: the proxy mode needs --raft-port+%d free as well", c.RaftPort, ProxyRaftOffset)
		}
	}
	return errors.Join(errs...)
}

// ErrHarness wraps failures of the harness itself (the cluster did not
// start), as opposed to violations by the store.
var ErrHarness = errors.New("chaos")

// Run starts the cluster, runs the workload and the nemeses, heals, checks
// and writes the results into cfg.Out. The report says what was found; an
// error means the run itself could not be carried out.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	if err := os.MkdirAll(cfg.Out, 0o755); err != nil {
		return nil, fmt.Errorf("%w: --out: %w", ErrHarness, err)
	}
	dataDir := filepath.Join(cfg.Out, "data")
	if err := os.RemoveAll(dataDir); err != nil {
		return nil, fmt.Errorf("%w: clear %s: %w", ErrHarness, dataDir, err)
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

	cl, err := NewCluster(ClusterConfig{Binary: cfg.Binary, Nodes: cfg.Nodes, Dir: dataDir,
		HTTPPort: cfg.HTTPPort, RaftPort: cfg.RaftPort, RaftProxy: useProxy, InjectBug: cfg.InjectBug, InjectInto: cfg.InjectInto})
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrHarness, err)
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
	logf("starting %d nodes of %s (data and logs in %s)", cfg.Nodes, cfg.Binary, dataDir)
	if err := cl.StartAll(); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrHarness, err)
	}
	if err := cl.WaitReady(ctx, cl.Nodes, 60*time.Second); err != nil {
		return nil, fmt.Errorf("%w: the cluster did not form (see %s/n*.log): %w", ErrHarness, dataDir, err)
	}

	h := NewHistory()
	w := NewWorkload(WorkloadConfig{Clients: cfg.Clients, Rate: cfg.Rate, Seed: cfg.Seed, Timeout: cfg.Timeout,
		LeaseMs: 300_000, Epoch: 15 * time.Second}, cl, h)
	deadline := time.Now().Add(cfg.Duration)
	wctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()

	var current sync.Map
	setCurrent := func(k string) { current.Store("k", k) }
	e := &env{cl: cl, net: nw, rnd: rand.New(rand.NewPCG(cfg.Seed, 0x6e656d))}
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); w.Run(wctx) }()
	go func() {
		defer wg.Done()
		// Leave time at the end for the last event to heal under load.
		schedule(ctx, e, h, cfg.Nemeses, cfg.Interval, deadline, 8*time.Second, setCurrent)
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
	if herr := heal(hctx, cl, nw); herr != nil {
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
	} else {
		rep.Notes = append(rep.Notes, "interrupted: no final checks")
	}
	cl.StopAll()
	rep.Elapsed = time.Duration(h.Now())
	rep.Ops, rep.Events = h.Ops(), h.Events()

	logf("checking %d operations", len(rep.Ops))
	rep.Check = Check(rep.Ops, cfg.CheckTimeout, true)
	if diverged != nil {
		rep.Check.Violations = append(rep.Check.Violations, *diverged)
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
	return h.WriteJSON(r.HistoryPath, r.Config, r.Violations())
}

// heal undoes every fault: network rules, SIGSTOP, dead and removed nodes,
// clock offsets; then waits for a leader and every node ready.
func heal(ctx context.Context, cl *Cluster, nw Partitioner) error {
	var errs []error
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
	if _, err := cl.WaitLeader(ctx, 30*time.Second); err != nil {
		return errors.Join(append(errs, err)...)
	}
	for _, n := range cl.Nodes {
		if !cl.IsMember(ctx, n) {
			// Removed by a membership event that did not finish.
			cl.Kill(n)
			if err := cl.Wipe(n); err != nil {
				errs = append(errs, err)
				continue
			}
			if err := cl.Rejoin(ctx, n); err != nil {
				errs = append(errs, err)
			}
		}
	}
	if err := cl.WaitReady(ctx, cl.Nodes, 60*time.Second); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}
