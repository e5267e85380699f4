package main

import (
	"strings"
	"testing"
)

func TestSummarizeClaimsCountsStallsAndLeavesErrorsOut(t *testing.T) {
	var ss []claimSample
	for i := 1; i <= 100; i++ {
		ss = append(ss, claimSample{ms: float64(i)})
	}
	ss = append(ss, claimSample{ms: 5000, err: true}) // a failed claim is no latency
	s := summarizeClaims(ss)
	if s.Count != 100 || s.Errors != 1 || s.P50 != 50 || s.P99 != 99 || s.Max != 100 || s.Over != 50 {
		t.Fatalf("summarizeClaims = %+v", s)
	}
	if z := summarizeClaims(nil); z.Count != 0 || z.String() != "none started" {
		t.Fatalf("no claims: %+v %q", z, z.String())
	}
}

func TestThousands(t *testing.T) {
	for n, want := range map[int64]string{0: "0", 999: "999", 1000: "1,000", 10_000_000: "10,000,000", -1234567: "-1,234,567"} {
		if got := thousands(n); got != want {
			t.Errorf("thousands(%d) = %q, want %q", n, got, want)
		}
	}
}

func TestExpiryTableFlagsLostLiveRowsAndStalls(t *testing.T) {
	ok := expiryRun{Mode: "single", Expired: 10, Live: 5, Deleted: 10, DeleteWAL: 2560, LiveKept: 5,
		Claims: map[string]claimStats{phaseNames[phaseDelete]: {Count: 3, Max: 80, Over: 1, Secs: 1}}}
	bad := expiryRun{Mode: "batched", Batch: 10_000, Batches: 2, Expired: 10, Live: 5, Deleted: 9, LiveKept: 4, ExpiredLeft: 1}
	var b strings.Builder
	writeExpiryTable(&b, &expiryReport{Server: "PostgreSQL 15", Claimers: 4, ClaimRate: 200, Runs: []expiryRun{ok, bad}})
	out := b.String()
	for _, want := range []string{"LIMIT 10,000", "(256 B per row)", "(2 statements,", "5 / 0 (all kept)", "4 / 1 (**WRONG**)",
		"max 80.0 ms; **1 over** 50 ms", "| claims during VACUUM FULL | none started | none started |"} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
}
