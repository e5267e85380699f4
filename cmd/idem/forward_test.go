package main

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Forwarding while the leader is gone. Two failures were seen: with the
// leader SIGSTOPped a claim to a follower hung 15 s before its 503 (a new
// leader was elected after 1.5 s, and the README promises about 3 s); with
// the leader stopped cleanly, followers answered "outcome unknown" for
// requests the old leader never received.

// unknownOutcome is the 503 that says the request may have been applied.
func unknownOutcome(a answer) bool {
	return a.code == 503 && strings.Contains(string(a.body), "outcome is unknown")
}

func TestForwardToStoppedLeaderIsBounded(t *testing.T) {
	c := newCluster(t, viaJoin, nil, nil)
	leader := c.leader()
	f := c.others(leader)[0]
	stopProcess(t, leader.p)
	defer leader.p.cmd.Process.Signal(syscall.SIGCONT)

	// The follower still believes in the stopped leader for a moment: the
	// forward reaches its socket and cannot be called undelivered, but the
	// answer comes within the documented wait, not after 15 s.
	start := time.Now()
	a := call("POST", f.http, "/v1/claim", claimReq("fwd-stopped", "a1"))
	took := time.Since(start)
	require.NoError(t, a.err)
	require.True(t, a.code == 201 || a.unavailable503(), "answer: %s", a)
	require.Less(t, took, 8*time.Second, "a forward to a stopped leader is bounded by the leader wait (3 s), got %s: %s", took, a)

	// Once the others elect a leader, claims through followers succeed.
	waitFor(t, 20*time.Second, "a claim through a follower after the election", func() (bool, string) {
		a := call("POST", f.http, "/v1/claim", claimReq("fwd-stopped-2", "a2"))
		return a.code == 201, a.String()
	})
}

func TestForwardDuringCleanLeaderStopNeverSaysUnknown(t *testing.T) {
	c := newCluster(t, viaJoin, nil, nil)
	leader := c.leader()
	fs := c.others(leader)

	stop := make(chan struct{})
	var mu sync.Mutex
	var unknown []string
	codes := map[int]int{}
	var wg sync.WaitGroup
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				key := fmt.Sprintf("fwd-clean-%d-%d", w, i)
				a := call("POST", fs[i%2].http, "/v1/claim", claimReq(key, key))
				mu.Lock()
				codes[a.code]++
				if unknownOutcome(a) {
					unknown = append(unknown, key+": "+a.String())
				}
				mu.Unlock()
			}
		}()
	}
	time.Sleep(500 * time.Millisecond)
	// SIGTERM: a clean stop. The leader hands over, then serves until the
	// others follow the new leader: a forward then reaches it only on a
	// connection it keeps open, and is answered "not the leader".
	leader.stop(t)
	require.Contains(t, leader.p.logs.String(), "others-follow-it=true", "the followers named the new leader before the old one stopped serving")
	time.Sleep(5 * time.Second)
	close(stop)
	wg.Wait()
	t.Logf("answers by status: %v", codes)
	require.Empty(t, unknown, "requests the stopped leader never received were answered as unknown")
	require.Greater(t, codes[201], 0)
}

// X-Idem-Forwarded-By marks a request a follower passed to the leader, so
// that a node that lost the leadership meanwhile answers rather than
// forwarding it again. A client's request that carries it (sent by
// mistake, or copied by something in front) is not one: its follower
// still forwards it, and the client gets its answer. Bug: the follower
// answered 503 "no leader" at once, a spurious outage. A request that
// names a member of the cluster is one a node forwarded: never forwarded
// again (here, back to the follower's own id), so no forwarding loop is
// possible.
func TestClientRequestWithTheForwardingHeaderIsAnswered(t *testing.T) {
	c := newCluster(t, viaJoin, nil, nil)
	leader := c.leader()
	f := c.others(leader)[0]
	send := func(method, path, body, by string) answer {
		req, err := http.NewRequest(method, "http://"+f.http+path, strings.NewReader(body))
		require.NoError(t, err)
		if body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		req.Header.Set("X-Idem-Forwarded-By", by)
		resp, err := clusterHTTP.Do(req)
		if err != nil {
			return answer{err: err}
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		return answer{code: resp.StatusCode, hdr: resp.Header, body: b, err: err}
	}
	for _, by := range []string{"1", "edge-proxy", "not-a-member,also-not"} {
		key := "fwd-header-" + strings.NewReplacer(",", "-").Replace(by)
		a := send("POST", "/v1/claim", claimReq(key, key), by)
		require.Equal(t, 201, a.code, "claim through a follower with X-Idem-Forwarded-By: %s: %s", by, a)
		require.Equal(t, leader.http, a.hdr.Get("Idem-Leader"), "the leader decided it")
		a = send("GET", "/v1/records?principal="+cPrincipal+"&endpoint=POST%20/payments&key="+key, "", by)
		require.Equal(t, 200, a.code, "linearizable lookup through a follower with X-Idem-Forwarded-By: %s: %s", by, a)
	}
	// Marked by a member (the follower itself: it came back to it), it is
	// not forwarded again: answered as not applied, for the node that sent
	// it to try the leader.
	a := send("POST", "/v1/claim", claimReq("fwd-header-loop", "l1"), f.id)
	require.Equal(t, 503, a.code, "a request marked by a member is never forwarded again: %s", a)
	require.Equal(t, "1", a.hdr.Get("X-Idem-Not-Applied"), "%s", a)
	a = send("POST", "/v1/claim", claimReq("fwd-header-loop-2", "l2"), "edge-proxy,"+leader.id)
	require.Equal(t, 503, a.code, "a request a member forwarded is never forwarded again: %s", a)
}

// A forward whose outcome is unknown is logged without its URL: the URL of
// a DELETE /v1/records carries the principal, endpoint and key in its
// query, and net/http's error quoted it whole into the follower's WARN
// line (a leak walk: every caller that went away mid-eviction put a
// customer's key into a log that operators paste into tickets; the node
// logs no key anywhere else).
func TestUnknownForwardIsLoggedWithoutTheQuery(t *testing.T) {
	c := newCluster(t, viaJoin, nil, nil)
	leader := c.leader()
	f := c.others(leader)[0]
	const key = "leak-key-cus-4242"
	require.Equal(t, 201, call("POST", leader.http, "/v1/claim", claimReq(key, "a1")).code)
	waitFor(t, 10*time.Second, "the follower to apply the claim", func() (bool, string) {
		a := call("GET", f.http, "/v1/records?consistency=stale&principal="+cPrincipal+"&endpoint=POST%20/payments&key="+key, "")
		return a.code == 200, a.String()
	})

	// The stopped leader's socket takes the forward, and never answers.
	stopProcess(t, leader.p)
	defer leader.p.cmd.Process.Signal(syscall.SIGCONT)
	a := call("DELETE", f.http, "/v1/records?principal="+cPrincipal+"&endpoint=POST%20/payments&key="+key, "")
	require.NoError(t, a.err)
	require.True(t, unknownOutcome(a), "a DELETE forwarded to a stopped leader %s (%s): %s, decided by %q", leader.id, leader.http, a, a.hdr.Get("Idem-Leader"))

	// The answer can reach the test before the line reaches its pipe.
	waitFor(t, 10*time.Second, "the follower's line on the forward", func() (bool, string) {
		return strings.Contains(f.p.logs.String(), "forward to leader failed; outcome unknown"), ""
	})
	logs := f.p.logs.String()
	require.NotContains(t, logs, key, "the follower logged the evicted record's key")
	require.Contains(t, logs, "path=/v1/records", "the line still says what was forwarded")
}

// stopProcess sends p SIGSTOP and waits until the kernel shows it stopped
// (state T in /proc/PID/stat): kill(2) returns once the signal is queued,
// and a thread finishing a system call stops only after it. A DELETE sent
// through a follower right after the signal was once answered 200 deleted
// (twice in CI, never reproduced), as if the leader still ran.
func stopProcess(t *testing.T, p *proc) {
	t.Helper()
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGSTOP))
	stat := fmt.Sprintf("/proc/%d/stat", p.cmd.Process.Pid)
	waitFor(t, 5*time.Second, "the process stopped", func() (bool, string) {
		b, err := os.ReadFile(stat)
		if err != nil {
			return false, err.Error()
		}
		// pid (comm) state ...: comm may hold spaces and parentheses.
		i := bytes.LastIndexByte(b, ')')
		if i < 0 || i+2 >= len(b) {
			return false, string(b)
		}
		return b[i+2] == 'T', "state " + string(b[i+2])
	})
}
