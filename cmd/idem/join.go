package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"mime"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/idem-store/idem/api"
	"github.com/idem-store/idem/raftfsm"
)

// membership brings a node into its cluster and keeps its addresses in the
// log, for the node's whole life:
//
//   - with --bootstrap-expect N and no state: ask the --join addresses who
//     they are until N nodes (this one included) are known, then bootstrap
//     all of them with the same configuration;
//   - with --join and no state: ask the members to add this node until one
//     does; it joins as a non-voter, and the leader promotes it once it has
//     caught up (a node that has state but is not in the configuration was
//     removed, and stays out until an operator adds it back: it keeps
//     running, and serves again as soon as that happens);
//   - once a member: make sure the log holds this node's current HTTP and
//     raft addresses (so followers can forward to it), asking the leader to
//     record them when they are missing or changed.
//
// It also gives the node the means to measure its peers' health whenever
// it leads (their GET /v1/cluster). Every call carries nodeToken, the
// node's own admin credential (--node-token-file), when it has one.
func membership(ctx context.Context, node *raftfsm.Node, c *serveConfig, nodeToken string, log *slog.Logger) {
	node.SetPeerProbe(api.NewPeerProbe(nodeToken, c.nodeID, c.tls.loaded))
	m := &member{node: node, c: c, log: log, client: c.tls.httpClient(5 * time.Second), token: nodeToken}
	// A redirect is an answer to judge, not one to follow: no idem node
	// redirects a join, and a --join naming a web server (http:// to
	// https://, a login page) had the join POSTed on, or turned into a
	// GET of its home page, whose 200 was taken for an admission.
	m.client.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	// The scope goes along so that the cluster refuses a node that would
	// scope keys differently from it, and the retention so that, until a
	// claim pins the cluster's, it refuses one that would give the first
	// claim, leading it, another retention than its nodes'.
	m.self = map[string]any{"id": c.nodeID, "raft_addr": c.raftAdvertise, "http_addr": c.httpAdvertise, "scope": c.scope, "retention": c.retention.String()}
	go m.warnSettingsDrift(ctx)
	m.warnJoinIgnored()
	outside := 0 // consecutive rounds with state but outside the configuration
	for ctx.Err() == nil {
		hasState := node.HasState()
		if node.Outside() {
			outside++
		} else {
			outside = 0
			m.removedTold = false
		}
		switch {
		case !hasState && c.bootstrapExpect > 1:
			m.tryBootstrap(ctx)
		case !hasState && c.join != "" && node.StateOnItsWay():
			// Restarted empty and reached by the leader before it asked:
			// the addresses its join would have learned.
			if l, ok := node.Leader(); ok && l.HTTPAddr == "" {
				m.learnAddrs(ctx, splitAddrs(c.join)...)
			}
		case !hasState && c.join != "":
			// A leader sending this node its state (a snapshot that takes
			// seconds) was asked every second again, and the node logged
			// "cluster membership recorded" each time.
			if addrs := splitAddrs(c.join); !m.joinSelfOnly(addrs) {
				m.tryJoin(ctx, addrs)
			}
		case node.ReplayingUnheard():
			// Replaying toward its admission, and no leader sends to it:
			// restarted at a new raft address it waited for ever, in
			// silence (the leader sends to the old one), as it did when
			// removed before it caught up.
			m.checkReplaying(ctx)
		case node.MemberUnheard() && outside == 0:
			// A member by its own log that hears from no leader: the
			// leader is down, or it removed this node and its last
			// attempt to say so failed (it then stops sending): the node
			// campaigned for ever, and answered writes "no leader". A
			// leader that does not list it makes it Outside (the case
			// below says so).
			m.checkUnheard(ctx)
		case outside > 0:
			// Removed from the cluster: joining back on its own would undo
			// the operator's removal. (A joining node replaying entries
			// older than its admission is not outside: Outside.)
			if outside == 2 {
				m.warnRemoved()
			}
		case node.IsMember() && !node.IsLeader() && (!node.Registered() || node.AdmissionPending()) && !alone(node, c.nodeID):
			// AdmissionPending: taken in before it asked (by hand), or its
			// answer was lost; the leader's answer names its admission.
			// A node alone in its configuration asks no one: it is about
			// to lead its one-node cluster and records its addresses
			// itself. Restarted with --join (warnJoinIgnored) and new
			// addresses, it asked the --join members while its election
			// ran, and logged their "join refused" beside "--join is
			// ignored".
			if l, ok := node.Leader(); ok && l.HTTPAddr != "" {
				m.tryJoin(ctx, []string{l.HTTPAddr})
			} else {
				// No leader heard of: a node restarted on a new raft
				// address is never reached, the leader sends to the old
				// one. Ask the members its state records, and --join.
				m.tryJoin(ctx, append(splitAddrs(c.join), node.PeerHTTPAddrs()...))
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Second):
		}
	}
}

// checkReplaying asks the cluster, for a node replaying its log toward its
// admission that hears from no leader (Node.ReplayingUnheard), whether the
// leader's configuration still lists it, and where. Listed at other
// addresses (the node was restarted at a new --raft-addr or --http-addr
// while it replayed), it asks the leader to record the new ones, as a
// member that moved does; not listed, it was removed before it caught up,
// and it says so once, with the command that adds it back, as a removed
// member does. Listed where it runs, it waits: the leader is down or out
// of reach.
func (m *member) checkReplaying(ctx context.Context) {
	a, st, ok := m.askLeader(ctx)
	if !ok {
		return
	}
	i := slices.IndexFunc(st.Nodes, func(n raftfsm.Member) bool { return n.ID == m.c.nodeID })
	switch {
	case i < 0:
		// Its answers to writes and reads say so too (api's notMemberIf).
		m.node.MarkRemovedWhileReplaying(a)
		if !m.replayRemoved {
			m.replayRemoved = true
			m.log.Warn(raftfsm.RemovedBeforeCaughtUp,
				"leader", st.Leader.ID, "add-back", addBackCommand(m.c, a))
		}
	case st.Nodes[i].RaftAddr != m.c.raftAdvertise || st.Nodes[i].HTTPAddr != m.c.httpAdvertise:
		m.node.MarkRemovedWhileReplaying("")
		m.replayRemoved = false
		m.tryJoin(ctx, []string{a})
	default:
		m.node.MarkRemovedWhileReplaying("")
		m.replayRemoved = false
	}
}

// askLeader asks the members this node knows (--join, and the HTTP
// addresses its state records) for GET /v1/cluster, following an answer
// that names another leader, and returns the first answer of a node that
// leads, with its address. A member that names no leader (it is cut off
// with a minority, or an election runs) tells nothing.
func (m *member) askLeader(ctx context.Context) (string, raftfsm.Status, bool) {
	addrs := append(splitAddrs(m.c.join), m.node.PeerHTTPAddrs()...)
	if l, ok := m.node.Leader(); ok && l.HTTPAddr != "" {
		addrs = append([]string{l.HTTPAddr}, addrs...)
	}
	asked := map[string]bool{m.c.httpAdvertise: true}
	for i := 0; i < len(addrs); i++ {
		a := addrs[i]
		if asked[a] {
			continue
		}
		asked[a] = true
		st, ok := m.memberStatus(ctx, a)
		if !ok || st.Leader == nil {
			continue
		}
		if st.Leader.ID != st.Self.ID {
			// Only the leader's own view is the cluster's now.
			if st.Leader.HTTPAddr != "" {
				addrs = append(addrs, st.Leader.HTTPAddr)
			}
			continue
		}
		return a, st, true
	}
	return "", raftfsm.Status{}, false
}

// memberStatus asks the member at a for GET /v1/cluster; false when it
// does not answer 200 with a status.
func (m *member) memberStatus(ctx context.Context, a string) (raftfsm.Status, bool) {
	var st raftfsm.Status
	b, status, err := m.do(ctx, http.MethodGet, a, "/v1/cluster", nil)
	if err != nil || status != http.StatusOK || json.Unmarshal(b, &st) != nil {
		return raftfsm.Status{}, false
	}
	return st, true
}

// checkUnheard asks the cluster, for a member (by its own log) that hears
// from no leader (Node.MemberUnheard), whether the leader lists it. Not
// listed by a leader of a term at least its own, it was removed and the
// leader's one last attempt to tell it failed: MarkRemovedUnheard makes it
// Outside, which the membership loop says once, with the command that adds
// it back, and its answers to writes and reads say too. It never joins
// back on its own. Listed at addresses it does not run at, it asks the
// leader to record its own. Listed where it runs, or asked no leader, it
// waits: the leader is down or out of reach (a node cut off with a
// minority hears no leader named, and concludes nothing).
func (m *member) checkUnheard(ctx context.Context) {
	a, st, ok := m.askLeader(ctx)
	if !ok {
		return
	}
	if slices.ContainsFunc(st.Nodes, func(n raftfsm.Member) bool { return n.ID == m.c.nodeID }) {
		m.node.MarkRemovedUnheard("", 0)
		if (!m.node.Registered() || m.node.AdmissionPending()) && !alone(m.node, m.c.nodeID) {
			// Listed, and restarted at addresses the leader does not
			// send to (or never told its admission): as the loop's
			// case for such a member does, ask the leader to record
			// them.
			m.tryJoin(ctx, []string{a})
		}
		return
	}
	if m.node.MarkRemovedUnheard(a, st.Term) {
		// Said now rather than on the loop's second look at Outside:
		// five seconds of silence went before it.
		m.warnRemoved("leader", st.Leader.ID, "leader-term", st.Term)
	}
}

// warnRemoved says, once while the node stays Outside, that it was
// removed, with the command that adds it back.
func (m *member) warnRemoved(args ...any) {
	if m.removedTold {
		return
	}
	if m.node.Superseded() != "" {
		// A member a recovery left out, started on its old data dir: it
		// said at ERROR to start empty with --join, and the add-back
		// command this line gave is refused (409 foreign_cluster).
		return
	}
	m.removedTold = true
	m.log.Warn("this node is not in the cluster's configuration (removed?): it answers no writes or reads until an operator adds it back, which needs no restart",
		append(args, "add-back", addBackCommand(m.c, m.node.PeerHTTPAddrs()...))...)
}

// learnAddrs asks the first of addrs that answers for the members'
// addresses (GET /v1/cluster) and gives them to the node (LearnAddrs): a
// node that joined empty installs the leader's snapshot before its state
// records any member, and it forwards writes and reads to the leader's HTTP
// address meanwhile, as it does while it replays the log. Before, it knew
// the leader's raft address only, and a request through it waited 3 s
// and was answered 503 for as long as the install lasted.
func (m *member) learnAddrs(ctx context.Context, addrs ...string) {
	for _, a := range addrs {
		if a == m.c.httpAdvertise {
			continue
		}
		st, ok := m.memberStatus(ctx, a)
		if !ok {
			continue
		}
		nodes := []raftfsm.NodeInfo{st.Self}
		if st.Leader != nil {
			nodes = append(nodes, *st.Leader)
		}
		for _, n := range st.Nodes {
			nodes = append(nodes, n.NodeInfo)
		}
		m.node.LearnAddrs(nodes)
		return
	}
}

// warnJoinIgnored says, at start, that --join does nothing for a node
// whose data dir holds a one-node cluster of its own (a store started
// without --join, a restored backup): a node with state never joins
// another cluster, so it goes on serving as a separate one, and a client
// given every address could have one key claimed in both. A --join that
// names only this node (a template listing every node) is not a mistake.
func (m *member) warnJoinIgnored() {
	others := slices.DeleteFunc(splitAddrs(m.c.join), func(a string) bool { return a == m.c.httpAdvertise })
	if len(others) == 0 || !m.node.HasState() {
		return
	}
	st, err := m.node.Status()
	if err != nil || len(st.Nodes) != 1 || st.Nodes[0].ID != m.c.nodeID {
		return
	}
	m.log.Warn("--join is ignored: this data dir holds a one-node cluster of its own, with its own records, and a node with state never joins another cluster; "+
		"it serves as that cluster. If it is the first node of the cluster at --join (the others are to join it), nothing is wrong: they join it. "+
		"If it is to join a cluster that runs there, start it with an empty data dir (keep this one: it may hold the only copy of its records)",
		"join", m.c.join, "data-dir", m.c.dataDir)
}

// alone reports whether the node's configuration holds this node only.
func alone(node *raftfsm.Node, self string) bool {
	ids := node.MemberIDs()
	return len(ids) == 1 && ids[0] == self
}

// notHTTPHint says, for an error of a --join address that answered but not
// HTTP (a raft port closes the connection on an HTTP request), that --join
// takes HTTP addresses; "" for any other error.
func notHTTPHint(err error) string {
	if what := notHTTPAnswer(err); what != "" {
		return " HTTP (" + what + "): --join takes members' HTTP addresses (their --http-addr, default 127.0.0.1:7070), not their raft addresses"
	}
	return ""
}

// addBackCommand is the command that adds a removed node back, ready to
// paste: the member to ask is one of --join (not the node itself), else
// one of the members the node knows (known), else a placeholder.
//
// On a TLS cluster it gives the command the node's own CA, certificate
// and key (--ca-file, --cert-file, --key-file: a node's certificate is
// one the CA signed, which a join needs), and its --node-token-file (an
// admin token, which a join needs), or with --auth-file and none a
// placeholder. Without them the command pasted from the log failed: a TLS
// error on a bare address, then 403 for the missing client certificate.
// The paths are made absolute: the operator pastes it from another
// directory than the node's.
func addBackCommand(c *serveConfig, known ...string) string {
	member := ""
	for _, a := range append(splitAddrs(c.join), known...) {
		if a != c.httpAdvertise {
			member = a
			break
		}
	}
	cmd := raftfsm.AddBackCommand(raftfsm.NodeInfo{ID: c.nodeID, RaftAddr: c.raftAdvertise, HTTPAddr: c.httpAdvertise}, member)
	if c.tls.on() {
		cmd += " --ca-file " + absWord(c.tls.caFile) + " --cert-file " + absWord(c.tls.certFile) + " --key-file " + absWord(c.tls.keyFile)
	}
	switch {
	case c.nodeTokenFile != "":
		// Given even without --auth-file here: the node asked may check
		// tokens (a rolling restart that turns them on).
		cmd += " --token-file " + absWord(c.nodeTokenFile)
	case c.authFile != "":
		// An old-format auth file's first token is the node's: the
		// operator gives an admin token of their own.
		cmd += " --token-file ADMIN_TOKEN_FILE"
	}
	return cmd
}

// absWord is path made absolute when it can be, as one shell word.
func absWord(path string) string {
	if a, err := filepath.Abs(path); err == nil {
		path = a
	}
	return raftfsm.ShellWord(path)
}

type member struct {
	node   *raftfsm.Node
	c      *serveConfig
	log    *slog.Logger
	client *http.Client
	token  string
	// self is the body of the node's join; with "empty" added when the
	// node holds no state yet, the leader refuses it a voter's place (a
	// stopped voter's id).
	self map[string]any
	// refused is the last refusal logged, so that a join retried every
	// second logs a refusal once rather than every time.
	refused string
	// cantBootstrap: the node's refusal to bootstrap was logged.
	cantBootstrap bool
	// unreachable is the last error logged per --join address, for the
	// same reason: a typo in --join, a member speaking HTTPS to a node
	// without TLS, or a certificate from another CA would otherwise leave
	// a node waiting forever with nothing in its log.
	unreachable map[string]string
	// selfOnly: --join named this node alone, said once.
	selfOnly bool
	// replayRemoved: checkReplaying said that the node was removed before
	// it caught up.
	replayRemoved bool
	// removedTold: the node said that it is not in the cluster's
	// configuration (warnRemoved), since it last was.
	removedTold bool
	// notIdem is when the node last said, per address, that the address
	// answered something no idem node answers (notIdemEvery).
	notIdem map[string]time.Time
	// answered: a join of this process was admitted. Only the first
	// answer tells whether the node ran before (warnEmptyVoter): a second
	// join finds the addresses the first one recorded.
	answered bool
}

// warnEmptyVoter says that this node, started on an empty data dir, is a
// voter that ran at the same addresses before: a rolling restart from
// another working directory with a relative --data-dir, or a volume not
// mounted, joined in silence (INFO "n2 is a voter already"), and the data
// dir it ran on was left behind (an operator walk). What to do is in
// OPERATIONS.md's rolling restarts.
func (m *member) warnEmptyVoter() {
	dir, err := filepath.Abs(m.c.dataDir)
	if err != nil {
		dir = m.c.dataDir
	}
	cwd, _ := os.Getwd()
	m.log.Warn("this node started with an empty data dir, and the cluster lists it as a voter that ran at these addresses before: if it ran on another data dir (a relative --data-dir started from another working directory, a volume not mounted), that one is left behind, and this node catches up from the others as that voter. "+
		"Do not start it on the old data dir again: it lacks what this node acknowledges from now on. Give it an absolute --data-dir (docs/OPERATIONS.md, rolling restarts). If it replaces a member whose data was lost, remove the member before starting the new node next time (docs/MEMBERSHIP.md, replacing a member)",
		"data-dir", dir, "working-dir", cwd, "node-id", m.c.nodeID)
}

// notIdemEvery is how often the node says again that an address answers
// something no idem node answers: it asks every second, and the answer of
// a web server stays the same.
const notIdemEvery = time.Minute

func (m *member) do(ctx context.Context, method, addr, path string, body []byte) ([]byte, int, error) {
	b, _, status, err := m.send(ctx, method, addr, path, body)
	return b, status, err
}

// send is do with the answer's header.
func (m *member) send(ctx context.Context, method, addr, path string, body []byte) ([]byte, http.Header, int, error) {
	req, err := http.NewRequestWithContext(ctx, method, (&url.URL{Scheme: m.c.tls.scheme(), Host: addr}).String()+path, bytes.NewReader(body))
	if err != nil {
		return nil, nil, 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	if m.token != "" {
		req.Header.Set("Authorization", "Bearer "+m.token)
	}
	resp, err := m.client.Do(req)
	var plain tls.RecordHeaderError
	if err != nil && req.URL.Scheme == "https" && (errors.As(err, &plain) || strings.Contains(err.Error(), "first record does not look like a TLS handshake")) {
		// A node without TLS answers a handshake with plain HTTP.
		return nil, nil, 0, fmt.Errorf("%s speaks plain HTTP: this node runs with TLS and that one without it; if it is a node of this cluster, start it with --tls-cert-file, --tls-key-file and --tls-ca-file too (a certificate from this cluster's CA), and if it is not an idem node at all, correct the address: %w", addr, err)
	}
	if err != nil {
		return nil, nil, 0, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if req.URL.Scheme == "http" && resp.StatusCode == http.StatusBadRequest &&
		bytes.HasPrefix(b, []byte("Client sent an HTTP request to an HTTPS server")) {
		// Go's answer to plain HTTP on an HTTPS port: a 400 without a code.
		return nil, nil, 0, fmt.Errorf("%s speaks HTTPS: the cluster runs with TLS, and this node without it; start it with --tls-cert-file, --tls-key-file and --tls-ca-file (a certificate from the cluster's CA)", addr)
	}
	return b, resp.Header, resp.StatusCode, err
}

// joinSelfOnly says, once, that --join (addrs) names no node but this one,
// and reports whether it does: there is nothing to ask, and the node waited
// in silence, answering 503 to every write (an operator walk).
// joinSelfAdvice is what to do instead of a --join of this node alone
// (serve's formationProblem refuses it on a new data dir).
const joinSelfAdvice = "Give the HTTP address of a member of the cluster to join; to start a new cluster leave --join out (one node), or give --bootstrap-expect N with every node's address"

func (m *member) joinSelfOnly(addrs []string) bool {
	if len(addrs) == 0 || slices.ContainsFunc(addrs, func(a string) bool { return a != m.c.httpAdvertise }) {
		return false
	}
	if !m.selfOnly {
		m.selfOnly = true
		m.log.Error("--join names only this node's own address: a node cannot join itself, so it waits for ever, answering no write. "+joinSelfAdvice,
			"join", strings.Join(addrs, ","), "http-advertise", m.c.httpAdvertise)
	}
	return true
}

func (m *member) tryJoin(ctx context.Context, addrs []string) {
	for _, a := range addrs {
		if a == m.c.httpAdvertise {
			continue
		}
		body := maps.Clone(m.self)
		body["scope"] = m.scope()
		if !m.node.HasState() {
			body["empty"] = true
			// Before the cluster can send a first entry: restarted in the
			// middle of replaying the cluster's log, the node must know it
			// joined (raftfsm's joining.go).
			if err := m.node.MarkJoining(); err != nil {
				m.log.Error("join: cannot record in the data dir that this node is joining; not asking until it can", "error", err)
				return
			}
		}
		b, hdr, status, err := m.join(ctx, a, body)
		ans, isAnswer := readJoinAnswer(status, hdr, b)
		switch {
		case err != nil:
			if ctx.Err() == nil && m.unreachable[a] != err.Error() {
				if m.unreachable == nil {
					m.unreachable = map[string]string{}
				}
				m.unreachable[a] = err.Error()
				m.log.Warn("join: this --join address did not answer"+notHTTPHint(err)+"; retrying every second until a member accepts the join", "addr", a, "error", err)
			}
		case !isAnswer:
			// A web server, a health endpoint or another service at a
			// --join address answered the join 200 {}: the node logged
			// "cluster membership recorded" every second for ever, asked
			// no other --join address, and waited as a member that was
			// never added. It is a failed join, as a refusal is.
			m.sayNotIdem(a, "join answer", status, hdr, b)
		case status == http.StatusOK:
			m.log.Info("cluster membership recorded", "via", a, "suffrage", ans.Suffrage, "detail", ans.Detail)
			if !m.answered && ans.RanBefore && ans.Suffrage == "voter" && m.node.StartedEmpty() {
				m.warnEmptyVoter()
			}
			m.answered = true
			if !m.node.HasState() {
				m.learnAddrs(ctx, a)
			}
			// Until its configuration is that recent, the node is replaying
			// the cluster's past (raftfsm's joining.go).
			if err := m.node.Admitted(ans.AdmittedIndex); err != nil {
				m.log.Error("join: cannot record in the data dir where this node was admitted; asking again", "error", err)
				return
			}
			m.refused = ""
			return
		default:
			answer := strings.TrimSpace(string(b))
			if answer != m.refused {
				m.log.Error("join refused; retrying every second"+joinRefusedHint(status, m.token != "", m.c.authFile != ""), "addr", a, "status", status, "code", ans.Code, "detail", ans.Detail)
				m.refused = answer
			}
		}
	}
}

// scope is the scope mode this node's join states: the cluster's once
// the node's state holds it (pinned by the first write, the node applies
// and looks up every key in it whatever its --scope, and its status says
// so: the leader promotes it on that word), else its --scope. A node joined
// by hand before it started, and started with another --scope, stated
// its flag: its join, which asks for its admission, was refused
// (scope_mismatch) for as long as it ran, though it was a voter, and its
// joining file never went (a removal then said "removed before it caught
// up", and its raft lines stayed at debug).
func (m *member) scope() string {
	if mode, pinned := m.node.ScopeMode(); pinned {
		return mode
	}
	return m.c.scope
}

// joinAnswer is what an idem node answers a join: 200 with
// {"outcome":"joined",...} (suffrage since 9d6353a, admitted_index since
// 486c43e, left out when 0), or a problem document ({"code","detail"}).
type joinAnswer struct {
	Outcome, Suffrage, Detail, Code string
	AdmittedIndex                   uint64 `json:"admitted_index"`
	RanBefore                       bool   `json:"ran_before"`
}

// joinRefusedHint is what to do about a join the member refused for its
// token (401), given whether this node has a node token and an auth
// file (a 403's detail names the role the token lacks already). A node started as MEMBERSHIP.md's "replacing a member" shows it,
// without the flags the others run with, logged only the member's own
// detail ("a valid Authorization: Bearer token is required") once, and
// waited for ever, with nothing naming the flags it lacked.
func joinRefusedHint(status int, hasToken, hasAuthFile bool) string {
	switch {
	case status == http.StatusUnauthorized && !hasToken && !hasAuthFile:
		return ": the member checks tokens (it runs with --auth-file) and this node sent none; start this node with the --auth-file and --node-token-file the other nodes run with"
	case status == http.StatusUnauthorized && !hasToken:
		return ": the member checks tokens and this node has no --node-token-file to call it with; start this node with the --node-token-file the other nodes run with"
	case status == http.StatusUnauthorized:
		return ": the member's --auth-file does not list the token of this node's --node-token-file; give this node the node token file the other nodes run with, or add an admin entry for its token (its hash: idem token hash < FILE; docs/SECURITY.md, \"The node credential\") to every node's --auth-file and kill -HUP them"
	}
	return ""
}

// readJoinAnswer reads a join's answer, and reports whether an idem node
// could have given it. Every release answered a join as JSON
// (application/json, a refusal application/problem+json) with "outcome"
// "joined" on 200, and a refusal with a "code". A 5xx without one is taken
// as a refusal too: a load balancer in front of the members, or a node
// too busy to answer (--max-conns), whose next answer may be the node's.
func readJoinAnswer(status int, hdr http.Header, b []byte) (joinAnswer, bool) {
	var ans joinAnswer
	mt, _, _ := mime.ParseMediaType(hdr.Get("Content-Type"))
	isJSON := (mt == "application/json" || strings.HasSuffix(mt, "+json")) && json.Unmarshal(b, &ans) == nil
	switch {
	case status == 0: // no answer (do's error)
		return ans, true
	case status >= 200 && status < 300:
		return ans, status == http.StatusOK && isJSON && ans.Outcome == "joined"
	case status >= 500:
		return ans, true
	default:
		return ans, isJSON && ans.Code != ""
	}
}

// sayNotIdem says, once a minute per address, that the address a answered
// something that is not what (an idem node's "join answer", or its "GET
// /v1/cluster answer"): a --join naming another service, a raft address
// behind a proxy, a web server's default page.
func (m *member) sayNotIdem(a, what string, status int, hdr http.Header, b []byte) {
	if t, ok := m.notIdem[a]; ok && time.Since(t) < notIdemEvery {
		return
	}
	if m.notIdem == nil {
		m.notIdem = map[string]time.Time{}
	}
	m.notIdem[a] = time.Now()
	name := "--join " + a
	if !slices.Contains(splitAddrs(m.c.join), a) {
		name = "member " + a // the leader or a member the node's state records
	}
	next := "; a failed join: asking the other --join addresses, if any, and this one again every second"
	if what != "join answer" {
		next = "; not counted among the peers, asking again every second"
	}
	head := strings.ToValidUTF8(string(b[:min(len(b), 120)]), "?")
	attrs := []any{"content-type", hdr.Get("Content-Type"), "answer", strings.Join(strings.Fields(head), " ")}
	for _, h := range []string{"Location", "WWW-Authenticate", "Server"} {
		if v := hdr.Get(h); v != "" {
			attrs = append(attrs, strings.ToLower(h), v)
		}
	}
	m.log.Error(fmt.Sprintf("%s answered %d with something that is not an idem %s (is it an idem node's --http-addr? a raft address or another service?)%s",
		name, status, what, next), attrs...)
}

// join asks the member at a to add this node. A member of an earlier
// release refuses a field it does not know ("empty", "retention"): the
// join is asked again without it, as that release's nodes asked.
func (m *member) join(ctx context.Context, a string, body map[string]any) ([]byte, http.Header, int, error) {
	for {
		raw, _ := json.Marshal(body)
		b, hdr, status, err := m.send(ctx, http.MethodPost, a, "/v1/cluster/join", raw)
		if status != http.StatusBadRequest {
			return b, hdr, status, err
		}
		dropped := false
		for _, f := range []string{"empty", "retention"} {
			if _, ok := body[f]; ok && bytes.Contains(b, []byte(`unknown field \"`+f+`\"`)) {
				delete(body, f)
				dropped = true
			}
		}
		if !dropped {
			return b, hdr, status, err
		}
	}
}

func (m *member) tryBootstrap(ctx context.Context) {
	peers := map[string]raftfsm.NodeInfo{m.c.nodeID: m.node.Self()}
	own := m.node.WallMs()
	walls := []int64{own}
	for _, a := range splitAddrs(m.c.join) {
		if a == m.c.httpAdvertise {
			continue
		}
		b, hdr, status, err := m.send(ctx, http.MethodGet, a, "/v1/cluster", nil)
		if _, isAnswer := readJoinAnswer(status, hdr, b); err == nil && status != http.StatusOK && !isAnswer {
			// A refusal no idem node gives (a web server's 401, a
			// redirect): "it refuses this node's token" misled.
			delete(m.unreachable, a)
			m.sayNotIdem(a, "GET /v1/cluster answer", status, hdr, b)
			continue
		}
		if err == nil && status != http.StatusOK {
			var p struct{ Detail, Code string }
			json.Unmarshal(b, &p)
			err = fmt.Errorf("answered %d %s: %s", status, p.Code, p.Detail)
			if status == http.StatusUnauthorized || status == http.StatusForbidden {
				err = fmt.Errorf("%w (it refuses this node's --node-token-file token: every node of a cluster needs the same --auth-file, listing each node's token as admin)", err)
			}
		}
		if err != nil {
			// A peer speaking HTTPS to this plain node (or the reverse), a
			// certificate from another CA, another auth file: the node
			// waited for ever, saying only "waiting for peers to
			// bootstrap" (a mixed-settings walk). Said once per answer.
			if ctx.Err() == nil && m.unreachable[a] != err.Error() {
				if m.unreachable == nil {
					m.unreachable = map[string]string{}
				}
				m.unreachable[a] = err.Error()
				level := slog.LevelWarn
				if errors.Is(err, syscall.ECONNREFUSED) {
					level = slog.LevelInfo // a peer not started yet: the usual start of a cluster
				}
				m.log.Log(ctx, level, "bootstrap: this --join address did not answer"+notHTTPHint(err)+"; not counted among the peers, asking again every second", "addr", a, "error", err)
			}
			continue
		}
		// Answered: the same failure again later is said again (the
		// peer stopped, came back, and stopped once more).
		delete(m.unreachable, a)
		var st raftfsm.Status
		if json.Unmarshal(b, &st) != nil || st.Self.ID == "" {
			// Every idem node names itself: a web server's page, or its
			// 200 {}, left the node "waiting for peers to bootstrap",
			// never saying which peer was not one.
			m.sayNotIdem(a, "GET /v1/cluster answer", status, hdr, b)
			continue
		}
		if len(st.Nodes) > 0 {
			// A cluster already exists there: join it instead.
			m.tryJoin(ctx, []string{a})
			return
		}
		if st.Scope != "" && st.Scope != m.c.scope {
			// The first claim would fix the scope mode of whichever node
			// led it, and the others would take it on their next start:
			// not what one of the two flags asked for. Said once per
			// answer, not every second.
			msg := fmt.Sprintf("not bootstrapping: node %s (%s) runs with --scope %s and this node with --scope %s; a cluster has one scope mode: restart the odd one on its data dir with the same --scope, given explicitly (a data dir that formed no cluster takes it; left out, the flag keeps the mode the data dir was created with)", st.Self.ID, a, st.Scope, m.c.scope)
			if msg != m.refused {
				m.refused = msg
				m.log.Error(msg)
			}
			return
		}
		if st.BootstrapExpect > 1 && st.BootstrapExpect != m.c.bootstrapExpect {
			// Each would bootstrap once it saw its own count of nodes: a
			// node expecting two formed a cluster of two with the first
			// peer it reached while the others waited for three, and two
			// nodes expecting two could form two clusters sharing a third
			// node. A node started with --join alone (0) is only counted.
			msg := fmt.Sprintf("not bootstrapping: node %s (%s) runs with --bootstrap-expect %d and this node with --bootstrap-expect %d; the nodes forming a cluster must all expect the same count: restart the odd one with the same --bootstrap-expect (its data dir is still empty)", st.Self.ID, a, st.BootstrapExpect, m.c.bootstrapExpect)
			if msg != m.refused {
				m.refused = msg
				m.log.Error(msg)
			}
			return
		}
		if st.RetentionFlag != "" && st.RetentionFlag != m.c.retention.String() {
			// The cluster's first claim pins the --retention of the node
			// that leads it: one node started with 1h beside two with 24h
			// gave the cluster 1h when it won the first election, and the
			// others then advised starting them with 1h too.
			msg := fmt.Sprintf("not bootstrapping: node %s (%s) runs with --retention %s and this node with --retention %s; the cluster's first claim pins the retention of the node that leads it, so the cluster's would depend on an election: restart the odd one with the same --retention (its data dir is still empty)", st.Self.ID, a, st.RetentionFlag, m.c.retention)
			if msg != m.refused {
				m.refused = msg
				m.log.Error(msg)
			}
			return
		}
		if own := raftfsm.AuthMode(m.c.authFile != ""); st.Auth != "" && st.Auth != own {
			// Formed, every node is a voter, never kept back as a joining
			// node without --auth-file is: that node answered any caller,
			// every tenant's records included. Only a node with the file
			// sees this (the other's questions are refused: 401).
			msg := fmt.Sprintf("not bootstrapping: node %s (%s) runs without --auth-file and this node with it; that node would answer any caller, every tenant's records included: restart it with the same --auth-file (its data dir is still empty)", st.Self.ID, a)
			if own == raftfsm.AuthNone {
				msg = fmt.Sprintf("not bootstrapping: node %s (%s) checks tokens (--auth-file) and this node does not; this node would answer any caller, every tenant's records included: restart it with the same --auth-file (its data dir is still empty)", st.Self.ID, a)
			}
			if msg != m.refused {
				m.refused = msg
				m.log.Error(msg)
			}
			return
		}
		if p, ok := peers[st.Self.ID]; ok && p.HTTPAddr != st.Self.HTTPAddr {
			// Two nodes given one --node-id (a command copied with one
			// part changed) counted as one: every node waited for ever,
			// saying only "waiting for peers to bootstrap".
			msg := fmt.Sprintf("not bootstrapping: two nodes run with --node-id %s, at %s and at %s; every node of a cluster needs its own id: restart one of them with another --node-id (its data dir is still empty)", st.Self.ID, p.HTTPAddr, st.Self.HTTPAddr)
			if msg != m.refused {
				m.refused = msg
				m.log.Error(msg)
			}
			return
		}
		peers[st.Self.ID] = st.Self
		walls = append(walls, st.WallMs)
	}
	// A round without a refusal: a refusal that comes back later (the odd
	// peer stopped, then restarted with the same flag) is said again,
	// not kept silent by the last one's message.
	m.refused = ""
	if len(peers) < m.c.bootstrapExpect {
		m.log.Info("waiting for peers to bootstrap", "known", len(peers), "expect", m.c.bootstrapExpect)
		return
	}
	list := make([]raftfsm.NodeInfo, 0, len(peers))
	for _, p := range peers {
		list = append(list, p)
	}
	sort.Slice(list, func(i, j int) bool { return list[i].ID < list[j].ID })
	// The first command of the cluster takes its time from its first
	// leader's wall clock: start every node from the median of the wall
	// clocks, so one node running minutes off cannot start cluster time off.
	slices.Sort(walls)
	median := walls[len(walls)/2]
	m.node.CorrectClock(time.Duration(median-own) * time.Millisecond)
	if err := m.node.Bootstrap(list); err != nil {
		if errors.Is(err, raftfsm.ErrCantBootstrap) {
			// Usually a peer that bootstrapped first reached this node
			// a moment ago and its configuration is on the way; said
			// once, not every second (it used to log "bootstrapped the
			// cluster", every second, for a node that never would be).
			if !m.cantBootstrap {
				m.cantBootstrap = true
				m.log.Warn("not bootstrapping: this node has raft state already (a term from a peer) but no cluster configuration yet; a peer that bootstrapped first will send it. If this lasts, see idem cluster status on the peers", "peers", fmt.Sprint(list))
			}
			return
		}
		m.log.Error("bootstrap failed", "error", err)
		return
	}
	m.log.Info("bootstrapped the cluster", "nodes", fmt.Sprint(list))
}

// driftCheckFor is how long after its start a node looks for its peers'
// settings: a node that joins learns its peers' records once it has
// caught up, a restarted one has them at once.
const driftCheckFor = 5 * time.Minute

// warnSettingsDrift logs one warning when this node's --lease or limits
// flags differ from another member's: a claim gets the default lease and
// limits of the leader deciding it, so what clients get would change with
// leadership, and a node restarted with other flags said nothing (only
// idem cluster status compared them). The members are the node records
// of the replicated state, asked for their GET /v1/config as status does;
// it gives up after driftCheckFor without a member that answers.
func (m *member) warnSettingsDrift(ctx context.Context) {
	own := map[string]string{"lease": m.c.lease.String()}
	for k, v := range m.c.limits.Published() {
		own[k] = publishedValue(k, float64(v))
	}
	// A batch over a node's --max-batch-ops is refused whole by it (413),
	// and a forwarded one by both the node asked and the leader.
	own["max_batch_ops"] = publishedValue("max_batch_ops", float64(m.c.maxBatchOps))
	if m.c.authDigest != "" {
		own["auth_file"] = m.c.authDigest
	}
	own["commit_timeout_ms"] = publishedValue("commit_timeout_ms", float64(m.c.commitTimeout.Milliseconds()))
	for end := time.Now().Add(driftCheckFor); time.Now().Before(end); {
		if m.compareSettings(ctx, own) || ctx.Err() != nil {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(2 * time.Second):
		}
	}
}

// compareSettings asks the other members for their settings and logs the
// flags among own whose values differ. It reports whether it is done:
// false while a member's record has no HTTP address yet (a node still
// catching up) or no other member answered; true as well when the members
// refused to answer it (--auth-file and no --node-token-file).
func (m *member) compareSettings(ctx context.Context, own map[string]string) bool {
	st, err := m.node.Status()
	if err != nil || len(st.Nodes) < 2 {
		return false
	}
	values := map[string][]string{} // flag -> "id value" of each member, in id order
	differ := map[string]bool{}
	answered, refused := 0, 0
	var refusedBy []string
	for _, p := range st.Nodes {
		if p.ID == m.c.nodeID {
			for k, v := range own {
				values[k] = append(values[k], p.ID+" "+v+" (this node)")
			}
			continue
		}
		if p.HTTPAddr == "" {
			return false
		}
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		b, status, err := m.do(cctx, http.MethodGet, p.HTTPAddr, "/v1/config", nil)
		cancel()
		var cfg struct {
			LeaseDefaultMs  *float64            `json:"lease_default_ms"`
			Limits          map[string]*float64 `json:"limits"`
			AuthFileDigest  string              `json:"auth_file_digest"`
			CommitTimeoutMs *float64            `json:"commit_timeout_ms"`
		}
		if status == http.StatusUnauthorized || status == http.StatusForbidden {
			refused++ // --auth-file without a --node-token-file to ask with: asking again changes nothing
			refusedBy = append(refusedBy, fmt.Sprintf("%s (%s: %d)", p.ID, p.HTTPAddr, status))
			continue
		}
		if err != nil || status != http.StatusOK || json.Unmarshal(b, &cfg) != nil || cfg.LeaseDefaultMs == nil {
			continue // down, or not answering yet
		}
		answered++
		theirs := map[string]string{"lease": publishedValue("lease_ms", *cfg.LeaseDefaultMs)}
		for k, v := range cfg.Limits {
			if v != nil {
				theirs[k] = publishedValue(k, *v)
			}
		}
		if cfg.AuthFileDigest != "" { // an earlier release publishes none
			theirs["auth_file"] = cfg.AuthFileDigest
		}
		if cfg.CommitTimeoutMs != nil { // nor this
			theirs["commit_timeout_ms"] = publishedValue("commit_timeout_ms", *cfg.CommitTimeoutMs)
		}
		for k, v := range own {
			if t, ok := theirs[k]; ok { // an earlier release may publish fewer limits
				values[k] = append(values[k], p.ID+" "+t)
				if t != v {
					differ[k] = true
				}
			}
		}
	}
	if refused > 0 && m.token != "" {
		// A member restarted with another --node-token-file, or whose
		// token the others' auth files dropped, logged nothing itself: only
		// the leader's health checks and the CLI showed it (a membership
		// walk). Its own calls to the others are refused the same way.
		m.log.Error("other members refuse this node's --node-token-file token: their --auth-file has no admin entry for it. Until it does, this node cannot measure its peers' health while it leads (no promotions, membership changes refused), its /readyz stays 503 as a follower, and it cannot join; give every node a token their auth files list (idem token new --role admin prints the entry)",
			"refused-by", strings.Join(refusedBy, ", "))
	}
	if answered == 0 {
		return refused > 0
	}
	if len(differ) > 0 {
		var flags []string
		var attrs []any
		for _, k := range slices.Sorted(maps.Keys(differ)) {
			name := "--" + strings.ReplaceAll(strings.TrimSuffix(k, "_ms"), "_", "-")
			flags = append(flags, name)
			attrs = append(attrs, name[2:], strings.Join(values[k], ", "))
		}
		verb := " differ"
		if len(flags) == 1 {
			verb = " differs"
		}
		msg := strings.Join(flags, ", ") + verb + " between this node and other members:"
		other := len(differ) // the default lease and limits among them
		for _, k := range []string{"auth_file", "commit_timeout_ms"} {
			if differ[k] {
				other--
			}
		}
		if other > 0 {
			msg += " a claim gets the default lease and limits of the leader that decides it, so what clients get changes with leadership;"
		}
		if differ["commit_timeout_ms"] {
			msg += " a follower cuts a write it forwards by its own --commit-timeout (503, outcome unknown) while a leader with a longer one still waits for it;"
		}
		if differ["auth_file"] {
			msg += " " + strings.Trim(authFileDrift, "()") + " (auth-file shows a digest of each member's file);"
		}
		msg += " give every node the same flags (idem cluster status compares them too)"
		m.log.Warn(msg, attrs...)
	} else {
		m.log.Info("--lease and the limits agree with the other members that answered", "members-answered", answered)
	}
	return true
}

// publishedValue writes a value of GET /v1/config as its flag takes it:
// the *_ms ones as durations.
func publishedValue(name string, v float64) string {
	if strings.HasSuffix(name, "_ms") {
		return (time.Duration(v) * time.Millisecond).String()
	}
	return strconv.FormatFloat(v, 'f', -1, 64)
}
