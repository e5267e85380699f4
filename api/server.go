package api

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"net/url"
	"path"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/idem-store/idem/engine"
	"github.com/idem-store/idem/internal/mono"
	"github.com/idem-store/idem/raftfsm"
	"github.com/idem-store/idem/ttl"
	"github.com/idem-store/idem/wire"
)

// Config configures the HTTP server.
type Config struct {
	Retention      time.Duration
	DefaultLease   time.Duration
	BucketWidth    time.Duration
	PrincipalScope bool // --scope principal: the endpoint is not part of uniqueness
	// BootstrapExpect is the node's --bootstrap-expect, published in its
	// cluster status for peers forming a cluster with it to compare.
	BootstrapExpect int
	Limits          Limits
	// MaxBatchOps bounds the ops of one POST /v1/batch (--max-batch-ops);
	// 0 means DefaultMaxBatchOps.
	MaxBatchOps int
	// MaxBatchAnswerBytes bounds the bytes of POST /v1/batch answers being
	// made or written at once; 0 means DefaultMaxBatchAnswerBytes (batch.go).
	MaxBatchAnswerBytes int64
	// BatchAnswerWriteTimeout is how long a client has to take a batch
	// answer before its connection is closed; 0 means 30 s.
	BatchAnswerWriteTimeout time.Duration
	// AnswerWriteTimeout is how long a client has to take any other answer
	// (a snapshot download and /debug/pprof aside), from when it is ready,
	// before its connection is closed; 0 means 30 s.
	AnswerWriteTimeout time.Duration
	// SnapshotStallTimeout is how long a snapshot download (GET
	// /v1/admin/snapshot) may make no progress, its client reading
	// nothing, before its connection is closed; 0 means
	// DefaultSnapshotStallTimeout.
	SnapshotStallTimeout time.Duration
	// MaxSnapshotDownloads bounds the snapshot downloads (GET
	// /v1/admin/snapshot, taken here or passed through from the leader)
	// this node answers at once; 0 means DefaultMaxSnapshotDownloads.
	MaxSnapshotDownloads int
	// Auth, when set, holds the credentials (auth.go) every route but
	// /healthz and /readyz needs; the caller may swap them (SIGHUP).
	Auth *Auth
	// TLSReloadError, when set, says why the last SIGHUP did not reload
	// the --tls-* files ("" when it did): GET /v1/config publishes it.
	TLSReloadError func() string
	// AuthTokens are plain bearer tokens, each an admin token (the old auth
	// file format): used when Auth is nil.
	AuthTokens []string
	// NodeToken is the bearer token this node sends on its own calls to
	// other nodes (a follower's readiness check, health measurements); it
	// must be an admin token of the other nodes. Default: the first plain
	// token of an old-format file.
	NodeToken string
	// PeerTLS, when set, makes this node's calls to other nodes
	// (forwarding, readiness, health, snapshots) HTTPS with its own
	// certificate, verified against the cluster's CA.
	PeerTLS *raftfsm.TLS
	// LeaderWait is how long a request waits for a leader during an
	// election before answering 503.
	LeaderWait time.Duration
	// CommitTimeout is the leader's bound on a write's wait to be
	// committed (raftfsm.Config.ApplyTimeout, --commit-timeout; 0: its
	// default). What it adds to the default, a follower's forward of a
	// request waits longer for the leader's answer (commitExtra).
	CommitTimeout time.Duration
	Logger        *slog.Logger
	Gatherer      prometheus.Gatherer
}

// Server is the HTTP API of one node.
type Server struct {
	cfg   Config
	store Store
	log   *slog.Logger
	mux   *http.ServeMux
	// authRefused counts the requests the auth guard refused, by why
	// (Collectors: idem_http_auth_refused_total).
	authRefused *prometheus.CounterVec
	// answering is the bytes of batch answers being made or written now.
	// Each app token's part of it is its tokenLoad's answers: each at
	// most half of what the others leave (tokenHeld.over).
	answering atomic.Int64
	// released holds back "attempt released" lines past releaseLogsPerSecond.
	released logBudget
	// internalErrors counts the requests answered 500 "internal error"
	// (storeProblem); internalLog spaces their ERROR lines, and
	// internalLogged is internalErrors at the last one.
	internalErrors, internalLogged atomic.Int64
	internalLog                    mono.Spacer
	// unknown answers a path no route serves (404, after the auth guard).
	unknown http.HandlerFunc
	fwd     *forwarder
	// gate says when the leader may make the cluster secret (fencing.go).
	gate secretGate
	// guards: the connection and load limits (limits_conn.go).
	guards connGuard
	// batches says when the leader may propose batch entries (batch.go).
	batches batchGate
	// lists says when headers stored as arrays may be proposed (headerlists.go).
	lists listsGate
	// featured holds the members seen listing a feature (membersLacking),
	// keyed by feature, member id and HTTP address.
	featured sync.Map
	// opened holds the features every other member listed at once
	// (membersLacking found none lacking): the gate was open, so entries
	// needing them may be in the log.
	opened sync.Map
	// snapshots holds a slot per snapshot download being answered.
	snapshots chan struct{}
}

// New returns a server over store.
func New(store Store, cfg Config) *Server {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.LeaderWait == 0 {
		cfg.LeaderWait = 3 * time.Second
	}
	s := &Server{cfg: cfg, store: store, log: cfg.Logger, mux: http.NewServeMux(),
		authRefused: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "idem_http_auth_refused_total",
			Help: "Requests refused by --auth-file, by reason: no_token (no Bearer token), unknown_token (not in the file), role (the token's role may not call the route), principal (an app token acting for a principal outside its prefixes)."},
			[]string{"reason"})}
	for _, r := range []string{"no_token", "unknown_token", "role", "principal"} {
		s.authRefused.WithLabelValues(r) // each reason reads 0 before its first refusal
	}
	if cfg.MaxSnapshotDownloads <= 0 {
		s.cfg.MaxSnapshotDownloads = DefaultMaxSnapshotDownloads
	}
	s.snapshots = make(chan struct{}, s.cfg.MaxSnapshotDownloads)
	s.setupAuth()
	s.fwd = newForwarder(s)
	// Who may call what: auth.go and the role table of docs/API.md.
	s.route("/v1/claim", http.MethodPost, s.app(noQuery(s.handleClaim)))
	s.route("/v1/complete", http.MethodPost, s.app(noQuery(s.handleComplete)))
	s.route("/v1/release", http.MethodPost, s.app(noQuery(s.handleRelease)))
	s.route("/v1/extend", http.MethodPost, s.app(noQuery(s.handleExtend)))
	// Any valid token may send a batch; each op is then authorized as its
	// own route would be (batch.go).
	s.route("/v1/batch", http.MethodPost, s.guard(noQuery(s.handleBatch), func(*http.Request) (Role, principalIn) { return RoleApp, principalNowhere }))
	s.mux.HandleFunc("/v1/records", s.records(s.handleRecords))
	s.route("/v1/config", http.MethodGet, s.operator(s.handleConfig))
	s.route("/v1/cluster", http.MethodGet, s.operator(s.handleCluster))
	s.route("/v1/cluster/join", http.MethodPost, s.admin(noQuery(s.handleJoin)))
	s.route("/v1/cluster/remove", http.MethodPost, s.admin(noQuery(s.handleRemove)))
	s.route("/v1/cluster/transfer-leadership", http.MethodPost, s.admin(noQuery(s.handleTransfer)))
	s.route("/v1/admin/state", http.MethodGet, s.admin(s.handleState))
	s.route("/v1/admin/snapshot", http.MethodGet, s.admin(s.handleSnapshot))
	s.route("/v1/admin/retention", http.MethodPut, s.admin(noQuery(s.handleSetRetention)))
	s.route("/healthz", http.MethodGet, withFeatures(s.handleHealthz, featureSecret, featureBatch, featureHeaderLists, featureRetention,
		raftfsm.FeatureCredentialCap))
	s.route("/readyz", http.MethodGet, s.handleReadyz)
	if cfg.Gatherer != nil {
		metrics := promhttp.HandlerFor(cfg.Gatherer, promhttp.HandlerOpts{})
		s.route("/metrics", http.MethodGet, s.operator(metrics.ServeHTTP))
	}
	// An unknown route is a route too: with an auth file it needs a valid
	// token (any role) before it is told 404, as docs/API.md says of
	// every route but /healthz and /readyz.
	s.unknown = s.guard(func(w http.ResponseWriter, r *http.Request) {
		writeProblem(w, newProblem(http.StatusNotFound, codeNotFound, fmt.Sprintf("no route %s %s", r.Method, truncate(r.URL.Path, 200))))
	}, func(*http.Request) (Role, principalIn) { return RoleApp, principalNowhere })
	s.mux.HandleFunc("/", s.unknown)
	return s
}

// ServeHTTP implements http.Handler.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if strings.HasPrefix(r.URL.Path, "/v1/") {
		// The API's answers carry records, stored responses (payment
		// data) and tokens: no cache between client and node may keep one.
		w.Header().Set("Cache-Control", "no-store")
	}
	if Unclean(r) {
		// ServeMux would answer an HTML redirect to the cleaned path
		// ("/v1//config", "/v1/../x"); no route is served at such a path.
		s.shield(w, r, s.unknown)
		return
	}
	s.shield(w, r, s.mux)
}

// Unclean reports whether r's path is one a ServeMux would redirect to
// its cleaned form; the Server answers such a path 404.
func Unclean(r *http.Request) bool {
	p := r.URL.EscapedPath()
	return p != cleanPath(p)
}

// cleanPath is the form ServeMux redirects a path to when it differs:
// rooted, without empty, "." or ".." elements, a trailing slash kept.
func cleanPath(p string) string {
	if p == "" {
		return "/"
	}
	if p[0] != '/' {
		p = "/" + p
	}
	np := path.Clean(p)
	if p[len(p)-1] == '/' && np != "/" {
		np += "/"
	}
	return np
}

// noQuery refuses a query string on a route whose request is its body
// alone (400 invalid_request, before anything is decided). It was ignored:
// "POST /v1/claim?principal=cus_9" with another principal in the body
// claimed the body's, and a client that put a member in the query (as a
// lookup takes it) had it dropped unseen, as strict parsing refuses for
// any body member and for the query of /v1/records.
func noQuery(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if r.URL.RawQuery != "" {
			writeProblem(w, invalid("%s %s takes no query parameters (got %q): every member goes in the JSON body",
				r.Method, r.URL.Path, truncate(r.URL.RawQuery, 200)))
			return
		}
		h(w, r)
	}
}

// route registers h for exactly one method, answering others with a
// problem document rather than the mux's plain text.
func (s *Server) route(path, method string, h http.HandlerFunc) {
	allow := method
	if method == http.MethodGet {
		allow = "GET, HEAD" // a GET route answers HEAD too (RFC 9110 10.2.1: Allow lists every method)
	}
	wrong := func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Allow", allow)
		writeProblem(w, newProblem(http.StatusMethodNotAllowed, codeMethod, fmt.Sprintf("%s takes %s", path, method)))
	}
	if path != "/healthz" && path != "/readyz" {
		// As for an unknown route: with an auth file, what a route takes
		// is told only to a valid token.
		wrong = s.guard(wrong, func(*http.Request) (Role, principalIn) { return RoleApp, principalNowhere })
	}
	s.mux.HandleFunc(path, func(w http.ResponseWriter, r *http.Request) {
		if r.Method != method && !(method == http.MethodGet && r.Method == http.MethodHead) {
			wrong(w, r)
			return
		}
		h(w, r)
	})
}

func (s *Server) handleClaim(w http.ResponseWriter, r *http.Request) {
	var req claimRequest
	body, p := s.readBody(w, r)
	if p == nil {
		p = decodeClaim(body, &req)
	}
	var args engine.ClaimArgs
	if p == nil {
		args, p = s.claimArgs(r, &req)
	}
	if p != nil {
		writeProblem(w, p)
		return
	}
	var res engine.Result
	err := s.onLeader(w, r, body, func() (err error) {
		if err = s.ensureSecret(r.Context()); err != nil { // the key of the claim's token
			return err
		}
		res, _, err = s.store.Claim(s.claimBound(args))
		return err
	})
	if err != nil {
		return
	}
	s.answerClaim(w, args, cappedCredential(r), res)
}

// claimArgs validates a claim (the route's body, or a batch's claim op of
// request r). A credential with a principal cap puts it in the claim.
func (s *Server) claimArgs(r *http.Request, req *claimRequest) (engine.ClaimArgs, *problem) {
	scope, p := s.scope(req.Principal, req.Endpoint, req.Key)
	if p == nil {
		p = s.checkFingerprint(req.Fingerprint)
	}
	if p != nil {
		scope, p = s.claimOfStored(r, req, p)
	}
	var lease int64
	if p == nil {
		p = s.checkID("claim_id", req.ClaimID)
	}
	if p == nil {
		p = s.checkID("correlation_id", req.CorrelationID)
	}
	if p == nil {
		lease, p = s.checkLease("lease_ms", req.LeaseMs, false)
	}
	if p != nil {
		return engine.ClaimArgs{}, p
	}
	a := engine.ClaimArgs{
		Scope: scope, PrincipalScope: s.cfg.PrincipalScope, Fingerprint: strings.ToLower(req.Fingerprint),
		ClaimID: req.ClaimID, CorrelationID: req.CorrelationID, LeaseMs: lease,
		// This node's --retention: the leader replaces it with the cluster's
		// once pinned (raftfsm stamps every claim), which it is not before.
		RetentionMs: s.cfg.Retention.Milliseconds(), MaxKeys: s.cfg.Limits.MaxKeysPerPrincipal,
		MaxPrincipals: s.cfg.Limits.MaxPrincipals,
	}
	if c := cappedCredential(r); c != nil && c.Role == RoleApp {
		// The leader's auth file decides (a follower forwards the token):
		// Apply counts the principals under the prefixes on every replica.
		a.CredentialPrefixes, a.CredentialMaxPrincipals = c.capPrefixes(), c.MaxPrincipals
	}
	return a, nil
}

// claimOfStored takes a claim refused (p) for a principal, endpoint, key
// or fingerprint over this node's --max-scope-bytes or
// --max-fingerprint-chars when its record is stored: it was taken by a
// node with higher limits (before they were lowered, or by another
// leader), and a retry of it must get the stored answer, not a 400 its
// client takes for a permanent failure of work that was done (a walk of
// mixed settings). Only sizes are forgiven, each part and the fingerprint
// up to the stored record's (and MaxScopeBytesLimit); the record is looked
// up in this node's state.
//
// The lookup is at the applied log's time and the claim is applied later:
// a record that expires (or is deleted) in between is gone when the claim
// applies, and the claim stores a new record of its sizes. Parts and a
// fingerprint no longer than the stored one's keep that record no larger
// than the one it replaces (in principal scope the endpoint named may be
// another); forgiving any size the request carried let an app store a
// fingerprint up to the body limit, or an endpoint up to 64 KiB, under
// any key it had claimed once.
func (s *Server) claimOfStored(r *http.Request, req *claimRequest, p *problem) (engine.Scope, *problem) {
	scope, sp := s.storedScope(req.Principal, req.Endpoint, req.Key)
	if sp != nil {
		return engine.Scope{}, p
	}
	rec, found, err := s.store.Lookup(r.Context(), scope, s.cfg.PrincipalScope, false)
	if err != nil || !found || rec == nil {
		return engine.Scope{}, p
	}
	if fingerprintUpTo(req.Fingerprint, max(s.cfg.Limits.MaxFingerprintChars, len(rec.Fingerprint))) != nil {
		return engine.Scope{}, p
	}
	// In principal scope the record is found by principal and key alone:
	// the endpoint named may be another, and longer, than the stored one.
	limit := s.cfg.Limits.MaxScopeBytes
	if len(scope.Principal) > max(limit, len(rec.Scope.Principal)) || len(scope.Endpoint) > max(limit, len(rec.Scope.Endpoint)) ||
		len(scope.Key) > max(limit, len(rec.Scope.Key)) {
		return engine.Scope{}, p
	}
	return scope, nil
}

// claimBound is a claim as the leader proposes it once it has tried to
// make the cluster secret (ensureSecret).
func (s *Server) claimBound(a engine.ClaimArgs) engine.ClaimArgs {
	if _, ok, _ := s.store.ClusterSecret(); !ok {
		// The principal bound travels in the claim's entry, which an
		// older member cannot decode. Every member knows it once the
		// cluster has its secret (the same version brought both, and
		// the secret waits for every member: fencing.go).
		a.MaxPrincipals = 0
	}
	return a
}

// answerClaim answers a decided claim a, made with cred when that has a
// principal cap (else nil).
func (s *Server) answerClaim(w http.ResponseWriter, a engine.ClaimArgs, cred *Credential, res engine.Result) {
	scope := a.Scope
	switch res.Outcome {
	case engine.OutcomeClaimed:
		s.writeClaimed(w, res.Record)
	case engine.OutcomeReplay:
		writeJSON(w, http.StatusOK, outcomeJSON{Outcome: "replay", Record: toJSON(res.Record)})
	case engine.OutcomeInProgress:
		p := newProblem(http.StatusConflict, codeInProgress, fmt.Sprintf("attempt %d holds the lease until %s", res.Record.Attempt, fmtTime(res.Record.LeaseMs)))
		p.LeaseExpiresAt = fmtTime(res.Record.LeaseMs)
		p.retryAfter = ttl.RetryAfter(res.Record.LeaseMs, res.NowMs)
		writeProblem(w, p)
	case engine.OutcomeFingerprintMismatch:
		writeProblem(w, newProblem(http.StatusUnprocessableEntity, codeFingerprintMismatch,
			"this key was first used with a different request fingerprint; use a new key for a new request"))
	case engine.OutcomeQuotaExceeded:
		p := newProblem(http.StatusTooManyRequests, codeQuota, fmt.Sprintf("principal %q holds the most live keys allowed (%d, or more if the limit was lowered since): a new key is taken once some expire", scope.Principal, s.cfg.Limits.MaxKeysPerPrincipal))
		p.retryAfter = 60
		writeProblem(w, p)
	case engine.OutcomePrincipalLimit:
		if res.ByCredential {
			name := "of this request"
			if cred != nil {
				name = strconv.Quote(cred.Name)
			}
			p := newProblem(http.StatusTooManyRequests, codePrincipalLimit, fmt.Sprintf("the token %s may hold keys of at most %d principals under its patterns (its max_principals in the auth file), and holds that many; principal %q has none",
				name, a.CredentialMaxPrincipals, scope.Principal))
			p.retryAfter = 60
			writeProblem(w, p)
			return
		}
		held := fmt.Sprintf("%d principals, the most allowed", s.cfg.Limits.MaxPrincipals)
		if s.cfg.Auth != nil {
			// Not to a tenant: the bound is the operator's (/v1/config),
			// and less the tenant's own principals it counts the others'.
			held = "as many principals as it may"
		}
		p := newProblem(http.StatusTooManyRequests, codePrincipalLimit, fmt.Sprintf("the cluster holds keys of %s (--max-principals); principal %q has none", held, scope.Principal))
		p.retryAfter = 60
		writeProblem(w, p)
	default:
		s.unexpected(w, res)
	}
}

func (s *Server) unexpected(w http.ResponseWriter, res engine.Result) {
	s.log.Error("unexpected outcome", "outcome", res.Outcome.String())
	writeProblem(w, newProblem(http.StatusInternalServerError, codeInternal, "unexpected outcome "+res.Outcome.String()))
}

// tokenTarget validates the scope and token shared by complete, release and extend.
func (s *Server) tokenTarget(principal, endpoint, key, token string) (engine.TokenArgs, *problem) {
	scope, p := s.storedScope(principal, endpoint, key)
	if p != nil {
		return engine.TokenArgs{}, p
	}
	t, p := parseToken(token)
	if p != nil {
		return engine.TokenArgs{}, p
	}
	return engine.TokenArgs{Scope: scope, PrincipalScope: s.cfg.PrincipalScope, Token: t}, nil
}

// tokenProblem answers the outcomes shared by complete, release and extend.
func tokenProblem(res engine.Result, want engine.Outcome) *problem {
	switch res.Outcome {
	case engine.OutcomeNotFound:
		return newProblem(http.StatusNotFound, codeNotFound, "no live record for this scope")
	case engine.OutcomeTokenMismatch:
		return newProblem(http.StatusConflict, codeTokenMismatch, "the token is not the current attempt's (the lease ran out and another attempt took over, or the attempt was released)")
	case engine.OutcomeAlreadyCompleted:
		if want != engine.OutcomeCompleted {
			return newProblem(http.StatusConflict, codeAlreadyCompleted, "the attempt already completed and its response is stored: a completed record cannot be "+verbOf(want))
		}
		return newProblem(http.StatusConflict, codeAlreadyCompleted, "the attempt already completed with a different response")
	}
	return nil
}

// verbOf names what an operation would have done, for problem details.
func verbOf(o engine.Outcome) string {
	if o == engine.OutcomeExtended {
		return "extended"
	}
	return "released"
}

func (s *Server) handleComplete(w http.ResponseWriter, r *http.Request) {
	var req completeRequest
	body, p := s.readJSON(w, r, &req)
	var t engine.TokenArgs
	var resp *engine.Response
	if p == nil {
		t, p = s.tokenTarget(req.Principal, req.Endpoint, req.Key, req.Token)
	}
	if p == nil {
		resp, p = s.checkResponse(req.Response)
	}
	if p != nil {
		writeProblem(w, p)
		return
	}
	s.tokenOp(w, r, body, t, req.Token, engine.OutcomeCompleted,
		func(t engine.TokenArgs) (engine.Result, error) { return s.store.Complete(t, resp) }, completedAnswer(w))
}

// completedAnswer, releasedAnswer and extendedAnswer answer the wanted
// outcome of complete, release and extend.
func completedAnswer(w http.ResponseWriter) func(engine.Result) {
	return func(res engine.Result) {
		writeJSON(w, http.StatusOK, outcomeJSON{Outcome: "completed", Record: toJSON(res.Record)})
	}
}

// releaseLogsPerSecond is how many "attempt released" lines (a release
// with a reason) a node writes in a second; the others are counted, and
// the next line written says how many (released_unlogged).
const releaseLogsPerSecond = 20

// logReleased logs a release's reason, within releaseLogsPerSecond: a
// client decides how often it releases (a repeat by the same token is
// answered, and logged, again), and every line reached the disk.
func (s *Server) logReleased(principal, reason string) {
	if args, ok := s.released.line(releaseLogsPerSecond, time.Second, "released_unlogged", "principal", principal, "reason", reason); ok {
		s.log.Info("attempt released", args...)
	}
}

func (s *Server) releasedAnswer(w http.ResponseWriter, t engine.TokenArgs, reason string) func(engine.Result) {
	return func(engine.Result) {
		if reason != "" {
			s.logReleased(t.Scope.Principal, reason)
		}
		writeJSON(w, http.StatusOK, outcomeJSON{Outcome: "released"})
	}
}

func extendedAnswer(w http.ResponseWriter) func(engine.Result) {
	return func(res engine.Result) {
		writeJSON(w, http.StatusOK, outcomeJSON{Outcome: "extended", LeaseExpiresAt: fmtTime(res.Record.LeaseMs)})
	}
}

// tokenOp has the leader decide an operation on the current attempt, once
// token is known good for t's scope (fenced), and answers it: ok for the
// wanted outcome, the shared problems otherwise.
func (s *Server) tokenOp(w http.ResponseWriter, r *http.Request, body []byte, t engine.TokenArgs, token string, want engine.Outcome,
	do func(engine.TokenArgs) (engine.Result, error), ok func(engine.Result)) {
	var res engine.Result
	if s.onLeader(w, r, body, func() (err error) { res, err = s.fenced(r.Context(), t, token, do); return err }) != nil {
		return
	}
	s.answerToken(w, res, want, ok)
}

// answerToken answers a decided operation on the current attempt: ok for
// the wanted outcome, the shared problems otherwise.
func (s *Server) answerToken(w http.ResponseWriter, res engine.Result, want engine.Outcome, ok func(engine.Result)) {
	if res.Outcome == want {
		ok(res)
		return
	}
	if p := tokenProblem(res, want); p != nil {
		writeProblem(w, p)
		return
	}
	s.unexpected(w, res)
}

func (s *Server) handleRelease(w http.ResponseWriter, r *http.Request) {
	var req releaseRequest
	body, p := s.readJSON(w, r, &req)
	var t engine.TokenArgs
	if p == nil {
		t, p = s.tokenTarget(req.Principal, req.Endpoint, req.Key, req.Token)
	}
	if p == nil {
		p = s.checkID("reason", req.Reason)
	}
	if p != nil {
		writeProblem(w, p)
		return
	}
	s.tokenOp(w, r, body, t, req.Token, engine.OutcomeReleased,
		func(t engine.TokenArgs) (engine.Result, error) { return s.store.Release(t) }, s.releasedAnswer(w, t, req.Reason))
}

func (s *Server) handleExtend(w http.ResponseWriter, r *http.Request) {
	var req extendRequest
	body, p := s.readJSON(w, r, &req)
	var t engine.TokenArgs
	var lease int64
	if p == nil {
		t, p = s.tokenTarget(req.Principal, req.Endpoint, req.Key, req.Token)
	}
	if p == nil {
		lease, p = s.checkLease("lease_ms", req.LeaseMs, true)
	}
	if p != nil {
		writeProblem(w, p)
		return
	}
	s.tokenOp(w, r, body, t, req.Token, engine.OutcomeExtended,
		func(t engine.TokenArgs) (engine.Result, error) { return s.store.Extend(t, lease) }, extendedAnswer(w))
}

func (s *Server) handleRecords(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead && r.Method != http.MethodDelete {
		w.Header().Set("Allow", "GET, HEAD, DELETE")
		writeProblem(w, newProblem(http.StatusMethodNotAllowed, codeMethod, "/v1/records takes GET or DELETE"))
		return
	}
	q, p := recordsQuery(r)
	var scope engine.Scope
	linearizable := true
	if p == nil {
		scope, linearizable, p = s.lookupArgs(q, r.Method != http.MethodDelete)
	}
	if p != nil {
		writeProblem(w, p)
		return
	}
	if r.Method == http.MethodDelete {
		var res engine.Result
		if s.onLeader(w, r, nil, func() (err error) { res, err = s.store.Delete(scope, s.cfg.PrincipalScope); return err }) != nil {
			return
		}
		if res.Outcome == engine.OutcomeDeleted {
			writeJSON(w, http.StatusOK, outcomeJSON{Outcome: "deleted"})
			return
		}
		writeProblem(w, newProblem(http.StatusNotFound, codeNotFound, "no live record for this scope"))
		return
	}
	var rec *engine.Record
	var found bool
	do := func() (err error) {
		rec, found, err = s.store.Lookup(r.Context(), scope, s.cfg.PrincipalScope, linearizable)
		return err
	}
	if linearizable {
		if s.onLeader(w, r, nil, do) != nil {
			return
		}
	} else if why := s.servesNoRecord(); why != "" {
		writeProblem(w, newProblem(http.StatusServiceUnavailable, codeUnavailable, why))
		return
	} else if err := do(); err != nil {
		writeProblem(w, s.storeProblem(err))
		return
	}
	answerLookup(w, rec, found)
}

// recordsQuery reads the query of /v1/records as strictly as a body is
// read: url.Values would drop a pair that does not decode (so "p%zz" read
// as no principal) and keep a parameter given twice, of which Get takes
// the first while another reader may take the last.
func recordsQuery(r *http.Request) (url.Values, *problem) {
	q, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		return nil, invalid("the query does not decode: %s", truncate(err.Error(), 80))
	}
	if p := repeatedParam(q); p != nil {
		return nil, p
	}
	return q, nil
}

// repeatedParam refuses a lookup's parameter given more than once.
func repeatedParam(q url.Values) *problem {
	for _, k := range slices.Sorted(maps.Keys(q)) {
		if len(q[k]) > 1 {
			return invalid("the query has the parameter %q more than once", truncate(k, 40))
		}
	}
	return nil
}

// lookupArgs validates the parameters of a lookup (the query of
// /v1/records, or a batch's get op, whose members are these parameters):
// no parameter but these four, the scope, and, for a read, the
// consistency. Run after the guard, as a body's checks are.
func (s *Server) lookupArgs(q url.Values, read bool) (scope engine.Scope, linearizable bool, p *problem) {
	// A delete is always decided by the leader: a consistency would be
	// ignored, so it is refused there, as any other parameter.
	allowed := "principal, endpoint, key and consistency"
	if !read {
		allowed = "principal, endpoint and key"
	}
	for _, k := range slices.Sorted(maps.Keys(q)) {
		switch {
		case k == "principal" || k == "endpoint" || k == "key":
		case k == "consistency" && read:
		default:
			return engine.Scope{}, false, invalid("unknown parameter %q (the parameters are %s; names are case-sensitive)", truncate(k, 40), allowed)
		}
	}
	if scope, p = s.storedScope(q.Get("principal"), q.Get("endpoint"), q.Get("key")); p != nil {
		return engine.Scope{}, false, p
	}
	if !read {
		return scope, true, nil
	}
	switch c := q.Get("consistency"); c {
	case "", wire.ConsistencyLinearizable:
		return scope, true, nil
	case wire.ConsistencyStale:
		return scope, false, nil
	default:
		return engine.Scope{}, false, invalid("consistency must be linearizable or stale (got %q)", truncate(c, 40))
	}
}

// answerLookup answers a lookup.
func answerLookup(w http.ResponseWriter, rec *engine.Record, found bool) {
	if !found {
		writeProblem(w, newProblem(http.StatusNotFound, codeNotFound, "no live record for this scope"))
		return
	}
	writeJSON(w, http.StatusOK, struct {
		Record *recordJSON `json:"record"`
	}{toJSON(rec)})
}

func (s *Server) handleConfig(w http.ResponseWriter, r *http.Request) {
	scope := "endpoint"
	if s.cfg.PrincipalScope {
		scope = "principal"
	}
	if pinned, ok := s.store.ScopeMode(); ok {
		scope = pinned // what every write is decided in, whatever this node was started with
	}
	ret := s.retention()
	width := s.cfg.BucketWidth
	if cw, ok := s.store.BucketWidth(); ok {
		width = cw // the cluster's, fixed by its first command; this node's flag may differ
	}
	limits := s.cfg.Limits.json()
	limits.MaxBatchOps = s.maxBatchOps() // docs/openapi.yaml's Limits lists it; clients size batches by it
	writeJSON(w, http.StatusOK, configJSON{
		Retention: ret.String(), RetentionSeconds: durationSeconds(ret),
		LeaseDefaultMs: s.cfg.DefaultLease.Milliseconds(), Scope: scope,
		BucketWidth: width.String(), Limits: limits, AuthFileDigest: s.authDigest(),
		AuthFileReloadError: s.authReloadError(), TLSReloadError: s.tlsReloadError(),
		CommitTimeoutMs: s.commitTimeout().Milliseconds(),
	})
}

// tlsReloadError is why the last reload of the TLS files failed, "" when
// it did not (or there is no TLS).
func (s *Server) tlsReloadError() string {
	if s.cfg.TLSReloadError == nil {
		return ""
	}
	return s.cfg.TLSReloadError()
}

// authReloadError is why the last reload of the auth file failed, "" when
// it did not (or there is no auth file).
func (s *Server) authReloadError() string {
	if s.cfg.Auth == nil {
		return ""
	}
	return s.cfg.Auth.ReloadError()
}

// authDigest is the digest of the credentials in force (a SIGHUP may have
// changed them), "none" without --auth-file.
func (s *Server) authDigest() string {
	if s.cfg.Auth == nil {
		return "none"
	}
	return s.cfg.Auth.Credentials().Digest()
}

// handleState shows this replica's state hash and the applied index it was
// taken at, to compare replicas (tests, chaos checks, operators).
func (s *Server) handleState(w http.ResponseWriter, r *http.Request) {
	h, withGated, applied, err := s.store.StateHashes()
	if err != nil {
		writeProblem(w, s.storeProblem(err))
		return
	}
	// state_hash_with_gated is what a replica of a release before December
	// 5, 2026 answers as its state_hash for the same state: idem cluster
	// status --state-hashes compares such a replica with it.
	writeJSON(w, http.StatusOK, map[string]any{"node": s.store.Self().ID, "state_hash": h, "state_hash_with_gated": withGated, "applied_index": applied})
}

func (s *Server) handleHealthz(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}

// handleReadyz: ready means this node knows a leader and has applied the
// leader's commit index as of the call. A follower's own commit index can
// lag far behind after a restart (it learns the leader's only once its log
// matches), so a follower asks the leader.
func (s *Server) handleReadyz(w http.ResponseWriter, r *http.Request) {
	if why := s.unready(r.Context()); why != "" {
		writeProblem(w, newProblem(http.StatusServiceUnavailable, codeUnavailable, s.unreadyDetail(r, why)))
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"status": "ready"})
}

// notReadyDetail is /readyz's 503 detail for a caller not told why.
const notReadyDetail = "this node is not ready; why is told to an operator or admin token (Authorization: Bearer)"

// unreadyDetail is what /readyz tells r of why this node is not ready.
// With an auth file /readyz still needs no token (load balancers call
// it), but its reasons name the data dir and its free bytes, node ids and
// addresses, and the leader's errors: only an operator or admin token is
// told them, as /v1/config and /metrics are (an unauthenticated caller
// read them all). Without an auth file the node is on loopback or
// --insecure, and everyone is told. A token sent and not known is counted
// as the guard counts it (unknown_token): asking an unready node was a
// way to try tokens that no counter saw. No token is no refusal here.
func (s *Server) unreadyDetail(r *http.Request, why string) string {
	if s.cfg.Auth == nil {
		return why
	}
	if len(r.Header.Values("Authorization")) == 1 {
		cred, reason := authenticate(s.cfg.Auth.Credentials(), r)
		if cred != nil && cred.Role >= RoleOperator {
			return why
		}
		if reason == "unknown_token" {
			s.countRefused(reason)
		}
	}
	return notReadyDetail
}

// Collectors are the API's own metrics, for the registry /metrics
// serves (cmd/idem/serve.go registers them beside the node's):
// idem_ready, what /readyz would answer now (1 ready, 0 not), and
// idem_http_auth_refused_total{reason}. A node unready while the others
// are ready gets no traffic from a load balancer, and nothing else shows
// it; a flood of wrong tokens was counted nowhere.
func (s *Server) Collectors() []prometheus.Collector {
	ready := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "idem_ready",
		Help: "1 when /readyz would answer 200 now (this node knows a leader and has applied its commit index), 0 when it would answer 503: curl /readyz for why (with --auth-file, with an operator or admin token)."},
		func() float64 {
			// A second in all (the leader's answer, the waits for a
			// leader and for the apply): a scrape must not wait out a
			// leader that does not answer, and a node that cannot tell
			// within a second is not ready to a load balancer either.
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			ready := make(chan bool, 1)
			go func() { ready <- s.unready(ctx) == "" }()
			select {
			case ok := <-ready:
				if ok {
					return 1
				}
			case <-ctx.Done():
			}
			return 0
		})
	return []prometheus.Collector{ready, s.authRefused}
}

// unready is why this node is not ready (handleReadyz), "" when it is.
func (s *Server) unready(ctx context.Context) string {
	if why := s.store.Superseded(); why != "" {
		return why
	}
	if why := s.store.ForeignLeader(); why != "" {
		return why
	}
	if !s.store.Ready() {
		return "this node has no leader or has not applied its commit index" + s.diskFullReason()
	}
	if k, ok := s.store.(interface{ KeptBack() error }); ok {
		// A non-voter the leader keeps one: its state may lack records,
		// so a caller routing reads by /readyz must not read here.
		if err := k.KeptBack(); err != nil {
			var kept *raftfsm.KeptBackError
			if errors.As(err, &kept) {
				return kept.Detail()
			}
			return err.Error()
		}
	}
	if !s.store.IsLeader() {
		l, ok := s.store.Leader()
		if !ok || l.HTTPAddr == "" {
			return "this node does not know the leader's address yet"
		}
		commit, err := s.fwd.sharedCommit(ctx, l.HTTPAddr)
		if err != nil {
			return "the leader did not tell its commit index: " + err.Error()
		}
		if !s.store.CaughtUp(commit) {
			return fmt.Sprintf("this node has not applied the leader's commit index %d yet", commit) + s.diskFullReason()
		}
	}
	return ""
}

// diskFullReason is what unready adds for a node whose disk is full: such
// a follower takes no raft entries and stays behind until space is freed,
// which "has not applied" alone did not say.
func (s *Server) diskFullReason() string {
	if d, ok := s.store.(interface{ DiskFull() *raftfsm.DiskFull }); ok {
		if full := d.DiskFull(); full != nil {
			return ": " + full.String()
		}
	}
	return ""
}

// errAnswered means onLeader already wrote the answer.
var errAnswered = errors.New("api: answered")
