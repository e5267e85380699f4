package main

import (
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A follower's /readyz asks the leader for its commit index. /readyz needs
// no token and is outside --max-inflight, but the leader's answer to it is
// not: one request to the leader per call let a crowd polling a follower's
// /readyz fill the leader's --max-inflight, and the leader's own clients
// got 503. Callers that come while a request is on its way now share the
// next one, so a follower has at most one such request at the leader: with
// --max-inflight 2, that one and a client's request always fit.
func TestFollowerReadyzCrowdLeavesTheLeadersLimitToItsClients(t *testing.T) {
	t.Parallel()
	c := newCluster(t, viaJoin, []string{"--max-inflight", "2"}, nil)
	leader := c.leader()
	follower := c.others(leader)[0]
	// Each node, once it has joined, asks the others for their settings
	// (GET /v1/config): a third request at the leader beside the shared
	// probe and a client's, which failed this test now and then under
	// load. It is over once each says so.
	for _, n := range c.others(leader) {
		require.Eventually(t, func() bool {
			return strings.Contains(n.p.logs.String(), "agree with the other members")
		}, 30*time.Second, 50*time.Millisecond, "%s never compared its settings", n.id)
	}

	stop := make(chan struct{})
	var polls, unanswered atomic.Int64
	var lastUnanswered atomic.Pointer[string]
	var wg sync.WaitGroup
	for range 48 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				a := call("GET", follower.http, "/readyz", "")
				polls.Add(1)
				if a.code == 503 && strings.Contains(string(a.body), "the leader did not tell its commit index") {
					unanswered.Add(1)
					body := string(a.body)
					lastUnanswered.Store(&body)
				}
			}
		}()
	}
	var refused []string
	claims := 0
	for deadline := time.Now().Add(3 * time.Second); time.Now().Before(deadline); claims++ {
		a := call("POST", leader.http, "/v1/claim", claimReq(fmt.Sprintf("crowd-%d", claims), ""))
		if a.code == 503 && strings.Contains(string(a.body), "max-inflight") {
			refused = append(refused, string(a.body))
		}
	}
	close(stop)
	wg.Wait()
	require.Greater(t, polls.Load(), int64(1000), "the crowd polled too little to test anything")
	if n := unanswered.Load(); n > 0 {
		t.Errorf("%d of %d /readyz polls of the follower found the leader refusing its probe, e.g. %s", n, polls.Load(), *lastUnanswered.Load())
	}
	require.Empty(t, refused, "%d of %d claims at the leader were refused for --max-inflight while %d /readyz polls hit a follower", len(refused), claims, polls.Load())
}
