package main

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// A follower killed with -9 and restarted while claims keep coming is
// caught up by a snapshot from the leader and must then keep applying:
// once a chaos run saw such a follower install a snapshot whose state was
// past the snapshot's index and then apply nothing for 35 s.
func TestKilledFollowerCatchesUpBySnapshotUnderLoad(t *testing.T) {
	c := newCluster(t, viaBootstrapExpect, []string{"--snapshot-threshold", "64", "--trailing-logs", "16", "--snapshot-interval", "200ms"}, nil)
	leader := c.leader()
	f := c.others(leader)[0]
	live := c.others(f)

	stop := make(chan struct{})
	var wg sync.WaitGroup
	var acked atomic.Int64
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				key := fmt.Sprintf("load-%d-%d", w, i)
				if a := call("POST", live[i%2].http, "/v1/claim", claimReq(key, "c")); a.code == 201 {
					acked.Add(1)
				}
			}
		}()
	}
	defer func() { close(stop); wg.Wait() }()
	time.Sleep(time.Second)
	f.kill(t)
	time.Sleep(3 * time.Second) // the leader snapshots far past f
	c.restart(f, nil)
	waitFor(t, 30*time.Second, "the killed follower ready again under load", func() (bool, string) {
		a := call("GET", f.http, "/readyz", "")
		return a.code == 200, a.String()
	})
	// And it keeps up: ready again a few seconds later, not stuck.
	time.Sleep(3 * time.Second)
	waitFor(t, 15*time.Second, "the follower still applying", func() (bool, string) {
		a := call("GET", f.http, "/readyz", "")
		return a.code == 200, a.String()
	})
	waitForLine(t, f.p.logs, "restored snapshot") // else f caught up without a snapshot from the leader; the test needs one
	t.Logf("claims acknowledged during the test: %d", acked.Load())
}
