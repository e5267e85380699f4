package api

import (
	"strings"
	"testing"
)

// MaxBatchOpsFor is the most decidable ops a body of --max-request-bytes
// holds: that many of the smallest op fit, and are each taken as an op;
// one more does not fit. idem serve refuses a --max-batch-ops above it,
// which no request could reach.
func TestMaxBatchOpsForIsWhatABodyHolds(t *testing.T) {
	if len(smallestBatchOp) != 53 {
		t.Fatalf("the smallest op is %d bytes; idem serve's refusal says 53", len(smallestBatchOp))
	}
	body := func(n int) string {
		return `{"ops":[` + strings.TrimSuffix(strings.Repeat(smallestBatchOp+",", n), ",") + `]}`
	}
	for _, limit := range []int64{63, 64, 116, 117, 1000, 8 << 10, 1 << 20} {
		n := MaxBatchOpsFor(limit)
		if n < 1 {
			t.Fatalf("MaxBatchOpsFor(%d) = %d", limit, n)
		}
		if b := body(n); int64(len(b)) > limit {
			t.Errorf("MaxBatchOpsFor(%d) = %d ops, a body of %d bytes", limit, n, len(b))
		} else if ops, ok := fastBatchOps([]byte(b)); !ok || len(ops) != n {
			t.Errorf("a body of %d smallest ops was read as %d ops", n, len(ops))
		}
		if b := body(n + 1); int64(len(b)) <= limit {
			t.Errorf("MaxBatchOpsFor(%d) = %d, but %d ops fit in %d bytes", limit, n, n+1, len(b))
		}
	}
	if n := MaxBatchOpsFor(62); n != 0 {
		t.Errorf("MaxBatchOpsFor(62) = %d: not even one op fits", n)
	}
}
