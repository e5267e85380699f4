package main

import (
	"strings"
	"testing"

	"github.com/idem-store/idem/bench"
)

func TestScopeKeyIsLengthPrefixed(t *testing.T) {
	a := scopeKey(bench.Scope{Principal: "a", Endpoint: "bc", Key: "k"})
	b := scopeKey(bench.Scope{Principal: "ab", Endpoint: "c", Key: "k"})
	if a == b {
		t.Fatalf("(a,bc) and (ab,c) share the key %q", a)
	}
	if u := principalUUID("cus_42"); len(u) != 36 || u != principalUUID("cus_42") || u == principalUUID("cus_43") {
		t.Fatalf("principalUUID: %q", u)
	}
}

func TestTableRatiosAgainstIdemWithTheSameNodes(t *testing.T) {
	rs := []Result{
		{System: "Redis", Kind: "redis", Durability: "always", Durable: true, Nodes: 1, Report: &bench.Report{OpsPerSec: 1000}},
		{System: "Redis es", Kind: "redis", Durability: "everysec", Durable: false, Nodes: 1, Report: &bench.Report{OpsPerSec: 4000, Errors: map[string]int{"transport": 2}}},
		{System: "etcd3", Kind: "etcd", Nodes: 3, Report: &bench.Report{OpsPerSec: 500, DupsWon: 1}},
		{System: "idem1", Kind: "idem", Nodes: 1, Report: &bench.Report{OpsPerSec: 2000}},
		{System: "idem3", Kind: "idem", Nodes: 3, Report: &bench.Report{OpsPerSec: 1500}},
	}
	var b strings.Builder
	writeTable(&b, rs)
	out := b.String()
	for _, want := range []string{"| Redis | 1 | always | 1000 |", "| 2.00× |", "**not durable**", "| 0.50× |",
		"2 (transport 2)", "| 3.00× |", "**NO**", "| idem1 | 1 |"} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
}

func TestTableShowsTheMedianOfRounds(t *testing.T) {
	run := func(sys, kind string, nodes int, ops, p99 float64) Result {
		rep := &bench.Report{OpsPerSec: ops}
		rep.All.P99 = p99
		return Result{System: sys, Kind: kind, Durability: "fsync", Durable: true, Nodes: nodes, Report: rep}
	}
	pg := []Result{run("PG", "postgres", 1, 1000, 30), run("PG", "postgres", 1, 3000, 10), run("PG", "postgres", 1, 2000, 20)}
	pg[0].Report.DupsWon = 1 // the slowest run is not the median, but its wrong answer must show
	pg[2].Report.Errors = map[string]int{"timeout": 2}
	pg[1].Report.Errors = map[string]int{"timeout": 1}
	idem := []Result{run("idem", "idem", 1, 5000, 4), run("idem", "idem", 1, 3000, 9)}
	rs := []Result{pg[0], idem[0], pg[1], idem[1], pg[2]} // rounds interleave the systems
	var b strings.Builder
	writeTable(&b, rs)
	out := b.String()
	for _, want := range []string{
		"| PG | 1 | fsync | 2000 | 1000–3000 | 3 | 0.00 | 20.00 | 3 (timeout 3) | **NO** (lost 0, dup won 1, wrong 0) | 2.50× |",
		"| idem | 1 | fsync | 5000 | 3000–5000 | 2 | 0.00 | 4.00 | 0 | yes | 1.00× |",
		"claims/s (median) | range | runs",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
	if strings.Index(out, "| PG |") > strings.Index(out, "| idem |") {
		t.Errorf("rows are not in the order systems first ran:\n%s", out)
	}
	if strings.Count(out, "| PG |") != 1 {
		t.Errorf("one row per system:\n%s", out)
	}
}
