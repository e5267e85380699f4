package raftfsm

import (
	"fmt"
	"hash/fnv"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/idem-store/idem/engine"
)

// BenchmarkGroups simulates docs/SCALING.md's plan in one process: N raft
// groups, each a real one-node raft with its own log, Pebble store and
// leader, and principals hashed to groups. Every claim goes to the group its
// principal hashes to (1,000 principals), from 64 callers per group, so the figure says how
// throughput grows with the number of groups on this machine's cores and
// disk (run it with -cpu 1,2,... to vary the cores):
//
//	go test ./raftfsm -run '^$' -bench Groups -benchtime 20000x -cpu 1,2
func BenchmarkGroups(b *testing.B) {
	for _, groups := range []int{1, 2, 4, 8} {
		b.Run(fmt.Sprintf("groups=%d", groups), func(b *testing.B) {
			nodes := make([]*Node, groups)
			for i := range nodes {
				nodes[i] = mustNode(b)
			}
			var next atomic.Int64
			var wg sync.WaitGroup
			b.ResetTimer()
			for w := 0; w < 64*groups; w++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for {
						i := next.Add(1)
						if i > int64(b.N) {
							return
						}
						scope := engine.Scope{Principal: fmt.Sprint("p", i%1000), Endpoint: "POST /x", Key: fmt.Sprint("k", i)}
						n := nodes[groupOf(scope, groups)]
						res, _, err := n.Claim(engine.ClaimArgs{Scope: scope, Fingerprint: "aa", LeaseMs: 30000, RetentionMs: 86_400_000})
						if err != nil || res.Outcome != engine.OutcomeClaimed {
							b.Errorf("claim %d: %v %v", i, res.Outcome, err)
							return
						}
					}
				}()
			}
			wg.Wait()
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "claims/s")
		})
	}
}

// groupOf is the routing rule SCALING.md describes: the principal hashes to
// one of a fixed number of slots, and slots are assigned to groups. Every
// request about one scope reaches the same group (one-winner needs exactly
// one group to decide a scope), and a principal's live-key quota stays exact
// because all its records live in one group.
func groupOf(s engine.Scope, groups int) int {
	const slots = 4096
	h := fnv.New64a()
	h.Write([]byte(s.Principal))
	return int(h.Sum64()%slots) % groups
}
