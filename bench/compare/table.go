package main

import (
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
// how many times the unbatched row's claims/s they did.
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

func writeTable(w io.Writer, rs []Result) {
	idem := map[int]float64{}
	for _, r := range rs {
		if r.Kind == "idem" && r.Batch == 0 {
			idem[r.Nodes] = r.Report.OpsPerSec
		}
	}
	fmt.Fprintln(w, "| system | nodes | durability | claims/s | p50 ms | p99 ms | errors | correct | idem ÷ this |")
	fmt.Fprintln(w, "|---|---:|---|---:|---:|---:|---:|---|---:|")
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
		errs := fmt.Sprint(rep.ErrorCount())
		if rep.ErrorCount() > 0 {
			var parts []string
			for _, k := range slices.Sorted(maps.Keys(rep.Errors)) {
				parts = append(parts, fmt.Sprintf("%s %d", k, rep.Errors[k]))
			}
			errs += " (" + strings.Join(parts, ", ") + ")"
		}
		correct := "yes"
		if !rep.OK() {
			correct = fmt.Sprintf("**NO** (lost %d, dup won %d, wrong %d)", rep.LostFresh, rep.DupsWon, rep.WrongAnswer)
		}
		fmt.Fprintf(w, "| %s | %d | %s | %.0f | %.2f | %.2f | %s | %s | %s |\n",
			r.System, r.Nodes, dur, rep.OpsPerSec, rep.All.P50, rep.All.P99, errs, correct, ratio)
	}
}
