package main

import (
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strings"
)

// cmdTable prints the markdown table of the saved results, in the order
// given. The last column is idem's claims/s divided by the row's, against
// idem with the same number of nodes (one-node rows against idem on one
// node, three-node rows against idem on three); idem's batched rows say
// how many times the unbatched row's claims/s they did. Several runs of
// one system (run.sh --rounds) make one row: see medians.
func cmdTable(files []string, w io.Writer) int {
	var rs []Result
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			fmt.Fprintf(os.Stderr, "compare table: %v\n", err)
			continue
		}
		var r Result
		if err := json.Unmarshal(b, &r); err != nil || r.Report == nil {
			fmt.Fprintf(os.Stderr, "compare table: %s: not a result (%v)\n", f, err)
			continue
		}
		rs = append(rs, r)
	}
	if len(rs) == 0 {
		fmt.Fprintln(os.Stderr, "compare table: no results")
		return 1
	}
	writeTable(w, rs)
	return 0
}

// row is one system in the table: its median run, and what every run of
// it adds up to.
type row struct {
	Result
	runs     int
	min, max float64 // the slowest and fastest run's claims/s
	errors   map[string]int
	lost     [3]int // lost fresh claims, duplicates won, wrong answers
}

func (r *row) errorCount() int {
	n := 0
	for _, v := range r.errors {
		n += v
	}
	return n
}

// medians makes one row per system (its label, nodes and batch), in the
// order each first appears. A row's claims/s, p50 and p99 are those of
// its median run by claims/s (the faster of the two middle ones for an
// even count): a run whose latencies go with its throughput, not a blend.
// Errors and wrong answers add up over every run, so one bad run shows.
func medians(rs []Result) []row {
	type id struct {
		system       string
		nodes, batch int
	}
	var order []id
	runs := map[id][]Result{}
	for _, r := range rs {
		k := id{r.System, r.Nodes, r.Batch}
		if _, ok := runs[k]; !ok {
			order = append(order, k)
		}
		runs[k] = append(runs[k], r)
	}
	out := make([]row, 0, len(order))
	for _, k := range order {
		all := runs[k]
		slices.SortStableFunc(all, func(a, b Result) int { return cmp.Compare(a.Report.OpsPerSec, b.Report.OpsPerSec) })
		r := row{Result: all[len(all)/2], runs: len(all), min: all[0].Report.OpsPerSec,
			max: all[len(all)-1].Report.OpsPerSec, errors: map[string]int{}}
		for _, x := range all {
			for e, n := range x.Report.Errors {
				r.errors[e] += n
			}
			r.lost[0] += x.Report.LostFresh
			r.lost[1] += x.Report.DupsWon
			r.lost[2] += x.Report.WrongAnswer
		}
		out = append(out, r)
	}
	return out
}

func writeTable(w io.Writer, results []Result) {
	rs := medians(results)
	rounds := false
	for _, r := range rs {
		rounds = rounds || r.runs > 1
	}
	idem := map[int]float64{}
	for _, r := range rs {
		if r.Kind == "idem" && r.Batch == 0 {
			idem[r.Nodes] = r.Report.OpsPerSec
		}
	}
	if rounds {
		fmt.Fprintln(w, "| system | nodes | durability | claims/s (median) | range | runs | p50 ms | p99 ms | errors | correct | idem ÷ this |")
		fmt.Fprintln(w, "|---|---:|---|---:|---|---:|---:|---:|---:|---|---:|")
	} else {
		fmt.Fprintln(w, "| system | nodes | durability | claims/s | p50 ms | p99 ms | errors | correct | idem ÷ this |")
		fmt.Fprintln(w, "|---|---:|---|---:|---:|---:|---:|---|---:|")
	}
	for _, r := range rs {
		rep := r.Report
		dur := r.Durability
		if !r.Durable {
			dur += " — **not durable**"
		}
		ratio := "—"
		if base, ok := idem[r.Nodes]; ok && rep.OpsPerSec > 0 {
			switch {
			case r.Kind == "idem" && r.Batch > 0:
				ratio = fmt.Sprintf("%.2f× unbatched", rep.OpsPerSec/base)
			case r.Kind == "idem":
				ratio = "1.00×"
			default:
				ratio = fmt.Sprintf("%.2f×", base/rep.OpsPerSec)
			}
		}
		errs := fmt.Sprint(r.errorCount())
		if r.errorCount() > 0 {
			var parts []string
			for _, k := range slices.Sorted(maps.Keys(r.errors)) {
				parts = append(parts, fmt.Sprintf("%s %d", k, r.errors[k]))
			}
			errs += " (" + strings.Join(parts, ", ") + ")"
		}
		correct := "yes"
		if r.lost != [3]int{} {
			correct = fmt.Sprintf("**NO** (lost %d, dup won %d, wrong %d)", r.lost[0], r.lost[1], r.lost[2])
		}
		if rounds {
			fmt.Fprintf(w, "| %s | %d | %s | %.0f | %.0f–%.0f | %d | %.2f | %.2f | %s | %s | %s |\n",
				r.System, r.Nodes, dur, rep.OpsPerSec, r.min, r.max, r.runs, rep.All.P50, rep.All.P99, errs, correct, ratio)
			continue
		}
		fmt.Fprintf(w, "| %s | %d | %s | %.0f | %.2f | %.2f | %s | %s | %s |\n",
			r.System, r.Nodes, dur, rep.OpsPerSec, rep.All.P50, rep.All.P99, errs, correct, ratio)
	}
}
