package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/idem-store/idem/api"
	"github.com/idem-store/idem/client"
	"github.com/idem-store/idem/raftfsm"
	"github.com/idem-store/idem/ttl"
)

func init() {
	extraCommands["cluster"] = command{Run: runCluster, Summary: "cluster membership and settings: status, join, remove, transfer-leadership, set-retention"}
}

const clusterUsage = `Usage: idem cluster <status|join|remove|transfer-leadership|set-retention> [flags]

  status                 members, their health (measured by the leader) and lag
  join                   add a node: --id, --raft-addr, --node-http-addr. It joins
                         as a non-voter; the leader promotes it to voter once it
                         answers and has caught up, so a node that never starts
                         never counts towards the quorum
  remove                 remove a node: --id. Refused when the remaining voters
                         would not have a healthy quorum, unless --force; the
                         last voter is never removed
  transfer-leadership    hand leadership to another voter (for rolling restarts);
                         --id names the voter, else raft picks the most up to date;
                         --from n1 hands over only while n1 leads, so running
                         it twice does not move the leadership on again
  set-retention          change the cluster's retention: --retention. Records
                         claimed from then on get it; stored records keep the
                         expires_at they were given. The cluster's retention is
                         replicated state: the first claim pins it from the
                         leader's serve --retention, and that flag changes
                         nothing afterwards: set it to the new value on every
                         node too, so that the nodes' configuration agrees
                         with the cluster's. A cluster an earlier release
                         started is pinned by its first set-retention: run it
                         once every node is upgraded

Any node answers; followers forward to the leader.

Flags:
`

// joinFlagsProblem names what is wrong with the flags of a join, or returns
// "". The addresses are checked here because the server records whatever
// it is given: a node added with --raft-addr "nonsense" (or a URL) sits in
// the configuration as a non-voter that can never be reached.
func joinFlagsProblem(id, raftAddr, httpAddr string) string {
	var missing []string
	for _, f := range []struct{ name, v string }{{"--id", id}, {"--raft-addr", raftAddr}, {"--node-http-addr", httpAddr}} {
		if f.v == "" {
			missing = append(missing, f.name)
		}
	}
	if len(missing) > 0 {
		return strings.Join(missing, ", ") + " required (a join needs --id, --raft-addr and --node-http-addr)"
	}
	for _, f := range []struct{ name, v, serveFlag, example string }{
		{"--raft-addr", raftAddr, "--raft-addr", "10.0.0.4:7071"},
		{"--node-http-addr", httpAddr, "--http-addr", "10.0.0.4:7070"},
	} {
		if host, _, _ := net.SplitHostPort(f.v); host == "" || checkHostPort(f.v) != nil {
			if hint := ipv6Hint(f.v); hint != "" {
				return fmt.Sprintf("%s %q must be host:port, the node's own %s: %s", f.name, f.v, f.serveFlag, hint)
			}
			return fmt.Sprintf("%s %q must be host:port, the node's own %s (e.g. %s)", f.name, f.v, f.serveFlag, f.example)
		}
	}
	return ""
}

// nodeIDFlagsProblem names a node id flag (by name, its value) that no
// node can have, or returns "". An id pasted with a space (--id "n4 ")
// went to the node, whose 404 read "no such member: n4  is not in the
// cluster (members: …, n4)", the space unseen; the join's 400 said so only
// after a request.
func nodeIDFlagsProblem(flags map[string]string) string {
	for _, name := range slices.Sorted(maps.Keys(flags)) {
		v := flags[name]
		if v == "" || nodeIDPattern.MatchString(v) {
			continue
		}
		msg := fmt.Sprintf("%s %q is not a node id (1-64 letters, digits, '.', '_' or '-', as idem serve --node-id)", name, v)
		if t := strings.TrimSpace(v); t != v && nodeIDPattern.MatchString(t) {
			msg += fmt.Sprintf(": a space was pasted with it (did you mean %s %s?)", name, t)
		}
		return msg + "; nothing was asked or changed"
	}
	return ""
}

// clusterFlags are the flags each cluster subcommand reads (they share
// one flag set): cluster status --id n3, say, showed every node.
var clusterFlags = func() subcommandFlags {
	common := []string{"addr", "auth-token", "token-file", "ca-file", "cert-file", "key-file", "json", "timeout"}
	with := func(flags ...string) []string { return append(slices.Clone(common), flags...) }
	return subcommandFlags{
		{"status", with("state-hashes")},
		{"join", with("id", "raft-addr", "node-http-addr", "scope", "force")},
		{"remove", with("id", "force")},
		{"transfer-leadership", with("id", "from")},
		{"set-retention", with("retention", "allow-short-retention")},
	}
}()

func runCluster(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("idem cluster", flag.ContinueOnError)
	fs.SetOutput(stderr)
	addr := fs.String("addr", envOr("IDEM_ADDR", client.DefaultAddr), "HTTP address of any node (env IDEM_ADDR)")
	tokenOf := authTokenFlag(fs, "bearer token for a server started with --auth-file (env IDEM_AUTH_TOKEN)")
	id := fs.String("id", "", "node id (join, remove; transfer-leadership: the voter to hand it to, default the most up to date)")
	from := fs.String("from", "", "transfer-leadership: hand over only if this node leads (so a transfer run twice does not move the leadership again)")
	raftAddr := fs.String("raft-addr", "", "raft address of the node to add (join)")
	httpAddr := fs.String("node-http-addr", "", "HTTP address of the node to add, host:port or http://host:port as --join takes it (join)")
	scope := fs.String("scope", "", "scope mode of the node to add, endpoint or principal (join; refused when it differs from the cluster's)")
	retention := fs.Duration("retention", 0, "the cluster's new retention of records, e.g. 48h (set-retention)")
	allowShort := fs.Bool("allow-short-retention", false, "allow a --retention below 1m (set-retention; tests and demos only)")
	force := fs.Bool("force", false, "make the change even if it leaves the cluster without a quorum of healthy voters (join, remove)")
	asJSON := fs.Bool("json", false, "print the server's JSON answer instead of a table or sentence")
	hashes := fs.Bool("state-hashes", false, "status: also ask every member for its state hash (GET /v1/admin/state, an admin route that reads every record: for investigations, not for monitoring; it needs an admin token with --auth-file) and show which replicas differ at the same applied index")
	timeout := fs.Duration("timeout", 30*time.Second, "give up after this long")
	tlsFlags := addClientTLSFlags(fs, "addr")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), clusterUsage)
		printFlags(fs.Output(), fs)
	}
	sub, code, done := parseSubcommand(fs, "idem cluster", args, stdout, stderr)
	if done {
		return code
	}
	if err := authTokenProblem(fs, stderr, "idem cluster "+sub); err != nil {
		fmt.Fprintf(stderr, "idem cluster %s: %v\n", sub, err)
		return 2
	}
	if _, msg := clusterFlags.problem(fs, sub); msg != "" {
		fmt.Fprintf(stderr, "idem cluster %s: %s (see idem cluster --help)\n", sub, msg)
		return 2
	}
	if *timeout <= 0 {
		// --timeout 0 read as "no limit" (the client commands' 0) gave up
		// at once with "context deadline exceeded" from the server.
		fmt.Fprintf(stderr, "idem cluster %s: --timeout %s must be positive (e.g. --timeout 30s)\n", sub, *timeout)
		return 2
	}
	if msg := nodeIDFlagsProblem(map[string]string{"--id": *id, "--from": *from}); msg != "" {
		fmt.Fprintf(stderr, "idem cluster %s: %s\n", sub, msg)
		return 2
	}
	var opts []client.Option
	if token := tokenOf(); token != "" {
		opts = append(opts, client.WithToken(token))
	}
	tlsOpts, err := tlsFlags.options()
	if err != nil {
		fmt.Fprintf(stderr, "idem cluster: %v\n", err)
		return 2
	}
	base, err := addrFlag(fs, *addr)
	if err != nil {
		fmt.Fprintf(stderr, "idem cluster: %v\n", err)
		return 2
	}
	cl, err := client.New(base, append(opts, tlsOpts...)...)
	if err != nil {
		fmt.Fprintf(stderr, "idem cluster: --addr: %v\n", err)
		return 2
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	var raw json.RawMessage
	var wasVoter *bool // remove: whether the node removed was a voter (nil: not known)
	switch sub {
	case "status":
		raw, err = cl.Do(ctx, http.MethodGet, "/v1/cluster", nil, nil)
	case "join":
		// As --join takes a member's address: http://host:port is
		// host:port (http://[::1]:7070 was refused here, taken there).
		*httpAddr = memberHTTPAddr(*httpAddr)
		if msg := joinFlagsProblem(*id, *raftAddr, *httpAddr); msg != "" {
			fmt.Fprintf(stderr, "idem cluster join: %s\n", msg)
			return 2
		}
		if *scope != "" && *scope != "endpoint" && *scope != "principal" {
			fmt.Fprintf(stderr, "idem cluster join: --scope %q must be endpoint or principal\n", *scope)
			return 2
		}
		raw, err = cl.Join(ctx, client.JoinRequest{ID: *id, RaftAddr: *raftAddr, HTTPAddr: *httpAddr, Scope: *scope, Force: *force})
	case "remove":
		if *id == "" {
			fmt.Fprintln(stderr, "idem cluster remove: --id is required")
			return 2
		}
		if !*asJSON {
			// Read before: the note after the removal speaks of the voters
			// left only when the removal took one away.
			wasVoter = votesNow(ctx, cl, *id)
		}
		raw, err = cl.RemoveNode(ctx, client.RemoveRequest{ID: *id, Force: *force})
	case "transfer-leadership":
		var body any
		if *id != "" || *from != "" {
			b := map[string]string{}
			if *id != "" {
				b["id"] = *id
			}
			if *from != "" {
				b["from"] = *from
			}
			body = b
		}
		raw, err = cl.Do(ctx, http.MethodPost, "/v1/cluster/transfer-leadership", nil, body)
		var p *client.Problem
		if *from != "" && errors.As(err, &p) && p.Status == http.StatusBadRequest && strings.Contains(p.Detail, `unknown field "from"`) {
			// A node of a release before --from (the leader, in step 3
			// of an upgrade from it) refuses the field: ask who leads,
			// and hand over without it only if --from does.
			c, cerr := cl.Cluster(ctx)
			switch {
			case cerr != nil:
				err = cerr
			case c.Leader == nil || c.Leader.ID != *from:
				leader := "no node"
				if c.Leader != nil {
					leader = c.Leader.ID
				}
				fmt.Fprintf(stdout, "%s leads, not %s: nothing was handed over\n", leader, *from)
				return 0
			default:
				fmt.Fprintf(stderr, "idem cluster transfer-leadership: the leader runs a release without --from: %s leads, so it is asked to hand over without it\n", *from)
				delete(body.(map[string]string), "from")
				if *id == "" {
					body = nil
				}
				raw, err = cl.Do(ctx, http.MethodPost, "/v1/cluster/transfer-leadership", nil, body)
			}
		}
	case "set-retention":
		given := false
		fs.Visit(func(f *flag.Flag) { given = given || f.Name == "retention" })
		if !given {
			fmt.Fprintln(stderr, "idem cluster set-retention: --retention is required (e.g. --retention 48h)")
			return 2
		}
		if err := ttl.ValidateRetention(*retention, *allowShort); err != nil {
			fmt.Fprintf(stderr, "idem cluster set-retention: --retention: %s\n", strings.TrimPrefix(err.Error(), "ttl: "))
			return 2
		}
		raw, err = cl.Do(ctx, http.MethodPut, "/v1/admin/retention", nil, map[string]any{
			"retention": retention.String(), "allow_short_retention": *allowShort})
	default:
		fmt.Fprintf(stderr, "idem cluster: unknown subcommand %q\n", sub)
		fs.SetOutput(stderr)
		fs.Usage()
		return 2
	}
	if err != nil {
		var p *client.Problem
		if errors.As(err, &p) {
			printProblem(stderr, "idem cluster "+sub, p.Detail, p.Code, p.Status, tokenOf())
			if p.Code == "would_lose_quorum" && !strings.Contains(p.Detail, "force does not") {
				fmt.Fprintf(stderr, "idem cluster %s: nothing was changed; see `idem cluster status`, or repeat with --force\n", sub)
			}
			if p.Status == http.StatusServiceUnavailable && strings.HasPrefix(p.Detail, "no leader is available") && sub != "status" {
				// Retrying helps only through an election; with most voters
				// down (a membership walk: two of four killed) it never does.
				fmt.Fprintf(stderr, "idem cluster %s: nothing was changed. If no leader comes within seconds, most voters are down or cut off: start them again (idem cluster status --addr on each says what it sees); a change of membership needs a leader, so if most voters are lost for good, see idem recover (docs/BACKUP.md)\n", sub)
			}
		} else {
			fmt.Fprintf(stderr, "idem cluster %s: %v\n", sub, notHTTP(err))
		}
		return 1
	}
	if *asJSON {
		cliWriteJSON(stdout, raw)
		if sub == "set-retention" {
			fmt.Fprintln(stderr, retentionFlagReminder(*retention))
		}
		return 0
	}
	switch sub {
	case "status":
		var st raftfsm.Status
		if err := json.Unmarshal(raw, &st); err != nil {
			fmt.Fprintf(stderr, "idem cluster status: the answer does not decode (%v); --json prints it as received\n", err)
			return 1
		}
		leaderDowngrades(ctx, &st, append(opts, tlsOpts...))
		memberVersions(ctx, &st, append(opts, tlsOpts...))
		printStatus(stdout, st)
		if *hashes {
			printStateHashes(stdout, memberStateHashes(ctx, st, append(opts, tlsOpts...)))
		}
		// Each member's GET /v1/config, asked once for both checks below: it
		// was asked twice, by each of them.
		configs := memberConfigs(ctx, st, append(opts, tlsOpts...))
		if open := openMembers(ctx, st, configs, append(opts, tlsOpts...)); len(open) > 0 {
			fmt.Fprintf(stdout, "WARNING: %s answered GET /v1/config without a token while other members check tokens: a release that does not record --auth-file in its data dir, started without it (a rollback from a unit file that lost the line?). It serves anyone every principal's records there (consistency=stale). Start it with the --auth-file the other nodes use (docs/SECURITY.md)\n", strings.Join(open, ", "))
		}
		drift := settingsDrift(st, configs)
		for _, r := range []struct {
			warning string
			whyOf   func(*client.ServerConfig) string
		}{
			{"WARNING: the last SIGHUP did not reload the --auth-file of these members: the tokens loaded before stay in force there (a token removed from the file still works, one added does not yet). Fix the file (idem token check FILE says what is wrong) and kill -HUP them again:",
				func(c *client.ServerConfig) string { return c.AuthFileReloadError }},
			{"WARNING: the last SIGHUP did not reload the --tls-* files of these members: the certificate and CAs loaded before stay in force there (after a CA rotation's last step, the old CA is still trusted there, by raft too; a renewed certificate is not served). Fix the files and kill -HUP them again:",
				func(c *client.ServerConfig) string { return c.TLSReloadError }},
		} {
			if failed := reloadFailed(st, configs, r.whyOf); len(failed) > 0 {
				fmt.Fprintln(stdout, r.warning)
				for _, f := range failed {
					fmt.Fprintln(stdout, "  "+f)
				}
			}
		}
		if len(drift) > 0 {
			leader := "none now"
			if st.Leader != nil {
				leader = "now " + st.Leader.ID
			}
			fmt.Fprintf(stdout, "WARNING: the members' settings differ, and a claim gets those of the leader that decides it (%s): what clients get changes with leadership. Give every node the same flags (a rolling restart):\n", leader)
			for _, d := range drift {
				fmt.Fprintln(stdout, "  "+d)
				if strings.HasPrefix(d, "retention: ") {
					// Right after a set-retention, or on a member that lags, the
					// retention differs with every flag the same: a restart
					// changes nothing then.
					fmt.Fprintln(stdout, "  (the retention is each node's --retention only until the first claim pins one for the cluster; after that a member showing another has not applied the latest set-retention yet: run cluster status again before restarting anything)")
				}
				if strings.HasPrefix(d, "commit timeout: ") {
					fmt.Fprintln(stdout, "  (--commit-timeout: a follower cuts a write it forwards by its own, 503 with the outcome unknown, while a leader with a longer one still waits for it)")
				}
				if strings.HasPrefix(d, "auth file digest: ") {
					fmt.Fprintln(stdout, "  "+authFileDrift)
				}
			}
		}
	case "transfer-leadership":
		var a struct{ Outcome, From, Leader string }
		json.Unmarshal(raw, &a)
		switch {
		case a.Outcome == "unchanged" && *from != "" && a.Leader != *from:
			fmt.Fprintf(stdout, "%s leads, not %s: nothing was handed over\n", a.Leader, *from)
		case a.Outcome == "unchanged":
			fmt.Fprintf(stdout, "%s leads already\n", a.Leader)
		case a.From == "": // a node of an earlier release says only that
			fmt.Fprintln(stdout, "leadership transferred: see idem cluster status for the new leader")
		case a.Leader != "":
			fmt.Fprintf(stdout, "leadership moved from %s to %s\n", a.From, a.Leader)
		default:
			fmt.Fprintf(stdout, "%s handed over the leadership; no new leader yet: see idem cluster status\n", a.From)
		}
	case "set-retention":
		var a struct {
			Retention         string `json:"retention"`
			PreviousRetention string `json:"previous_retention"`
			FirstPin          bool   `json:"first_pin"`
		}
		json.Unmarshal(raw, &a)
		switch {
		case a.FirstPin:
			// Unpinned, the leader's flag was the "previous" one: equal to
			// it, this said "nothing changed" when it had just pinned the
			// retention, as a refused first claim's 503 asks an operator to.
			fmt.Fprintf(stdout, "the cluster's retention is %s, pinned now (no claim had pinned one): records claimed from now on get it, whichever node leads\n", a.Retention)
		case a.Retention == a.PreviousRetention:
			// Run twice, it said "(was 48h0m0s)" as if it had changed (an
			// operator walk).
			fmt.Fprintf(stdout, "the cluster's retention is %s already: nothing changed\n", a.Retention)
		default:
			fmt.Fprintf(stdout, "the cluster's retention is %s (was %s): records claimed from now on get it; stored records keep their expires_at\n", a.Retention, a.PreviousRetention)
		}
		fmt.Fprintln(stdout, retentionFlagReminder(*retention))
	case "join", "remove":
		var a struct{ Outcome, Suffrage, Detail string }
		json.Unmarshal(raw, &a)
		switch {
		case a.Detail != "":
			fmt.Fprintf(stdout, "%s: %s\n", a.Outcome, a.Detail)
		case a.Outcome == "removed":
			fmt.Fprintf(stdout, "removed %s from the cluster\n", *id)
			if note := faultToleranceNote(ctx, cl, *id, wasVoter); note != "" {
				fmt.Fprintln(stdout, note)
			}
		default:
			cliWriteJSON(stdout, raw)
		}
	default:
		cliWriteJSON(stdout, raw)
	}
	return 0
}

// votesNow reports whether id is a voter in the configuration the node
// cl asks knows: nil when its status cannot be read.
func votesNow(ctx context.Context, cl *client.Client, id string) *bool {
	st, ok := clusterStatus(ctx, cl)
	if !ok {
		return nil
	}
	voter := slices.ContainsFunc(st.Nodes, func(m raftfsm.Member) bool { return m.ID == id && strings.EqualFold(m.Suffrage, "voter") })
	return &voter
}

func clusterStatus(ctx context.Context, cl *client.Client) (raftfsm.Status, bool) {
	var st raftfsm.Status
	raw, err := cl.Do(ctx, http.MethodGet, "/v1/cluster", nil, nil)
	return st, err == nil && json.Unmarshal(raw, &st) == nil
}

// faultToleranceNote says, after a removal, what the voters left can
// survive when that is less than one failure: removing down to two or one
// voter said only "removed" (a membership walk), and the next failure of
// any node then stopped the cluster. "" when the status cannot be read,
// three or more voters remain, or the node removed was not a voter
// (wasVoter false: removing a non-voter from a cluster of one voter said
// "n1 is the only voter left", as if the removal had made it so). With
// wasVoter nil (not known) it says what the voters are, not that they are
// what is left.
func faultToleranceNote(ctx context.Context, cl *client.Client, removed string, wasVoter *bool) string {
	if wasVoter != nil && !*wasVoter {
		return ""
	}
	st, ok := clusterStatus(ctx, cl)
	if !ok {
		return ""
	}
	var voters []string
	for _, m := range st.Nodes {
		if strings.EqualFold(m.Suffrage, "voter") && m.ID != removed { // "Voter" from an older node
			voters = append(voters, m.ID)
		}
	}
	// Not known to have been a voter: what the voters are, not what is left.
	only, two, again := "%s is the only voter left", "two voters are left (%s)", " again"
	if wasVoter == nil {
		only, two, again = "%s is the only voter", "the cluster has two voters (%s)", ""
	}
	switch len(voters) {
	case 1:
		return fmt.Sprintf("NOTE: "+only+": the cluster survives no failure (if it stops, nothing is served until it is back). Join nodes%s to have three voters (idem cluster join, docs/MEMBERSHIP.md)", voters[0], again)
	case 2:
		return fmt.Sprintf("NOTE: "+two+": a majority of two is both, so the cluster stops serving if either fails. Join a node%s to have three voters (idem cluster join, docs/MEMBERSHIP.md)", strings.Join(voters, ", "), again)
	}
	return ""
}

// retentionFlagReminder is what set-retention adds to its answer: the
// change is the cluster's, and the nodes' --retention flags still hold the
// old value, which makes each node warn at start and would seed a cluster
// started again from empty data dirs.
func retentionFlagReminder(d time.Duration) string {
	v := d.String() // 48h0m0s -> 48h, 1h30m0s -> 1h30m: as a config file writes it
	if strings.HasSuffix(v, "m0s") {
		v = strings.TrimSuffix(v, "0s")
	}
	if strings.HasSuffix(v, "h0m") {
		v = strings.TrimSuffix(v, "0m")
	}
	if d < ttl.MinRetention {
		// A node refuses such a --retention without the flag that allows it.
		v += " --allow-short-retention"
	}
	return fmt.Sprintf("set --retention %s (or IDEM_RETENTION) on every node too, so that their configuration agrees: the flag only seeds a new cluster's retention and changes nothing here, but a node whose flag differs warns at each start, and a cluster started from empty data dirs would take the old value", v)
}

// authFileDrift says what members with different --auth-file files do.
const authFileDrift = "(the members' --auth-file differ, \"none\" for a node without one: a token is checked by the node asked and by the leader, but a consistency=stale lookup by the node asked alone, so a token that one node's file gives other principals reads their records there, and a token only some files list works or not with the node asked and the leader. Copy one file to every node, then SIGHUP each; no restart is needed)"

// leaderDowngrades fills in, on a status answered by a follower of an
// earlier release (no version), which members the leader shows as
// downgraded in place: that release passes on the leader's measurements
// but not the field, so asked on the node just rolled back, the status
// warned of nothing while the leader logged the downgrade at ERROR.
func leaderDowngrades(ctx context.Context, st *raftfsm.Status, opts []client.Option) {
	if st.Version != "" || st.Leader == nil || st.Leader.ID == st.Self.ID || st.Leader.HTTPAddr == "" {
		return
	}
	ls, ok := statusOf(ctx, st.Leader.HTTPAddr, opts)
	if !ok || ls.HealthFrom != ls.Self.ID {
		return
	}
	for i, m := range st.Nodes {
		for _, lm := range ls.Nodes {
			if lm.ID == m.ID && m.Downgraded == "" {
				st.Nodes[i].Downgraded = lm.Downgraded
			}
		}
	}
}

// statusOf is the GET /v1/cluster answer of the node at addr, asked for 2 s
// at most; false when it did not answer one.
func statusOf(ctx context.Context, addr string, opts []client.Option) (raftfsm.Status, bool) {
	var st raftfsm.Status
	c, err := client.New(addr, opts...)
	if err != nil {
		return st, false
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	a, err := c.Cluster(ctx)
	return st, err == nil && json.Unmarshal(a.Raw, &st) == nil
}

// memberVersions asks each member the leader did not report a release for
// its own, when the leader runs a release that reports none (before the
// release NOTE): a rolling upgrade's status under a leader not yet
// upgraded named every upgraded member but the one asked "an earlier
// release", so which nodes were done could not be told. A member that
// does not answer, or answers without a release, stays unknown. The keys
// of a member that answers with a release fill its KEYS column, which
// read "?" (not known) for each upgraded member under such a leader.
func memberVersions(ctx context.Context, st *raftfsm.Status, opts []client.Option) {
	if st.Leader == nil {
		return
	}
	for _, m := range st.Nodes {
		if m.ID == st.Leader.ID && m.Version != "" {
			return // the leader reports releases: an empty one is an earlier release's
		}
	}
	var wg sync.WaitGroup
	for i, m := range st.Nodes {
		if m.Version != "" || m.HTTPAddr == "" {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if ms, ok := statusOf(ctx, m.HTTPAddr, opts); ok && ms.Self.ID == m.ID {
				st.Nodes[i].Version = ms.Version
				if st.Nodes[i].Keys == nil && ms.Version != "" {
					// Its own keys, as its row of its own status shows them:
					// a release that reports its version reports its keys
					// (they came first), none as no field.
					st.Nodes[i].Keys = ms.Keys
					if ms.Keys == nil {
						st.Nodes[i].Keys = []raftfsm.NodeKey{}
					}
				}
			}
		}()
	}
	wg.Wait()
}

// openMembers are the members of a release that does not publish its
// auth file digest (before it recorded --auth-file in node.json, which
// refuses a start without it) that answer GET /v1/config without a token,
// when another member checks tokens: such a node rolled back in place
// from a unit file without --auth-file served every tenant's records to
// anyone, and the digest comparison (settingsDrift) leaves out a member
// that publishes none, so nothing said so. Only such a member is asked
// without the token (a member that publishes its digest is not: each
// refusal counts in idem_http_auth_refused_total). Nothing when no member
// checks tokens. configs are the members' answers with the token
// (memberConfigs), which settingsDrift reads too.
func openMembers(ctx context.Context, st raftfsm.Status, configs []*client.ServerConfig, opts []client.Option) []string {
	open, checks := make([]bool, len(st.Nodes)), make([]bool, len(st.Nodes))
	var wg sync.WaitGroup
	for i, m := range st.Nodes {
		cfg := configs[i]
		if cfg == nil {
			continue
		}
		if cfg.AuthFileDigest != "" {
			checks[i] = cfg.AuthFileDigest != "none" // "none" is named by settingsDrift
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := memberConfig(ctx, m.HTTPAddr, append(slices.Clip(opts), client.WithToken("")))
			var p *client.Problem
			switch {
			case errors.As(err, &p) && (p.Status == http.StatusUnauthorized || p.Status == http.StatusForbidden):
				checks[i] = true
			case err == nil:
				open[i] = true
			}
		}()
	}
	wg.Wait()
	if !slices.Contains(checks, true) {
		return nil
	}
	var out []string
	for i, m := range st.Nodes {
		if open[i] {
			out = append(out, m.ID)
		}
	}
	return out
}

// memberConfigs are the members' answers to GET /v1/config (st.Nodes'
// order), asked at once, 2 s each at most; nil for a member that did not
// answer one.
func memberConfigs(ctx context.Context, st raftfsm.Status, opts []client.Option) []*client.ServerConfig {
	configs := make([]*client.ServerConfig, len(st.Nodes))
	var wg sync.WaitGroup
	for i, m := range st.Nodes {
		if m.HTTPAddr == "" {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if cfg, err := memberConfig(ctx, m.HTTPAddr, opts); err == nil {
				configs[i] = cfg
			}
		}()
	}
	wg.Wait()
	return configs
}

// memberConfig is the GET /v1/config answer of the node at addr, asked
// for 2 s at most.
func memberConfig(ctx context.Context, addr string, opts []client.Option) (*client.ServerConfig, error) {
	c, err := client.New(addr, opts...)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	return c.Config(ctx)
}

// settingsDrift compares what each member publishes at GET /v1/config on
// its own address. The default lease and the limits are each node's own
// flags, and the leader's decide a claim. Retention is replicated state
// once the first claim pinned it; before that each node publishes its own
// --retention, which the first claim's leader will pin. One line per setting that differs ("retention: n1
// 24h0m0s, n3 1h0m0s"); a member that does not answer is left out.
// configs are the members' answers (memberConfigs).
func settingsDrift(st raftfsm.Status, configs []*client.ServerConfig) (drift []string) {
	type view struct {
		id  string
		cfg map[string]string
	}
	var views []view
	for i, m := range st.Nodes {
		cfg := configs[i]
		if cfg == nil {
			continue
		}
		v := map[string]string{"retention": cfg.Retention, "default lease": fmt.Sprintf("%d ms", cfg.LeaseDefaultMs)}
		for k, l := range cfg.Limits {
			if f, ok := l.(float64); ok {
				v[k] = publishedValue(k, f) // 3600000, not 3.6e+06
			} else {
				v[k] = fmt.Sprint(l)
			}
		}
		if cfg.AuthFileDigest != "" {
			// A follower decides a stale lookup with its own auth file:
			// one that differs lets a token read other principals there.
			v["auth file digest"] = cfg.AuthFileDigest
		}
		if cfg.CommitTimeoutMs > 0 { // an earlier release publishes none
			// A follower cuts a write it forwards by its own: one below the
			// leader's answers 503 (outcome unknown) for writes the leader
			// still waits for.
			v["commit timeout"] = publishedValue("commit_timeout_ms", float64(cfg.CommitTimeoutMs))
		}
		views = append(views, view{m.ID, v})
	}
	names := map[string]bool{}
	for _, v := range views {
		for k := range v.cfg {
			names[k] = true
		}
	}
	for _, k := range slices.Sorted(maps.Keys(names)) {
		// A node that does not publish a setting (an older version, in a
		// rolling upgrade) is left out of its comparison, not shown as "".
		var vals []string
		differ, first := false, ""
		for _, v := range views {
			val, ok := v.cfg[k]
			if !ok {
				continue
			}
			if len(vals) == 0 {
				first = val
			}
			vals = append(vals, v.id+" "+val)
			differ = differ || val != first
		}
		if differ {
			drift = append(drift, k+": "+strings.Join(vals, ", "))
		}
	}
	return drift
}

// reloadFailed names each member whose last SIGHUP did not reload the
// files whyOf reads the failure of from its GET /v1/config (its auth
// file, its TLS files), with why: only its log said so, and a CA
// rotation's last step that failed there left the old CA trusted by it
// while every other member refused it.
func reloadFailed(st raftfsm.Status, configs []*client.ServerConfig, whyOf func(*client.ServerConfig) string) []string {
	var failed []string
	for i, m := range st.Nodes {
		if i < len(configs) && configs[i] != nil {
			if why := whyOf(configs[i]); why != "" {
				failed = append(failed, m.ID+": "+why)
			}
		}
	}
	return failed
}

// printStatus writes the cluster as a table, one node a line, with the
// leader's measurements and why each unhealthy node is so.
func printStatus(w io.Writer, st raftfsm.Status) {
	leader := "none"
	if st.Leader != nil {
		leader = st.Leader.ID
	}
	fmt.Fprintf(w, "leader %s, term %d, commit index %d (as seen by %s)\n", leader, st.Term, st.CommitIndex, st.Self.ID)
	if st.Superseded != "" {
		// Its table is its own view and may look healthy (it may even
		// lead): say first that it serves nothing.
		fmt.Fprintf(w, "WARNING: %s answers every request but this status 503: %s\n", st.Self.ID, st.Superseded)
	}
	if st.Removed != "" {
		// Its table is its own view from before the removal: every member
		// unhealthy, no leader. Said first, so that nobody takes the
		// cluster for lost (and reaches for idem recover).
		fmt.Fprintf(w, "WARNING: %s is not a member of the cluster (the table below is its own view, not the cluster's: ask a member, idem cluster status --addr MEMBER_HTTP_ADDR): %s\n", st.Self.ID, st.Removed)
	}
	if h := st.HoldsVote; h != nil {
		if h.LeaderTerm == 0 {
			fmt.Fprintf(w, "NOTE: %s started with an empty data dir and no leader has reached it yet: it votes only in a new cluster's first election and does not stand for election until a leader reaches it and it has caught up\n", st.Self.ID)
		} else {
			fmt.Fprintf(w, "NOTE: %s started with an empty data dir and is catching up: until its log reaches index %d of term %d (what the leader had committed when it first reached it, applied %d now) it votes only for a candidate whose log does, and does not stand for election\n", st.Self.ID, h.LeaderCommitIndex, h.LeaderTerm, st.AppliedIndex)
		}
	}
	voters, healthy, refused, unmeasured := 0, 0, 0, 0
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tSUFFRAGE\tHEALTHY\tLAG\tAPPLIED\tLAST CONTACT\tCHECKED\tKEYS\tHTTP\tRAFT")
	var reasons, kept, pending []string
	for _, m := range st.Nodes {
		name := m.ID
		if st.Leader != nil && m.ID == st.Leader.ID {
			name += " (leader)"
		}
		h := "yes"
		if !m.Healthy {
			h = "NO"
			reasons = append(reasons, fmt.Sprintf("  %s: %s", m.ID, m.UnhealthyReason))
		}
		if m.NotPromoted != "" {
			kept = append(kept, fmt.Sprintf("  %s: %s", m.ID, m.NotPromoted))
		}
		if strings.EqualFold(m.Suffrage, "voter") { // "Voter" from an older node
			voters++
			if m.Healthy {
				healthy++
			} else if strings.Contains(m.UnhealthyReason, api.TokenRefused) {
				refused++
			} else if strings.HasPrefix(m.UnhealthyReason, raftfsm.NotMeasuredYet) {
				unmeasured++
			}
		}
		checked := "never"
		if m.CheckedMsAgo != nil {
			checked = msAge(*m.CheckedMsAgo) + " ago"
		}
		contact := "never"
		if m.LastContactMs != nil {
			contact = msAge(*m.LastContactMs) + " ago"
		}
		applied, lag := shownApplied(m)
		suffrage := strings.ToLower(m.Suffrage)
		if m.CommittedSuffrage != "" {
			suffrage += "*"
			was := "was a " + strings.ToLower(m.CommittedSuffrage)
			if strings.EqualFold(m.CommittedSuffrage, "none") {
				was = "was not a member"
			}
			pending = append(pending, m.ID+" "+was)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", name, suffrage, h,
			optUint(lag), optUint(applied), contact, checked, keyIDs(m.Keys), m.HTTPAddr, m.RaftAddr)
	}
	tw.Flush()
	for _, id := range st.PendingRemoved {
		pending = append(pending, id+" was a member")
	}
	member := false
	for _, m := range st.Nodes {
		member = member || m.ID == st.Self.ID
	}
	if len(pending) > 0 && (member || len(st.Nodes) == 0) {
		// Not on a node outside the configuration it knows (removed, or
		// replaying toward its admission): the change pending there is its
		// own removal, whose commit a leader never sends to a node it
		// removed, so "wait until this note is gone" was a wait for ever
		// (an operator walk). The note below says where to ask.
		//
		// A leader lists a promotion as soon as it appends it: an operator
		// who stopped the leader then, taking the new node for a voter,
		// left the others a configuration in which it was not one.
		fmt.Fprintf(w, "NOTE: * the last membership change is not committed yet (before it %s): stopped before a quorum has stored it, the leader may take it with it. Wait until this note is gone before stopping or removing another voter.\n", strings.Join(pending, ", "))
	}
	from := st.HealthFrom
	if from == "" {
		from = "nobody (no leader's measurements)"
	}
	if !member && len(st.Nodes) > 0 && st.HoldsVote != nil && st.HoldsVote.LeaderTerm != 0 && st.Leader != nil {
		// A node that joined, hears from a leader and replays the log
		// short of its admission: the configurations it passes are older
		// than the one that took it in. It was told removed, under the
		// note that it is catching up.
		fmt.Fprintf(w, "NOTE: %s is replaying the cluster's log and has not reached the entry that took it in: the table is the configuration of the entry it has reached, without %s, and only a leader measures health; ask the leader %s for the cluster as it is.\n", st.Self.ID, st.Self.ID, st.Leader.ID)
		return
	}
	if !member && len(st.Nodes) > 0 {
		// A removed node's last view: nobody measures health for it, so
		// the count below would read as a lost quorum.
		fmt.Fprintf(w, "NOTE: %s is not a member of the configuration it knows (removed from the cluster?): the table is its last view, and only a leader measures health; ask a member at one of the HTTP addresses above.\n", st.Self.ID)
		return
	}
	fmt.Fprintf(w, "%d of %d voters healthy (a quorum is %d); health measured by %s.\n", healthy, voters, voters/2+1, from)
	leaderRefuses := false
	for _, m := range st.Nodes {
		leaderRefuses = leaderRefuses || st.HealthFrom == "" && st.Leader != nil && strings.Contains(m.UnhealthyReason, "could not ask the leader") && strings.Contains(m.UnhealthyReason, api.TokenRefused) &&
			!strings.Contains(m.UnhealthyReason, "has no --node-token-file")
	}
	switch {
	case leaderRefuses:
		// The node asked could not get the leader's measurements: the
		// leader refuses the token the others call it with, so they cannot
		// ask it their readiness either (a reload of its auth file dropped
		// the nodes' entry). Requests they forward carry the caller's token.
		fmt.Fprintf(w, "WARNING: the leader %s refuses %s's node token (--node-token-file): %s's --auth-file lacks the entry of that token (reloaded without it?). The other nodes cannot learn their readiness from it and answer /readyz 503 (a load balancer sends them nothing): add the entry to its auth file and kill -HUP it\n", st.Leader.ID, st.Self.ID, st.Leader.ID)
	case healthy < voters/2+1 && healthy+refused+unmeasured >= voters/2+1 && unmeasured > 0:
		// Right after an election or a join: the leader has not checked
		// them yet, which says nothing of the quorum (a walk read "writes
		// fail" while every write went through).
		fmt.Fprintln(w, "NOTE: the leader has not measured every voter yet (it was elected moments ago, or they joined since its last check): run this again in a few seconds; membership changes wait for it")
	case healthy < voters/2+1 && healthy+refused >= voters/2+1:
		// Raft may well be replicating: only the leader's checks over HTTP
		// are refused (a node token removed from the auth files).
		fmt.Fprintln(w, "WARNING: members refuse the leader's health checks (its node token): writes may still succeed, but membership changes are refused and those members answer /readyz 503 until every node's --auth-file holds the entry of the token in --node-token-file (then kill -HUP them)")
	case healthy < voters/2+1 && st.Removed == "":
		fmt.Fprintln(w, "WARNING: fewer healthy voters than a quorum: writes fail until enough of them answer, and membership changes are refused")
	}
	if st.WritesRefused != "" {
		fmt.Fprintln(w, "WARNING: the leader refuses writes with 507 storage_full: "+st.WritesRefused)
	}
	for _, m := range st.Nodes {
		if m.Downgraded != "" {
			fmt.Fprintf(w, "WARNING: %s was downgraded in place: %s\n", m.ID, m.Downgraded)
		}
	}
	for _, d := range slices.Concat(keyDisagreements(st.Nodes), firstKeyOnFew(st.Nodes), expiryWarnings(st.Nodes, time.Now()), clockWarnings(st)) {
		fmt.Fprintln(w, "WARNING: "+d)
	}
	for _, d := range upgradeNotes(st) {
		fmt.Fprintln(w, "NOTE: "+d)
	}
	if slices.ContainsFunc(st.Nodes, lagUnknown) {
		fmt.Fprintln(w, "LAG - : not known for a node that did not answer the leader's last check (stopped, or cut off): it is behind by whatever was committed since; APPLIED is its last answer's")
	}
	if keyed(st.Nodes) {
		fmt.Fprintln(w, "KEYS: the ids in each node's --encryption-key-file, the first is the one it encrypts with (? not known: not measured yet, or a release that does not report them)")
	}
	if len(reasons) > 0 {
		fmt.Fprintln(w, "unhealthy:")
		for _, r := range reasons {
			fmt.Fprintln(w, r)
		}
	}
	if len(kept) > 0 {
		fmt.Fprintln(w, "kept non-voters:")
		for _, r := range kept {
			fmt.Fprintln(w, r)
		}
	}
}

// shownApplied is a member's APPLIED and LAG columns: its state store's
// applied index when that is ahead of raft's (a node restarted a moment
// ago, whose raft has not replayed its log yet, answered 0 and a lag of
// the whole log while its /readyz said ready), and the lag behind the
// leader's commit index that makes. For display only: the leader's
// judgement (HEALTHY, and every decision) goes by raft's, and the
// unhealthy reason says when they differ.
func shownApplied(m raftfsm.Member) (applied, lag *uint64) {
	applied, lag = m.AppliedIndex, m.Lag
	if lagUnknown(m) {
		// A leader of an earlier release reports the lag of its last
		// answer: 0 for a node stopped caught up, read as "caught up".
		lag = nil
	}
	if s := m.StateAppliedIndex; s != nil && applied != nil && *s > *applied {
		ahead := *s - *applied
		applied = s
		if lag != nil {
			l := *lag - min(ahead, *lag)
			lag = &l
		}
	}
	return applied, lag
}

// lagUnknown reports whether m did not answer the leader's last check: its
// lag is not known (APPLIED is its last answer's).
func lagUnknown(m raftfsm.Member) bool {
	return !m.Healthy && strings.HasPrefix(m.UnhealthyReason, raftfsm.DidNotAnswer)
}

func optUint(v *uint64) string {
	if v == nil {
		return "-"
	}
	return strconv.FormatUint(*v, 10)
}

// msAge is a duration in ms, short: "0s", "1.2s", "3m4s".
func msAge(ms int64) string {
	d := time.Duration(ms) * time.Millisecond
	if d < time.Minute {
		return d.Round(100 * time.Millisecond).String()
	}
	return d.Round(time.Second).String()
}

// keyIDs is a member's KEYS column: its key ids, the one it encrypts with
// first; "none" without a key file, "?" when not known.
func keyIDs(keys []raftfsm.NodeKey) string {
	if keys == nil {
		return "?"
	}
	if len(keys) == 0 {
		return "none"
	}
	ids := make([]string, len(keys))
	for i, k := range keys {
		ids[i] = k.ID
	}
	return strings.Join(ids, ",")
}

// keyed reports whether any member holds a key file: the KEYS column is
// explained only then.
func keyed(nodes []raftfsm.Member) bool {
	for _, m := range nodes {
		if len(m.Keys) > 0 {
			return true
		}
	}
	return false
}

// keyDisagreements says which key ids members hold with different keys
// (their check values differ): a key generated on each node instead of
// copied, whose values one node cannot read of another.
func keyDisagreements(nodes []raftfsm.Member) []string {
	checks := map[string]map[string][]string{} // id -> check -> members
	for _, m := range nodes {
		for _, k := range m.Keys {
			if checks[k.ID] == nil {
				checks[k.ID] = map[string][]string{}
			}
			checks[k.ID][k.Check] = append(checks[k.ID][k.Check], m.ID)
		}
	}
	var out []string
	for _, id := range slices.Sorted(maps.Keys(checks)) {
		byCheck := checks[id]
		if len(byCheck) < 2 {
			continue
		}
		var groups []string
		for _, c := range slices.Sorted(maps.Keys(byCheck)) {
			groups = append(groups, strings.Join(byCheck[c], ", "))
		}
		slices.Sort(groups)
		out = append(out, fmt.Sprintf("key %q is not the same key on every node (the check values differ: %s): values sealed under it on one of these nodes cannot be read on the other. "+
			"Copy the key file of the nodes that hold the cluster's key to the others (idem keys status on a node says whether its key is the one the cluster recorded); never generate a key id in use again", id, strings.Join(groups, " / ")))
	}
	return out
}

// firstKeyOnFew says which members encrypt with a key (the first of their
// key file) that no more than half of the voters hold: rotation step 2
// (docs/SECURITY.md) done on them before step 1 reached the others. The
// leader refuses to hand them the leadership (409 no_transfer_target),
// and one elected all the same refuses to encrypt and hands it on; the
// table showed it only in the KEYS column. Voters whose keys are not
// known count as holding it, so nothing is said that a check has not
// shown.
func firstKeyOnFew(nodes []raftfsm.Member) []string {
	voters := 0
	for _, m := range nodes {
		if strings.EqualFold(m.Suffrage, "voter") {
			voters++
		}
	}
	type first struct{ id, check string }
	byKey := map[first][]raftfsm.Member{}
	for _, m := range nodes {
		if len(m.Keys) > 0 {
			k := first{m.Keys[0].ID, m.Keys[0].Check}
			byKey[k] = append(byKey[k], m)
		}
	}
	var out []string
	for _, k := range slices.SortedFunc(maps.Keys(byKey), func(a, b first) int { return strings.Compare(a.id+a.check, b.id+b.check) }) {
		held, keyedLacking, holders := 0, 0, []string{}
		for _, v := range nodes {
			if !strings.EqualFold(v.Suffrage, "voter") {
				continue
			}
			switch {
			case v.Keys == nil:
				held++ // not known: maybe
			case slices.ContainsFunc(v.Keys, func(h raftfsm.NodeKey) bool { return h.ID == k.id && h.Check == k.check }):
				held++
				holders = append(holders, v.ID)
			case len(v.Keys) > 0:
				keyedLacking++
			}
		}
		if voters == 0 || held*2 > voters || keyedLacking == 0 {
			// keyedLacking 0: the others hold no key at all (encryption
			// being turned on), no rotation.
			continue
		}
		var ids, back []string
		for _, m := range byKey[k] {
			ids = append(ids, m.ID)
			if len(m.Keys) > 1 {
				back = append(back, fmt.Sprintf("%q first again on %s", m.Keys[1].ID, m.ID))
			}
		}
		who, encrypts, its := strings.Join(ids, ", "), "encrypts", "its"
		if len(ids) > 1 {
			encrypts, its = "encrypt", "their"
		}
		held1 := "none"
		if len(holders) > 0 {
			held1 = strings.Join(holders, ", ")
		}
		undo := "restore the key file it had before"
		if len(back) == len(ids) {
			undo = "put " + strings.Join(back, ", ")
		}
		out = append(out, fmt.Sprintf("%s %s with key %q (the first in %s --encryption-key-file), which only %d of the %d voters hold (%s): key rotation step 2 was done there before step 1 reached the other nodes. "+
			"The other voters could not read what it sealed under that key: while nothing is, the leadership is not handed to it (transfer-leadership is refused, 409 no_transfer_target), and elected all the same it refuses writes that store a response (503) and hands the leadership on. "+
			"Add %q to every node's key file after the current first key (rotation step 1, docs/SECURITY.md) and restart them one at a time, or %s",
			who, encrypts, k.id, its, len(holders), voters, held1, k.id, undo))
	}
	return out
}

// expiryWarnings says which members' TLS certificates or CAs have expired
// or expire within expiryWarning, as the leader's last checks saw them. A
// node whose certificate expired keeps the connections it had, so its row
// still reads healthy: until a restart or a network fault, when no other
// node can reach it.
func expiryWarnings(nodes []raftfsm.Member, now time.Time) []string {
	var out []string
	for _, m := range nodes {
		for _, c := range []struct {
			what, fix string
			at        *raftfsm.Stamp
		}{
			{"TLS certificate", "renew it (idem tls cert, docs/SECURITY.md) and kill -HUP " + m.ID, m.CertNotAfter},
			{"CA (--tls-ca-file)", "rotate the CA on every node (docs/SECURITY.md)", m.CANotAfter},
		} {
			if c.at == nil {
				continue
			}
			at := c.at.UTC().Format(time.RFC3339)
			switch left := c.at.Sub(now); {
			case left <= 0:
				out = append(out, fmt.Sprintf("%s's %s EXPIRED at %s: connections made before still work, so it may look healthy, but no new one to or from it does (after a restart or a network fault it is cut off); %s", m.ID, c.what, at, c.fix))
			case left < expiryWarning:
				out = append(out, fmt.Sprintf("%s's %s expires in %s (%s): %s before then", m.ID, c.what, fmtLeft(left), at, c.fix))
			}
		}
	}
	return out
}

// clockSkewWarning is how far a member's wall clock may be from the
// leader's, beyond what the measurement cannot tell, before cluster
// status says so: NTP keeps clocks within milliseconds.
const clockSkewWarning = 10 * time.Second

// clockWarnings says which members' wall clocks are off the leader's, as
// its health checks measured them. Records do not expire by wall clocks
// (cluster time), but certificates are judged by them and logs line up by
// them, and a clock off by hours is otherwise found by neither.
func clockWarnings(st raftfsm.Status) []string {
	if st.Leader == nil {
		return nil
	}
	const why = "Records do not expire by it (idem keeps cluster time), but TLS certificates are judged by it (a clock behind refuses certificates issued since, one ahead takes expired ones) and the nodes' logs no longer line up"
	type skew struct {
		id  string
		off time.Duration
	}
	var skewed []skew
	measured := 0
	for _, m := range st.Nodes {
		if m.ClockOffsetMs == nil || m.ID == st.Leader.ID {
			continue
		}
		measured++
		off, within := time.Duration(*m.ClockOffsetMs)*time.Millisecond, time.Duration(0)
		if m.ClockUncertaintyMs != nil {
			within = time.Duration(*m.ClockUncertaintyMs) * time.Millisecond
		}
		if off.Abs()-within < clockSkewWarning {
			continue
		}
		skewed = append(skewed, skew{m.ID, off})
	}
	dir := func(off time.Duration) string {
		if off < 0 {
			return "behind"
		}
		return "ahead of"
	}
	// Every other member off by about the same from the leader: the
	// leader's clock is the odd one. Said per member, the warning blamed
	// the majority ("n1's and n2's clocks are 30h behind the leader n3's"
	// when n3 ran 30h ahead; a walk of mixed settings).
	if len(skewed) >= 2 && len(skewed) == measured {
		lo, hi := skewed[0].off, skewed[0].off
		var ids []string
		for _, k := range skewed {
			lo, hi = min(lo, k.off), max(hi, k.off)
			ids = append(ids, k.id)
		}
		if (lo > 0) == (hi > 0) && hi-lo < clockSkewWarning {
			off := -(lo + (hi-lo)/2)
			return []string{fmt.Sprintf("the leader %s's wall clock is %s %s every other member's (%s): check NTP on %s first (timedatectl, chronyc tracking). %s",
				st.Leader.ID, off.Abs().Round(time.Second), dir(off), strings.Join(ids, ", "), st.Leader.ID, why)}
		}
	}
	var out []string
	for _, k := range skewed {
		out = append(out, fmt.Sprintf("%s's wall clock is %s %s the leader %s's: check NTP on both (timedatectl, chronyc tracking). %s",
			k.id, k.off.Abs().Round(time.Second), dir(k.off), st.Leader.ID, why))
	}
	return out
}

// upgradeNotes say which release each member runs when they differ (a
// rolling upgrade: which nodes are done), and that the clocks were not
// measured when the leader, or the node asked, does not report them.
func upgradeNotes(st raftfsm.Status) []string {
	if st.Leader == nil {
		return nil
	}
	var out []string
	versions, differ, measured, others := []string{}, false, false, 0
	var first *string // the release of the first member whose release is known
	for _, m := range st.Nodes {
		v := m.Version
		switch {
		case v == "" && !m.Healthy:
			// Down or unreachable: its release is unknown, not different
			// (a membership walk: one node down read "the members run
			// different releases").
			v = "? (not measured: down or unreachable)"
		case v == "":
			v = "? (an earlier release)"
		}
		versions = append(versions, m.ID+" "+v)
		if m.Version != "" || m.Healthy {
			if first == nil {
				first = &m.Version
			}
			differ = differ || m.Version != *first
		}
		if m.ID != st.Leader.ID && m.Healthy {
			others++
			measured = measured || m.ClockOffsetMs != nil
		}
	}
	if differ {
		out = append(out, "the members run different releases: "+strings.Join(versions, ", ")+
			". In a rolling upgrade that is expected until the last node is done; run the newest release's idem for commands meanwhile (an older one may report what only newer nodes publish as a difference)")
	}
	if others > 0 && !measured {
		out = append(out, "the members' clocks were not measured: the leader, or the node asked, runs an earlier release")
	}
	return out
}

// fmtLeft is a duration in days and hours (or minutes under an hour).
func fmtLeft(d time.Duration) string {
	if d < time.Hour {
		return fmt.Sprintf("%dm", int(d.Minutes()))
	}
	days, hours := int(d.Hours())/24, int(d.Hours())%24
	if days == 0 {
		return fmt.Sprintf("%dh", hours)
	}
	return fmt.Sprintf("%dd%dh", days, hours)
}

// stateHash is one member's GET /v1/admin/state, or why it was not read.
type stateHash struct {
	id, hash string
	// withGated is the member's state_hash_with_gated: what a replica of
	// a release before December 5, 2026 answers as state_hash for the
	// same state. "" from such a release, which does not send it.
	withGated string
	applied   uint64
	err       string
}

// memberStateHashes asks every member with an HTTP address for its state
// hash, in parallel.
func memberStateHashes(ctx context.Context, st raftfsm.Status, opts []client.Option) []stateHash {
	out := make([]stateHash, len(st.Nodes))
	var wg sync.WaitGroup
	for i, m := range st.Nodes {
		out[i].id = m.ID
		if m.HTTPAddr == "" {
			out[i].err = "its HTTP address is not known"
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := client.New(m.HTTPAddr, opts...)
			if err == nil {
				cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
				var raw json.RawMessage
				raw, err = c.Do(cctx, http.MethodGet, "/v1/admin/state", nil, nil)
				cancel()
				var a struct {
					StateHash          string `json:"state_hash"`
					StateHashWithGated string `json:"state_hash_with_gated"`
					AppliedIndex       uint64 `json:"applied_index"`
				}
				if err == nil {
					err = json.Unmarshal(raw, &a)
				}
				out[i].hash, out[i].withGated, out[i].applied = a.StateHash, a.StateHashWithGated, a.AppliedIndex
			}
			if err != nil {
				out[i].err = notHTTP(err).Error()
			}
		}()
	}
	wg.Wait()
	return out
}

// printStateHashes writes each member's state hash and applied index, and
// a warning for replicas whose hashes differ at the same applied index
// (their states diverged: one lacks or holds writes the others do not).
// Hashes read at different indexes do not compare.
func printStateHashes(w io.Writer, hs []stateHash) {
	fmt.Fprintln(w, "state hashes (GET /v1/admin/state; only hashes at the same applied index compare):")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	byIndex := map[uint64][]stateHash{}
	for _, h := range hs {
		if h.err != "" {
			fmt.Fprintf(tw, "  %s\t-\t-\t%s\n", h.id, h.err)
			continue
		}
		fmt.Fprintf(tw, "  %s\t%s\tapplied %d\t\n", h.id, h.hash, h.applied)
		byIndex[h.applied] = append(byIndex[h.applied], h)
	}
	tw.Flush()
	comparable := false
	var alone []string // replicas read alone at their applied index: not compared
	for _, idx := range slices.Sorted(maps.Keys(byIndex)) {
		group := byIndex[idx]
		comparable = comparable || len(group) > 1
		if len(group) == 1 {
			alone = append(alone, fmt.Sprintf("%s at %d", group[0].id, idx))
		}
		hashes := map[string][]string{}
		for _, h := range group {
			hashes[h.hash] = append(hashes[h.hash], h.id)
		}
		// A replica of a release before December 5, 2026 sends no
		// state_hash_with_gated and hashed the record of applied gated
		// kinds too: it agrees with a member of this release whose
		// state_hash or state_hash_with_gated is its state_hash (a
		// rolling upgrade read the two as replicas that differ).
		for _, old := range group {
			if old.withGated != "" {
				continue
			}
			for _, h := range group {
				if h.withGated != "" && h.hash != old.hash && h.withGated == old.hash {
					hashes[h.hash] = append(hashes[h.hash], old.id)
					if ids := slices.DeleteFunc(hashes[old.hash], func(id string) bool { return id == old.id }); len(ids) == 0 {
						delete(hashes, old.hash)
					} else {
						hashes[old.hash] = ids
					}
					break
				}
			}
		}
		if len(hashes) < 2 {
			continue
		}
		var parts []string
		for _, hash := range slices.Sorted(maps.Keys(hashes)) {
			parts = append(parts, strings.Join(hashes[hash], ", ")+" "+hash)
		}
		fmt.Fprintf(w, "WARNING: the replicas' states differ at applied index %d (%s): one lacks writes the others hold, or holds writes they lack. The hashes alone do not tell which holds the acknowledged history (a kept non-voter or a member downgraded in place, above, is the likely one): copy every data dir aside as it is before changing anything (docs/OPERATIONS.md, checking that replicas agree)\n", idx, strings.Join(parts, "; "))
	}
	if !comparable && len(byIndex) > 1 {
		fmt.Fprintln(w, "NOTE: no two replicas were read at the same applied index (writes are going on): run this again while the cluster is idle to compare them")
		return
	}
	// Some compared, but a replica read alone at its index was not: its
	// row alone read as if it agreed.
	if comparable && len(alone) > 0 {
		fmt.Fprintf(w, "NOTE: not compared with any other replica, read alone at its applied index: %s; run this again while the cluster is idle to compare it\n", strings.Join(alone, ", "))
	}
}
