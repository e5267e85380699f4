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
