package chaos

import (
	"bytes"
	"cmp"
	"fmt"
	"html"
	"io"
	"os"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"
)

// Report is the outcome of a run.
type Report struct {
	Config      Config
	Elapsed     time.Duration
	Ops         []*Op
	Events      []Event
	Check       *CheckResult
	Converged   string
	FinalScopes int      // scopes whose completed response was replayed after healing
	Unreached   []string // scopes the final check could not reach
	Notes       []string // partitions skipped, data kept, ...
	Readiness   []ReadySample
	Missing     []string // nemesis kinds asked for that never ran
	Diags       []Diag   // captures of nodes that stayed unready (diag.go)
	// ForcedStops are graceful stops (SIGTERM) that needed SIGKILL.
	ForcedStops []ForcedStop
	// Exits are nodes that ended without the harness stopping them.
	Exits       []Exit
	HistoryPath string
	HTMLPath    string
}

// Violations are every violation found.
func (r *Report) Violations() []Violation { return r.Check.Violations }

func secs(ns int64) string { return fmt.Sprintf("%6.1fs", float64(ns)/1e9) }

// Summary writes the one-screen summary.
func (r *Report) Summary(w io.Writer) {
	c := r.Config
	bug := ""
	if c.InjectBug != "" {
		bug = fmt.Sprintf(", INJECTED BUG %s on %s", c.InjectBug, c.InjectInto)
	}
	fmt.Fprintf(w, "idem chaos: %d nodes, %d clients, %s (ran %s), seed %d, nemesis %s%s\n",
		c.Nodes, c.Clients, c.Duration, r.Elapsed.Round(time.Second), c.Seed, orNone(strings.Join(c.Nemeses, ",")), bug)
	pause := ""
	if slices.Contains(c.Nemeses, "pause") {
		// The seed repeats the schedule only with the same --pause-max.
		pause = fmt.Sprintf(", pause max %s", cmp.Or(c.PauseMax, DefaultPauseMax))
	}
	fmt.Fprintf(w, "retention %s, ready bound %s%s, binary %s\n", c.Retention, c.ReadyBound, pause, c.Binary)

	type row struct {
		ok, info, fail int
		by             map[string]int
	}
	rows := map[string]*row{}
	var total, ok, info, fail, final int
	for _, o := range r.Ops {
		if o.Final {
			final++
		}
		rw := rows[o.Kind]
		if rw == nil {
			rw = &row{by: map[string]int{}}
			rows[o.Kind] = rw
		}
		total++
		switch o.Outcome {
		case OK:
			ok++
			rw.ok++
			a := fmt.Sprint(o.Status)
			if o.Code != "" {
				a += " " + o.Code
			}
			rw.by[a]++
		case Info:
			info++
			rw.info++
		default:
			fail++
			rw.fail++
		}
	}
	fmt.Fprintf(w, "\noperations: %d (%d answered, %d indeterminate, %d not sent), %d of them final checks\n", total, ok, info, fail, final)
	fmt.Fprintf(w, "  %-9s %7s %6s %6s  answers\n", "kind", "ok", "info", "fail")
	for _, k := range []string{KindClaim, KindComplete, KindRelease, KindExtend, KindLookup} {
		rw := rows[k]
		if rw == nil {
			continue
		}
		var as []string
		for a, n := range rw.by {
			as = append(as, fmt.Sprintf("%s:%d", a, n))
		}
		sort.Strings(as)
		fmt.Fprintf(w, "  %-9s %7d %6d %6d  %s\n", k, rw.ok, rw.info, rw.fail, strings.Join(as, " "))
	}

	fmt.Fprintf(w, "\nnemesis events: %d", len(r.Events))
	counts := map[string]int{}
	for _, e := range r.Events {
		counts[e.Kind]++
	}
	var cs []string
	for _, k := range AllKinds() {
		if counts[k] > 0 {
			cs = append(cs, fmt.Sprintf("%s %d", k, counts[k]))
		}
	}
	if len(cs) > 0 {
		fmt.Fprintf(w, " (%s)", strings.Join(cs, ", "))
	}
	fmt.Fprintln(w)
	if len(r.Missing) > 0 {
		fmt.Fprintf(w, "  NOT EVERY NEMESIS RAN: %s never ran (the run was too short for a whole cycle)\n", strings.Join(r.Missing, ", "))
	}
	for _, e := range r.Events {
		line := fmt.Sprintf("  %s..%s  %-13s %s", secs(e.Start), strings.TrimSpace(secs(e.End)), e.Kind, e.Detail)
		if e.Healed != 0 && e.End-e.Healed >= int64(time.Second) {
			line += fmt.Sprintf(" (healed at %s)", strings.TrimSpace(secs(e.Healed)))
		}
		if e.Error != "" {
			line += "  [nemesis error: " + e.Error + "]"
		}
		fmt.Fprintln(w, line)
	}

	ch := r.Check
	fmt.Fprintf(w, "\nlinearizability (porcupine, one record per scope): %s — %d operations on %d scopes checked in %s\n",
		verdict(ch.Linearizable), ch.Checked, ch.Scopes, ch.CheckTime.Round(time.Millisecond))
	if len(ch.Unknown) > 0 {
		fmt.Fprintf(w, "  undecided within the timeout: %d scopes (%s)\n", len(ch.Unknown), strings.Join(first(ch.Unknown, 3), ", "))
	}
	fmt.Fprintf(w, "final replay check: %d completed scopes replayed after healing", r.FinalScopes)
	if len(r.Unreached) > 0 {
		fmt.Fprintf(w, ", %d unreachable", len(r.Unreached))
	}
	fmt.Fprintln(w)
	if r.Converged != "" {
		fmt.Fprintf(w, "replicas: %s\n", r.Converged)
	}
	var unready, stalls int
	for _, x := range r.Violations() {
		switch x.Kind {
		case VNotReady:
			unready++
		case VNoProgress:
			stalls++
		}
	}
	changes := 0
	wasReady := map[string]bool{}
	for _, s := range r.Readiness {
		ready, seen := wasReady[s.Node]
		if !s.Ready && (ready || !seen) {
			changes++
		}
		wasReady[s.Node] = s.Ready
	}
	verdict := fmt.Sprintf("every node ready within %s of each heal, and operations succeeded throughout", c.ReadyBound)
	if unready+stalls > 0 {
		verdict = fmt.Sprintf("%d spells of a node unready too long, %d stalls of the whole cluster (see VIOLATIONS)", unready, stalls)
	}
	fmt.Fprintf(w, "liveness: /readyz of every node polled throughout (%d unready spells); %s\n", changes, verdict)
	for _, d := range r.Diags {
		line := fmt.Sprintf("  %s unready (running) for %s at %s: goroutines, status and metrics of every node in %s",
			d.Node, d.Unready.Round(100*time.Millisecond), strings.TrimSpace(secs(d.At)), d.Dir)
		if d.Note != "" {
			line += " (" + d.Note + ")"
		}
		fmt.Fprintln(w, line)
	}
	if len(r.ForcedStops) > 0 {
		fmt.Fprintf(w, "graceful stops: %d did not end within their grace after SIGTERM and were killed (a node that hangs on SIGTERM is a bug: see its log)\n", len(r.ForcedStops))
		for _, f := range r.ForcedStops {
			fmt.Fprintf(w, "  %s: SIGTERM at %s, SIGKILL %s later\n", f.Node, strings.TrimSpace(secs(f.At)), f.Grace)
		}
	}
	if len(r.Exits) > 0 {
		fmt.Fprintf(w, "exits: %d node processes ended without the harness stopping them (a crash, a node giving up, or a signal from outside the harness: see the node's log)\n", len(r.Exits))
		for _, x := range r.Exits {
			fmt.Fprintf(w, "  %s at %s: %s\n", x.Node, strings.TrimSpace(secs(x.At)), x.Said)
		}
	}
	for _, n := range r.Notes {
		fmt.Fprintf(w, "note: %s\n", n)
	}
	v := r.Violations()
	if len(v) == 0 {
		fmt.Fprintln(w, "\nviolations: none")
	} else {
		fmt.Fprintf(w, "\nVIOLATIONS: %d\n", len(v))
		kinds := map[string]int{}
		for _, x := range v {
			kinds[x.Kind]++
		}
		var ks []string
		for k := range kinds {
			ks = append(ks, k)
		}
		sort.Strings(ks)
		for _, k := range ks {
			fmt.Fprintf(w, "  %-36s %d\n", k, kinds[k])
		}
		shown := map[string]int{}
		for _, x := range v {
			if shown[x.Kind]++; shown[x.Kind] > 3 {
				continue
			}
			fmt.Fprintf(w, "  %s %s %s: %s\n", secs(x.At), x.Kind, x.Scope, x.Detail)
		}
		if len(v) > 3*len(kinds) {
			fmt.Fprintln(w, "  (at most 3 of each kind shown; all are in history.json)")
		}
	}
	if r.HistoryPath != "" {
		fmt.Fprintf(w, "results: %s, %s\n", r.HistoryPath, orNone(r.HTMLPath))
	}
}

func verdict(r porcupine.CheckResult) string {
	switch r {
	case porcupine.Ok:
		return "ok"
	case porcupine.Illegal:
		return "NOT LINEARIZABLE"
	}
	return "unknown (timed out)"
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

func first(xs []string, n int) []string {
	if len(xs) > n {
		return append(xs[:n:n], "…")
	}
	return xs
}

// WriteHTML writes porcupine's timeline of the history, with the nemesis
// windows and violations as annotations and the summary on top.
func (r *Report) WriteHTML(path string) error {
	ch := r.Check
	if !ch.infoOK {
		return fmt.Errorf("chaos: no linearization info")
	}
	var notes []porcupine.Annotation
	for _, e := range r.Events {
		notes = append(notes, porcupine.Annotation{Tag: "nemesis", Start: e.Start, End: e.End,
			Description: e.Kind, Details: e.Detail, BackgroundColor: "#f7c6a3"})
	}
	for _, v := range ch.Violations {
		notes = append(notes, porcupine.Annotation{Tag: "violations", Start: v.At, End: v.At,
			Description: v.Kind, Details: v.Scope + ": " + v.Detail, BackgroundColor: "#ff8080"})
	}
	ch.info.AddAnnotations(notes)
	var buf bytes.Buffer
	if err := porcupine.Visualize(Model(), ch.info, &buf); err != nil {
		return err
	}
	var sum bytes.Buffer
	r.Summary(&sum)
	head := `<pre style="font: 12px monospace; background: #f4f4f4; padding: 8px; border-bottom: 1px solid #ccc">` +
		html.EscapeString(sum.String()) +
		"\nNemesis windows are the orange bars in the \"nemesis\" row, violations red marks in the \"violations\" row; each client row is one process (a new one after an indeterminate operation, which stays open).</pre>"
	out := strings.Replace(buf.String(), "<body>", "<body>\n"+head, 1)
	out = strings.Replace(out, "<title>Porcupine</title>", "<title>idem chaos timeline</title>", 1)
	return os.WriteFile(path, []byte(out), 0o644)
}
