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
	"regexp"
	"sort"
	"strings"
	"time"

	"github.com/idem-store/idem/internal/hostport"
	"github.com/idem-store/idem/raftfsm"
)

// Problem codes of membership changes.
const (
	codeWouldLoseQuorum  = "would_lose_quorum"
	codeScopeMismatch    = "scope_mismatch"
	codeRetentionDiffers = "retention_mismatch"
	codeAddressInUse     = "address_in_use"
	codeIDInUse          = "id_in_use"
	codeNotAnswering     = "not_answering"
	codeForeignCluster   = "foreign_cluster"
	codeNodeTokenRefused = "node_token_refused"
	codeAuthMismatch     = "auth_mismatch"
)

// clusterJoinRequest is the body of POST /v1/cluster/join. Scope is the
// joining node's --scope, checked against the cluster's; Retention its
// --retention, checked against this node's until the cluster's is pinned;
// Force skips the quorum check.
type clusterJoinRequest struct {
	ID        string `json:"id"`
	RaftAddr  string `json:"raft_addr"`
	HTTPAddr  string `json:"http_addr"`
	Scope     string `json:"scope"`
	Retention string `json:"retention"`
	Force     bool   `json:"force"`
	// Empty is sent by a node joining with no state in its data dir: it
	// may not take the place of a voter (raftfsm.Node.Join).
	Empty bool `json:"empty"`
}

type clusterRemoveRequest struct {
	ID    string `json:"id"`
	Force bool   `json:"force"`
}

type joinAnswer struct {
	Outcome  string `json:"outcome"`
	Suffrage string `json:"suffrage"`
	Detail   string `json:"detail"`
	// AdmittedIndex is a raft log index at or past the configuration that
	// lists the node: a node that joined empty keeps its joining file until
	// its own log reaches it (raftfsm's joining.go).
	AdmittedIndex uint64 `json:"admitted_index,omitempty"`
	// RanBefore: the node is a voter that ran at these addresses before
	// (raftfsm.JoinResult): one that started empty warns that its data
	// dir is not the one it ran on.
	RanBefore bool `json:"ran_before,omitempty"`
}

// joinerWithoutAuth refuses the join of a node that runs without
// --auth-file into a cluster whose nodes check tokens (this one does): such
// a node serves every route to anyone, and a consistency=stale lookup from
// its own replica, so every tenant's records would be one request away
// from any caller. It asks the node's GET /v1/config without a token, which
// only a node without --auth-file answers (with the digest "none"). A node
// that does not answer, or answers otherwise, is not refused for it. said
// is what the node's status said (Status.Auth, "" when not asked): "none"
// is refused without asking again.
func (s *Server) joinerWithoutAuth(ctx context.Context, id, addr, said string) *problem {
	if said == raftfsm.AuthNone {
		return authMismatch(id)
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, peerURL(s.cfg.PeerTLS, addr, "/v1/config"), nil)
	if err != nil {
		return nil
	}
	resp, err := s.fwd.client.Do(req)
	if err != nil {
		return nil
	}
	defer resp.Body.Close()
	var cfg struct {
		AuthFileDigest string `json:"auth_file_digest"`
	}
	if resp.StatusCode != http.StatusOK || json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&cfg) != nil || cfg.AuthFileDigest != "none" {
		return nil
	}
	return authMismatch(id)
}

// authMismatch refuses the join of node id, which runs without --auth-file.
func authMismatch(id string) *problem {
	p := newProblem(http.StatusConflict, codeAuthMismatch, fmt.Sprintf(
		"node %s runs without --auth-file but this cluster's nodes check tokens: it would serve every route, and every tenant's records (a consistency=stale lookup reads its own replica), to callers without a token; start %s with the --auth-file the other nodes use",
		truncate(id, 70), truncate(id, 70)))
	p.Title = "Authentication differs from the cluster's nodes'"
	return p
}

// handleCluster answers the cluster's membership and progress. Only the
// leader measures health: a follower asks it and shows its measurements,
// unless the request itself comes from a node (a leader measuring this
// one, a follower asking the leader), which gets this node's own view.
func (s *Server) handleCluster(w http.ResponseWriter, r *http.Request) {
	if why := s.store.Superseded(); why != "" && r.Header.Get(forwardedHeader) != "" {
		// A follower asking for the commit index its /readyz needs: it is
		// no more ready than this node (an operator still sees the status).
		writeProblem(w, newProblem(http.StatusServiceUnavailable, codeUnavailable, why))
		return
	}
	st, err := s.store.Status()
	if err != nil {
		writeProblem(w, s.storeProblem(err))
		return
	}
	st.Superseded = s.store.Superseded()
	if m, ok := s.store.(interface{ Outside() bool }); ok && st.Superseded == "" && m.Outside() {
		st.Removed = s.notMemberProblem().Detail
	}
	st.Scope = s.clusterScope()
	st.BootstrapExpect = s.cfg.BootstrapExpect
	st.RetentionFlag = s.cfg.Retention.String()
	st.Auth = raftfsm.AuthMode(s.cfg.Auth != nil)
	// Any mark will do here (not only fromPeer's): it forwards nothing, and
	// a node asks before it is a member (a leader asking a joining node).
	if r.Header.Get(forwardedHeader) == "" && st.HealthFrom == "" {
		s.mergeLeaderHealth(r.Context(), &st)
	}
	// raft names suffrages "Voter" and "Nonvoter"; the API, as its join
	// answer does, "voter" and "nonvoter".
	for i := range st.Nodes {
		st.Nodes[i].Suffrage = strings.ToLower(st.Nodes[i].Suffrage)
		st.Nodes[i].CommittedSuffrage = strings.ToLower(st.Nodes[i].CommittedSuffrage)
	}
	writeJSON(w, http.StatusOK, st)
}

func (s *Server) mergeLeaderHealth(ctx context.Context, st *raftfsm.Status) {
	note := func(why string) {
		for i := range st.Nodes {
			if st.Nodes[i].ID != st.Self.ID {
				st.Nodes[i].UnhealthyReason = "not measured: " + why
			}
		}
	}
	if st.Leader == nil || st.Leader.HTTPAddr == "" {
		note("this node knows no leader to ask")
		return
	}
	// Briefly: a status must come back quickly when the leader is stuck
	// (callers poll it with short timeouts to find the leader).
	ctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	ls, err := s.fwd.peerStatus(ctx, st.Leader.HTTPAddr)
	if err != nil {
		note(fmt.Sprintf("could not ask the leader %s: %v", st.Leader.ID, err))
		return
	}
	if ls.HealthFrom == "" {
		note(fmt.Sprintf("%s no longer leads", st.Leader.ID))
		return
	}
	st.MergeHealth(ls)
}

// peerStatus is GET /v1/cluster on another node, marked as coming from a
// node so that it answers its own view without asking anyone else.
func (f *forwarder) peerStatus(ctx context.Context, addr string) (raftfsm.Status, error) {
	return peerStatus(ctx, f.client, peerURL(f.s.cfg.PeerTLS, addr, "/v1/cluster"), addr, f.s.cfg.NodeToken, f.s.store.Self().ID)
}

func peerStatus(ctx context.Context, c *http.Client, url, addr string, token string, self string) (raftfsm.Status, error) {
	var st raftfsm.Status
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return st, err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	req.Header.Set(forwardedHeader, self)
	resp, err := c.Do(req)
	if err != nil {
		return st, err
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden {
		// Raft may be fine: only the node token is not taken there.
		if token == "" {
			return st, fmt.Errorf("%s answered %s: it wants a token, and this node has no --node-token-file to send one (%s): start this node with --node-token-file (docs/SECURITY.md, the node credential)%w", addr, resp.Status, TokenRefused, quiet{raftfsm.ErrNoNodeToken})
		}
		return st, fmt.Errorf("%s answered %s: it refused this node's token (%s): every node's --auth-file needs the entry of the token in --node-token-file%w", addr, resp.Status, TokenRefused, quiet{raftfsm.ErrTokenRefused})
	}
	if resp.StatusCode != http.StatusOK {
		return st, fmt.Errorf("%s answered %s", addr, resp.Status)
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&st); err != nil {
		return st, fmt.Errorf("%s answered a status that does not decode: %w", addr, err)
	}
	return st, nil
}

// quiet wraps an error for errors.Is without adding to the message.
type quiet struct{ err error }

func (q quiet) Error() string { return "" }
func (q quiet) Unwrap() error { return q.err }

// TokenRefused marks a member's health check refused for the node token,
// in its unhealthy reason (idem cluster status tells it from an outage).
const TokenRefused = "health check refused"

// NewPeerProbe returns how a leader measures the other members (see
// raftfsm.Node.SetPeerProbe): their GET /v1/cluster, with the node's own
// token (Config.NodeToken) when the nodes require one, and selfID as the
// asking node; over HTTPS with this node's certificate when t is set.
func NewPeerProbe(token string, selfID string, t *raftfsm.TLS) raftfsm.PeerProbe {
	c := &http.Client{Transport: withPeerTLS(&http.Transport{
		Proxy:               nil,
		DialContext:         (&net.Dialer{Timeout: time.Second}).DialContext,
		MaxIdleConnsPerHost: 2,
		IdleConnTimeout:     90 * time.Second,
	}, t, time.Second)}
	return func(ctx context.Context, addr string) (raftfsm.Status, error) {
		return peerStatus(ctx, c, peerURL(t, addr, "/v1/cluster"), addr, token, selfID)
	}
}

// clusterScope is the uniqueness scope of the cluster, which a joining
// node must share: the same scope encoded two ways would be claimed twice.
// It is the mode the first write pinned in the replicated state; before
// any write, this node's own --scope, which that write will pin.
func (s *Server) clusterScope() string {
	if mode, pinned := s.store.ScopeMode(); pinned {
		return mode
	}
	if s.cfg.PrincipalScope {
		return "principal"
	}
	return "endpoint"
}

// checksRetention reports whether a joining node's --retention must match
// this node's: until the cluster's retention is pinned (by its first claim
// or set-retention), a claim gets the --retention of the leader that
// decides it. Once it is pinned every leader gives the pinned one, and the
// flags may differ (a rolling change of --retention after set-retention).
func (s *Server) checksRetention() bool {
	_, pinned := s.store.Retention()
	return !pinned && s.cfg.Retention > 0
}

// isVoter reports whether id is a voter of this node's configuration: a
// voter asking again records its addresses (a restart on new ones), and
// refusing that would not make it a non-voter, only unreachable.
func (s *Server) isVoter(id string) bool {
	st, err := s.store.Status()
	if err != nil {
		return false
	}
	for _, m := range st.Nodes {
		if m.ID == id {
			return strings.EqualFold(m.Suffrage, "voter")
		}
	}
	return false
}

// hostPort refuses a member address that is not host:port with a port
// number: the cluster would record it, and every node would dial it in
// vain (a scheme, a missing port or a typo left an unreachable non-voter).
// An empty host (":7071", what --http-addr :7071 advertises) is this
// machine to a dialer, which a cluster on one machine relies on.
func hostPort(field, v, flag string) *problem {
	if err := CheckHostPort(v); err != nil {
		return invalid("%s %q must be host:port, the joining node's %s (e.g. 10.0.0.4:7071 or node-4:7071): %v", field, v, flag, err)
	}
	return nil
}

// CheckHostPort checks a host:port address with a port number from 1 to
// 65535 (idem serve's address flags hold the same rule, and the Go
// client's New for an address without a scheme). An empty host (":7070")
// is this machine to a dialer and every address to a listener.
func CheckHostPort(v string) error { return hostport.Check(v) }

// IPv6Hint says how to write v, an IPv6 address given without the
// brackets a host:port needs around it (::1:7070, or ::1 alone), or in
// brackets without a port ([::1]); "" for anything else.
func IPv6Hint(v string) string { return hostport.IPv6Hint(v) }

// NodeIDPattern is what a node id may be (idem serve --node-id).
var NodeIDPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)

// memberID refuses an id no member can have, before it is echoed in an
// answer or a log line (a 1 MB id came back whole in a 404).
func memberID(id string) *problem {
	if len(id) > 64 {
		return invalid("id is %d bytes: a node id is at most 64 (idem serve --node-id)", len(id))
	}
	return nil
}

func (s *Server) handleJoin(w http.ResponseWriter, r *http.Request) {
	if s.cfg.PeerTLS != nil && !raftfsm.HasVerifiedClientCert(r.TLS) {
		// With TLS on, adding a member needs the CA's certificate as well
		// as an admin token, so a stolen token alone cannot put an address
		// of its choosing into the configuration. Checked after the token
		// (admin): without one the answer is 401, as on every route.
		// Nodes joining present their own; operators one from idem tls
		// cert --client.
		s.refuseUnread(w, r, forbidden("with TLS on, joining a node needs a client certificate from the cluster's CA (the node's own, or an operator's from idem tls cert --client, given with --cert-file and --key-file)"))
		return
	}
	var req clusterJoinRequest
	body, p := s.readJSON(w, r, &req)
	if p == nil && (req.ID == "" || req.RaftAddr == "" || req.HTTPAddr == "") {
		p = invalid("id, raft_addr and http_addr are required")
	}
	if p == nil && !NodeIDPattern.MatchString(req.ID) {
		p = invalid("id %q must be 1-64 letters, digits, '.', '_' or '-', the joining node's --node-id", truncate(req.ID, 70))
	}
	if p == nil {
		p = hostPort("raft_addr", req.RaftAddr, "--raft-addr")
	}
	if p == nil {
		p = hostPort("http_addr", req.HTTPAddr, "--http-addr")
	}
	if p == nil && req.Scope != "" && req.Scope != "endpoint" && req.Scope != "principal" {
		p = invalid("scope %q must be endpoint or principal", req.Scope)
	}
	var retention time.Duration
	if p == nil && req.Retention != "" {
		var err error
		if retention, err = time.ParseDuration(req.Retention); err != nil || retention <= 0 {
			p = invalid("retention %q must be a positive Go duration, the joining node's --retention", truncate(req.Retention, 70))
		}
	}
	// asked is what asking the joining node for its status found: the
	// auth check below asks nothing more of a node that did not answer
	// (a join by hand forwarded by a follower waited 2 s per question on
	// each node, past the follower's 3 s wait for the leader: 503) or
	// that said how it checks tokens.
	var asked struct {
		unreachable bool
		auth        string
	}
	if p == nil && (req.Scope == "" || req.Retention == "" && s.checksRetention()) {
		// Joined by hand (idem cluster join sends neither): ask the node.
		// One that does not answer yet, or does not say (an earlier
		// release), goes on as before (the leader then compares them
		// before it promotes the node: raftfsm's notPromotable).
		ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
		st, err := s.fwd.peerStatus(ctx, req.HTTPAddr)
		var ne net.Error
		asked.unreachable = errors.As(err, &ne)
		if err == nil && st.Self.ID == req.ID {
			asked.auth = st.Auth
			if req.Scope == "" {
				req.Scope = st.Scope
			}
			if req.Retention == "" && st.RetentionFlag != "" {
				if d, err := time.ParseDuration(st.RetentionFlag); err == nil {
					req.Retention, retention = st.RetentionFlag, d
				}
			}
		}
		cancel()
	}
	if p == nil && req.Scope != "" && req.Scope != s.clusterScope() {
		p = newProblem(http.StatusConflict, codeScopeMismatch, fmt.Sprintf(
			"node %s runs with --scope %s but this cluster's scope is %s: the same key would be scoped two ways and claimed twice; start %s with --scope %s (on an empty data dir if it was created with %s)",
			req.ID, req.Scope, s.clusterScope(), req.ID, s.clusterScope(), req.Scope))
		p.Title = "Scope mode differs from the cluster's"
	}
	if p == nil && retention > 0 && retention != s.cfg.Retention && s.checksRetention() && !s.isVoter(req.ID) {
		p = newProblem(http.StatusConflict, codeRetentionDiffers, fmt.Sprintf(
			"node %s runs with --retention %s but this cluster's nodes run with --retention %s, and no claim has pinned the cluster's retention yet: the first claim pins the retention of the node that leads it, so the cluster's would depend on an election; start %s with --retention %s (or pin the cluster's retention first with idem cluster set-retention: after that the flag changes nothing)",
			req.ID, retention, s.cfg.Retention, req.ID, s.cfg.Retention))
		p.Title = "Retention differs from the cluster's nodes'"
	}
	if p == nil && s.cfg.Auth != nil && !asked.unreachable && asked.auth != raftfsm.AuthTokens {
		p = s.joinerWithoutAuth(r.Context(), req.ID, req.HTTPAddr, asked.auth)
	}
	if p != nil {
		writeProblem(w, p)
		return
	}
	info := raftfsm.NodeInfo{ID: req.ID, RaftAddr: req.RaftAddr, HTTPAddr: req.HTTPAddr}
	var res raftfsm.JoinResult
	var refused error
	if s.onLeader(w, r, body, func() (err error) {
		res, err = s.store.Join(info, req.Force, req.Empty)
		if membershipProblem(err) != nil {
			refused, err = err, nil
		}
		return err
	}) != nil {
		return
	}
	if refused != nil {
		writeProblem(w, membershipProblem(refused))
		return
	}
	a := joinAnswer{Outcome: "joined", Suffrage: res.Suffrage, AdmittedIndex: res.AdmittedIndex, RanBefore: res.RanBefore}
	switch {
	case res.MovedFrom != "":
		// Said in full: a typo in a join for a stopped member moves it to
		// an address where nothing answers, and only these words show it.
		a.Detail = fmt.Sprintf("%s was a %s at raft %s and now is at raft %s, HTTP %s: if nothing answers there, the cluster has lost that %s until it does (repeat the join with the right addresses)",
			req.ID, res.Suffrage, res.MovedFrom, req.RaftAddr, req.HTTPAddr, res.Suffrage)
	case res.Suffrage == "voter":
		a.Detail = fmt.Sprintf("%s is a voter already; its addresses are recorded", req.ID)
	case res.Existing:
		a.Detail = fmt.Sprintf("%s is a non-voter already; its addresses are recorded, and it will be promoted to voter when it has caught up", req.ID)
	default:
		a.Detail = fmt.Sprintf("%s joined as non-voter; it will be promoted to voter when it answers and has caught up", req.ID)
	}
	writeJSON(w, http.StatusOK, a)
}

func (s *Server) handleRemove(w http.ResponseWriter, r *http.Request) {
	var req clusterRemoveRequest
	body, p := s.readJSON(w, r, &req)
	if p == nil && req.ID == "" {
		p = invalid("id is required")
	}
	if p == nil {
		p = memberID(req.ID)
	}
	if p != nil {
		writeProblem(w, p)
		return
	}
	var refused error
	if s.onLeader(w, r, body, func() error {
		err := s.store.Remove(req.ID, req.Force)
		if membershipProblem(err) != nil {
			refused, err = err, nil
		}
		return err
	}) != nil {
		return
	}
	var pending *raftfsm.PendingError
	switch {
	case errors.As(refused, &pending):
		writeJSON(w, http.StatusAccepted, map[string]string{"outcome": "pending", "detail": pending.Error()})
	case refused != nil:
		writeProblem(w, membershipProblem(refused))
	default:
		writeJSON(w, http.StatusOK, outcomeJSON{Outcome: "removed"})
	}
}

// membershipProblem maps the refusals of a membership change to their
// answers; nil for any other error (storeProblem's).
func membershipProblem(err error) *problem {
	var qe *raftfsm.QuorumError
	var pending *raftfsm.PendingError
	var p *problem
	switch {
	case err == nil:
		return nil
	case errors.As(err, &pending):
		// Not a problem: answered 202 by the caller.
		return &problem{}
	case errors.As(err, &qe):
		p = newProblem(http.StatusConflict, codeWouldLoseQuorum, qe.Error())
		p.Title = "The change would leave the cluster without a quorum"
	case errors.Is(err, raftfsm.ErrUnknownMember):
		p = newProblem(http.StatusNotFound, codeNotFound, strings.TrimPrefix(err.Error(), "raftfsm: "))
	case errors.Is(err, raftfsm.ErrAddressInUse):
		p = newProblem(http.StatusConflict, codeAddressInUse, strings.TrimPrefix(err.Error(), "raftfsm: "))
		p.Title = "Address in use by another member"
	case errors.Is(err, raftfsm.ErrIDInUse):
		p = newProblem(http.StatusConflict, codeIDInUse, strings.TrimPrefix(err.Error(), "raftfsm: "))
		p.Title = "Node id in use by a live member"
	case errors.Is(err, raftfsm.ErrNotAnswering):
		p = newProblem(http.StatusConflict, codeNotAnswering, strings.TrimPrefix(err.Error(), "raftfsm: "))
		p.Title = "Node does not answer at its new addresses"
	case errors.Is(err, raftfsm.ErrTokenRefused):
		p = newProblem(http.StatusConflict, codeNodeTokenRefused, strings.TrimPrefix(err.Error(), "raftfsm: "))
		p.Title = "Node refuses this cluster's node token"
	case errors.Is(err, raftfsm.ErrForeignCluster):
		p = newProblem(http.StatusConflict, codeForeignCluster, strings.TrimPrefix(err.Error(), "raftfsm: "))
		p.Title = "Node holds a cluster of its own"
	}
	return p
}

// codeNoTransferTarget: a leadership transfer with no other voter to take it.
const codeNoTransferTarget = "no_transfer_target"

// transferRequest is the optional body of a leadership transfer: the voter
// to hand it to (none: the most up-to-date voter, as raft picks).
type transferRequest struct {
	ID string `json:"id"`
	// From, when set, makes the transfer conditional: only the node of
	// that id, leading, hands over; another leader answers "unchanged".
	// So a transfer run twice (a retry at 3 am, a script run again) does
	// not move the leadership on, or back to the node being restarted.
	From string `json:"from,omitempty"`
}

type transferAnswer struct {
	Outcome string `json:"outcome"`
	From    string `json:"from"`
	// Leader is the node that leads once the transfer is done; empty when
	// no node had taken over within a short wait (ask GET /v1/cluster).
	Leader string `json:"leader,omitempty"`
}

func (s *Server) handleTransfer(w http.ResponseWriter, r *http.Request) {
	body, p := s.readBody(w, r)
	var req transferRequest
	if p == nil && len(bytes.TrimSpace(body)) > 0 {
		p = decodeStrict(body, &req)
	}
	if p == nil {
		p = memberID(req.ID)
	}
	if p == nil && req.From != "" {
		p = memberID(req.From)
	}
	if p != nil {
		writeProblem(w, p)
		return
	}
	var refused *problem
	notFrom := false // from names another node than the leader
	if s.onLeader(w, r, body, func() error {
		if !s.store.IsLeader() {
			return s.store.TransferLeadershipTo(req.ID) // not the leader: forwarded
		}
		if req.From != "" && req.From != s.store.Self().ID {
			// A from that names no member (a typo, a node removed) said
			// "n2 leads, not n22: nothing was handed over", exit 0: the
			// operator read it as the run-twice case and restarted the
			// leader without a hand-over.
			refused = unknownFrom(s.store, req.From)
			notFrom = refused == nil
			return nil
		}
		if req.ID == "" { // a named target is checked by the transfer itself
			if refused = s.noTransferTarget(); refused != nil {
				return nil
			}
		}
		err := s.store.TransferLeadershipTo(req.ID)
		switch {
		case errors.Is(err, raftfsm.ErrUnknownMember):
			refused = newProblem(http.StatusNotFound, codeNotFound, strings.TrimPrefix(err.Error(), "raftfsm: "))
			return nil
		case errors.Is(err, raftfsm.ErrNotVoter), errors.Is(err, raftfsm.ErrLacksKey), errors.Is(err, raftfsm.ErrRefusesNodes):
			refused = newProblem(http.StatusConflict, codeNoTransferTarget, strings.TrimPrefix(err.Error(), "raftfsm: "))
			refused.Title = "The named node cannot take the leadership"
			if req.ID == "" {
				refused.Title = "No other voter can take the leadership"
			}
			return nil
		case err != nil && !errors.Is(err, raftfsm.ErrNotLeader) && !errors.Is(err, raftfsm.ErrNoLeader):
			// The target did not take over in time (down, behind) or a
			// transfer is already under way: nothing to retry blindly.
			s.log.Warn("leadership transfer failed", "to", req.ID, "error", err)
			refused = newProblem(http.StatusServiceUnavailable, codeUnavailable, fmt.Sprintf(
				"the leadership transfer did not complete (%s): see idem cluster status for who leads and which voters are healthy",
				strings.TrimPrefix(err.Error(), "raftfsm: ")))
			refused.retryAfter = 1
			return nil
		}
		return err
	}) != nil {
		return
	}
	if refused != nil {
		writeProblem(w, refused)
		return
	}
	a := transferAnswer{Outcome: "transferred", From: s.store.Self().ID}
	if notFrom {
		a.Outcome, a.Leader = "unchanged", a.From // another node leads: nothing to hand over
		writeJSON(w, http.StatusOK, a)
		return
	}
	if req.ID == a.From {
		a.Outcome, a.Leader = "unchanged", a.From // asked to lead, and leads
	} else {
		// Who took over: raft's transfer returns once the target was told
		// to campaign; its election takes a moment more. The wait stays
		// short: through a follower, the whole answer must come within
		// the follower's forward deadline (LeaderWait).
		deadline := time.Now().Add(time.Second)
		for time.Now().Before(deadline) && r.Context().Err() == nil {
			if l, ok := s.store.Leader(); ok && l.ID != a.From {
				a.Leader = l.ID
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	// Asked for no voter in particular, raft picks the most up to date:
	// the line said to="" for it.
	to, leader := req.ID, a.Leader
	if to == "" {
		to = "any voter"
	}
	if leader == "" {
		leader = "not known yet" // the election takes a moment more
	}
	s.log.Info("leadership transferred on request", "to", to, "leader", leader)
	writeJSON(w, http.StatusOK, a)
}

// unknownFrom is the 404 of a transfer whose from names no member of the
// configuration, or nil when it names one (or the configuration cannot be
// read: the transfer then answers "unchanged", as before).
func unknownFrom(store Store, from string) *problem {
	st, err := store.Status()
	if err != nil {
		return nil
	}
	members := make([]string, 0, len(st.Nodes))
	for _, m := range st.Nodes {
		if m.ID == from {
			return nil
		}
		members = append(members, m.ID)
	}
	sort.Strings(members)
	p := newProblem(http.StatusNotFound, codeNotFound, fmt.Sprintf(
		"from: no such member: %s is not in the cluster (members: %s), so it cannot be the leader to hand over from; nothing was handed over. Give --from the id of the node you mean to restart (idem cluster status names the leader)",
		truncate(from, 70), strings.Join(members, ", ")))
	p.Title = "No such member"
	return p
}

// noTransferTarget refuses a transfer when no other voter could take the
// leadership (a one-node cluster, or only non-voters besides the leader):
// raft would only fail it.
func (s *Server) noTransferTarget() *problem {
	st, err := s.store.Status()
	if err != nil {
		return nil // let the transfer itself say what is wrong
	}
	for _, m := range st.Nodes {
		if m.ID != st.Self.ID && strings.EqualFold(m.Suffrage, "voter") {
			return nil
		}
	}
	detail := fmt.Sprintf("%s is the only voter of this cluster: there is no other voter to hand the leadership to; join another node first (it becomes a voter once it has caught up)", st.Self.ID)
	s.log.Warn("leadership transfer refused", "reason", "no other voter")
	p := newProblem(http.StatusConflict, codeNoTransferTarget, detail)
	p.Title = "No other voter to take the leadership"
	return p
}
