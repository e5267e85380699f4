package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idem-store/idem/client"
	"github.com/idem-store/idem/raftfsm"
)

// Three-node clusters of real `idem serve` processes, each node on its own
// loopback IP (127.0.0.11, .12, .13) with real TCP between them: membership,
// forwarding, one winner under concurrency, kill -9 of the leader, catch-up
// by snapshot, full restart, removal, clock skew and leadership transfer.

// ---- harness -----------------------------------------------------------

type cnode struct {
	id, ip     string
	dir        string
	http, raft string
	args       []string // flags of the first start: membership and extras
	p          *proc
}

type testCluster struct {
	t     *testing.T
	nodes []*cnode
}

// formation is how the three nodes form their cluster.
type formation int

const (
	viaJoin            formation = iota // n1 bootstraps alone, n2 and n3 --join n1
	viaBootstrapExpect                  // all three --bootstrap-expect 3 --join <all>
)

func (f formation) String() string {
	if f == viaJoin {
		return "join"
	}
	return "bootstrap-expect"
}

// freePortOn returns an address on ip with a port nothing listens on, and
// that no other test of this process was given: the kernel can hand a
// port just closed to the next caller, and the parallel test that got it
// second then found its node's port taken by the first's ("address
// already in use", once in CI).
func freePortOn(t *testing.T, ip string) string {
	t.Helper()
	lo, hi := testPortRange(t)
	for next := lo; ; next++ {
		port := "0"
		if lo > 0 {
			if next > hi {
				t.Fatalf("IDEM_TEST_PORTS: no free port left in %d-%d on %s", lo, hi, ip)
			}
			port = strconv.Itoa(next)
		}
		ln, err := net.Listen("tcp", net.JoinHostPort(ip, port))
		if err != nil && lo > 0 {
			continue // taken by someone else
		}
		require.NoError(t, err)
		addr := ln.Addr().String()
		ln.Close()
		_, port, _ = net.SplitHostPort(addr)
		givenPortsMu.Lock()
		taken := givenPorts[port]
		givenPorts[port] = true
		givenPortsMu.Unlock()
		if !taken {
			return addr
		}
	}
}

// testPortRange is IDEM_TEST_PORTS ("27000-27999"), the ports freePortOn
// takes from instead of the kernel's ephemeral ones, for a shared machine
// that gives each run its own range; 0, 0 when unset.
func testPortRange(t *testing.T) (lo, hi int) {
	v := os.Getenv("IDEM_TEST_PORTS")
	if v == "" {
		return 0, 0
	}
	a, b, ok := strings.Cut(v, "-")
	lo, err1 := strconv.Atoi(a)
	hi, err2 := strconv.Atoi(b)
	if !ok || err1 != nil || err2 != nil || lo <= 0 || hi < lo || hi > 65535 {
		t.Fatalf("IDEM_TEST_PORTS=%q: want LOW-HIGH, e.g. 27000-27999", v)
	}
	return lo, hi
}

// givenPorts are the ports freePortOn has handed out, on any address (a
// node may listen on one address and advertise another).
var (
	givenPortsMu sync.Mutex
	givenPorts   = map[string]bool{}
)

// threeOnOneIP launches n1..n3 on one address (IDEM_TEST_IP, else
// 127.0.0.9), three ports each, forming with --bootstrap-expect 3 and
// --min-free-disk 0; it does not wait for them (the caller's c.leader()
// does).
func threeOnOneIP(t *testing.T) *testCluster {
	t.Helper()
	ip := testIP("127.0.0.9") // one address, three ports: IDEM_TEST_IP keeps a shared machine's run on its own
	root := t.TempDir()
	c := &testCluster{t: t}
	for i := 1; i <= 3; i++ {
		c.nodes = append(c.nodes, &cnode{id: fmt.Sprintf("n%d", i), ip: ip, dir: filepath.Join(root, fmt.Sprintf("n%d", i)),
			http: freePortOn(t, ip), raft: freePortOn(t, ip)})
	}
	var all []string
	for _, n := range c.nodes {
		all = append(all, n.http)
	}
	for _, n := range c.nodes {
		n.args = []string{"--node-id", n.id, "--bootstrap-expect", "3", "--join", strings.Join(all, ","), "--min-free-disk", "0"}
		n.p = launch(t, n.dir, n.http, n.raft, n.args...)
	}
	return c
}

// newCluster starts n1..n3 on 127.0.0.11..13 with common flags plus each
// node's own, and waits until every node shows three voters, one leader and
// every HTTP address.
func newCluster(t *testing.T, how formation, common []string, perNode map[string][]string) *testCluster {
	t.Helper()
	c := &testCluster{t: t}
	root := t.TempDir()
	for i := 1; i <= 3; i++ {
		// 127.0.0.11-13 rather than .1-.3: out of the way of anything else
		// on the machine (a chaos run, make cluster) that uses the low ones.
		ip := fmt.Sprintf("127.0.0.%d", 10+i)
		n := &cnode{id: fmt.Sprintf("n%d", i), ip: ip, dir: filepath.Join(root, fmt.Sprintf("n%d", i)),
			http: freePortOn(t, ip), raft: freePortOn(t, ip)}
		c.nodes = append(c.nodes, n)
	}
	var all []string
	for _, n := range c.nodes {
		all = append(all, n.http)
	}
	for i, n := range c.nodes {
		n.args = []string{"--node-id", n.id}
		switch {
		case how == viaBootstrapExpect:
			n.args = append(n.args, "--bootstrap-expect", "3", "--join", strings.Join(all, ","))
		case i > 0:
			n.args = append(n.args, "--join", c.nodes[0].http)
		}
		n.args = append(append(n.args, common...), perNode[n.id]...)
	}
	for i, n := range c.nodes {
		if how == viaJoin && i == 0 {
			n.p = start(t, n.dir, n.http, n.raft, n.args...)
			continue
		}
		n.p = launch(t, n.dir, n.http, n.raft, n.args...)
	}
	c.waitStable(c.nodes...)
	return c
}

func (c *testCluster) node(id string) *cnode {
	for _, n := range c.nodes {
		if n.id == id {
			return n
		}
	}
	c.t.Fatalf("no node %s", id)
	return nil
}

func (c *testCluster) others(not ...*cnode) []*cnode {
	var out []*cnode
next:
	for _, n := range c.nodes {
		for _, x := range not {
			if n == x {
				continue next
			}
		}
		out = append(out, n)
	}
	return out
}

// restart starts a stopped node again on its data dir and addresses, with
// args (its first-start flags when nil). It does not wait.
func (c *testCluster) restart(n *cnode, args []string) {
	c.t.Helper()
	select {
	case <-n.p.done:
	default:
		c.t.Fatalf("restart of %s while it still runs", n.id)
	}
	if args == nil {
		args = n.args
	}
	n.p = launch(c.t, n.dir, n.http, n.raft, args...)
}

func (n *cnode) kill(t *testing.T) {
	t.Helper()
	require.NoError(t, n.p.cmd.Process.Signal(syscall.SIGKILL))
	n.p.wait()
}

// stop sends SIGTERM and requires a clean exit.
func (n *cnode) stop(t *testing.T) {
	t.Helper()
	require.NoError(t, n.p.cmd.Process.Signal(syscall.SIGTERM))
	select {
	case <-n.p.done:
		require.NoError(t, n.p.err, "exit status of %s after SIGTERM", n.id)
	case <-time.After(30 * time.Second):
		t.Fatalf("%s did not exit 30s after SIGTERM", n.id)
	}
}

// waitFor polls cond every 100ms until it holds or timeout passes.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	last := ""
	for {
		ok, detail := cond()
		if ok {
			return
		}
		if detail != "" {
			last = detail
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not reached in %s; last: %s", what, timeout, last)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

var clusterHTTP = &http.Client{
	Timeout: 30 * time.Second,
	Transport: &http.Transport{
		Proxy:               nil,
		DialContext:         (&net.Dialer{Timeout: 2 * time.Second}).DialContext,
		MaxIdleConns:        512,
		MaxIdleConnsPerHost: 128,
		IdleConnTimeout:     30 * time.Second,
	},
}

type answer struct {
	code int
	hdr  http.Header
	body []byte
	err  error
}

func (a answer) String() string {
	if a.err != nil {
		return "error: " + a.err.Error()
	}
	return fmt.Sprintf("%d %s", a.code, strings.TrimSpace(string(a.body)))
}

// problemCode is the `code` of a problem document ("" when not one).
func (a answer) problemCode() string {
	var p struct{ Code string }
	json.Unmarshal(a.body, &p)
	return p.Code
}

// unavailable503 is a 503 `unavailable` with Retry-After: the answer that
// says "retry", which clients must be ready for during elections.
func (a answer) unavailable503() bool {
	return a.err == nil && a.code == 503 && a.problemCode() == "unavailable" && a.hdr.Get("Retry-After") != ""
}

// call is a request that never fails the test, for use in goroutines and
// against nodes that may be down.
func call(method, addr, path, body string) answer {
	req, err := http.NewRequest(method, "http://"+addr+path, strings.NewReader(body))
	if err != nil {
		return answer{err: err}
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := clusterHTTP.Do(req)
	if err != nil {
		return answer{err: err}
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return answer{code: resp.StatusCode, hdr: resp.Header, body: b, err: err}
}

const (
	cPrincipal = "cus_cluster"
	cEndpoint  = "POST /payments"
	cFinger    = "c0ffee"
)

func claimReq(key, claimID string) string {
	b, _ := json.Marshal(map[string]string{"principal": cPrincipal, "endpoint": cEndpoint, "key": key,
		"fingerprint": cFinger, "claim_id": claimID})
	return string(b)
}

func completeReq(key, token, body string) string {
	b, _ := json.Marshal(map[string]any{"principal": cPrincipal, "endpoint": cEndpoint, "key": key, "token": token,
		"response": map[string]any{"status": 201, "content_type": "application/json", "body": []byte(body)}})
	return string(b)
}

func recordPath(key, consistency string) string {
	q := url.Values{"principal": {cPrincipal}, "endpoint": {cEndpoint}, "key": {key}}
	if consistency != "" {
		q.Set("consistency", consistency)
	}
	return "/v1/records?" + q.Encode()
}

type claimedAnswer struct {
	Outcome        string `json:"outcome"`
	Token          string `json:"token"`
	Attempt        int    `json:"attempt"`
	CreatedAt      string `json:"created_at"`
	ExpiresAt      string `json:"expires_at"`
	LeaseExpiresAt string `json:"lease_expires_at"`
}

type recordAnswer struct {
	Record struct {
		Key      string `json:"key"`
		State    string `json:"state"`
		Response *struct {
			Status int    `json:"status"`
			Body   []byte `json:"body"`
		} `json:"response"`
	} `json:"record"`
}

// claimOK claims key through addr, retrying 503s with the same claim_id
// (always safe), and requires a 201.
func claimOK(t *testing.T, addr, key string) claimedAnswer {
	t.Helper()
	var a answer
	waitFor(t, 30*time.Second, "claim "+key+" via "+addr, func() (bool, string) {
		a = call("POST", addr, "/v1/claim", claimReq(key, "c-"+key))
		if a.err == nil && a.code == 201 {
			return true, ""
		}
		require.True(t, a.err != nil || a.unavailable503(), "claim %s via %s: %s", key, addr, a)
		return false, a.String()
	})
	var c claimedAnswer
	require.NoError(t, json.Unmarshal(a.body, &c))
	return c
}

func completeOK(t *testing.T, addr, key, token, body string) {
	t.Helper()
	waitFor(t, 30*time.Second, "complete "+key+" via "+addr, func() (bool, string) {
		a := call("POST", addr, "/v1/complete", completeReq(key, token, body))
		if a.err == nil && a.code == 200 {
			return true, ""
		}
		require.True(t, a.err != nil || a.unavailable503(), "complete %s via %s: %s", key, addr, a)
		return false, a.String()
	})
}

func (c *testCluster) status(n *cnode) (raftfsm.Status, error) {
	a := call("GET", n.http, "/v1/cluster", "")
	if a.err != nil {
		return raftfsm.Status{}, a.err
	}
	if a.code != 200 {
		return raftfsm.Status{}, fmt.Errorf("%s", a)
	}
	var st raftfsm.Status
	err := json.Unmarshal(a.body, &st)
	return st, err
}

// stableCheck reports whether every node of members shows exactly members
// as voters with their HTTP addresses, the same leader (one of them, with
// its HTTP address) and is ready.
func (c *testCluster) stableCheck(members []*cnode) (*cnode, string) {
	want := map[string]*cnode{}
	for _, m := range members {
		want[m.id] = m
	}
	var leader string
	for _, n := range members {
		st, err := c.status(n)
		if err != nil {
			return nil, fmt.Sprintf("%s: %v", n.id, err)
		}
		if len(st.Nodes) != len(members) {
			return nil, fmt.Sprintf("%s sees %d nodes: %+v", n.id, len(st.Nodes), st.Nodes)
		}
		for _, m := range st.Nodes {
			w, ok := want[m.ID]
			if !ok || m.Suffrage != "voter" || m.HTTPAddr != w.http || m.RaftAddr != w.raft {
				return nil, fmt.Sprintf("%s sees member %+v", n.id, m)
			}
		}
		if st.Leader == nil {
			return nil, fmt.Sprintf("%s knows no leader", n.id)
		}
		l, ok := want[st.Leader.ID]
		if !ok || st.Leader.HTTPAddr != l.http {
			return nil, fmt.Sprintf("%s sees leader %+v", n.id, *st.Leader)
		}
		if leader != "" && leader != st.Leader.ID {
			return nil, fmt.Sprintf("leaders differ: %s and %s", leader, st.Leader.ID)
		}
		leader = st.Leader.ID
		if a := call("GET", n.http, "/readyz", ""); a.err != nil || a.code != 200 {
			return nil, fmt.Sprintf("%s not ready: %s", n.id, a)
		}
	}
	return want[leader], ""
}

// waitStable waits until members agree on membership and leader (see
// stableCheck) and returns the leader.
func (c *testCluster) waitStable(members ...*cnode) *cnode {
	c.t.Helper()
	var leader *cnode
	waitFor(c.t, 45*time.Second, "stable cluster", func() (bool, string) {
		l, why := c.stableCheck(members)
		leader = l
		return l != nil, why
	})
	return leader
}

func (c *testCluster) leader() *cnode { c.t.Helper(); return c.waitStable(c.nodes...) }

type stateAnswer struct {
	Node         string `json:"node"`
	StateHash    string `json:"state_hash"`
	AppliedIndex uint64 `json:"applied_index"`
}

func adminState(n *cnode) (stateAnswer, error) {
	a := call("GET", n.http, "/v1/admin/state", "")
	if a.err != nil || a.code != 200 {
		return stateAnswer{}, fmt.Errorf("%s: %s", n.id, a)
	}
	var s stateAnswer
	err := json.Unmarshal(a.body, &s)
	return s, err
}

// waitSameState polls /v1/admin/state on every node until a moment where
// all show the same applied index and the same state hash. Replicas at the
// same applied index with different hashes have diverged: that fails at
// once.
func waitSameState(t *testing.T, nodes ...*cnode) uint64 {
	t.Helper()
	var applied uint64
	waitFor(t, 30*time.Second, "identical state on every node", func() (bool, string) {
		states := make([]stateAnswer, len(nodes))
		errs := make([]error, len(nodes))
		var wg sync.WaitGroup
		for i, n := range nodes {
			wg.Add(1)
			go func() { defer wg.Done(); states[i], errs[i] = adminState(n) }()
		}
		wg.Wait()
		for _, err := range errs {
			if err != nil {
				return false, err.Error()
			}
		}
		byIndex := map[uint64]string{}
		for _, s := range states {
			if h, ok := byIndex[s.AppliedIndex]; ok {
				require.Equal(t, h, s.StateHash, "replicas diverged at applied index %d: %+v", s.AppliedIndex, states)
			}
			byIndex[s.AppliedIndex] = s.StateHash
		}
		if len(byIndex) != 1 {
			return false, fmt.Sprintf("%+v", states)
		}
		applied = states[0].AppliedIndex
		return true, ""
	})
	return applied
}

// ---- tests -------------------------------------------------------------

// 1. Both ways of forming a cluster give three voters, one leader, and
// every node knows the leader and every node's HTTP address.
func TestClusterJoinAndStatus(t *testing.T) {
	for _, how := range []formation{viaJoin, viaBootstrapExpect} {
		t.Run(how.String(), func(t *testing.T) {
			c := newCluster(t, how, nil, nil)
			leader := c.leader()
			for _, n := range c.nodes {
				st, err := c.status(n)
				require.NoError(t, err)
				require.Equal(t, n.id, st.Self.ID)
				require.Equal(t, n.http, st.Self.HTTPAddr)
				require.Equal(t, n.raft, st.Self.RaftAddr)
				require.Equal(t, leader.id, st.Leader.ID, "leader seen by %s", n.id)
				require.Equal(t, leader.http, st.Leader.HTTPAddr)
				require.Equal(t, leader.raft, st.Leader.RaftAddr)
				require.Len(t, st.Nodes, 3)
				for i, m := range st.Nodes {
					require.Equal(t, c.nodes[i].id, m.ID)
					require.Equal(t, c.nodes[i].http, m.HTTPAddr, "%s's view of %s", n.id, m.ID)
					require.Equal(t, "voter", m.Suffrage)
				}
			}
			// The operator's view through the CLI, from a follower.
			out, err := exec.Command(binary, "cluster", "status", "--json", "--addr", c.others(leader)[0].http).CombinedOutput()
			require.NoError(t, err, "%s", out)
			var st raftfsm.Status
			require.NoError(t, json.Unmarshal(out, &st), "%s", out)
			require.Equal(t, leader.id, st.Leader.ID)
			// Only the designated node bootstrapped with --join; with
			// --bootstrap-expect every node may have proposed the same
			// configuration, and none formed a cluster of its own.
			for _, n := range c.nodes {
				require.NotContains(t, n.p.logs.String(), "bootstrap failed", n.id)
			}
			if how == viaJoin {
				waitForLine(t, c.nodes[0].p.logs, "bootstrapped a new one-node cluster")
				for _, n := range c.nodes[1:] {
					require.NotContains(t, n.p.logs.String(), "bootstrapped", n.id)
				}
			}
		})
	}
}

// 2. A follower forwards writes and linearizable reads; every node then
// serves the record, and stale reads converge on every replica.
func TestClusterWriteThroughFollower(t *testing.T) {
	c := newCluster(t, viaJoin, nil, nil)
	leader := c.leader()
	fs := c.others(leader)
	cl := claimOK(t, fs[0].http, "via-follower")
	require.Equal(t, "claimed", cl.Outcome)
	const body = `{"id":"py_follower"}`
	completeOK(t, fs[1].http, "via-follower", cl.Token, body)

	for _, n := range c.nodes {
		a := call("GET", n.http, recordPath("via-follower", ""), "")
		require.Equal(t, 200, a.code, "linearizable read on %s: %s", n.id, a)
		var r recordAnswer
		require.NoError(t, json.Unmarshal(a.body, &r))
		require.Equal(t, "completed", r.Record.State, n.id)
		require.Equal(t, body, string(r.Record.Response.Body), n.id)
	}
	for _, n := range c.nodes {
		waitFor(t, 10*time.Second, "stale read on "+n.id, func() (bool, string) {
			a := call("GET", n.http, recordPath("via-follower", "stale"), "")
			if a.code != 200 || !strings.Contains(string(a.body), `"state":"completed"`) {
				return false, a.String()
			}
			return true, ""
		})
	}
	// Every node replays the stored response, and names the leader that
	// decided it, so that a client can send its next writes there.
	for _, n := range c.nodes {
		a := call("POST", n.http, "/v1/claim", claimReq("via-follower", "other"))
		require.Equal(t, 200, a.code, "replay via %s: %s", n.id, a)
		require.Contains(t, string(a.body), `"outcome":"replay"`)
		require.Equal(t, leader.http, a.hdr.Get(client.LeaderHeader), "via %s", n.id)
	}

	// A Go client given every node (a dead one first) skips the one it
	// cannot reach and then sends to the leader, not through a follower.
	all := "127.0.0.1:1"
	for _, n := range fs {
		all += "," + n.http
	}
	all += "," + leader.http
	cl2, err := client.New(all)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := cl2.Claim(ctx, client.ClaimRequest{Principal: "p", Endpoint: "POST /e", Key: "via-client", Fingerprint: "9f86d081"})
	require.NoError(t, err)
	require.Equal(t, client.OutcomeClaimed, res.Outcome)
	require.Equal(t, "http://"+leader.http, cl2.Addr())
}

// 3. Concurrent claims of one scope spread over all nodes: one winner.
func TestClusterConcurrentClaimsOneWinner(t *testing.T) {
	c := newCluster(t, viaBootstrapExpect, nil, nil)
	c.leader()
	const racers, scopes = 64, 10
	for s := 0; s < scopes; s++ {
		key := fmt.Sprintf("race-%d", s)
		results := make([]answer, racers)
		gate := make(chan struct{})
		var wg sync.WaitGroup
		for i := 0; i < racers; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				n := c.nodes[i%3]
				<-gate
				// A 503 means "unknown outcome": retrying with the same
				// claim_id is safe and gets the same claim back if it won.
				for try := 0; ; try++ {
					results[i] = call("POST", n.http, "/v1/claim", claimReq(key, fmt.Sprintf("racer-%d", i)))
					if !results[i].unavailable503() || try == 50 {
						return
					}
					time.Sleep(100 * time.Millisecond)
				}
			}()
		}
		close(gate)
		wg.Wait()
		won, busy := 0, 0
		for i, a := range results {
			switch {
			case a.err == nil && a.code == 201:
				won++
			case a.err == nil && a.code == 409 && a.problemCode() == "in_progress":
				require.NotEmpty(t, a.hdr.Get("Retry-After"), "409 without Retry-After")
				busy++
			default:
				t.Fatalf("racer %d on %s for %s: %s", i, c.nodes[i%3].id, key, a)
			}
		}
		require.Equal(t, 1, won, "winners of %s", key)
		require.Equal(t, racers-1, busy)
	}
}

// loadResult is what a load generator saw acknowledged.
type loadResult struct {
	mu        sync.Mutex
	claimed   map[string]string // key -> token, claim answered 201
	completed map[string]string // key -> body, complete answered 200
	bad       []string          // answers no client should ever get
	counts    map[string]int
}

func newLoadResult() *loadResult {
	return &loadResult{claimed: map[string]string{}, completed: map[string]string{}, counts: map[string]int{}}
}

func (r *loadResult) note(what string, a answer) {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case a.err != nil:
		r.counts[what+" conn-error"]++
	default:
		r.counts[fmt.Sprintf("%s %d", what, a.code)]++
	}
}

func (r *loadResult) badf(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.bad) < 20 {
		r.bad = append(r.bad, fmt.Sprintf(format, args...))
	}
}

// runLoad claims fresh keys (and completes every other one) through the
// nodes pick chooses, until stop closes. A claim or complete is
// acknowledged only by 201/200; connection errors and 503 unavailable are
// "unknown outcome" and not retried; anything else is recorded as bad.
func runLoad(workers int, prefix string, pause time.Duration, pick func() *cnode, stop chan struct{}) (*loadResult, *sync.WaitGroup) {
	res := newLoadResult()
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				key := fmt.Sprintf("%s-%d-%d", prefix, w, i)
				n := pick()
				a := call("POST", n.http, "/v1/claim", claimReq(key, "c-"+key))
				res.note("claim", a)
				switch {
				case a.err == nil && a.code == 201:
					var cl claimedAnswer
					if err := json.Unmarshal(a.body, &cl); err != nil {
						res.badf("claim %s via %s: %s", key, n.id, a)
						continue
					}
					res.mu.Lock()
					res.claimed[key] = cl.Token
					res.mu.Unlock()
					if i%2 == 0 {
						body := `{"id":"` + key + `"}`
						m := pick()
						a := call("POST", m.http, "/v1/complete", completeReq(key, cl.Token, body))
						res.note("complete", a)
						switch {
						case a.err == nil && a.code == 200:
							res.mu.Lock()
							res.completed[key] = body
							res.mu.Unlock()
						case a.err != nil || a.unavailable503():
						default:
							res.badf("complete %s via %s: %s", key, m.id, a)
						}
					}
				case a.err != nil || a.unavailable503():
				default:
					res.badf("claim %s via %s: %s", key, n.id, a)
				}
				time.Sleep(pause)
			}
		}()
	}
	return res, &wg
}

// verifyAcknowledged requires every acknowledged claim on every node
// (linearizable, and stale once replicas agree) and every acknowledged
// complete to replay its response.
func verifyAcknowledged(t *testing.T, nodes []*cnode, res *loadResult, consistency string) {
	t.Helper()
	keys := make([]string, 0, len(res.claimed))
	for k := range res.claimed {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	jobs := make(chan string)
	var mu sync.Mutex
	var failures []string
	fail := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		if len(failures) < 20 {
			failures = append(failures, fmt.Sprintf(format, args...))
		}
	}
	var wg sync.WaitGroup
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for key := range jobs {
				for _, n := range nodes {
					a := call("GET", n.http, recordPath(key, consistency), "")
					if a.err != nil || a.code != 200 {
						fail("acknowledged %s missing on %s (%s): %s", key, n.id, consistency, a)
						continue
					}
					var r recordAnswer
					json.Unmarshal(a.body, &r)
					if body, ok := res.completed[key]; ok && (r.Record.State != "completed" || r.Record.Response == nil || string(r.Record.Response.Body) != body) {
						fail("acknowledged complete of %s not on %s: %s", key, n.id, a)
					}
				}
				if body, ok := res.completed[key]; ok && consistency == "" {
					n := nodes[rand.IntN(len(nodes))]
					a := call("POST", n.http, "/v1/claim", claimReq(key, "replay"))
					if a.code != 200 || !strings.Contains(string(a.body), `"outcome":"replay"`) ||
						!strings.Contains(string(a.body), `"body":"`+base64Of(body)+`"`) {
						fail("acknowledged complete of %s does not replay via %s: %s", key, n.id, a)
					}
				}
			}
		}()
	}
	for _, k := range keys {
		jobs <- k
	}
	close(jobs)
	wg.Wait()
	require.Empty(t, failures)
}

func base64Of(s string) string {
	b, _ := json.Marshal([]byte(s))
	return strings.Trim(string(b), `"`)
}

// 4. kill -9 of the leader under load loses no acknowledged claim or
// complete, a new leader serves within a few election timeouts, and after
// the killed node returns all replicas are identical.
func TestClusterKill9LeaderUnderLoad(t *testing.T) {
	c := newCluster(t, viaJoin, nil, nil)
	leader := c.leader()
	var dead atomic.Pointer[cnode]
	pick := func() *cnode {
		for {
			n := c.nodes[rand.IntN(3)]
			// Mostly avoid the dead node; still send it some requests.
			if n != dead.Load() || rand.IntN(4) == 0 {
				return n
			}
		}
	}
	stop := make(chan struct{})
	res, wg := runLoad(4, "k9", 20*time.Millisecond, pick, stop)
	defer func() {
		select {
		case <-stop:
		default:
			close(stop)
		}
		wg.Wait()
	}()

	time.Sleep(2 * time.Second)
	res.mu.Lock()
	before := len(res.claimed)
	res.mu.Unlock()
	require.NotZero(t, before, "no claim acknowledged before the kill")
	dead.Store(leader)
	killedAt := time.Now()
	leader.kill(t)
	t.Logf("killed leader %s after %d acknowledged claims", leader.id, before)

	// A new leader must serve claims within a few election timeouts
	// (raft's default election timeout is 1s; allow plenty on a busy box).
	survivors := c.others(leader)
	for i := 0; ; i++ {
		n := survivors[i%2]
		a := call("POST", n.http, "/v1/claim", claimReq(fmt.Sprintf("probe-%d", i), ""))
		if a.err == nil && a.code == 201 {
			t.Logf("a claim through %s succeeded %s after the kill", n.id, time.Since(killedAt).Round(time.Millisecond))
			break
		}
		require.True(t, a.err == nil && a.unavailable503(), "claim via %s after the kill: %s", n.id, a)
		require.Less(t, time.Since(killedAt), 30*time.Second, "no new leader serves claims: %s", a)
		time.Sleep(100 * time.Millisecond)
	}
	time.Sleep(time.Second)
	close(stop)
	wg.Wait()
	t.Logf("load: %d claims and %d completes acknowledged; answers %v", len(res.claimed), len(res.completed), res.counts)
	require.Empty(t, res.bad, "answers no client may get")
	require.Greater(t, len(res.claimed), before, "no claim acknowledged after the kill")

	c.restart(leader, nil)
	c.waitStable(c.nodes...)
	verifyAcknowledged(t, c.nodes, res, "")
	waitSameState(t, c.nodes...)
	verifyAcknowledged(t, c.nodes, res, "stale")
}

// snapshotIndexes lists the indexes of the raft snapshots in a data dir.
func snapshotIndexes(dir string) []uint64 {
	entries, _ := os.ReadDir(filepath.Join(dir, "snapshots"))
	var out []uint64
	for _, e := range entries {
		parts := strings.Split(e.Name(), "-")
		if len(parts) != 3 || strings.HasSuffix(e.Name(), ".tmp") {
			continue
		}
		if i, err := strconv.ParseUint(parts[1], 10, 64); err == nil {
			out = append(out, i)
		}
	}
	return out
}

// 5. A follower that was down while the leader compacted its log past the
// follower's last entry catches up by an installed snapshot.
func TestClusterSnapshotCatchUp(t *testing.T) {
	c := newCluster(t, viaBootstrapExpect, []string{"--snapshot-threshold", "64", "--trailing-logs", "16", "--snapshot-interval", "200ms"}, nil)
	leader := c.leader()
	f := c.others(leader)[0]
	f.stop(t)
	st, err := c.status(leader)
	require.NoError(t, err)
	downAt := st.CommitIndex // f has nothing above this

	// A few hundred claims while f is down, through both live nodes.
	live := c.others(f)
	const n = 300
	var wg sync.WaitGroup
	errs := make(chan string, n)
	for w := 0; w < 6; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < n; i += 6 {
				key := fmt.Sprintf("down-%d", i)
				a := call("POST", live[i%2].http, "/v1/claim", claimReq(key, "c"))
				if a.code != 201 {
					errs <- fmt.Sprintf("claim %s: %s", key, a)
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
	require.False(t, t.Failed())
	cl := claimOK(t, leader.http, "down-completed")
	completeOK(t, leader.http, "down-completed", cl.Token, `{"id":"while-down"}`)

	// The leader snapshots and keeps only 16 entries below the snapshot:
	// f's next entry is gone from its log.
	waitFor(t, 30*time.Second, "leader snapshot past the follower", func() (bool, string) {
		idx := snapshotIndexes(leader.dir)
		for _, i := range idx {
			if i > downAt+16+1 {
				return true, ""
			}
		}
		return false, fmt.Sprintf("snapshots %v, follower stopped at %d", idx, downAt)
	})

	c.restart(f, nil)
	// /readyz promises the leader's commit index is applied: the moment the
	// restarted follower says ready, it must serve what was written while
	// it was down (its own commit index lags until its log matches).
	waitFor(t, 60*time.Second, "restarted follower ready", func() (bool, string) {
		a := call("GET", f.http, "/readyz", "")
		if a.code != 200 {
			return false, a.String()
		}
		for _, key := range []string{"down-0", "down-299", "down-completed"} {
			b := call("GET", f.http, recordPath(key, "stale"), "")
			require.Equal(t, 200, b.code, "%s said ready but has no %s yet: %s", f.id, key, b)
		}
		return true, ""
	})
	c.waitStable(c.nodes...)
	waitSameState(t, c.nodes...)
	for _, key := range []string{"down-0", "down-299", "down-completed"} {
		a := call("GET", f.http, recordPath(key, "stale"), "")
		require.Equal(t, 200, a.code, "stale read of %s on the caught-up %s: %s", key, f.id, a)
	}
	a := call("GET", f.http, recordPath("down-completed", "stale"), "")
	require.Contains(t, string(a.body), `"state":"completed"`)
	// Ready and caught up says nothing of when f's lines reach the test.
	logs := waitForLine(t, f.p.logs, "restored snapshot") // else f caught up without installing a snapshot
	require.NotContains(t, logs, "state is behind the newest snapshot", "the snapshot must come from the leader, not %s's own", f.id)
}

// 6. All three stopped and started again: every record is there and new
// claims work. A node with state restarts without --join, and with its
// original --bootstrap-expect it just restarts too.
func TestClusterFullRestart(t *testing.T) {
	c := newCluster(t, viaBootstrapExpect, nil, nil)
	c.leader()
	bodies := map[string]string{}
	for i := 0; i < 12; i++ {
		key := fmt.Sprintf("fr-%d", i)
		n := c.nodes[i%3]
		cl := claimOK(t, n.http, key)
		if i%2 == 0 {
			bodies[key] = fmt.Sprintf(`{"id":"py_%d"}`, i)
			completeOK(t, c.nodes[(i+1)%3].http, key, cl.Token, bodies[key])
		} else {
			bodies[key] = ""
		}
	}
	before := waitSameState(t, c.nodes...)

	// SIGTERM two, kill -9 the last (it has lost its quorum by then).
	c.nodes[0].stop(t)
	c.nodes[1].stop(t)
	c.nodes[2].kill(t)

	c.restart(c.nodes[0], []string{"--node-id", "n1"})
	c.restart(c.nodes[1], nil) // the original --bootstrap-expect 3 --join ...
	c.restart(c.nodes[2], []string{"--node-id", "n3"})
	c.waitStable(c.nodes...)
	for _, n := range c.nodes {
		require.NotContains(t, n.p.logs.String(), "bootstrapped", "%s bootstrapped again", n.id)
	}
	for key, body := range bodies {
		for _, n := range c.nodes {
			a := call("GET", n.http, recordPath(key, ""), "")
			require.Equal(t, 200, a.code, "%s after the restart, via %s: %s", key, n.id, a)
			if body != "" {
				a := call("POST", n.http, "/v1/claim", claimReq(key, "again"))
				require.Equal(t, 200, a.code, "replay of %s via %s: %s", key, n.id, a)
				require.Contains(t, string(a.body), base64Of(body))
			} else {
				require.Contains(t, string(a.body), `"state":"in_progress"`)
				a := call("POST", n.http, "/v1/claim", claimReq(key, "again"))
				require.Equal(t, 409, a.code, "the lease of %s must still hold: %s", key, a)
			}
		}
	}
	for _, n := range c.nodes {
		claimOK(t, n.http, "after-restart-"+n.id)
	}
	after := waitSameState(t, c.nodes...)
	require.Greater(t, after, before)
}

// 7. A removed node leaves the configuration, stops accepting writes and
// does not come back by itself; the others keep working. First a follower
// (n3) is removed from three nodes, then the leader of the remaining two,
// which must step down and hand the cluster to the last node.
func TestClusterRemoveNode(t *testing.T) {
	c := newCluster(t, viaJoin, nil, nil)
	n3 := c.node("n3")
	if c.leader() == n3 {
		a := call("POST", n3.http, "/v1/cluster/transfer-leadership", "")
		require.Equal(t, 200, a.code, "%s", a)
		waitFor(t, 30*time.Second, "n3 no longer leads", func() (bool, string) {
			l, why := c.stableCheck(c.nodes)
			return l != nil && l != n3, why
		})
	}
	claimOK(t, n3.http, "before-removal")
	out, err := exec.Command(binary, "cluster", "remove", "--addr", c.node("n2").http, "--id", "n3").CombinedOutput()
	require.NoError(t, err, "idem cluster remove: %s", out)
	require.Contains(t, string(out), "removed")
	// Down to two voters, it says what that means (it said only "removed").
	require.Contains(t, string(out), "two voters are left (n1, n2): a majority of two is both", "%s", out)
	rest := c.others(n3)
	leader := c.waitStable(rest...)
	watchRemoved(t, c, n3, rest)
	for _, n := range rest {
		claimOK(t, n.http, "after-removal-"+n.id)
		a := call("GET", n.http, recordPath("before-removal", ""), "")
		require.Equal(t, 200, a.code, "%s", a)
	}
	waitSameState(t, rest...)

	// Now the leader, through the follower (which forwards).
	last := c.others(n3, leader)[0]
	a := call("POST", last.http, "/v1/cluster/remove", `{"id":"`+leader.id+`"}`)
	require.Equal(t, 200, a.code, "removal of the leader %s: %s", leader.id, a)
	c.waitStable(last)
	watchRemoved(t, c, leader, []*cnode{last})
	claimOK(t, last.http, "alone")
	a = call("GET", last.http, recordPath("before-removal", ""), "")
	require.Equal(t, 200, a.code, "%s", a)
}

// watchRemoved sends claims to a node just removed. Until it has seen its
// removal it may still forward a claim to the leader, which decides it for
// the remaining cluster: such a 201 must be real there. Within a few
// seconds it refuses claims with 503, and from then on never acknowledges
// one; the rest keep showing only themselves as voters all along (the
// removed node does not join itself back).
func watchRemoved(t *testing.T, c *testCluster, removed *cnode, rest []*cnode) {
	t.Helper()
	removedAt := time.Now()
	var refusedAt time.Time
	for i := 0; refusedAt.IsZero() || time.Since(refusedAt) < 3*time.Second; i++ {
		key := fmt.Sprintf("to-removed-%s-%d", removed.id, i)
		a := call("POST", removed.http, "/v1/claim", claimReq(key, ""))
		require.NoError(t, a.err)
		switch {
		case a.code == 201 && refusedAt.IsZero():
			t.Logf("claim via %s %s after its removal was forwarded and acknowledged", removed.id, time.Since(removedAt).Round(time.Millisecond))
			r := call("GET", rest[0].http, recordPath(key, ""), "")
			require.Equal(t, 200, r.code, "a claim %s acknowledged after its removal is not in the cluster: %s", removed.id, r)
		case a.unavailable503():
			if refusedAt.IsZero() {
				refusedAt = time.Now()
				t.Logf("%s refuses claims %s after its removal", removed.id, refusedAt.Sub(removedAt).Round(time.Millisecond))
			}
		default:
			t.Fatalf("claim via the removed %s %s after removal (refusing since %v): %s", removed.id, time.Since(removedAt), refusedAt, a)
		}
		require.True(t, !refusedAt.IsZero() || time.Since(removedAt) < 10*time.Second, "%s still accepts claims %s after its removal", removed.id, time.Since(removedAt))
		for _, n := range rest {
			st, err := c.status(n)
			require.NoError(t, err)
			require.Len(t, st.Nodes, len(rest), "%s sees %+v", n.id, st.Nodes)
		}
		time.Sleep(200 * time.Millisecond)
	}
	// Logged by the removed node's membership loop on its second look,
	// not by the refusals above.
	waitForLine(t, removed.p.logs, "not in the cluster's configuration")
	// And the refusal says why: no election will ever give it a leader.
	a := call("POST", removed.http, "/v1/claim", claimReq("to-removed-final-"+removed.id, ""))
	require.True(t, a.unavailable503(), "%s", a)
	require.Contains(t, string(a.body), "not in the cluster's configuration", "%s", a)
	// With the whole command to paste: the CLI refuses a join without
	// --id, --raft-addr and --node-http-addr.
	require.Contains(t, string(a.body), "cluster join --id "+removed.id+" --raft-addr "+removed.raft+" --node-http-addr "+removed.http+" --addr ", "%s", a)
	// A backup asked of it says the same, not "no leader, retry shortly"
	// (operator walk: retrying never helped).
	a = call("GET", removed.http, "/v1/admin/snapshot", "")
	require.Equal(t, 503, a.code, "%s", a)
	require.Contains(t, string(a.body), "not in the cluster's configuration", "%s", a)
}

// moveLeadership makes target the leader with `idem cluster
// transfer-leadership --id`, which names who took over.
func (c *testCluster) moveLeadership(target *cnode) {
	t := c.t
	t.Helper()
	for try := 0; try < 5; try++ {
		l := c.leader()
		if l == target {
			t.Logf("%s leads", target.id)
			return
		}
		t.Logf("moving leadership from %s to %s", l.id, target.id)
		out, code := cli(t, "transfer-leadership", "--id", target.id, "--addr", l.http)
		if code == 0 {
			require.Contains(t, out, "leadership moved from "+l.id+" to "+target.id, "the answer names who took over")
		} else {
			t.Logf("transfer-leadership: %s", out) // a leader change meanwhile: look again
		}
	}
	require.Equal(t, target, c.leader(), "leadership never moved to %s", target.id)
}

// 8. A leader whose wall clock is skewed stamps cluster time, not its own
// wall clock: created_at stays near real time, expires_at = created_at +
// retention.
func TestClusterClockSkew(t *testing.T) {
	c := newCluster(t, viaJoin, nil, map[string][]string{
		"n2": {"--clock-offset", "-10m"},
		"n3": {"--clock-offset", "10m"},
	})
	var cfg struct {
		RetentionSeconds int64 `json:"retention_seconds"`
		LeaseDefaultMs   int64 `json:"lease_default_ms"`
	}
	a := call("GET", c.nodes[0].http, "/v1/config", "")
	require.NoError(t, json.Unmarshal(a.body, &cfg))
	require.NotZero(t, cfg.RetentionSeconds)

	for _, target := range []*cnode{c.node("n3"), c.node("n2")} {
		c.moveLeadership(target)
		waitForLine(t, target.p.logs, "clock-offset")
		for i, via := range []*cnode{target, c.others(target)[0], target} {
			key := fmt.Sprintf("skew-%s-%d", target.id, i)
			cl := claimOK(t, via.http, key)
			now := time.Now()
			created, err := time.Parse(time.RFC3339, cl.CreatedAt)
			require.NoError(t, err)
			expires, err := time.Parse(time.RFC3339, cl.ExpiresAt)
			require.NoError(t, err)
			lease, err := time.Parse(time.RFC3339, cl.LeaseExpiresAt)
			require.NoError(t, err)
			skew := now.Sub(created)
			t.Logf("leader %s, claim via %s: created_at %s, %s before real time", target.id, via.id, cl.CreatedAt, skew.Round(time.Millisecond))
			require.Less(t, skew.Abs(), 5*time.Second,
				"leader %s (skewed) stamped created_at %s at real time %s", target.id, cl.CreatedAt, now.UTC().Format(time.RFC3339Nano))
			require.Equal(t, time.Duration(cfg.RetentionSeconds)*time.Second, expires.Sub(created), "expires_at - created_at")
			require.Equal(t, time.Duration(cfg.LeaseDefaultMs)*time.Millisecond, lease.Sub(created), "lease_expires_at - created_at")
		}
	}

	// The leader (n2, 10 m behind) measures its members' wall clocks, and
	// cluster status names the clocks that are off, as seen from a
	// follower too: n1 10 m ahead of it, n3 20 m.
	offsets := func() (map[string]int64, string) {
		out, err := exec.Command(binary, "cluster", "status", "--json", "--addr", c.node("n1").http).CombinedOutput()
		require.NoError(t, err, "%s", out)
		var st raftfsm.Status
		require.NoError(t, json.Unmarshal(out, &st), "%s", out)
		got := map[string]int64{}
		for _, m := range st.Nodes {
			if m.ClockOffsetMs != nil {
				got[m.ID] = *m.ClockOffsetMs
			}
			if m.Version == "" || m.Version != st.Version {
				delete(got, "n2") // not measured yet: wait
			}
		}
		return got, string(out)
	}
	waitFor(t, 10*time.Second, "the leader's measure of its members' clocks", func() (bool, string) {
		got, out := offsets()
		near := func(id string, want time.Duration) bool {
			return (time.Duration(got[id])*time.Millisecond - want).Abs() < 2*time.Second
		}
		_, has := got["n2"]
		return has && got["n2"] == 0 && near("n1", 10*time.Minute) && near("n3", 20*time.Minute), out
	})
	out, err := exec.Command(binary, "cluster", "status", "--addr", c.node("n1").http).CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.Contains(t, string(out), "WARNING: n1's wall clock is 10m0s ahead of the leader n2's: check NTP on both")
	require.Contains(t, string(out), "WARNING: n3's wall clock is 20m0s ahead of the leader n2's")
	require.NotContains(t, string(out), "WARNING: n2's wall clock")
	require.NotContains(t, string(out), "NOTE: the members run different releases", "one binary, one release")
	require.NotContains(t, string(out), "clocks were not measured")
}

// 8b. Three fresh nodes forming a cluster with skewed wall clocks (+10m,
// -10m, none): the first command's time comes from whichever leads first,
// so the nodes agree on the median of their wall clocks before
// bootstrapping, and cluster time starts at real time.
func TestClusterSkewedBootstrap(t *testing.T) {
	c := newCluster(t, viaBootstrapExpect, nil, map[string][]string{
		"n1": {"--clock-offset", "10m"},
		"n2": {"--clock-offset", "-10m"},
	})
	for i, n := range c.nodes {
		cl := claimOK(t, n.http, fmt.Sprintf("boot-skew-%d", i))
		created, err := time.Parse(time.RFC3339, cl.CreatedAt)
		require.NoError(t, err)
		skew := time.Since(created)
		t.Logf("leader %s, claim via %s: created_at %s, %s before real time", c.leader().id, n.id, cl.CreatedAt, skew.Round(time.Millisecond))
		require.Less(t, skew.Abs(), 5*time.Second, "a cluster formed by skewed nodes started cluster time off real time")
	}
}

// 9. Leadership transfer under load: clients of the old leader see only
// 201 or 503-with-Retry-After, and the old leader forwards afterwards.
func TestClusterTransferUnderLoad(t *testing.T) {
	c := newCluster(t, viaBootstrapExpect, nil, nil)
	old := c.leader()
	stop := make(chan struct{})
	res, wg := runLoad(4, "tr", 5*time.Millisecond, func() *cnode { return old }, stop)
	defer func() {
		select {
		case <-stop:
		default:
			close(stop)
		}
		wg.Wait()
	}()
	time.Sleep(time.Second)
	a := call("POST", old.http, "/v1/cluster/transfer-leadership", "")
	require.Equal(t, 200, a.code, "transfer-leadership: %s", a)
	var newLeader *cnode
	waitFor(t, 30*time.Second, "a new leader", func() (bool, string) {
		l, why := c.stableCheck(c.nodes)
		newLeader = l
		return l != nil && l != old, why
	})
	time.Sleep(2 * time.Second)
	close(stop)
	wg.Wait()
	t.Logf("leadership %s -> %s; answers %v", old.id, newLeader.id, res.counts)
	require.Empty(t, res.bad, "answers no client may get")
	require.Zero(t, res.counts["claim conn-error"]+res.counts["complete conn-error"], "connection errors")

	// The same transfer run again, with --from naming the old leader (as
	// OPERATIONS.md runs it), hands nothing over: without --from it moved
	// the leadership on again, maybe back to the node being restarted.
	out, err := idemCmd(t, "cluster", "transfer-leadership", "--addr", old.http, "--from", old.id)
	require.NoError(t, err, out)
	require.Contains(t, out, newLeader.id+" leads, not "+old.id+": nothing was handed over")
	time.Sleep(500 * time.Millisecond)
	l, why := c.stableCheck(c.nodes)
	require.Equal(t, newLeader, l, "leader after a transfer --from a node that no longer leads: %s", why)

	// The old leader, now a follower, forwards: claims through it succeed.
	for i := 0; i < 5; i++ {
		a := call("POST", old.http, "/v1/claim", claimReq(fmt.Sprintf("after-transfer-%d", i), ""))
		require.Equal(t, 201, a.code, "claim via the old leader %s: %s", old.id, a)
	}
	verifyAcknowledged(t, c.nodes, res, "")
	waitSameState(t, c.nodes...)
}

// A transfer to a voter that is down does not hang or answer 500: the
// leader keeps the leadership and says the transfer did not complete.
// Through a follower, a named transfer answers with who took over.
func TestClusterTransferToAStoppedVoter(t *testing.T) {
	t.Parallel()
	c := newCluster(t, viaJoin, nil, nil)
	l := c.leader()
	down, via := c.others(l)[0], c.others(l)[1]
	down.stop(t)
	out, code := cli(t, "transfer-leadership", "--id", down.id, "--addr", l.http)
	require.Equal(t, 1, code, "%s", out)
	require.Contains(t, out, "the leadership transfer did not complete")
	require.Contains(t, out, "HTTP 503")
	for _, n := range []*cnode{l, via} {
		st, err := c.status(n)
		require.NoError(t, err)
		require.NotNil(t, st.Leader)
		require.Equal(t, l.id, st.Leader.ID, "the leader kept the leadership (as %s sees it)", n.id)
	}

	c.restart(down, nil)
	c.waitStable(c.nodes...)
	out, code = cli(t, "transfer-leadership", "--id", down.id, "--addr", via.http)
	require.Equal(t, 0, code, "%s", out)
	require.Contains(t, out, "leadership moved from "+l.id+" to "+down.id)
	require.Equal(t, down, c.leader())
}

// A node whose --join names only itself cannot join anything: it said
// nothing and answered 503 to every write for ever (an operator walk). It
// then said so in its log, but still made the data dir and waited for
// ever; on a new data dir it is now refused at start, naming the flags,
// before anything is made or opened (the addresses are never bound).
func TestJoinOfOnlyItselfSaysSo(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	httpAddr := "127.0.0.15:28905"
	out, err := idemCmdWithin(t, 5*time.Second, "serve", "--data-dir", dir, "--http-addr", httpAddr, "--raft-addr", "127.0.0.15:28906", "--join", httpAddr)
	require.Equal(t, 2, exitCode(err), out)
	require.Contains(t, out, "--join "+httpAddr+" names only this node's own address", out)
	require.Contains(t, out, "--bootstrap-expect", out)
	require.NoDirExists(t, dir)
}

// Bug (an attack on cluster time): a node that stayed up while the other
// two were down for a while counted the outage; they, restarted, resumed
// cluster time from their stored value and granted a lease in that frame.
// Once the node that stayed up led, its stamps moved cluster time forward
// by the outage, and the lease was taken over after a third of its 30 s.
// Its clock now follows the log's time (ttl.Clock.Observe).
func TestNodeThatOutlivedAnOutageDoesNotJumpClusterTime(t *testing.T) {
	c := newCluster(t, viaJoin, nil, nil)
	n1, n2, n3 := c.node("n1"), c.node("n2"), c.node("n3")
	claimOK(t, c.leader().http, "before")
	waitSameState(t, c.nodes...)
	n1.kill(t)
	n3.kill(t)
	const gap = 20 * time.Second
	time.Sleep(gap) // n2 runs on alone, without a quorum, counting it
	// A membership change without a quorum: "retry shortly" alone sent an
	// operator retrying for ever (a membership walk); it says what to do.
	out, err := idemCmd(t, "cluster", "remove", "--addr", n2.http, "--id", "n3")
	require.Error(t, err, out)
	require.Contains(t, out, "no leader is available")
	require.Contains(t, out, "most voters are down or cut off: start them again")
	require.Contains(t, out, "idem recover")
	require.NoError(t, n2.p.cmd.Process.Signal(syscall.SIGSTOP))
	defer n2.p.cmd.Process.Signal(syscall.SIGCONT)
	c.restart(n1, nil)
	c.restart(n3, nil)
	var granted time.Time
	waitFor(t, 45*time.Second, "a claim through n1 while n2 is stopped", func() (bool, string) {
		a := call("POST", n1.http, "/v1/claim", claimReq("held", "first"))
		granted = time.Now()
		return a.code == 201, a.String()
	})
	require.NoError(t, n2.p.cmd.Process.Signal(syscall.SIGCONT))
	waitSameState(t, c.nodes...)
	c.moveLeadership(n2)
	// The lease is 30 s from the grant: until then, every other claim of
	// the key is 409, however cluster time was counted on n2.
	for time.Since(granted) < 25*time.Second {
		a := call("POST", n2.http, "/v1/claim", claimReq("held", "second"))
		require.Equal(t, 409, a.code, "%.1f s after a 30 s lease was granted, through n2 (which counted the %s outage): %s",
			time.Since(granted).Seconds(), gap, a)
		time.Sleep(500 * time.Millisecond)
	}
	// Logged while n2 applies; the loop above may not have run at all.
	waitForLine(t, n2.p.logs, "it follows the log's")
}

// Three nodes formed with --bootstrap-expect, one of them started with 2
// (a typo, a unit file from another cluster). Nothing compared the counts:
// it bootstrapped a cluster of two with the first peer it reached while
// the others still waited for three, and two nodes expecting two could
// form two clusters around one third node. Nodes now publish the count in
// their status and none bootstraps beside a peer expecting another; the
// odd one restarted with the same count forms the cluster.
func TestBootstrapExpectMismatchFormsNoCluster(t *testing.T) {
	root := t.TempDir()
	var nodes []*cnode
	for i := 1; i <= 3; i++ {
		ip := fmt.Sprintf("127.0.0.%d", 10+i)
		nodes = append(nodes, &cnode{id: fmt.Sprintf("n%d", i), ip: ip, dir: filepath.Join(root, fmt.Sprintf("n%d", i)),
			http: freePortOn(t, ip), raft: freePortOn(t, ip)})
	}
	var all []string
	for _, n := range nodes {
		all = append(all, n.http)
	}
	for _, n := range nodes {
		expect := "3"
		if n.id == "n3" {
			expect = "2"
		}
		n.args = []string{"--node-id", n.id, "--bootstrap-expect", expect, "--join", strings.Join(all, ",")}
		n.p = launch(t, n.dir, n.http, n.raft, n.args...)
	}
	for _, n := range nodes {
		waitFor(t, 20*time.Second, n.id+" naming the other --bootstrap-expect", func() (bool, string) {
			return strings.Contains(n.p.logs.String(), "the nodes forming a cluster must all expect the same count"), ""
		})
	}
	time.Sleep(2 * time.Second) // a few more rounds of trying
	for _, n := range nodes {
		require.NotContains(t, n.p.logs.String(), "bootstrapped the cluster", "%s formed a cluster beside a peer expecting another count", n.id)
		a := call("GET", n.http, "/v1/cluster", "")
		require.Equal(t, 200, a.code, "%s", a)
		var st raftfsm.Status
		require.NoError(t, json.Unmarshal(a.body, &st))
		require.Empty(t, st.Nodes, "%s has a configuration", n.id)
	}
	// Restarted with the same count, the odd one forms the cluster with
	// the others.
	n3 := nodes[2]
	require.NoError(t, n3.p.cmd.Process.Signal(syscall.SIGKILL))
	n3.p.wait()
	n3.args[3] = "3"
	n3.p = launch(t, n3.dir, n3.http, n3.raft, n3.args...)
	c := &testCluster{t: t, nodes: nodes}
	c.waitStable(nodes...)
	claimOK(t, n3.http, "formed")
}
