package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/idem-store/idem/internal/mono"
	"github.com/idem-store/idem/raftfsm"
	"github.com/idem-store/idem/wire"
)

// forwardedHeader marks a request a follower passed to the leader, so a
// node that lost leadership meanwhile answers instead of forwarding again.
// Its value is the id of the node that forwarded it; of a request that
// came to that node marked by no member (fromPeer), the ids of the mark it
// came with, then its own, comma-separated (node ids have no comma).
const forwardedHeader = "X-Idem-Forwarded-By"

// fromPeer reports whether r was forwarded by a node of this cluster: its
// forwardedHeader names a member of the configuration this node knows, or
// this node itself (the request came back to it). Such a request is never
// forwarded again: the node that sent it tries the leader itself.
//
// Any other mark is not a node's (a client's, or copied by something in
// front of the node): honoured, a follower answered such a request "no
// leader is available" at once, a spurious outage, where it forwards an
// unmarked one. It is forwarded like any client request, marked with this
// node's id after the ids it came with, so a request that goes round
// comes back to a node that finds itself in the mark and stops: no
// forwarding loop. (Naming a member on purpose only refuses the sender's
// own request.)
func (s *Server) fromPeer(r *http.Request) bool {
	v := r.Header.Get(forwardedHeader)
	if v == "" {
		return false
	}
	m, ok := s.store.(interface{ MemberIDs() []string })
	if !ok {
		return true // a store that cannot tell: every mark a node's, as before
	}
	// The configuration is read once, and the mark walked without a copy:
	// a client's mark may fill the header limit (1 MiB) with ids, and one
	// read per id, over a list of them, cost a node ~0.2 s of CPU and
	// 8 MB of memory per request.
	ids := append(m.MemberIDs(), s.store.Self().ID)
	for rest := v; rest != ""; {
		var id string
		id, rest, _ = strings.Cut(rest, ",")
		if id = strings.TrimSpace(id); id != "" && slices.Contains(ids, id) {
			return true
		}
	}
	return false
}

// forwardMark is the forwardedHeader this node sends with r, forwarded.
func (s *Server) forwardMark(r *http.Request) string {
	self := s.store.Self().ID
	if v := r.Header.Get(forwardedHeader); v != "" {
		// Bounded by the request's header limit like any header.
		return v + "," + self
	}
	return self
}

type forwarder struct {
	s         *Server
	client    *http.Client
	snapshots *http.Client // snapshotClient's settings, with this node's TLS
	commits   sharedProbe  // the leader's commit index, for /readyz
	// refusedAt spaces refusedByLeader's lines, per status: at most once a
	// minute each (on the monotonic clock: a wall clock stepped back would
	// silence them until it caught up).
	refusedAt [3]mono.Spacer
	// failed holds back "forward to leader failed" lines past
	// forwardFailLogsPerSecond.
	failed logBudget
}

// forwardFailLogsPerSecond is how many failed forwards a node logs in a
// second (a leader that died takes every forward in flight with it); the
// next line written counts the others in failed_unlogged.
const forwardFailLogsPerSecond = 5

func (f *forwarder) logForwardFailed(addr string, r *http.Request, err error) {
	if args, ok := f.failed.line(forwardFailLogsPerSecond, time.Second, "failed_unlogged", "leader", addr, "method", r.Method, "path", r.URL.Path, "error", withoutURL(err)); ok {
		f.s.log.Warn("forward to leader failed; outcome unknown", args...)
	}
}

// refusedByLeader logs that the leader refused, with status, a request
// this node had checked and passed on: their settings differ, and the
// client's answer (passed through as the leader gave it) names neither
// node. A token this node takes and the leader does not (their
// --auth-file differ) was a 401 "not one of the node's tokens" from a
// node whose file lists it (a mixed-settings walk).
func (f *forwarder) refusedByLeader(status int, addr string) {
	var i int
	var why string
	switch status {
	case http.StatusUnauthorized:
		i, why = 0, "a token this node takes: their --auth-file differ (a token only this node's file lists); give every node the same file and SIGHUP them"
	case http.StatusForbidden:
		i, why = 1, "a token this node lets act for the request's principal: their --auth-file differ (the token's role or principals); give every node the same file and SIGHUP them"
	case http.StatusRequestEntityTooLarge:
		i, why = 2, "a body this node takes: most likely their --max-request-bytes, --max-response-bytes or --max-batch-ops differ (idem cluster status compares them); give every node the same flags"
	default:
		return
	}
	if !f.refusedAt[i].Allow(time.Minute) {
		return
	}
	f.s.log.Warn(fmt.Sprintf("the leader answered %d to a request this node passed on, %s; logged at most once a minute", status, why), "leader", addr)
}

func newForwarder(s *Server) *forwarder {
	tr := &http.Transport{
		Proxy:               nil,
		DialContext:         (&net.Dialer{Timeout: 2 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:        512,
		MaxIdleConnsPerHost: 256,
		IdleConnTimeout:     90 * time.Second,
	}
	snap := snapshotClient.Transport.(*http.Transport).Clone()
	return &forwarder{s: s,
		client:    &http.Client{Transport: withPeerTLS(tr, s.cfg.PeerTLS, 2*time.Second)},
		snapshots: &http.Client{Transport: withPeerTLS(snap, s.cfg.PeerTLS, 2*time.Second)},
	}
}

// withPeerTLS makes tr dial other nodes over TLS with this node's
// certificate when t is set (URLs from peerURL then say https).
func withPeerTLS(tr *http.Transport, t *raftfsm.TLS, dialTimeout time.Duration) *http.Transport {
	if t != nil {
		tr.DialTLSContext = t.DialTLSContext(&net.Dialer{Timeout: dialTimeout, KeepAlive: 30 * time.Second})
	}
	return tr
}

// peerURL is the URL of uri on the node at addr: https when nodes speak TLS.
// The host is escaped as a URL's: a link-local IPv6 address's zone
// ([fe80::1%eth0]:7070) is written %25eth0, where "http://"+addr did not
// parse ("invalid URL escape") and no request reached that node.
func peerURL(t *raftfsm.TLS, addr, uri string) string {
	scheme := "http"
	if t != nil {
		scheme = "https"
	}
	return (&url.URL{Scheme: scheme, Host: addr}).String() + uri
}

// commitExtra is what --commit-timeout adds to its default (0 when not
// raised): a forward waits that much longer for the leader's answer than
// LeaderWait. Without it a write sent through a follower was cut at the
// follower's 3 s (503 outcome unknown, and a warning in its log) however
// long the flag let the leader wait for its disk and its quorum.
func (s *Server) commitExtra() time.Duration {
	return max(0, s.commitTimeout()-raftfsm.DefaultConfig().ApplyTimeout)
}

// commitTimeout is the node's --commit-timeout (CommitTimeout, else its
// default), as GET /v1/config publishes it.
func (s *Server) commitTimeout() time.Duration {
	if s.cfg.CommitTimeout == 0 {
		return raftfsm.DefaultConfig().ApplyTimeout
	}
	return s.cfg.CommitTimeout
}

// notAppliedHeader marks the answer to a forwarded request that the node
// provably did not apply (it was not the leader, or it refused before
// proposing), so the follower that forwarded it may try the new leader.
const notAppliedHeader = "X-Idem-Not-Applied"

// minForwardWait is the least time a forwarded request is given, even
// when the wait for a leader used up most of LeaderWait.
const minForwardWait = time.Second

// servesNoRecord says why this node must neither take a write nor answer a
// read now, or "": its records are older than a recovered cluster's
// (Superseded, for good), or a leader of another cluster sends it entries
// (ForeignLeader, while they come): that cluster counts this node's raft
// address as one of its members', so its clients reach this node, and a
// key they claimed there would be claimed again here. A node started at a
// running member's addresses on an empty or mistyped data dir (a mount
// that failed) was unready but answered claims: 201 for a key the cluster
// held in progress (an operator walk).
func (s *Server) servesNoRecord() string {
	if why := s.store.Superseded(); why != "" {
		return why
	}
	return s.store.ForeignLeader()
}

// onLeader runs do, which must be decided by the leader. A follower
// forwards the original request to the leader and passes its answer
// through unchanged. During an election, or when the leader it forwarded
// to provably did not take the request (refused the connection, or
// answered that it is no longer the leader), it waits for a leader and
// tries again, up to LeaderWait in all; then it answers 503. It answers
// "outcome unknown" only when the request may have reached a leader. A
// non-nil return means the answer is written.
func (s *Server) onLeader(w http.ResponseWriter, r *http.Request, body []byte, do func() error) error {
	if why := s.servesNoRecord(); why != "" {
		writeProblem(w, newProblem(http.StatusServiceUnavailable, codeUnavailable, why))
		return errAnswered
	}
	deadline := time.Now().Add(s.cfg.LeaderWait)
	forwarded := s.fromPeer(r)
	for {
		err := do()
		if err == nil {
			if a := s.store.Self().HTTPAddr; a != "" {
				w.Header().Set(wire.LeaderHeader, a)
			}
			return nil
		}
		leaderless := errors.Is(err, raftfsm.ErrNotLeader) || errors.Is(err, raftfsm.ErrNoLeader)
		if errors.Is(err, raftfsm.ErrNotLeader) && !forwarded {
			if l, ok := s.store.Leader(); ok && l.HTTPAddr != "" && l.ID != s.store.Self().ID {
				if !s.fwd.forward(w, r, body, l.HTTPAddr, deadline) {
					return errAnswered
				}
				// Not taken by that leader: wait for the next one.
			}
		}
		if leaderless && !forwarded {
			p := s.receivingState()
			if p == nil {
				// A removed node waits for no leader: none will ever send
				// to it (added back, it is a member again and follows one).
				// It answered its callers only after LeaderWait (3 s), a
				// load balancer still sending to it kept them waiting.
				p = s.notMemberIf(true)
			}
			if p != nil {
				writeProblem(w, p)
				return errAnswered
			}
		}
		// A forwarded request that found no leader here goes straight back:
		// the follower that sent it knows better whom to try next.
		if leaderless && !forwarded && time.Now().Before(deadline) {
			select {
			case <-r.Context().Done():
				writeProblem(w, storeProblem(raftfsm.ErrNoLeader))
				return errAnswered
			case <-time.After(50 * time.Millisecond):
			}
			continue
		}
		if leaderless {
			err = raftfsm.ErrNoLeader
			if stop := s.store.LogStopped(); stop != nil && !forwarded && r.Method != http.MethodGet {
				// No leader, and this node cannot be one: its disk, not an
				// election, is what an operator must see to. (A read stays
				// 503: it needs a leader, not space.)
				err = stop
			}
		}
		if forwarded && (leaderless || errors.Is(err, raftfsm.ErrNotProposed)) {
			w.Header().Set(notAppliedHeader, "1")
		}
		if p := s.notMemberIf(leaderless); p != nil {
			writeProblem(w, p)
			return errAnswered
		}
		writeProblem(w, s.storeProblem(err))
		return errAnswered
	}
}

// forward passes the request to the leader at addr and its answer back.
// It returns true, having written nothing, when the leader provably did
// not apply the request and there is time left to try another: the caller
// waits for a leader and tries again.
func (f *forwarder) forward(w http.ResponseWriter, r *http.Request, body []byte, addr string, deadline time.Time) bool {
	ctx, cancel := context.WithDeadline(r.Context(), later(deadline.Add(f.s.commitExtra()), time.Now().Add(minForwardWait)))
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, r.Method, peerURL(f.s.cfg.PeerTLS, addr, r.URL.RequestURI()), bytes.NewReader(body))
	if err != nil {
		writeProblem(w, storeProblem(raftfsm.ErrNoLeader))
		return false
	}
	for _, h := range []string{"Authorization", "Content-Type", "Accept"} {
		if v := r.Header.Get(h); v != "" {
			req.Header.Set(h, v)
		}
	}
	req.Header.Set(forwardedHeader, f.s.forwardMark(r))
	resp, err := f.client.Do(req)
	retry := time.Now().Before(deadline) && r.Context().Err() == nil
	if err != nil {
		if neverDelivered(err) || r.Method == http.MethodGet {
			if retry {
				return true
			}
			writeProblem(w, storeProblem(raftfsm.ErrNoLeader))
			return false
		}
		// The leader may or may not have decided: same answer as a lost leadership.
		if r.Context().Err() == nil {
			f.logForwardFailed(addr, r, err)
		}
		// A client that hung up while its request was on its way is not
		// logged: it hears nothing either way, nothing is wrong with the
		// leader, and a client decides how often it does so (a WARN line
		// per request, from a loop that sends a claim and resets the
		// connection: a protocol walk).
		writeProblem(w, forwardLost(addr, err))
		return false
	}
	defer resp.Body.Close()
	if resp.Header.Get(notAppliedHeader) != "" && retry {
		io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
		return true
	}
	for _, h := range []string{"Content-Type", "Retry-After", "Allow", "WWW-Authenticate"} {
		if v := resp.Header.Get(h); v != "" {
			w.Header().Set(h, v)
		}
	}
	// The leader names itself on what it decided (a 503 decided nothing,
	// and names no leader a client should follow).
	if v := resp.Header.Get(wire.LeaderHeader); v != "" {
		w.Header().Set(wire.LeaderHeader, v)
	}
	f.refusedByLeader(resp.StatusCode, addr)
	w.WriteHeader(resp.StatusCode)
	io.Copy(w, resp.Body)
	return false
}

// withoutURL is err without the URL net/http puts in its errors: the
// URL of a forwarded DELETE /v1/records carries the principal, endpoint
// and key in its query, which the node's log must not hold (operators
// paste logs into tickets; the log holds no other key).
func withoutURL(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

// neverDelivered reports whether a failed forward provably never reached
// the leader's handler: the connection was refused or could not be made,
// or the leader closed an idle connection before reading the request.
// forwardLost answers a forwarded write that reached the leader at addr
// and got no answer: its outcome is unknown, as after a lost leadership,
// but the detail says what happened. It said "leadership changed while the
// request was in flight" for a leader that only took longer than the
// forward waits (its two followers' disks full, a disk-full walk), though
// no leadership had changed.
func forwardLost(addr string, err error) *problem {
	what := "the connection to the leader at " + addr + " broke before it answered"
	if errors.Is(err, context.DeadlineExceeded) {
		what = "the leader at " + addr + " did not answer in time (a stalled commit: see idem cluster status)"
	}
	p := newProblem(http.StatusServiceUnavailable, codeUnavailable, "this node forwarded the request and "+what+"; its outcome is unknown, retry it (a claim with the same claim_id returns the same claim)")
	p.retryAfter = 1 // as storeProblem's unknown outcome
	return p
}

func neverDelivered(err error) bool {
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" {
		return true
	}
	return strings.Contains(err.Error(), "server closed idle connection")
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// sharedCommit is leaderCommit shared between callers: /readyz needs no
// token and is exempt from --max-inflight, and it asked the leader once
// per call, so clients polling a follower could fill the leader's limit.
// Each caller still gets a commit index the leader gave after the call
// began (sharedProbe), so readiness means what it meant.
func (f *forwarder) sharedCommit(ctx context.Context, addr string) (uint64, error) {
	return f.commits.do(ctx, addr, func() (uint64, error) { return f.leaderCommit(context.Background(), addr) })
}

// sharedProbe runs at most one probe at a time per key. A caller waits for
// the next run that starts after it came: the callers that come while a
// run is on its way share the run after it. So the probed side sees one
// request at a time, whatever the number of callers, and no caller gets
// an answer older than its call.
type sharedProbe struct {
	mu      sync.Mutex
	running map[string]bool
	next    map[string]*probeCall // the run that the callers waiting now share
}

type probeCall struct {
	probe   func() (uint64, error)
	done    chan struct{}
	v       uint64
	err     error
	waiters int // callers that joined before it started
}

// do returns the answer of a run of probe that starts after the call; a
// caller whose ctx ends stops waiting (the run goes on for the others).
func (p *sharedProbe) do(ctx context.Context, key string, probe func() (uint64, error)) (uint64, error) {
	p.mu.Lock()
	if p.next == nil {
		p.next, p.running = map[string]*probeCall{}, map[string]bool{}
	}
	c := p.next[key]
	if c == nil {
		c = &probeCall{probe: probe, done: make(chan struct{})}
		p.next[key] = c
	}
	c.waiters++
	if !p.running[key] {
		p.startLocked(key)
	}
	p.mu.Unlock()
	select {
	case <-c.done:
		return c.v, c.err
	case <-ctx.Done():
		return 0, ctx.Err()
	}
}

// startLocked starts the waiting run of key, and when it ends the run its
// latecomers wait for, if any.
func (p *sharedProbe) startLocked(key string) {
	c := p.next[key]
	delete(p.next, key)
	p.running[key] = true
	go func() {
		c.v, c.err = c.probe()
		close(c.done)
		p.mu.Lock()
		defer p.mu.Unlock()
		if p.next[key] != nil {
			p.startLocked(key)
			return
		}
		delete(p.running, key)
	}()
}

// leaderCommit asks the leader for its commit index.
func (f *forwarder) leaderCommit(ctx context.Context, addr string) (uint64, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, peerURL(f.s.cfg.PeerTLS, addr, "/v1/cluster"), nil)
	if err != nil {
		return 0, err
	}
	if t := f.s.cfg.NodeToken; t != "" {
		req.Header.Set("Authorization", "Bearer "+t)
	}
	req.Header.Set(forwardedHeader, f.s.store.Self().ID)
	resp, err := f.client.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden {
		if f.s.cfg.NodeToken == "" {
			return 0, fmt.Errorf("leader answered %s: give this node --node-token-file, a token whose SHA-256 is an admin entry of the leader's --auth-file", resp.Status)
		}
		return 0, fmt.Errorf("the leader at %s answered %s to this node's token (--node-token-file): the leader's --auth-file lacks its admin entry (reloaded without it?); add the entry there and kill -HUP the leader", addr, resp.Status)
	}
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("leader answered %s", resp.Status)
	}
	var st struct {
		CommitIndex uint64 `json:"commit_index"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&st); err != nil {
		return 0, err
	}
	return st.CommitIndex, nil
}

// notMemberIf is, for a request that found no leader, the answer of a node that is not in the cluster's
// configuration, or nil: it has state but the configuration leaves it out
// (an operator removed it: raftfsm's Outside), or it joined and, while it
// replayed the cluster's log toward its admission, the leader stopped
// listing it (raftfsm's RemovedWhileReplaying). Such a node knows no
// leader, and "no leader is available" sent callers to wait for an
// election that would never include it. A node that joined and replays
// the cluster's log up to its admission is not outside: it answered a
// caller that it had been removed, with a command to add it back. One
// removed while it replayed answered "no leader is available; retry
// shortly" while its log said it had been removed.
func (s *Server) notMemberIf(leaderless bool) *problem {
	if !leaderless {
		return nil
	}
	if m, ok := s.store.(interface{ RemovedWhileReplaying() (string, bool) }); ok {
		if member, removed := m.RemovedWhileReplaying(); removed {
			p := newProblem(http.StatusServiceUnavailable, codeUnavailable,
				raftfsm.RemovedBeforeCaughtUp+"; send requests to a member, or add it back with "+s.addBackCommand(member))
			p.retryAfter = 5
			return p
		}
	}
	if m, ok := s.store.(interface{ Outside() bool }); ok && m.Outside() {
		return s.notMemberProblem()
	}
	return nil
}

// receivingState is the answer of a node that is being sent the
// cluster's state (a leader installs its snapshot on it: raftfsm's
// StateOnItsWay) and knows no HTTP address to forward to, or nil: such a
// node holds no records of the members until the install ends, and learns
// the leader's address from the cluster at its join (raftfsm's
// LearnAddrs). One that did not learn it (added by hand, or the cluster
// did not answer) waited LeaderWait for a leader it had already, then
// answered 503 "no leader", on every request for as long as the install
// lasted.
func (s *Server) receivingState() *problem {
	m, ok := s.store.(interface{ StateOnItsWay() bool })
	if !ok || !m.StateOnItsWay() {
		return nil
	}
	if l, ok := s.store.Leader(); ok && l.HTTPAddr != "" {
		return nil
	}
	p := newProblem(http.StatusServiceUnavailable, codeUnavailable,
		"this node is receiving the cluster's state from the leader and cannot take writes or reads until it has it: retry shortly, or send them to a member")
	p.retryAfter = 1
	return p
}

func (s *Server) notMemberProblem() *problem {
	member := ""
	if m, ok := s.store.(interface{ PeerHTTPAddrs() []string }); ok {
		if addrs := m.PeerHTTPAddrs(); len(addrs) > 0 {
			member = addrs[0]
		}
	}
	p := newProblem(http.StatusServiceUnavailable, codeUnavailable,
		"this node is not in the cluster's configuration (it was removed, or has not been admitted yet), so it cannot take writes or joins: send them to a member; an operator adds it back with "+
			s.addBackCommand(member))
	p.retryAfter = 5
	return p
}

// addBackCommand is the command that adds this node back, as a caller is
// answered it: with TLS on, the client flags a join needs (the cluster's
// CA, and a client certificate it signed), and with tokens checked, an
// admin token's file, as placeholders to fill in. Without them the
// command failed as pasted on such a cluster (a TLS error, then 401 and
// 403). Placeholders, not the node's own files: the answer goes to any
// caller, and the node logs the command with its files (cmd/idem).
func (s *Server) addBackCommand(member string) string {
	cmd := raftfsm.AddBackCommand(s.store.Self(), member)
	if s.cfg.PeerTLS != nil {
		cmd += " --ca-file CA_FILE --cert-file CERT_FILE --key-file KEY_FILE"
	}
	if s.cfg.Auth != nil {
		cmd += " --token-file ADMIN_TOKEN_FILE"
	}
	return cmd
}
