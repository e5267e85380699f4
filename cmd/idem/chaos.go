package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/idem-store/idem/chaos"
)

func init() {
	extraCommands["chaos"] = command{Run: runChaos, Summary: "Jepsen-style failure test: a local cluster under faults, checked for linearizability"}
}

func nemesisHelp() string {
	var b strings.Builder
	for _, k := range chaos.NemesisKinds {
		fmt.Fprintf(&b, "  %-14s %s\n", k, chaos.NemesisHelp[k])
	}
	return b.String()
}

func runChaos(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("idem chaos", flag.ContinueOnError)
	fs.SetOutput(io.Discard) // errors and help are printed below, once
	self, _ := os.Executable()
	cfg := chaos.Config{}
	fs.IntVar(&cfg.Nodes, "nodes", 3, "cluster size: 3 or 5 (nodes on 127.0.0.1..N), or 1 (a one-node store, with the nemeses "+strings.Join(chaos.OneNodeKinds, ",")+" only; --nemesis all picks those but "+strings.Join(chaos.OptInKinds, ",")+")")
	fs.DurationVar(&cfg.Duration, "duration", 60*time.Second, "how long the workload and the nemeses run")
	fs.IntVar(&cfg.Clients, "clients", 8, "concurrent clients, each talking to random nodes")
	fs.Float64Var(&cfg.Rate, "rate", 100, "operations per second, all clients together")
	nem := fs.String("nemesis", "all", "faults to inject, comma-separated: "+strings.Join(chaos.NemesisKinds, ",")+", all or none; all leaves out "+strings.Join(chaos.OptInKinds, ",")+" (as root, with mkfs.ext4 and loop devices: each node gets a 1 GiB filesystem of its own to fill), which must be named: --nemesis all,disk")
	fs.DurationVar(&cfg.Interval, "interval", 5*time.Second, "quiet time between nemesis events")
	fs.DurationVar(&cfg.PauseMax, "pause-max", chaos.DefaultPauseMax, "the pause nemesis stops the leader, or every node, for 1s up to this (at most 2m). A leader that stays leader through a pause longer than 10s (one an entry may move cluster time by) is what put early expiry in the first entries after it; with --nodes 1, 60s makes its first client entries get a capped stamp")
	fs.BoolVar(&cfg.EveryNemesis, "every-nemesis", false, "run past --duration if needed until every nemesis has run once")
	seed := fs.Uint64("seed", 0, "seed of the nemesis schedule and the workload (0: pick one and print it)")
	fs.StringVar(&cfg.Binary, "binary", self, "idem binary the nodes run (default: this executable)")
	fs.StringVar(&cfg.InjectBug, "inject-bug", "", "TEST ONLY: start nodes with --inject-bug local-reads|skip-uniqueness, to prove the checker fails")
	fs.StringVar(&cfg.InjectInto, "inject-into", "n1", "which nodes get --inject-bug: a node id or all")
	fs.StringVar(&cfg.Out, "out", "chaos-out", "directory for history.json, timeline.html, the nodes' data and logs, and diag/ (goroutines, status and metrics of every node, taken while a running node stays unready for half of --ready-bound)")
	fs.BoolVar(&cfg.KeepData, "keep-data", false, "keep the nodes' data dirs and logs (always kept after a violation)")
	fs.IntVar(&cfg.HTTPPort, "http-port", 17070, "HTTP port of every node (each on its own loopback IP)")
	fs.IntVar(&cfg.RaftPort, "raft-port", 17071, "raft port of every node")
	fs.StringVar(&cfg.PartitionMode, "partition-mode", chaos.PartitionAuto, "how the partition nemesis cuts raft links: auto (iptables as root when it works, else proxy), iptables, or proxy (a TCP proxy on --raft-port in front of each node, which then listens on --raft-port+10)")
	fs.DurationVar(&cfg.Timeout, "request-timeout", 2*time.Second, "per-request timeout; a timed-out operation counts as possibly applied")
	fs.DurationVar(&cfg.CheckTimeout, "check-timeout", 2*time.Minute, "how long porcupine may search for a linearization of one scope")
	fs.DurationVar(&cfg.ReadyBound, "ready-bound", 30*time.Second, "liveness: how long a node may stay unready (GET /readyz not 200) after a nemesis heals, and the cluster may go without a successful operation, not counting time inside nemesis windows")
	fs.DurationVar(&cfg.Retention, "retention", 0, "the nodes' --retention (default: the run's duration + 10m, at least 10m, so the fsm-loss nemesis's hour of skew would expire every record)")
	fs.BoolVar(&cfg.TLS, "tls", false, "run the nodes with TLS everywhere (HTTPS, mutual TLS on raft); the run makes its own CA and certificates in --out/tls")
	fs.IntVar(&cfg.Batch, "batch", 0, "send the workload's operations through the Go client's batcher (POST /v1/batch), at most this many ops a request (0: one request each)")
	quiet := fs.Bool("quiet", false, "no progress line")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), `Usage: idem chaos [flags]

Starts a local cluster of real 'idem serve' processes, drives clients that
contend on a few scopes, injects faults on a seeded schedule, heals, and
checks the history: linearizability against a model of one idempotency
record per scope (porcupine), one live winner per scope, no record absent
early, no response shown to another scope, every acknowledged complete
replayed byte-identically, the same state on every replica, cluster time
never running ahead of real time (records and leases cut short); and liveness:
every node ready again within --ready-bound of each heal, operations
succeeding throughout. Writes history.json and timeline.html into --out.

Nemeses (each cycle runs every one given, in a seeded order):
`+nemesisHelp()+`
Exit status: 0 no violation, 1 violations found, 2 usage error, 3 the run
was interrupted or the harness itself failed (e.g. the cluster did not start).

Flags:
`)
		printFlags(fs.Output(), fs)
	}
	if code, done := parseArgs(fs, args, "idem chaos", stdout, stderr); done {
		return code
	}
	if err := batchFlagProblem(cfg.Batch); err != nil {
		fmt.Fprintf(stderr, "idem chaos: %v\n", err)
		return 2
	}
	var err error
	if cfg.Nemeses, err = chaos.ParseNemeses(*nem); err != nil {
		fmt.Fprintf(stderr, "idem chaos: --nemesis: %v\n", err)
		return 2
	}
	if cfg.Nodes == 1 && slices.Contains(strings.Split(strings.ReplaceAll(*nem, " ", ""), ","), "all") {
		// all is then the one-node kinds (an opt-in kind only if named).
		cfg.Nemeses = slices.DeleteFunc(cfg.Nemeses, func(k string) bool { return !slices.Contains(chaos.OneNodeKinds, k) })
	}
	cfg.Seed = *seed
	if cfg.Seed == 0 {
		cfg.Seed = uint64(time.Now().UnixNano()%1_000_000) + 1
	}
	if err := cfg.Validate(); err != nil {
		fmt.Fprintf(stderr, "idem chaos: %v\n", strings.ReplaceAll(err.Error(), "\n", "\nidem chaos: "))
		return 2
	}
	if !*quiet {
		cfg.Progress = stderr
		if f, ok := stderr.(*os.File); ok {
			if st, err := f.Stat(); err == nil && st.Mode()&os.ModeCharDevice != 0 {
				cfg.TTY = true
			}
		}
	}
	fmt.Fprintf(stderr, "idem chaos: seed %d (repeat the schedule and workload with --seed %d)\n", cfg.Seed, cfg.Seed)
	rep, err := chaos.Run(ctx, cfg)
	if err != nil {
		fmt.Fprintf(stderr, "idem chaos: %v\n", err)
		return 3
	}
	if err := chaos.Finish(rep); err != nil {
		fmt.Fprintf(stderr, "idem chaos: writing results: %v\n", err)
	}
	fmt.Fprintln(stdout)
	rep.Summary(stdout)
	if len(rep.Violations()) > 0 {
		return 1
	}
	if ctx.Err() != nil {
		return 3
	}
	return 0
}
