package main

import (
	"bytes"
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idem-store/idem/api"
	"github.com/idem-store/idem/raftfsm"
)

// TestDurationWithoutUnitNamesTheFix: `idem serve --retention 48` printed
// the flag package's `invalid value "48" for flag -retention: parse
// error` and `idem cluster set-retention --retention 48` the whole usage
// after it. Every command's flags, and serve's IDEM_* variables, are
// parsed in one place that says what is wrong on one line.
func TestDurationWithoutUnitNamesTheFix(t *testing.T) {
	for _, tc := range []struct {
		args []string
		env  string // IDEM_RETENTION
		want string // the first line of stderr
	}{
		{args: []string{"serve", "--retention", "48"}, want: "idem serve: --retention 48: a duration needs a unit, e.g. 48h, 30m or 90s"},
		{args: []string{"serve", "--bucket-width=2"}, want: "idem serve: --bucket-width 2: a duration needs a unit, e.g. 48h, 30m or 90s"},
		{args: []string{"serve", "--lease", "1.5"}, want: "idem serve: --lease 1.5: a duration needs a unit, e.g. 48h, 30m or 90s"},
		{args: []string{"serve"}, env: "48", want: "idem serve: $IDEM_RETENTION=48 (--retention): a duration needs a unit, e.g. 48h, 30m or 90s"},
		// A retention is thought of in days; Go's durations have none.
		{args: []string{"serve", "--retention", "1d"}, want: "idem serve: --retention 1d: a duration takes the units h, m, s, ms, us and ns, not days or weeks: write 24h"},
		{args: []string{"cluster", "set-retention", "--retention", "2w"}, want: "idem cluster set-retention: --retention 2w: a duration takes the units h, m, s, ms, us and ns, not days or weeks: write 336h (see idem cluster --help)"},
		{args: []string{"serve", "--retention", "1.5d"}, want: `idem serve: --retention: invalid duration "1.5d"`},
		{args: []string{"serve", "--retention", "abc"}, want: `idem serve: --retention: invalid duration "abc"`},
		{args: []string{"serve", "--max-lease", "10000000h"}, want: `idem serve: --max-lease: invalid duration "10000000h": out of range, the longest is 2562047h (about 292 years)`},
		{args: []string{"serve", "--retention", "1e3h"}, want: `idem serve: --retention: invalid duration "1e3h"`},
		{args: []string{"serve", "--retention", "h"}, want: `idem serve: --retention: invalid duration "h"`},
		{args: []string{"serve", "--retention", ".h"}, want: `idem serve: --retention: invalid duration ".h"`},
		{args: []string{"serve", "--retention", "2562048h"}, want: `idem serve: --retention: invalid duration "2562048h": out of range, the longest is 2562047h (about 292 years)`},
		{args: []string{"serve", "--max-keys-per-principal", "many"}, want: `idem serve: --max-keys-per-principal: invalid integer "many"`},
		// It printed slog's `slog: level string "verbose": unknown name`, naming no level it takes.
		{args: []string{"serve", "--log-level", "verbose"}, want: `idem serve: --log-level "verbose" must be debug, info, warn or error`},
		{args: []string{"cluster", "set-retention", "--retention", "48"}, want: "idem cluster set-retention: --retention 48: a duration needs a unit, e.g. 48h, 30m or 90s (see idem cluster --help)"},
		// A zero retention given was answered "--retention is required", as if it had not been.
		{args: []string{"cluster", "set-retention", "--retention", "0s"}, want: "idem cluster set-retention: --retention: retention must be positive (got 0s)"},
		{args: []string{"cluster", "status", "--force=maybe"}, want: `idem cluster status: --force: invalid boolean "maybe" (see idem cluster --help)`},
		{args: []string{"keys", "status", "--timeout", "5"}, want: "idem keys status: --timeout 5: a duration needs a unit, e.g. 48h, 30m or 90s (see idem keys --help)"},
		{args: []string{"claim", "--lease", "30"}, want: "idem claim: --lease 30: a duration needs a unit, e.g. 48h, 30m or 90s"},
		{args: []string{"bench", "--duration", "10"}, want: "idem bench: --duration 10: a duration needs a unit, e.g. 48h, 30m or 90s (see idem bench --help)"},
		{args: []string{"snapshot", "save", "f", "--addr", "x:1", "--force=maybe"}, want: `idem snapshot save: --force: invalid boolean "maybe" (see idem snapshot --help)`},
	} {
		t.Setenv("IDEM_RETENTION", tc.env) // restored after the test
		if tc.env == "" {
			os.Unsetenv("IDEM_RETENTION")
		}
		var stdout, stderr bytes.Buffer
		code := run(context.Background(), tc.args, &stdout, &stderr)
		require.Equal(t, 2, code, "%v: %s", tc.args, stderr.String())
		lines := strings.Split(strings.TrimSpace(stderr.String()), "\n")
		require.Equal(t, tc.want, lines[0], "%v", tc.args)
		// At most a pointer to --help after it, never the usage.
		require.LessOrEqual(t, len(lines), 2, "%v:\n%s", tc.args, stderr.String())
		require.NotContains(t, stderr.String(), "Usage", "%v", tc.args)
		require.NotContains(t, stderr.String(), "parse error", "%v", tc.args)
		require.Empty(t, stdout.String(), "%v", tc.args)
	}
}

// TestAddrAtRaftPortSaysSo: `idem cluster status --addr 127.0.0.1:7071`,
// the raft port of a node with the default addresses, said only
// "unexpected EOF": raft reads the request as an unknown message and
// closes. The CLI now says the address did not answer HTTP and which
// address --addr takes; a refused connection still says so, alone.
func TestAddrAtRaftPortSaysSo(t *testing.T) {
	httpAddr, raftAddr := freePort(t), freePort(t)
	start(t, filepath.Join(t.TempDir(), "d"), httpAddr, raftAddr)
	hint := raftAddr + " did not answer HTTP (it closed the connection); --addr takes a node's HTTP address (its --http-addr, default 127.0.0.1:7070), not its raft address"
	for _, args := range [][]string{
		{"cluster", "status"},
		{"cluster", "set-retention", "--retention", "48h"},
		{"get", "--principal", "p", "--endpoint", "e", "--key", "k"},
		{"keys", "status"},
		{"snapshot", "save", filepath.Join(t.TempDir(), "s.snap")},
	} {
		var stdout, stderr bytes.Buffer
		code := run(context.Background(), append(args, "--addr", raftAddr), &stdout, &stderr)
		require.Equal(t, 1, code, "%v: %s", args, stderr.String())
		require.Contains(t, stderr.String(), hint, "%v", args)
		require.Equal(t, 1, strings.Count(stderr.String(), "\n"), "%v: one line:\n%s", args, stderr.String())
	}

	// Something else on the port (an ssh server, say) answers bytes that
	// are not HTTP.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Write([]byte("SSH-2.0-OpenSSH_9.6\r\n"))
			c.Close()
		}
	}()
	var stdout, stderr bytes.Buffer
	require.Equal(t, 1, run(context.Background(), []string{"cluster", "status", "--addr", ln.Addr().String()}, &stdout, &stderr))
	require.Contains(t, stderr.String(), ln.Addr().String()+" did not answer HTTP (it sent something else); --addr takes a node's HTTP address", stderr.String())

	// Nothing listening: connection refused, naming --addr and saying
	// that nothing was changed (it said only "connection refused"), for
	// the membership and backup commands too.
	closed := freePort(t)
	for _, args := range [][]string{
		{"cluster", "status"}, {"cluster", "remove", "--id", "n3"}, {"cluster", "transfer-leadership"},
		{"cluster", "join", "--id", "n4", "--raft-addr", "127.0.0.4:7071", "--node-http-addr", "127.0.0.4:7070"},
		{"snapshot", "save", filepath.Join(t.TempDir(), "b.snap")},
	} {
		stderr.Reset()
		require.Equal(t, 1, run(context.Background(), append(args, "--addr", closed), &stdout, &stderr), "%v", args)
		require.Contains(t, stderr.String(), "connection refused", "%v", args)
		require.Contains(t, stderr.String(), "nothing listens at "+closed+", so nothing was asked or changed; check that the node runs and that --addr is its HTTP address", "%v", args)
		require.NotContains(t, stderr.String(), "did not answer HTTP")
	}
	// A node's HTTP address answers.
	stdout.Reset()
	require.Equal(t, 0, run(context.Background(), []string{"cluster", "status", "--addr", httpAddr}, &stdout, &stderr), stderr.String())
}

// TestRestartWithOtherLeaseOrLimitsWarns: a node restarted with another
// --lease or limits flag than the other members logged nothing; only idem
// cluster status warned. It now logs one warning naming the flags and
// every member's value once it knows its peers.
func TestRestartWithOtherLeaseOrLimitsWarns(t *testing.T) {
	c := newCluster(t, viaJoin, nil, nil)
	const warning = "between this node and other members"
	// Each node compares within a few seconds of knowing its peers; the
	// members, all with the default flags, say nothing.
	time.Sleep(4 * time.Second)
	for _, n := range c.nodes {
		require.NotContains(t, n.p.logs.String(), warning, n.id)
	}
	n3 := c.node("n3")
	n3.stop(t)
	c.restart(n3, append(slices.Clone(n3.args), "--lease", "45s", "--max-keys-per-principal", "5", "--max-batch-ops", "64"))
	waitFor(t, 30*time.Second, "n3's warning", func() (bool, string) {
		return strings.Contains(n3.p.logs.String(), warning), n3.p.logs.String()
	})
	logs := n3.p.logs.String()
	require.Equal(t, 1, strings.Count(logs, warning), logs)
	require.Contains(t, logs, `msg="--lease, --max-batch-ops, --max-keys-per-principal differ `+warning+`:`)
	require.Contains(t, logs, `lease="n1 30s, n2 30s, n3 45s (this node)" max-batch-ops="n1 256, n2 256, n3 64 (this node)" max-keys-per-principal="n1 100000, n2 100000, n3 5 (this node)"`)
}

// TestSetRetentionRemindsOfTheFlag: idem cluster set-retention answered
// without saying that each node's --retention still holds the old value
// (it only seeds a new cluster's): config files drifted from the cluster.
func TestSetRetentionRemindsOfTheFlag(t *testing.T) {
	f := newAPIFake(t, http.StatusOK, `{"outcome":"set","retention":"48h0m0s","retention_seconds":172800,"previous_retention":"24h0m0s"}`)
	const reminder = "set --retention 48h (or IDEM_RETENTION) on every node too, so that their configuration agrees: the flag only seeds a new cluster's retention"
	code, stdout, stderr := runClientCmd(t, runCluster, "set-retention", "--retention", "48h", "--addr", f.url)
	require.Equal(t, 0, code, stderr)
	require.Equal(t, "/v1/admin/retention", f.path)
	require.Contains(t, stdout, "the cluster's retention is 48h0m0s (was 24h0m0s)")
	require.Contains(t, stdout, reminder)
	// With --json stdout is the answer alone; the reminder goes to stderr.
	code, stdout, stderr = runClientCmd(t, runCluster, "set-retention", "--retention", "2880m", "--addr", f.url, "--json")
	require.Equal(t, 0, code, stderr)
	require.NotContains(t, stdout, "--retention")
	require.Contains(t, stderr, reminder)
	// Under a minute a node refuses the flag alone: the reminder gives both.
	code, stdout, stderr = runClientCmd(t, runCluster, "set-retention", "--retention", "30s", "--allow-short-retention", "--addr", f.url)
	require.Equal(t, 0, code, stderr)
	require.Contains(t, stdout, "set --retention 30s --allow-short-retention (or IDEM_RETENTION) on every node too")
}

// Members that refuse the leader's health checks for its node token (the
// nodes' entry removed from the auth files) made cluster status warn that
// writes fail, while raft replicated and every write went through (ops
// walk). The reason names the token, and the warning says what is refused.
func TestStatusTellsRefusedHealthChecksFromALostQuorum(t *testing.T) {
	// What the leader's probe records for a member that answers 401.
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, `{"code":"unauthorized"}`, http.StatusUnauthorized)
	}))
	defer ts.Close()
	addr := strings.TrimPrefix(ts.URL, "http://")
	_, err := api.NewPeerProbe("old-node-token", "n1", nil)(context.Background(), addr)
	require.Error(t, err)
	require.Contains(t, err.Error(), api.TokenRefused)
	require.Contains(t, err.Error(), "--node-token-file")
	require.ErrorIs(t, err, raftfsm.ErrTokenRefused, "a join of such a node is refused for it")

	st := raftfsm.Status{Self: raftfsm.NodeInfo{ID: "n1"}, Leader: &raftfsm.NodeInfo{ID: "n1"}, HealthFrom: "n1", Nodes: []raftfsm.Member{
		{NodeInfo: raftfsm.NodeInfo{ID: "n1"}, Suffrage: "voter", Healthy: true},
		{NodeInfo: raftfsm.NodeInfo{ID: "n2"}, Suffrage: "voter", UnhealthyReason: err.Error()},
		{NodeInfo: raftfsm.NodeInfo{ID: "n3"}, Suffrage: "voter", UnhealthyReason: err.Error()},
	}}
	var out bytes.Buffer
	printStatus(&out, st)
	require.Contains(t, out.String(), "members refuse the leader's health checks (its node token)")
	require.NotContains(t, out.String(), "writes fail")

	// The other way round, asked at a follower: the leader refuses the
	// token the others call it with (its own reload dropped the entry).
	// That warning blamed the members.
	asked := raftfsm.Status{Self: raftfsm.NodeInfo{ID: "n1"}, Leader: &raftfsm.NodeInfo{ID: "n3"}, Nodes: []raftfsm.Member{
		{NodeInfo: raftfsm.NodeInfo{ID: "n1"}, Suffrage: "voter", Healthy: true},
		{NodeInfo: raftfsm.NodeInfo{ID: "n2"}, Suffrage: "voter", UnhealthyReason: "not measured: could not ask the leader n3: " + err.Error()},
		{NodeInfo: raftfsm.NodeInfo{ID: "n3"}, Suffrage: "voter", UnhealthyReason: "not measured: could not ask the leader n3: " + err.Error()},
	}}
	out.Reset()
	printStatus(&out, asked)
	require.Contains(t, out.String(), "WARNING: the leader n3 refuses n1's node token (--node-token-file): n3's --auth-file lacks the entry of that token")
	require.NotContains(t, out.String(), "members refuse the leader's health checks")
	// Asked at a follower without a node token of its own (allowed, with a
	// warning at its start): the fault is that node's, not the leader's.
	_, noToken := api.NewPeerProbe("", "n1", nil)(context.Background(), addr)
	require.ErrorIs(t, noToken, raftfsm.ErrNoNodeToken)
	for i := 1; i < 3; i++ {
		asked.Nodes[i].UnhealthyReason = "not measured: could not ask the leader n3: " + noToken.Error()
	}
	out.Reset()
	printStatus(&out, asked)
	require.NotContains(t, out.String(), "WARNING: the leader n3 refuses", "the leader blamed for this node's missing token")
	require.Contains(t, out.String(), "has no --node-token-file")

	// Right after an election the leader has measured nobody: no quorum
	// warning, a note to look again.
	st.Nodes[1].UnhealthyReason = raftfsm.NotMeasuredYet + " (this node became leader moments ago)"
	st.Nodes[2].UnhealthyReason = raftfsm.NotMeasuredYet + " (this node became leader moments ago)"
	out.Reset()
	printStatus(&out, st)
	require.Contains(t, out.String(), "NOTE: the leader has not measured every voter yet")
	require.NotContains(t, out.String(), "writes fail")
	// One of them measured and down: the other may still make a quorum.
	st.Nodes[1].UnhealthyReason = "connection refused"
	out.Reset()
	printStatus(&out, st)
	require.Contains(t, out.String(), "NOTE: the leader has not measured every voter yet")

	// Members that do not answer at all: the quorum warning stands.
	st.Nodes[1].UnhealthyReason, st.Nodes[2].UnhealthyReason = "connection refused", "connection refused"
	out.Reset()
	printStatus(&out, st)
	require.Contains(t, out.String(), "writes fail until enough of them answer")

	// A node holding its vote says so, and from what.
	st.HoldsVote = &raftfsm.VoteHoldStatus{}
	out.Reset()
	printStatus(&out, st)
	require.Contains(t, out.String(), "NOTE: n1 started with an empty data dir and no leader has reached it yet")
	st.HoldsVote = &raftfsm.VoteHoldStatus{LeaderTerm: 3, LeaderCommitIndex: 812}
	out.Reset()
	printStatus(&out, st)
	require.Contains(t, out.String(), "until its log reaches index 812 of term 3")
}

// cluster status shows each member's key ids, and warns when one id names
// different keys on different nodes (a key generated on each node).
func TestClusterStatusShowsEveryMembersKeys(t *testing.T) {
	st := raftfsm.Status{Self: raftfsm.NodeInfo{ID: "n1"}, Leader: &raftfsm.NodeInfo{ID: "n1"}, HealthFrom: "n1", Nodes: []raftfsm.Member{
		{NodeInfo: raftfsm.NodeInfo{ID: "n1"}, Suffrage: "voter", Healthy: true, Keys: []raftfsm.NodeKey{{ID: "k2", Check: "aa"}, {ID: "k1", Check: "bb"}}},
		{NodeInfo: raftfsm.NodeInfo{ID: "n2"}, Suffrage: "voter", Healthy: true, Keys: []raftfsm.NodeKey{{ID: "k1", Check: "bb"}}},
		{NodeInfo: raftfsm.NodeInfo{ID: "n3"}, Suffrage: "voter", Healthy: true, Keys: []raftfsm.NodeKey{}},
		{NodeInfo: raftfsm.NodeInfo{ID: "n4"}, Suffrage: "nonvoter", UnhealthyReason: raftfsm.NotMeasuredYet},
	}}
	var out bytes.Buffer
	printStatus(&out, st)
	rows := map[string][]string{}
	for _, l := range strings.Split(out.String(), "\n") {
		if f := strings.Fields(l); len(f) > 0 {
			rows[strings.TrimSuffix(f[0], " (leader)")] = f
		}
	}
	require.Contains(t, rows["NODE"], "KEYS", out.String())
	require.Contains(t, rows["n1"], "k2,k1", out.String())
	require.Contains(t, rows["n2"], "k1", out.String())
	require.Contains(t, rows["n3"], "none", out.String())
	require.Contains(t, rows["n4"], "?", out.String())
	require.NotContains(t, out.String(), "not the same key on every node")

	st.Nodes[1].Keys[0].Check = "cc"
	out.Reset()
	printStatus(&out, st)
	require.Contains(t, out.String(), `WARNING: key "k1" is not the same key on every node (the check values differ: n1 / n2)`)
}

// cluster status warns of a member's TLS certificate or CA that expired or
// expires within 30 days: a node whose certificate expired keeps the
// connections it had and reads healthy until they are made again.
func TestClusterStatusWarnsOfExpiringCertificates(t *testing.T) {
	now := time.Now()
	at := func(d time.Duration) *raftfsm.Stamp { return &raftfsm.Stamp{Time: now.Add(d)} }
	st := raftfsm.Status{Self: raftfsm.NodeInfo{ID: "n1"}, Leader: &raftfsm.NodeInfo{ID: "n1"}, HealthFrom: "n1", Nodes: []raftfsm.Member{
		{NodeInfo: raftfsm.NodeInfo{ID: "n1"}, Suffrage: "voter", Healthy: true, CertNotAfter: at(365 * 24 * time.Hour), CANotAfter: at(3650 * 24 * time.Hour)},
		{NodeInfo: raftfsm.NodeInfo{ID: "n2"}, Suffrage: "voter", Healthy: true, CertNotAfter: at(-time.Hour), CANotAfter: at(3650 * 24 * time.Hour)},
		{NodeInfo: raftfsm.NodeInfo{ID: "n3"}, Suffrage: "voter", Healthy: true, CertNotAfter: at(3*24*time.Hour + 5*time.Hour + time.Minute), CANotAfter: at(20 * 24 * time.Hour)},
	}}
	var out bytes.Buffer
	printStatus(&out, st)
	s := out.String()
	require.NotContains(t, s, "n1's", "a certificate good for a year is no warning")
	require.Contains(t, s, "WARNING: n2's TLS certificate EXPIRED at "+st.Nodes[1].CertNotAfter.UTC().Format(time.RFC3339)+": connections made before still work")
	require.Contains(t, s, "kill -HUP n2")
	require.Contains(t, s, "WARNING: n3's TLS certificate expires in 3d5h")
	require.Contains(t, s, "WARNING: n3's CA (--tls-ca-file) expires in 19d23h")

	// Without TLS (no expiry known): nothing.
	for i := range st.Nodes {
		st.Nodes[i].CertNotAfter, st.Nodes[i].CANotAfter = nil, nil
	}
	out.Reset()
	printStatus(&out, st)
	require.NotContains(t, out.String(), "WARNING")
}

// In a rolling upgrade cluster status says which release each member
// runs (which nodes are done), and that the clocks were not measured when
// the leader, or the node asked, is of a release that does not measure
// them; with one release and measured clocks it says neither.
func TestClusterStatusTellsReleasesApartInAnUpgrade(t *testing.T) {
	off := func(ms int64) *int64 { return &ms }
	st := raftfsm.Status{Self: raftfsm.NodeInfo{ID: "n1"}, Leader: &raftfsm.NodeInfo{ID: "n1"}, HealthFrom: "n1", Version: "v1.4.0", Nodes: []raftfsm.Member{
		{NodeInfo: raftfsm.NodeInfo{ID: "n1"}, Suffrage: "voter", Healthy: true, Version: "v1.4.0", ClockOffsetMs: off(0)},
		{NodeInfo: raftfsm.NodeInfo{ID: "n2"}, Suffrage: "voter", Healthy: true, Version: "v1.4.0", ClockOffsetMs: off(3)},
		{NodeInfo: raftfsm.NodeInfo{ID: "n3"}, Suffrage: "voter", Healthy: true, Version: "v1.4.0", ClockOffsetMs: off(-2)},
	}}
	var out bytes.Buffer
	printStatus(&out, st)
	require.NotContains(t, out.String(), "NOTE")
	require.NotContains(t, out.String(), "WARNING")

	st.Nodes[2].Version = ""
	st.Nodes[1].Version = "v1.3.2"
	out.Reset()
	printStatus(&out, st)
	require.Contains(t, out.String(), "NOTE: the members run different releases: n1 v1.4.0, n2 v1.3.2, n3 ? (an earlier release)")

	// A member that is merely down has no release to compare: one release
	// and a node down read "the members run different releases" (a
	// membership walk).
	st.Nodes[1].Version = "v1.4.0"
	st.Nodes[2].Healthy = false
	out.Reset()
	printStatus(&out, st)
	require.NotContains(t, out.String(), "different releases")
	st.Nodes[1].Version = "v1.3.2" // a difference among the others still shows
	out.Reset()
	printStatus(&out, st)
	require.Contains(t, out.String(), "NOTE: the members run different releases: n1 v1.4.0, n2 v1.3.2, n3 ? (not measured: down or unreachable)")
	st.Nodes[1].Version, st.Nodes[2].Healthy = "v1.4.0", true

	for i := range st.Nodes {
		st.Nodes[i].ClockOffsetMs = nil // an earlier leader
	}
	out.Reset()
	printStatus(&out, st)
	require.Contains(t, out.String(), "NOTE: the members' clocks were not measured")
}

// A member the leader saw downgraded in place is named with the leader's
// words, on whichever node status was asked: a follower takes the
// measurement from the leader (MergeHealth).
func TestStatusWarnsOfADowngradeInPlace(t *testing.T) {
	why := "since 2026-12-05T16:00:00Z it runs a release (v-earlier) whose Apply lacks key-check"
	leader := raftfsm.Status{Self: raftfsm.NodeInfo{ID: "n1"}, Leader: &raftfsm.NodeInfo{ID: "n1"}, HealthFrom: "n1", Nodes: []raftfsm.Member{
		{NodeInfo: raftfsm.NodeInfo{ID: "n1"}, Suffrage: "voter", Healthy: true},
		{NodeInfo: raftfsm.NodeInfo{ID: "n2"}, Suffrage: "voter", Healthy: true, Downgraded: why},
		{NodeInfo: raftfsm.NodeInfo{ID: "n3"}, Suffrage: "voter", Healthy: true},
	}}
	asked := raftfsm.Status{Self: raftfsm.NodeInfo{ID: "n3"}, Leader: &raftfsm.NodeInfo{ID: "n1"}, Nodes: []raftfsm.Member{
		{NodeInfo: raftfsm.NodeInfo{ID: "n1"}, Suffrage: "voter"},
		{NodeInfo: raftfsm.NodeInfo{ID: "n2"}, Suffrage: "voter"},
		{NodeInfo: raftfsm.NodeInfo{ID: "n3"}, Suffrage: "voter"},
	}}
	asked.MergeHealth(leader)
	for _, st := range []raftfsm.Status{leader, asked} {
		var out bytes.Buffer
		printStatus(&out, st)
		require.Contains(t, out.String(), "WARNING: n2 was downgraded in place: "+why)
		require.NotContains(t, out.String(), "n1 was downgraded")
	}
}

// The status of a node that a recovery left out (it answers everything
// else 503) printed as a healthy table, itself leading: it says first that
// the node serves nothing, and why.
func TestStatusOfASupersededNodeSaysItServesNothing(t *testing.T) {
	st := raftfsm.Status{Self: raftfsm.NodeInfo{ID: "n2"}, Leader: &raftfsm.NodeInfo{ID: "n2"}, HealthFrom: "n2", Nodes: []raftfsm.Member{
		{NodeInfo: raftfsm.NodeInfo{ID: "n2"}, Suffrage: "voter", Healthy: true},
		{NodeInfo: raftfsm.NodeInfo{ID: "n3"}, Suffrage: "voter", Healthy: true},
	}}
	var out bytes.Buffer
	printStatus(&out, st)
	require.NotContains(t, out.String(), "WARNING")
	st.Superseded = "raftfsm: this node was left out of a recovery of its cluster: n1 answered"
	out.Reset()
	printStatus(&out, st)
	lines := strings.Split(out.String(), "\n")
	require.Equal(t, "WARNING: n2 answers every request but this status 503: "+st.Superseded, lines[1], out.String())
}

// A leader lists a promotion as soon as it appends it; an operator who
// took the new node for a voter and stopped the leader then left the
// others a configuration in which it was not one. The table marks what
// the change not committed yet touches and says to wait.
func TestStatusMarksAMembershipChangeNotCommitted(t *testing.T) {
	st := raftfsm.Status{Self: raftfsm.NodeInfo{ID: "n1"}, Leader: &raftfsm.NodeInfo{ID: "n1"}, HealthFrom: "n1", Nodes: []raftfsm.Member{
		{NodeInfo: raftfsm.NodeInfo{ID: "n1"}, Suffrage: "voter", Healthy: true},
		{NodeInfo: raftfsm.NodeInfo{ID: "n2"}, Suffrage: "voter", Healthy: true},
		{NodeInfo: raftfsm.NodeInfo{ID: "n3"}, Suffrage: "voter", Healthy: true},
	}}
	var out bytes.Buffer
	printStatus(&out, st)
	require.NotContains(t, out.String(), "not committed")
	require.NotContains(t, out.String(), "voter*")

	st.ConfigurationPending = true
	st.Nodes[2].CommittedSuffrage = "nonvoter"
	st.PendingRemoved = []string{"n4"}
	out.Reset()
	printStatus(&out, st)
	require.Regexp(t, `n3\s+voter\*\s+yes`, out.String())
	require.Contains(t, out.String(), "NOTE: * the last membership change is not committed yet (before it n3 was a nonvoter, n4 was a member)")
	require.Contains(t, out.String(), "Wait until this note is gone before stopping or removing another voter")
}

// A removed node's own status (an operator walk: idem cluster status
// --addr of the node just removed) listed its removal as "not committed
// yet" and said to wait until that note is gone: a leader sends a node it
// removed nothing more, so the note never goes there. It says instead
// that the node is not a member and where to ask.
func TestRemovedNodesStatusDoesNotSayToWaitForItsRemoval(t *testing.T) {
	st := raftfsm.Status{Self: raftfsm.NodeInfo{ID: "n4"}, ConfigurationPending: true, PendingRemoved: []string{"n4"}, Nodes: []raftfsm.Member{
		{NodeInfo: raftfsm.NodeInfo{ID: "n1", HTTPAddr: "127.0.0.1:7070"}, Suffrage: "voter"},
		{NodeInfo: raftfsm.NodeInfo{ID: "n2", HTTPAddr: "127.0.0.2:7070"}, Suffrage: "voter"},
		{NodeInfo: raftfsm.NodeInfo{ID: "n3", HTTPAddr: "127.0.0.3:7070"}, Suffrage: "voter"},
	}}
	var out bytes.Buffer
	printStatus(&out, st)
	require.NotContains(t, out.String(), "not committed yet", out.String())
	require.NotContains(t, out.String(), "Wait until this note is gone", out.String())
	require.Contains(t, out.String(), "NOTE: n4 is not a member of the configuration it knows (removed from the cluster?)")
}

// With both followers' disks full, the leader refuses writes 507 and
// proposes nothing, so the followers lag nothing: the table read "3 of 3
// voters healthy" while every write was refused. The leader's reason is
// shown.
func TestClusterStatusSaysTheLeaderRefusesWritesForFullVoters(t *testing.T) {
	st := raftfsm.Status{Self: raftfsm.NodeInfo{ID: "n2"}, Leader: &raftfsm.NodeInfo{ID: "n1"}, HealthFrom: "n1", Nodes: []raftfsm.Member{
		{NodeInfo: raftfsm.NodeInfo{ID: "n1"}, Suffrage: "voter", Healthy: true},
		{NodeInfo: raftfsm.NodeInfo{ID: "n2"}, Suffrage: "voter", Healthy: true},
		{NodeInfo: raftfsm.NodeInfo{ID: "n3"}, Suffrage: "voter", Healthy: true},
	}, WritesRefused: "the disks of n2 (1 bytes free on /d, under 2) and n3 (1 bytes free on /d, under 2) are below their minimum free space"}
	var out bytes.Buffer
	printStatus(&out, st)
	require.Contains(t, out.String(), "WARNING: the leader refuses writes with 507 storage_full: the disks of n2 (1 bytes free")
}
