package middleware

import (
	"bytes"
	"cmp"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"log/slog"
	"maps"
	"mime"
	"mime/multipart"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/idem-store/idem/client"
	"github.com/idem-store/idem/internal/mono"
)

// Store is what the middleware needs of idem: *client.Client is one. An
// implementation may fail over between several clients (idem proxy does).
type Store interface {
	Claim(ctx context.Context, req client.ClaimRequest) (*client.ClaimResponse, error)
	Complete(ctx context.Context, req client.CompleteRequest) (*client.CompleteResponse, error)
	Release(ctx context.Context, req client.ReleaseRequest) (*client.ReleaseResponse, error)
	Extend(ctx context.Context, req client.ExtendRequest) (*client.ExtendResponse, error)
}

var (
	_ Store = (*client.Client)(nil)
	_ Store = (*client.Batcher)(nil)
)

// Options configure the middleware. Only Store is required.
type Options struct {
	// Store is the idem cluster: a *client.Client, or a *client.Batcher
	// made from one to send the store calls of many concurrent requests
	// together (fewer, larger requests to the store; while batches are
	// in flight a call waits up to the batcher's linger, 0.5 ms by
	// default).
	Store Store

	// Principal returns the tenant the request acts for, from the
	// application's own authentication. An error answers 401 and the
	// handler does not run; the caller reads its text only when it is a
	// CallerError (any other is logged, and the caller told the principal
	// could not be determined). Default: AuthorizationPrincipal, a hash of the
	// credential itself, refusing a request without one: set Principal to the tenant's id when credentials
	// rotate (short-lived bearer tokens), or a retry sent with a fresh
	// token is another tenant's request and runs again.
	Principal func(r *http.Request) (string, error)

	// Challenge is the WWW-Authenticate challenge of the 401 answered when
	// Principal fails (RFC 9110 11.6.1: a 401 names how to authenticate),
	// unless a handler before the middleware set that header already.
	// Default: Basic realm="idempotency" for a request that sent Basic
	// credentials, else Bearer. Set it where callers authenticate
	// otherwise (Bearer realm="payments", Basic realm="api").
	Challenge string

	// Endpoint names the operation; default DefaultEndpoint (method and
	// route pattern, else method and path).
	Endpoint func(r *http.Request) string

	// Fingerprint returns the hex fingerprint of the request; body is the
	// whole request body, which r.Body holds too (a Fingerprint may read
	// either; the handler gets the whole body all the same). An error
	// answers 400, its text in the detail only when it is a CallerError
	// (any other is logged).
	// Default: DefaultFingerprint.
	Fingerprint func(r *http.Request, endpoint string, body []byte) (string, error)

	// Reauthorize, when set, runs before a stored answer is replayed: the
	// answer was authorized when it was computed, and the caller's
	// permissions may have changed since. An error answers 403, its text
	// in the detail only when it is a CallerError (any other is logged).
	Reauthorize func(r *http.Request, rec *client.Record) error

	// Methods that need an Idempotency-Key; default POST and PATCH.
	Methods []string

	// Lease of an attempt, extended in the background while the handler
	// runs; default 30s. Keep it at ShortLease or more: an answer the
	// store cannot take before the lease runs out (the cluster electing a
	// leader, a stopped node: seconds) lets a retry take the key over and
	// run the handler again; New logs a warning below it, and refuses a
	// Lease outside 100ms to 1h. It must be
	// within the store's --min-lease and --max-lease, or every claim is
	// refused (503 to the caller): New reads them from a Store that has
	// a Config method (*client.Client, not a client.Batcher) and logs at
	// error, once, when Lease is outside them.
	Lease time.Duration

	// WaitInProgress, when positive, makes a request whose key another
	// attempt holds wait up to this long for that attempt's answer instead
	// of answering 409 at once.
	WaitInProgress time.Duration

	// MaxBodyBytes bounds the request body read for the fingerprint;
	// larger requests get 413. Default 1 MiB.
	MaxBodyBytes int64

	// MaxStoredBody is the largest answer body stored for replays: set it
	// to the store's --max-response-bytes (default 65,536). Larger answers
	// are stored without their body (see the package doc).
	MaxStoredBody int

	// StoreTimeout bounds a claim, complete or release with its retries:
	// an unreachable store (or one electing a leader) is asked again until
	// then, so with the store down a request gets its 503 after
	// StoreTimeout. Default 5s. The complete of an answer is asked for at
	// most half the Lease before it goes on in the background, where the
	// lease is kept (nothing extends it meanwhile: longer, the lease could
	// run out while the answer waited, and a retry run the request a
	// second time); New logs a warning when StoreTimeout is longer.
	StoreTimeout time.Duration

	// CallerGoneTimeout is how long a handler goes on once its caller has
	// gone before its context is cancelled with ErrCallerGone. The caller
	// going away does not stop the handler at once (a payment half done
	// must finish, and its answer is stored for the retry); this bounds a
	// handler that ends only on its context (a long poll, a stream), which
	// would otherwise run, and hold its key, for ever. Default 10 minutes;
	// keep it longer than your slowest handler, since a handler cut short
	// has its key released and the retry runs it again.
	CallerGoneTimeout time.Duration

	// FailOpen runs the handler without protection when the store is
	// unreachable, instead of answering 503. UNSAFE: a retry during the
	// outage runs the handler again (a second payment). Use it only for
	// operations whose repetition is harmless.
	FailOpen bool

	// Logger receives the middleware's warnings; default slog.Default().
	Logger *slog.Logger
}

// ErrLeaseLost is the cause of a handler's cancelled context when another
// attempt took its key over: the handler must not commit its effect.
var ErrLeaseLost = errors.New("middleware: the attempt's lease was lost to another attempt")

// ErrLeaseExpired is the cause of a handler's cancelled context when the
// store could not extend the lease before it ran out (unreachable, or not
// answering): from then on a retry that reaches the store may take the key
// over and run the handler beside this one, so the handler must not commit
// its effect either. It wraps ErrLeaseLost: errors.Is(cause, ErrLeaseLost)
// holds for both.
var ErrLeaseExpired = fmt.Errorf("%w: the store did not extend it before it ran out", ErrLeaseLost)

// ErrCallerGone is the cause of a handler's cancelled context
// Options.CallerGoneTimeout after its caller went away: a handler that ends
// only on its context (a stream, a long poll) would otherwise run, and keep
// its key, for ever. A handler that then returns without writing anything
// has its key released, not an empty 200 stored.
var ErrCallerGone = errors.New("middleware: the caller went away long ago (Options.CallerGoneTimeout)")

// Headers the middleware writes.
const (
	HeaderKey         = "Idempotency-Key"
	HeaderReplayed    = "Idempotency-Replayed"
	HeaderBodyOmitted = "Idempotency-Body-Omitted"
)

// The values of HeaderBodyOmitted.
const (
	OmittedTooLarge = "too-large"
	OmittedStreamed = "streamed"
	// OmittedRefused: the store refused the answer as the handler wrote it
	// (it never should: headers it would refuse are left out first), so
	// only the status was stored.
	OmittedRefused = "refused"
)

// maxKeyBytes is the longest key the store accepts.
const maxKeyBytes = 255

type mw struct {
	o        Options
	methods  map[string]bool
	log      *slog.Logger
	unclaims unclaims // unclaim.go
	running  running  // unclaim.go

	// leaseRefused counts the requests refused because the store refused
	// Options.Lease, and leaseLog spaces the error that says so: every
	// keyed request meets it, and a log line each buried the rest.
	leaseRefused atomic.Int64
	leaseLog     mono.Spacer
	// foldedLists counts the answers stored with their header lists
	// folded (complete), and foldLog spaces the warning that says so.
	foldedLists atomic.Int64
	foldLog     mono.Spacer
	// bodiesOmitted, statusesAlone and foldsOmitted count the answers
	// stored without their body or with their status alone (complete's,
	// foldingListsAfter's folded ones), and their logs space the warnings
	// that say so: a store of smaller limits than the middleware's refuses
	// every such answer, and a client sending one per request made a line
	// each.
	bodiesOmitted, statusesAlone, foldsOmitted atomic.Int64
	bodyLog, statusLog, foldOmitLog            mono.Spacer
	// principalErrs, fingerprintErrs and reauthorizeErrs space the lines
	// of those options' plain errors (callerDetail).
	principalErrs, fingerprintErrs, reauthorizeErrs optionLog
}

// ShortLease is the shortest Lease New takes without a warning: a lease
// must outlast a leader election plus a store call, or the answer of an
// attempt whose store was failing over may be stored too late.
const ShortLease = 10 * time.Second

// New returns the middleware configured by o, or an error naming every
// option that is wrong.
func New(o Options) (func(http.Handler) http.Handler, error) {
	var errs []error
	if o.Store == nil {
		errs = append(errs, errors.New("middleware: Options.Store is required"))
	}
	if o.Lease == 0 {
		o.Lease = 30 * time.Second
	}
	if o.Lease < 100*time.Millisecond || o.Lease > time.Hour {
		errs = append(errs, fmt.Errorf("middleware: Options.Lease must be between 100ms and 1h (got %s)", o.Lease))
	}
	if o.WaitInProgress < 0 {
		errs = append(errs, fmt.Errorf("middleware: Options.WaitInProgress must not be negative (got %s)", o.WaitInProgress))
	}
	if o.MaxBodyBytes == 0 {
		o.MaxBodyBytes = 1 << 20
	}
	if o.MaxBodyBytes < 0 {
		errs = append(errs, fmt.Errorf("middleware: Options.MaxBodyBytes must be positive (got %d)", o.MaxBodyBytes))
	}
	if o.MaxStoredBody == 0 {
		o.MaxStoredBody = 65536
	}
	if o.MaxStoredBody < 0 {
		errs = append(errs, fmt.Errorf("middleware: Options.MaxStoredBody must be positive (got %d)", o.MaxStoredBody))
	}
	if o.StoreTimeout == 0 {
		o.StoreTimeout = 5 * time.Second
	}
	if o.StoreTimeout < 0 {
		errs = append(errs, fmt.Errorf("middleware: Options.StoreTimeout must be positive (got %s)", o.StoreTimeout))
	}
	if o.CallerGoneTimeout == 0 {
		o.CallerGoneTimeout = 10 * time.Minute
	}
	if o.CallerGoneTimeout < 0 {
		errs = append(errs, fmt.Errorf("middleware: Options.CallerGoneTimeout must be positive (got %s)", o.CallerGoneTimeout))
	}
	if len(o.Methods) == 0 {
		o.Methods = []string{http.MethodPost, http.MethodPatch}
	}
	methods := map[string]bool{}
	for _, m := range o.Methods {
		if m == "" || strings.ToUpper(m) != m {
			errs = append(errs, fmt.Errorf("middleware: Options.Methods: %q is not an upper-case method", m))
		}
		methods[m] = true
	}
	if o.Principal == nil {
		o.Principal = AuthorizationPrincipal
	}
	if strings.ContainsFunc(o.Challenge, func(r rune) bool { return r < 0x20 && r != '\t' || r == 0x7f }) {
		errs = append(errs, fmt.Errorf("middleware: Options.Challenge: %q has a control character", o.Challenge))
	}
	if o.Endpoint == nil {
		o.Endpoint = DefaultEndpoint
	}
	if o.Fingerprint == nil {
		o.Fingerprint = DefaultFingerprint
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	if o.Lease < ShortLease {
		o.Logger.Warn("idempotency lease is shorter than "+ShortLease.String()+": an answer the store cannot take before the lease runs out (while the cluster elects a leader, or a node is stopped: seconds) lets a retry take the key over and run the handler a second time; a walk under faults charged payments twice with a 3s lease. Use a lease of "+ShortLease.String()+" or more",
			"lease", o.Lease)
	}
	if o.StoreTimeout > o.Lease/2 {
		o.Logger.Warn("idempotency StoreTimeout (idem proxy's --store-timeout) is longer than half the Lease (--lease): nothing extends the lease between the handler's answer and its complete going on in the background, so an answer's complete is asked for half the lease, not StoreTimeout, before it goes on there (the lease kept); set StoreTimeout to at most half the Lease",
			"store-timeout", o.StoreTimeout, "lease", o.Lease, "complete-for", o.Lease/2)
	}
	m := &mw{o: o, methods: methods, log: o.Logger}
	m.principalErrs.option, m.fingerprintErrs.option, m.reauthorizeErrs.option = "Options.Principal", "Options.Fingerprint", "Options.Reauthorize"
	if cs, ok := o.Store.(configStore); ok {
		go m.checkLease(cs)
	}
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { m.serve(w, r, next) })
	}, nil
}

// configStore is a Store that reads the store's published settings (GET
// /v1/config): *client.Client is one.
type configStore interface {
	Config(ctx context.Context) (*client.ServerConfig, error)
}

// checkLease says once, at New, when Options.Lease is outside the store's
// --min-lease/--max-lease: the store would refuse every claim, and every
// keyed request would be answered 503, each logged as it comes. Not a
// reason to fail New: the store may be away, and one node's flags may not
// be the others'. Nothing is logged when the store cannot be read (away,
// or a token that may not read /v1/config): each refused claim says why.
func (m *mw) checkLease(s configStore) {
	ctx, cancel := context.WithTimeout(context.Background(), m.o.StoreTimeout)
	defer cancel()
	cfg, err := s.Config(ctx)
	if err != nil || cfg == nil {
		return
	}
	if outside, lo, hi := cfg.LeaseOutside(m.o.Lease); outside {
		m.log.Error("idempotency Options.Lease is outside the store's --min-lease/--max-lease: the store refuses every claim, and every keyed request is answered 503; set Options.Lease within them",
			"lease", m.o.Lease, "store-min-lease", lo, "store-max-lease", hi)
	}
}

// AuthorizationPrincipal is the default principal: a hash of the
// Authorization header, so each credential is its own tenant. A keyed
// request without one is refused (401): callers that present no
// credential would share one tenant, and a caller who picked another's
// key would be handed that caller's stored answer, Set-Cookie and all.
// Services that authenticate otherwise (cookies, mTLS, an API-key header)
// set Principal; AnonymousPrincipal keeps one shared tenant on purpose.
//
// A scheme without a credential ("Bearer", "Bearer " from an unset token
// variable), or with the text of an unset value ("Bearer undefined",
// "Bearer null", "Bearer None"), is no credential, and refused alike.
//
// A request with the header twice is refused too: the principal would be
// the first's hash, and a service that authenticates with the last would
// store a caller's answer under another's credential (a shared guest one,
// say) for whoever sends that first.
func AuthorizationPrincipal(r *http.Request) (string, error) {
	cred, err := credential(r)
	if err != nil {
		return "", err
	}
	return plainPrincipal(cred), nil
}

// plainPrincipal is AuthorizationPrincipal's principal of a canonical
// credential: "authz:" and 32 hex digits of its SHA-256.
func plainPrincipal(cred string) string {
	sum := sha256.Sum256([]byte(cred))
	return "authz:" + hex.EncodeToString(sum[:16])
}

// keyedPrincipal is KeyedAuthorizationPrincipal's principal of a canonical
// credential: "authk:" and 32 hex digits of its HMAC-SHA256 under key.
func keyedPrincipal(key []byte, cred string) string {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(cred))
	return "authk:" + hex.EncodeToString(m.Sum(nil)[:16])
}

// credential is the request's one Authorization header, canonical
// (canonicalAuthorization), or AuthorizationPrincipal's refusal.
func credential(r *http.Request) (string, error) {
	vs := r.Header.Values("Authorization")
	if len(vs) > 1 {
		return "", callerErrorf("the request has the Authorization header %d times", len(vs))
	}
	if len(vs) == 0 {
		return "", errNoAuthorization
	}
	if noCredential(vs[0]) {
		return "", errNoCredential
	}
	return canonicalAuthorization(vs[0]), nil
}

// KeyedAuthorizationPrincipal returns AuthorizationPrincipal with the
// credential's hash keyed: the first 16 bytes of HMAC-SHA256 under key,
// written "authk:" and 32 hex digits, with the same refusals.
//
// AuthorizationPrincipal's plain SHA-256 is what the store keeps, logs (a
// released attempt names its principal) and backs up; anyone who reads
// those can hash guesses of a credential and compare: a Basic-auth
// password or a short API key falls to a word list. Under a secret key
// (32 random bytes or more, the same for every instance in front of one
// store) a guess cannot be tested without it. Starting, changing or
// dropping the key changes every principal: a key retried across the
// change is a new key, and its request runs again.
func KeyedAuthorizationPrincipal(key []byte) func(*http.Request) (string, error) {
	key = bytes.Clone(key)
	return func(r *http.Request) (string, error) {
		cred, err := credential(r)
		if err != nil {
			return "", err
		}
		return keyedPrincipal(key, cred), nil
	}
}

// KeyedAnonymousPrincipal is AnonymousPrincipal with
// KeyedAuthorizationPrincipal's keyed hash for callers that present a
// credential.
func KeyedAnonymousPrincipal(key []byte) func(*http.Request) (string, error) {
	keyed := KeyedAuthorizationPrincipal(key)
	key = bytes.Clone(key)
	return func(r *http.Request) (string, error) {
		if noAuthorization(r) {
			return "anonymous", nil
		}
		if unsetAuthorization(r) { // as AnonymousPrincipal
			return keyedPrincipal(key, canonicalAuthorization(r.Header.Get("Authorization"))), nil
		}
		return keyed(r)
	}
}

// canonicalAuthorization writes a credential as "Scheme rest": the
// scheme is case-insensitive (RFC 9110 11.1) and the space after it may be
// more than one, so "bearer T" and "Bearer  T" are the caller of "Bearer
// T", which keeps the hash it always had. The credential itself is not
// touched: a refreshed token is another principal.
func canonicalAuthorization(v string) string {
	v = strings.TrimSpace(v)
	i := strings.IndexAny(v, " \t")
	if i <= 0 {
		return v // a scheme alone, or no scheme: left as it is
	}
	scheme, rest := v[:i], strings.TrimLeft(v[i:], " \t")
	return strings.ToUpper(scheme[:1]) + strings.ToLower(scheme[1:]) + " " + rest
}

// noCredential reports an Authorization header that carries no
// credential: empty, or an authentication scheme alone ("Bearer", "Bearer
// " with the token variable unset). Hashed as a credential, it made every
// caller whose token was unset one principal, handed each other's stored
// answers. A single word that is no scheme's name stays a credential (an
// API key sent bare).
//
// A credential that is the text of an unset value ("Bearer undefined",
// "Bearer null", "Bearer None", "Bearer <nil>": a client that formats a
// token variable it never set) is none either: hashed, it made every such
// caller one principal, and an upstream that serves a caller whose token
// it cannot read (a guest checkout that goes by a cookie) had one caller's
// stored answer, Set-Cookie and all, replayed to another that sent the
// same key.
func noCredential(v string) bool {
	return schemeAlone(v) || unsetCredential(v)
}

// unsetCredential reports an Authorization header whose credential is the
// text of an unset value (noCredential).
func unsetCredential(v string) bool {
	v = strings.TrimSpace(v)
	if i := strings.IndexAny(v, " \t"); i >= 0 {
		cred := strings.TrimLeft(v[i:], " \t")
		return unsetValue(cred) || strings.EqualFold(v[:i], "basic") && unsetBasic(cred)
	}
	return unsetValue(v)
}

// unsetBasic reports Basic credentials (base64 of user:password) whose
// user and password are both empty or the text of an unset value: ":"
// ("Basic Og==") is what curl -u :, axios and Python's requests send for
// a username and password left unset, one principal for every such
// caller. A user alone (an API key sent as the user) is a credential.
func unsetBasic(cred string) bool {
	b, err := base64.StdEncoding.DecodeString(cred)
	if err != nil {
		if b, err = base64.RawStdEncoding.DecodeString(cred); err != nil {
			return false
		}
	}
	user, password, ok := strings.Cut(string(b), ":")
	return ok && (user == "" || unsetValue(user)) && (password == "" || unsetValue(password))
}

// schemeAlone reports an Authorization header that is empty or an
// authentication scheme alone (noCredential).
func schemeAlone(v string) bool {
	v = strings.TrimSpace(v)
	if v == "" {
		return true
	}
	if strings.ContainsAny(v, " \t") {
		return false
	}
	switch strings.ToLower(v) {
	// The IANA HTTP Authentication Scheme Registry, and Token (GitHub's,
	// Django REST framework's).
	case "basic", "bearer", "concealed", "digest", "dpop", "gnap", "hoba", "mutual", "negotiate", "oauth",
		"privatetoken", "scram-sha-1", "scram-sha-256", "vapid", "token":
		return true
	}
	return false
}

// unsetValue reports the text that languages print for a variable with no
// value: JavaScript's undefined, null and [object Object], Python's None,
// Go's <nil> (and %!s(<nil>) from a nil interface), Ruby's and Lua's nil,
// NaN.
func unsetValue(v string) bool {
	switch strings.ToLower(v) {
	case "undefined", "null", "none", "nil", "<nil>", "%!s(<nil>)", "%!v(<nil>)", "nan", "[object object]":
		return true
	}
	return false
}

var errNoAuthorization error = &CallerError{Detail: "the request has no Authorization header, and idempotency keys belong to the caller's credential"}

// errNoCredential is errNoAuthorization for a header that holds a scheme
// alone ("Bearer "): told it had no header, its sender looked for the
// wrong fault.
var errNoCredential error = &CallerError{Detail: "the request's Authorization header holds no credential (a scheme alone, nothing, the text of an unset value such as undefined or null, or Basic credentials with neither user nor password), and idempotency keys belong to the caller's credential"}

// AnonymousPrincipal is AuthorizationPrincipal, except that requests
// without an Authorization header share the principal "anonymous": for a
// service whose callers all trust one another (one internal client), where
// one caller's stored answer may be replayed to another that sends the
// same key. A scheme without a credential ("Bearer") is no header, for
// both. The text of an unset value ("Bearer undefined"), which
// AuthorizationPrincipal refuses, keeps the principal it had before it
// was: a hash of the header, shared by every caller that sends it, as
// "anonymous" is (taken for "anonymous", every request stored under it
// ran again when its client retried across the upgrade).
func AnonymousPrincipal(r *http.Request) (string, error) {
	if noAuthorization(r) {
		return "anonymous", nil
	}
	if unsetAuthorization(r) {
		return plainPrincipal(canonicalAuthorization(r.Header.Get("Authorization"))), nil
	}
	return AuthorizationPrincipal(r)
}

// noAuthorization reports a request without an Authorization header, or
// with one that holds a scheme alone.
func noAuthorization(r *http.Request) bool {
	vs := r.Header.Values("Authorization")
	return len(vs) == 0 || (len(vs) == 1 && schemeAlone(vs[0]))
}

// unsetAuthorization reports a request with one Authorization header whose
// credential is the text of an unset value ("Bearer undefined").
func unsetAuthorization(r *http.Request) bool {
	vs := r.Header.Values("Authorization")
	return len(vs) == 1 && !schemeAlone(vs[0]) && unsetCredential(vs[0])
}

// HeaderPrincipal returns a Principal that reads the named header, set by a
// trusted gateway; a request without it, or with it twice, is refused with
// 401. Twice: a gateway that adds the header rather than replacing the
// caller's would leave the caller's own value first. A value with a comma
// is refused alike: it is two values joined on one line (RFC 9110 5.3;
// Apache's RequestHeader append writes "victim, attacker", and httpd joins
// a header sent twice so), whose first a handler that reads a list takes.
// A tenant id with a comma in it (a certificate's subject DN) needs a
// Principal of its own, or a header without one.
func HeaderPrincipal(name string) func(*http.Request) (string, error) {
	return func(r *http.Request) (string, error) {
		switch vs := r.Header.Values(name); {
		case len(vs) > 1:
			return "", callerErrorf("the request has the %s header %d times", name, len(vs))
		case len(vs) == 1 && strings.Contains(vs[0], ","):
			return "", callerErrorf("the request's %s header holds a comma: it reads as more than one value (a header sent twice, joined)", name)
		case len(vs) == 1 && vs[0] != "":
			return vs[0], nil
		}
		return "", callerErrorf("the request has no %s header", name)
	}
}

// DefaultEndpoint is the method and route pattern (r.Pattern, set by a Go
// 1.22 ServeMux for the handler it routes to), else the method and path.
// The pattern is that of the mux that routed to the middleware: wrapping a
// mux mounted under another gives every route of it the outer pattern.
// One longer than MaxEndpointBytes keeps its first bytes and ends in a
// hash of the whole, so that it fits the store's default --max-scope-bytes
// and two long paths stay two endpoints: the store refused it, and every
// request to a long path got 400 without running.
func DefaultEndpoint(r *http.Request) string {
	if p := r.Pattern; p != "" {
		if m, rest, ok := strings.Cut(p, " "); ok && m == r.Method {
			return fitEndpoint(m + " " + strings.TrimLeft(rest, " "))
		}
		return fitEndpoint(r.Method + " " + p)
	}
	return fitEndpoint(r.Method + " " + canonicalPath(r.URL.EscapedPath()))
}

// canonicalPath normalizes a path's percent-encoding as RFC 3986 (6.2.2)
// allows without changing what it names: an escaped unreserved character
// is written as itself, and every other escape with upper-case hex. So
// /%70ay and /pay, which every server routes alike, are one endpoint (and
// one request to the fingerprint): a retry whose client encoded the path
// otherwise was a new endpoint, and ran again. /a%2Fb stays apart from
// /a/b: a server may route the two differently.
func canonicalPath(p string) string {
	if !strings.Contains(p, "%") {
		return p
	}
	var b strings.Builder
	b.Grow(len(p))
	for i := 0; i < len(p); i++ {
		if p[i] == '%' && i+2 < len(p) && isHex(p[i+1]) && isHex(p[i+2]) {
			c := unhex(p[i+1])<<4 | unhex(p[i+2])
			if unreserved(c) {
				b.WriteByte(c)
			} else {
				b.WriteByte('%')
				b.WriteByte(upperHex[c>>4])
				b.WriteByte(upperHex[c&15])
			}
			i += 2
			continue
		}
		b.WriteByte(p[i])
	}
	return b.String()
}

const upperHex = "0123456789ABCDEF"

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

func unhex(c byte) byte {
	switch {
	case c <= '9':
		return c - '0'
	case c >= 'a':
		return c - 'a' + 10
	}
	return c - 'A' + 10
}

func unreserved(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '.' || c == '_' || c == '~'
}

// MaxEndpointBytes is the longest endpoint DefaultEndpoint makes: the
// store's default --max-scope-bytes.
const MaxEndpointBytes = 255

func fitEndpoint(e string) string {
	if len(e) <= MaxEndpointBytes {
		return e
	}
	sum := sha256.Sum256([]byte(e))
	tail := "~" + hex.EncodeToString(sum[:16])
	head := strings.ToValidUTF8(e[:MaxEndpointBytes-len(tail)], "")
	return head + tail
}

// DefaultFingerprint is SHA-256 of the method, path, raw query,
// Content-Type and body (and the request's trailers, when its chunked
// body ended with any: trailerFields), each length-prefixed so no two requests collide by
// moving bytes between fields. The path, not the endpoint: under the
// endpoint POST /payments/{id}/capture, one key sent for two ids is two
// requests (422), not a replay of the other payment's answer. Every
// Content-Type the request has counts; a multipart body counts as its
// parts, without the boundary its client picked at random (a form made
// anew for its retry is the same request).
func DefaultFingerprint(r *http.Request, endpoint string, body []byte) (string, error) {
	return fingerprint(sha256.New(), r, body), nil
}

// KeyedFingerprint returns DefaultFingerprint keyed: HMAC-SHA256 under
// key over the same fields. The store keeps fingerprints as they are,
// even with encryption at rest (they must be compared), so a plain hash of
// a guessable request (a small body of known shape) can be confirmed by
// whoever reads the store's data or backups; keyed, it cannot without the
// key. Every instance in front of one store needs the same key, and
// changing it makes a retry across the change a different request (422).
func KeyedFingerprint(key []byte) func(r *http.Request, endpoint string, body []byte) (string, error) {
	key = bytes.Clone(key)
	return func(r *http.Request, endpoint string, body []byte) (string, error) {
		return fingerprint(hmac.New(sha256.New, key), r, body), nil
	}
}

// HeaderFingerprint returns fp extended by the named request headers, for
// an application that picks what a request acts on by a header (an
// account header, X-HTTP-Method-Override) or by its Host ("Host": the
// request's host, in lower case): with fp alone a request that differs
// from another only there has the other's fingerprint, and a key sent
// with both is replayed the first one's answer. A request that has none
// of the headers keeps fp's fingerprint, so that naming a header keeps
// the records stored before for such requests (not for those that carry
// it: a retry of one across the change is another request, 422); one
// that has any gets SHA-256 of fp's
// fingerprint and every named header's values, length-prefixed (keyed
// already when fp is KeyedFingerprint). The names are a set: their order,
// case and repeats do not change a fingerprint.
func HeaderFingerprint(fp func(r *http.Request, endpoint string, body []byte) (string, error), names ...string) func(r *http.Request, endpoint string, body []byte) (string, error) {
	// A set: in order and once each, so that instances given the same
	// names in another order (or one twice) agree on every fingerprint.
	canon := make([]string, len(names))
	for i, n := range names {
		canon[i] = http.CanonicalHeaderKey(n)
	}
	slices.Sort(canon)
	canon = slices.Compact(canon)
	return func(r *http.Request, endpoint string, body []byte) (string, error) {
		base, err := fp(r, endpoint, body)
		if err != nil {
			return "", err
		}
		var fields []byte
		found := false
		for _, n := range canon {
			vs := r.Header.Values(n)
			if n == "Host" {
				vs = []string{strings.ToLower(r.Host)}
			}
			found = found || len(vs) > 0
			fields = binary.BigEndian.AppendUint64(fields, uint64(len(vs)))
			for _, v := range vs {
				fields = binary.BigEndian.AppendUint64(fields, uint64(len(v)))
				fields = append(fields, v...)
			}
		}
		if !found {
			return base, nil
		}
		h := sha256.New()
		h.Write([]byte("headers\x00" + base + "\x00"))
		h.Write(fields)
		return hex.EncodeToString(h.Sum(nil)), nil
	}
}

// fingerprint writes DefaultFingerprint's fields into h and returns its
// sum in hex.
//
// Content-Type sent more than once counts every value (the first alone
// let a retry that added a second, which an upstream may read instead,
// replay the first request's answer). A multipart body counts its parts,
// not its boundary (multipartFields).
func fingerprint(h hash.Hash, r *http.Request, body []byte) string {
	var n [8]byte
	ct := strings.Join(r.Header.Values("Content-Type"), ", ")
	if r.Context().Value(wholeBody{}) == nil { // else as the releases before (earlierFingerprint)
		if mct, mbody, ok := multipartFields(ct, body); ok {
			ct, body = mct, mbody
		}
	}
	parts := [][]byte{[]byte(r.Method), []byte(canonicalPath(r.URL.EscapedPath())), []byte(r.URL.RawQuery), []byte(ct), body}
	if t := trailerFields(r.Trailer); t != nil {
		parts = append(parts, t)
	}
	for _, part := range parts {
		binary.BigEndian.PutUint64(n[:], uint64(len(part)))
		h.Write(n[:])
		h.Write(part)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// trailerFields is the fingerprint's field of a request's trailers (the
// fields a chunked body ends with, read with it: r.Trailer once the body
// is read whole), or nil for a request that sent none, whose fingerprint
// stays what it was. They reach the handler, and idem proxy's upstream,
// as part of the request: uncounted, a retry of a key with another
// trailer (X-Amount: 100, then 999) was replayed the first request's
// answer, not told 422. Names in order, each with its values,
// length-prefixed; a name declared in Trailer that never came is none.
func trailerFields(t http.Header) []byte {
	raw := slices.Sorted(maps.Keys(t))
	byName := map[string][]string{}
	for _, k := range raw {
		if vs := t[k]; len(vs) > 0 {
			c := http.CanonicalHeaderKey(k)
			byName[c] = append(byName[c], vs...)
		}
	}
	if len(byName) == 0 {
		return nil
	}
	out := []byte("trailers\x00")
	for _, k := range slices.Sorted(maps.Keys(byName)) {
		vs := byName[k]
		out = binary.BigEndian.AppendUint64(out, uint64(len(k)))
		out = append(out, k...)
		out = binary.BigEndian.AppendUint64(out, uint64(len(vs)))
		for _, v := range vs {
			out = binary.BigEndian.AppendUint64(out, uint64(len(v)))
			out = append(out, v...)
		}
	}
	return out
}

// maxMultipartParts and maxMultipartHeaders bound the parts, and their
// header fields in all, of a multipart body fingerprinted by its parts,
// as Go's ParseMultipartForm bounds them (1000, 10,000): it is parsed
// before the claim, for any caller, and 1 MiB of empty parts took a
// million allocations and 160 ms of CPU. A body past either is
// fingerprinted whole.
const (
	maxMultipartParts   = 1000
	maxMultipartHeaders = 10000
)

// multipartFields returns the Content-Type and body fields of a multipart
// request without its boundary: every client picks a random boundary for
// each request it makes (curl -F, browsers, Go's mime/multipart, Python's
// requests), so a retry of an upload or a form, made anew, was always
// another request (422), and its sender never learned what became of the
// first. The Content-Type is its media type and parameters but the
// boundary, the body each part's headers and content, all
// length-prefixed; the preamble and epilogue, which carry nothing, are
// left out. The Content-Type field starts with a NUL, which no header
// value holds, so that no request fingerprinted whole has its fields. A
// body that is not well-formed multipart is fingerprinted whole (ok
// false), as is one of more than maxMultipartParts parts or
// maxMultipartHeaders part headers.
func multipartFields(ct string, body []byte) (string, []byte, bool) {
	mt, params, err := mime.ParseMediaType(ct)
	if err != nil || !strings.HasPrefix(mt, "multipart/") || params["boundary"] == "" {
		return "", nil, false
	}
	mr := multipart.NewReader(bytes.NewReader(body), params["boundary"])
	var out []byte
	field := func(b []byte) {
		out = binary.BigEndian.AppendUint64(out, uint64(len(b)))
		out = append(out, b...)
	}
	parts, headers := 0, 0
	for {
		p, err := mr.NextRawPart()
		if err == io.EOF {
			break
		}
		if err != nil {
			return "", nil, false
		}
		if parts++; parts > maxMultipartParts {
			return "", nil, false
		}
		if headers += len(p.Header); headers > maxMultipartHeaders {
			return "", nil, false
		}
		content, err := io.ReadAll(p)
		if err != nil {
			return "", nil, false
		}
		names := slices.Sorted(maps.Keys(p.Header))
		field(binary.BigEndian.AppendUint64(nil, uint64(len(names))))
		for _, k := range names {
			field([]byte(k))
			field([]byte(strings.Join(p.Header[k], "\x00")))
		}
		field(content)
	}
	if parts == 0 {
		return "", nil, false
	}
	delete(params, "boundary")
	return "\x00" + mime.FormatMediaType(mt, params), out, true
}

// sfParameters reports whether s is the parameters of a structured-field
// item and nothing more (RFC 8941: ;key or ;key=bare-item, each), white
// space around the semicolons allowed. A bare item that is not a string is
// taken as a run of the characters integers, decimals, tokens, byte
// sequences and booleans are written with.
func sfParameters(s string) bool {
	for {
		s = strings.TrimLeft(s, " \t")
		if s == "" {
			return true
		}
		if s[0] != ';' {
			return false
		}
		s = strings.TrimLeft(s[1:], " ")
		n := 0
		for n < len(s) && (s[n] >= 'a' && s[n] <= 'z' || s[n] == '*' ||
			n > 0 && (s[n] >= '0' && s[n] <= '9' || strings.IndexByte("_-.", s[n]) >= 0)) {
			n++
		}
		if n == 0 {
			return false
		}
		s = s[n:]
		if s == "" || s[0] != '=' {
			continue
		}
		s = s[1:]
		if s != "" && s[0] == '"' {
			i := 1
			for ; i < len(s) && s[i] != '"'; i++ {
				if s[i] == '\\' {
					i++
					if i >= len(s) || (s[i] != '"' && s[i] != '\\') {
						return false
					}
				} else if s[i] < 0x20 || s[i] > 0x7e {
					return false
				}
			}
			if i >= len(s) {
				return false
			}
			s = s[i+1:]
			continue
		}
		n = 0
		for n < len(s) && (s[n] >= 'a' && s[n] <= 'z' || s[n] >= 'A' && s[n] <= 'Z' || s[n] >= '0' && s[n] <= '9' ||
			strings.IndexByte("!#$%&'*+-.^_`|~:/?=", s[n]) >= 0) {
			n++
		}
		if n == 0 {
			return false
		}
		s = s[n:]
	}
}

// ParseKey reads the Idempotency-Key header values of a request: exactly one
// field holding a structured-field string ("abc", parameters after it
// ignored) or a bare key (abc) taken whole, ';' included, of 1 to 255
// printable ASCII characters.
func ParseKey(values []string) (string, error) {
	switch len(values) {
	case 0:
		return "", errKeyMissing
	case 1:
	default:
		return "", fmt.Errorf("%w: the header is sent %d times; send it once", errKeyInvalid, len(values))
	}
	v := strings.Trim(values[0], " \t")
	var key string
	if strings.HasPrefix(v, `"`) {
		var b strings.Builder
		i := 1
		for ; i < len(v); i++ {
			c := v[i]
			if c == '\\' {
				i++
				if i >= len(v) || (v[i] != '"' && v[i] != '\\') {
					return "", fmt.Errorf(`%w: only \" and \\ may be escaped in a structured-field string`, errKeyInvalid)
				}
				b.WriteByte(v[i])
				continue
			}
			if c == '"' {
				break
			}
			if c < 0x20 || c > 0x7e {
				return "", fmt.Errorf("%w: the key must be printable ASCII (0x20-0x7E)", errKeyInvalid)
			}
			b.WriteByte(c)
		}
		if i >= len(v) {
			return "", fmt.Errorf("%w: the string has no closing quote", errKeyInvalid)
		}
		// Parameters of the item (;a=1) carry nothing the key needs;
		// anything else after the string (a list) is refused. The
		// parameters are read, not skipped: "a";p, "b" is a list of two
		// keys, which was taken as the key "a".
		if !sfParameters(v[i+1:]) {
			if rest := strings.TrimLeft(v[i+1:], " \t"); rest[0] == ';' && !strings.Contains(rest, ",") {
				return "", fmt.Errorf("%w: the parameters after the key's string are malformed (each ;name or ;name=value, names in lowercase: RFC 8941)", errKeyInvalid)
			}
			return "", fmt.Errorf("%w: one structured-field string is expected, got more after it", errKeyInvalid)
		}
		key = b.String()
	} else {
		// A bare key is the key as the client wrote it (Stripe's raw
		// keys), ';' and all: only a quoted string may carry parameters
		// after it. Cut at ';', inv-7;part-1 and inv-7;part-2 were one
		// key, and the second was replayed the first's answer.
		if strings.ContainsAny(v, ", \t\"") {
			return "", fmt.Errorf("%w: a bare key must be one token; quote it as a structured-field string (\"...\")", errKeyInvalid)
		}
		for i := 0; i < len(v); i++ {
			if v[i] < 0x21 || v[i] > 0x7e {
				return "", fmt.Errorf("%w: the key must be printable ASCII (0x20-0x7E)", errKeyInvalid)
			}
		}
		key = v
	}
	if key == "" {
		return "", fmt.Errorf("%w: the key is empty", errKeyInvalid)
	}
	if len(key) > maxKeyBytes {
		return "", fmt.Errorf("%w: the key is %d bytes, at most %d are allowed", errKeyInvalid, len(key), maxKeyBytes)
	}
	return key, nil
}

// challenge is the WWW-Authenticate of a 401 for r (Options.Challenge).
// A 401 without one broke RFC 9110 (11.6.1), and clients that act on the
// challenge (a browser, an HTTP library's auth handler) had nothing to go
// by. Basic is named only to a caller that used it: it needs a realm, and
// makes a browser ask for a password.
func (m *mw) challenge(r *http.Request) string {
	if m.o.Challenge != "" {
		return m.o.Challenge
	}
	scheme := strings.TrimSpace(r.Header.Get("Authorization"))
	if i := strings.IndexAny(scheme, " \t"); i >= 0 {
		scheme = scheme[:i]
	}
	if strings.EqualFold(scheme, "basic") {
		return `Basic realm="idempotency"`
	}
	return "Bearer"
}

var (
	errKeyMissing = errors.New("middleware: the Idempotency-Key header is required")
	errKeyInvalid = errors.New("middleware: the Idempotency-Key header is not valid")
)

func (m *mw) serve(w http.ResponseWriter, r *http.Request, next http.Handler) {
	if !m.methods[r.Method] {
		next.ServeHTTP(w, r)
		return
	}
	key, err := ParseKey(r.Header.Values(HeaderKey))
	if err != nil {
		code := "idempotency_key_invalid"
		if errors.Is(err, errKeyMissing) {
			code = "idempotency_key_missing"
		}
		writeProblem(w, http.StatusBadRequest, code, strings.TrimPrefix(err.Error(), "middleware: "), 0)
		return
	}
	principal, err := m.o.Principal(r)
	if err == nil && !utf8.ValidString(principal) {
		// The store's scopes are UTF-8, which JSON carries: the client
		// refuses the others rather than send each bad byte as U+FFFD
		// (two tenants "acme\xff" and "acme\xfe" would be one). Refused
		// here, the caller is told; it was a 503 after every retry.
		err = &CallerError{Detail: "the request's principal is not valid UTF-8"}
	}
	if err != nil || principal == "" {
		if w.Header().Get("WWW-Authenticate") == "" {
			w.Header().Set("WWW-Authenticate", m.challenge(r))
		}
		writeProblem(w, http.StatusUnauthorized, "unauthorized",
			m.callerDetail(r, &m.principalErrs, err, "the request's principal could not be determined"), 0)
		return
	}
	if up := r.Header.Values("Upgrade"); len(up) > 0 && onlyH2C(up) {
		// curl --http2 offers h2c on every http:// request. net/http
		// ignores the offer and answers in HTTP/1.1, so this is an
		// ordinary request: refused, the caller was told to drop its key.
		// The offer is dropped, so that no handler takes it up (a reverse
		// proxy passing it on to an upstream that switches).
		r.Header.Del("Upgrade")
		r.Header.Del("HTTP2-Settings")
	} else if len(up) > 0 {
		// A 101 hands the connection over (hijacked): nothing is stored,
		// the key is released, and every retry runs again.
		writeProblem(w, http.StatusBadRequest, "invalid_request",
			"a request that upgrades its connection (Upgrade: "+r.Header.Get("Upgrade")+") cannot be made idempotent: its answer is a connection, not a response to replay; send it without an Idempotency-Key", 0)
		return
	}
	endpoint := m.o.Endpoint(r)
	if !utf8.ValidString(endpoint) {
		// A path such as /pay%FF: the store's scopes are UTF-8, and the
		// client refuses the others (it used to be a 503 after every
		// retry).
		writeProblem(w, http.StatusBadRequest, "invalid_request", "the request's endpoint (its method and path) is not valid UTF-8", 0)
		return
	}
	if r.ContentLength > m.o.MaxBodyBytes {
		// Its length says it is too large: refused at once, as a node
		// refuses it, rather than after waiting for a body that may never
		// come (a caller that names a length and sends less held the
		// request until its body read timed out, then got 400). Not read:
		// the connection closes after the answer, without draining it.
		w.Header().Set("Connection", "close")
		_ = http.NewResponseController(w).SetReadDeadline(time.Now())
		writeProblem(w, http.StatusRequestEntityTooLarge, "request_too_large",
			fmt.Sprintf("the request body is larger than %d bytes", m.o.MaxBodyBytes), 0)
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, m.o.MaxBodyBytes))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			writeProblem(w, http.StatusRequestEntityTooLarge, "request_too_large",
				fmt.Sprintf("the request body is larger than %d bytes", mbe.Limit), 0)
			return
		}
		writeProblem(w, http.StatusBadRequest, "invalid_request", "the request body could not be read: "+bodyReadError(err), 0)
		return
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	fp, err := m.o.Fingerprint(r, endpoint, body)
	// A Fingerprint that reads r.Body (a canonical JSON form decoded from
	// it) drained it: the handler ran the payment with an empty request.
	r.Body = io.NopCloser(bytes.NewReader(body))
	if err != nil {
		writeProblem(w, http.StatusBadRequest, "invalid_request",
			"the request could not be fingerprinted"+m.callerDetailSuffix(r, &m.fingerprintErrs, err), 0)
		return
	}
	s := scope{principal: principal, endpoint: endpoint, key: key}
	req := client.ClaimRequest{Principal: principal, Endpoint: endpoint, Key: key, Fingerprint: fp,
		LeaseMs: m.o.Lease.Milliseconds(), ClaimID: newClaimID(), CorrelationID: correlationID(r)}

	var deadline time.Time
	if m.o.WaitInProgress > 0 {
		deadline = time.Now().Add(m.o.WaitInProgress)
	}
	pause := 25 * time.Millisecond
	claimedAt := time.Now()
	askedAsBefore := false
	for {
		sentAt := time.Now() // an earlier turn's claim met another attempt: this one's lease is later
		res, err := m.claim(r.Context(), req)
		if err == nil && res.Outcome == client.OutcomeClaimed {
			if res.Attempt > 1 && m.recordOfAnotherEndpoint(r, s) {
				// A takeover, under the store's --scope principal, of a
				// record another endpoint made (released, or its lease
				// ran out): run, this request's answer was stored in
				// that record, and replayed to the other request's
				// retry. The key was used with another request, as for
				// a replay below.
				m.release(r, s, res.Token, "the key's record is of another endpoint")
				writeOtherEndpoint(w)
				return
			}
			m.run(w, r, next, s, res, sentAt)
			return
		}
		if err == nil { // a replay
			if res.Record != nil && res.Record.Endpoint != "" && res.Record.Endpoint != endpoint {
				// Under the store's --scope principal a key is one record
				// across endpoints, replayed to a claim from another whose
				// fingerprint matches: with a Fingerprint of the body alone,
				// a refund sent with a payment's key and body was answered
				// the payment's 201, and never ran. The key was used with
				// another request.
				writeOtherEndpoint(w)
				return
			}
			m.replay(w, r, res.Record)
			return
		}
		var p *client.Problem
		if errors.As(err, &p) && p.Status == http.StatusBadRequest && req.CorrelationID != "" &&
			strings.HasPrefix(p.Detail, "correlation_id ") {
			// X-Request-Id over the store's --max-id-bytes, which may be
			// below the 255 bytes correlationID keeps: it only links the
			// record to the request, and the request was refused 400 for
			// it. Asked again without it (the claim was refused, not
			// applied: its claim_id is unused).
			req.CorrelationID = ""
			continue
		}
		if errors.As(err, &p) && p.Code == client.CodeFingerprintMismatch && !askedAsBefore {
			// A multipart request whose record an earlier release stored,
			// by its whole body (boundary and all): its client resending
			// the same bytes after an upgrade is asked again by that
			// fingerprint (earlierFingerprint).
			askedAsBefore = true
			if before, ok := m.earlierFingerprint(r, endpoint, body, fp); ok {
				req.Fingerprint = before
				continue
			}
		}
		if errors.As(err, &p) && p.Code == client.CodeInProgress && !deadline.IsZero() && time.Now().Before(deadline) {
			wait := min(pause, time.Until(deadline))
			pause = min(pause*2, 500*time.Millisecond)
			select {
			case <-time.After(wait):
				// The same claim again: a replay once the first attempt
				// completed; the key itself once that attempt was
				// released or its lease ran out.
				continue
			case <-r.Context().Done():
				return
			}
		}
		if !refusedByStore(err) {
			m.unclaim(s, req, claimedAt)
		}
		m.refuse(w, r, next, err)
		return
	}
}

// bodyReadError says why a request body could not be read, naming no
// address: net's errors name both ends of the connection ("read tcp
// 10.0.0.5:8080->203.0.113.7:51234: i/o timeout"), and the server's end
// behind a load balancer is an internal address, which every caller that
// sent its body slowly past the http.Server's ReadTimeout was told.
func bodyReadError(err error) string {
	if errors.Is(err, os.ErrDeadlineExceeded) {
		return "it did not arrive in time (the server's read timeout)"
	}
	var op *net.OpError
	if errors.As(err, &op) && op.Err != nil {
		return op.Err.Error()
	}
	return err.Error()
}

// writeOtherEndpoint answers a request whose key's record, under the
// store's --scope principal, is of another endpoint: 422, as a key used
// with another request.
func writeOtherEndpoint(w http.ResponseWriter) {
	writeProblem(w, http.StatusUnprocessableEntity, client.CodeFingerprintMismatch,
		"this Idempotency-Key was used with a request to another endpoint; use a new key for a new request", 0)
}

// recordGetter is a Store that reads a record (client.Client and
// client.Batcher do).
type recordGetter interface {
	Get(ctx context.Context, principal, endpoint, key, consistency string) (*client.Record, error)
}

// recordOfAnotherEndpoint reports whether the record of s this request
// has just claimed was made by another endpoint: under the store's
// --scope principal a key is one record across endpoints, and a claim
// takes over a failed record (or one whose lease ran out) of another
// endpoint whose fingerprint matches. The 201 does not name the record's
// endpoint, which the store never changes, so it is read (any replica
// will do). A Store that cannot read, or a read that fails, says no: the
// attempt runs, as before.
func (m *mw) recordOfAnotherEndpoint(r *http.Request, s scope) bool {
	g, ok := m.o.Store.(recordGetter)
	if !ok {
		return false
	}
	ctx, cancel := context.WithTimeout(r.Context(), m.callTimeout())
	defer cancel()
	rec, err := g.Get(ctx, s.principal, s.endpoint, s.key, client.ConsistencyStale)
	return err == nil && rec != nil && rec.Endpoint != "" && rec.Endpoint != s.endpoint
}

// earlierFingerprint returns the fingerprint the releases before the
// multipart change gave r (its body whole, boundary and all), when it
// differs from fp: a record they stored for a multipart request has it,
// and its client resending the same bytes (Go's GetBody, urllib3's Retry,
// curl --retry keep the boundary) after an upgrade was refused 422 for the
// retention's length, never told what became of the request that ran. Only
// for a request with one Content-Type, multipart: for one with two, the
// earlier releases counted the first alone, and asking by it would replay
// the answer stored for that first alone (what counting both fixed).
func (m *mw) earlierFingerprint(r *http.Request, endpoint string, body []byte, fp string) (string, bool) {
	cts := r.Header.Values("Content-Type")
	if len(cts) != 1 {
		return "", false
	}
	if mt, _, err := mime.ParseMediaType(cts[0]); err != nil || !strings.HasPrefix(mt, "multipart/") {
		return "", false
	}
	before, err := m.o.Fingerprint(r.WithContext(context.WithValue(r.Context(), wholeBody{}, true)), endpoint, body)
	r.Body = io.NopCloser(bytes.NewReader(body)) // for a Fingerprint that reads it
	if err != nil || before == fp {
		return "", false
	}
	return before, true
}

// wholeBody, in a request's context, makes DefaultFingerprint and
// KeyedFingerprint (and HeaderFingerprint over them) fingerprint a
// multipart body whole, as the releases before the multipart change did
// (earlierFingerprint).
type wholeBody struct{}

// onlyH2C reports whether the Upgrade header values offer h2c and
// nothing else.
func onlyH2C(values []string) bool {
	for _, v := range values {
		for p := range strings.SplitSeq(v, ",") {
			if p = strings.TrimSpace(p); p != "" && !strings.EqualFold(p, "h2c") { // an empty element offers nothing
				return false
			}
		}
	}
	return true
}

type scope struct{ principal, endpoint, key string }

// claim asks the store for the key. An unreachable store or a 503 (an
// election) is asked again within StoreTimeout: a claim repeated with its
// claim_id is always safe, and returns the same claim if the first one
// was decided.
func (m *mw) claim(ctx context.Context, req client.ClaimRequest) (*client.ClaimResponse, error) {
	ctx, cancel := context.WithTimeout(ctx, m.o.StoreTimeout)
	defer cancel()
	var res *client.ClaimResponse
	err := retry(ctx, func() (err error) {
		cctx, ccancel := context.WithTimeout(ctx, m.callTimeout())
		defer ccancel()
		res, err = m.o.Store.Claim(cctx, req)
		return err
	})
	return res, err
}

// callTimeout bounds one store call within a claim, extend, complete or
// release, which are asked again (a claim with its claim_id, the others
// with their token: always safe) until StoreTimeout: a quarter of the
// Lease, at most StoreTimeout. A node that takes a call and never answers
// (a leader under SIGSTOP, a stalled disk) kept the whole StoreTimeout
// for one call: with a Lease not much longer, a handler's complete was
// still waiting on it when the lease ran out, while the other nodes had a
// new leader; a retry took the key over there and ran the handler a second
// time (a walk under faults: Lease 3 s, a payment charged twice, its first
// caller and its retries told two charges). Cut, the call is asked again,
// of the next node for a client of several (a call that timed out moves
// the client on).
func (m *mw) callTimeout() time.Duration {
	return min(m.o.StoreTimeout, max(m.o.Lease/4, 50*time.Millisecond))
}

// refuse answers a claim that did not give this request the key.
func (m *mw) refuse(w http.ResponseWriter, r *http.Request, next http.Handler, err error) {
	var p *client.Problem
	if errors.As(err, &p) {
		switch {
		case p.Code == client.CodeInProgress:
			// The store's Retry-After is when the lease would run out, the
			// worst case; the attempt usually ends far sooner, so the
			// client is told to come back in a second.
			writeProblem(w, http.StatusConflict, p.Code,
				"a request with this Idempotency-Key is still being processed; retry after Retry-After", 1)
			return
		case p.Code == client.CodeFingerprintMismatch:
			writeProblem(w, http.StatusUnprocessableEntity, p.Code,
				"this Idempotency-Key was used with a different request; use a new key for a new request", 0)
			return
		case p.Status == http.StatusTooManyRequests:
			writeProblem(w, http.StatusTooManyRequests, p.Code, "too many idempotency keys are live for this principal; retry later", retrySeconds(p.RetryAfter))
			return
		case p.Status == http.StatusBadRequest && strings.HasPrefix(p.Detail, "lease_ms "):
			// Options.Lease is outside the store's --min-lease/--max-lease
			// (the store's detail names its bounds, in ms): the server's
			// misconfiguration, refused for every keyed request, so not
			// the caller's 400, and never run unprotected.
			if n := m.leaseRefused.Add(1); m.leaseLog.Allow(10 * time.Second) {
				m.log.Error("idempotency store refused the lease (Options.Lease; idem proxy's --lease): it is outside the store's --min-lease/--max-lease; set it within them; refusing every keyed request (said at most every 10s)",
					"lease", m.o.Lease, "detail", p.Detail, "refused-total", n)
			}
			writeProblem(w, http.StatusServiceUnavailable, "unavailable",
				"the idempotency store cannot be used for this request, so it was not processed", 1)
			return
		case p.Status == http.StatusBadRequest:
			// The scope the application made is not one the store takes
			// (a principal too long, say): the caller cannot fix it by
			// retrying, and the details are the application's.
			m.log.Warn("idempotency store refused the request's scope", "detail", p.Detail)
			writeProblem(w, http.StatusBadRequest, "invalid_request", "the request's idempotency scope is not valid: "+p.Detail, 0)
			return
		case p.Status >= 300 && p.Status < 500 && p.Status != http.StatusRequestTimeout:
			// Any other refusal is an answer from a store that works: a
			// configuration problem, not an outage, and never a reason to
			// run unprotected, even with FailOpen. 401/403: a wrong store
			// token, or an app token whose principal patterns do not cover
			// this principal; 413: a batch above the store's --max-batch-ops;
			// 3xx (never followed, no idem route redirects): a front that
			// sends an http:// store address to https://, or a wrong
			// address reaching another service.
			msg := "idempotency store refused the call: a configuration problem, not an outage; refusing the request"
			if p.Status == http.StatusUnauthorized || p.Status == http.StatusForbidden {
				msg = "idempotency store refused the store credentials: check the store token, its role and its principal patterns; refusing the request"
			}
			m.log.Error(msg, "status", p.Status, "code", p.Code, "detail", p.Detail)
			writeProblem(w, http.StatusServiceUnavailable, "unavailable",
				"the idempotency store cannot be used for this request, so it was not processed", 1)
			return
		}
	}
	if r.Context().Err() != nil {
		return // the client went away while we asked
	}
	if errors.Is(err, client.ErrBadAnswer) {
		// Something answered, but not as a store does: a wrong address
		// (another service), a proxy's error page, a broken store. Not an
		// outage, and a claim may have been recorded: never a reason to
		// run unprotected, even with FailOpen.
		m.log.Error("idempotency store answered something that is not a store's answer: check the store address; refusing the request", "error", err)
		writeProblem(w, http.StatusServiceUnavailable, "unavailable",
			"the idempotency store cannot be used for this request, so it was not processed", 1)
		return
	}
	if m.o.FailOpen {
		m.log.Warn("idempotency store unreachable: running the handler unprotected (FailOpen)", "error", err)
		next.ServeHTTP(w, r)
		return
	}
	m.log.Warn("idempotency store unreachable: refusing the request", "error", err)
	writeProblem(w, http.StatusServiceUnavailable, "unavailable",
		"the idempotency store is unreachable, so the request was not processed; retry it with the same Idempotency-Key", 1)
}

func retrySeconds(d time.Duration) int {
	s := int((d + time.Second - 1) / time.Second)
	return max(s, 1)
}

// replay writes a stored answer.
func (m *mw) replay(w http.ResponseWriter, r *http.Request, rec *client.Record) {
	if m.o.Reauthorize != nil {
		if err := m.o.Reauthorize(r, rec); err != nil {
			writeProblem(w, http.StatusForbidden, "reauthorization_failed",
				"the stored answer of this Idempotency-Key may not be shown to this caller"+m.callerDetailSuffix(r, &m.reauthorizeErrs, err), 0)
			return
		}
	}
	resp := rec.Response
	if resp == nil { // a completed record always has one; be safe
		writeProblem(w, http.StatusServiceUnavailable, "unavailable", "the stored answer could not be read; retry", 1)
		return
	}
	if resp.Status < 200 {
		// Stored through the API by another writer of the key (the store
		// takes 100-599; the middleware stores final answers only). A
		// 1xx is no answer: written, 103 became an informational answer
		// followed by a 200 with the stored body, and 101 switched the
		// caller's connection to nothing (it hung until a timeout).
		writeProblem(w, http.StatusInternalServerError, "stored_answer_not_final",
			fmt.Sprintf("the stored answer of this Idempotency-Key has status %d, which is not a final HTTP answer: it cannot be replayed", resp.Status), 0)
		return
	}
	h := w.Header()
	// An outer middleware's Content-Encoding (set before this one ran) says
	// the body written here is encoded on its way out (recorder.finish).
	encodedOutside := len(h.Values("Content-Encoding")) > 0
	// Names in their canonical form: a stored "content-type" sat beside
	// the Content-Type set below, and both went out. Names that differ
	// only in case ("set-cookie" a handler set in the map beside the
	// "Set-Cookie" of Header.Add) are stored apart and went out apart:
	// their values are joined, in the order net/http wrote them (names
	// sorted), not one left out at random.
	names := make([]string, 0, len(resp.Headers)+len(resp.HeaderLists))
	for k := range resp.Headers {
		names = append(names, k)
	}
	for k := range resp.HeaderLists {
		names = append(names, k)
	}
	slices.Sort(names)
	names = slices.Compact(names) // Values gives a name held in both maps once
	stored := make(http.Header, len(names))
	for _, k := range names {
		if !connectionHeader(k) {
			ck := http.CanonicalHeaderKey(k)
			stored[ck] = append(stored[ck], resp.Values(k)...)
		}
	}
	for k, v := range stored {
		h[k] = v
	}
	if resp.ContentType != "" {
		h.Set("Content-Type", resp.ContentType)
	} else if _, ok := h["Content-Type"]; !ok {
		h["Content-Type"] = nil // no sniffed type: replay what was sent
	}
	h.Set(HeaderReplayed, "true")
	if bodyAllowed(resp.Status) && r.Method != http.MethodHead && !encodedOutside {
		// As the first caller had it (recorder.finish): a body over
		// net/http's 2 KiB buffer went out chunked, without a length.
		h.Set("Content-Length", strconv.Itoa(len(resp.Body)))
	}
	w.WriteHeader(resp.Status)
	if len(resp.Body) > 0 && r.Method != http.MethodHead {
		_, _ = w.Write(resp.Body)
	}
}

// connectionHeader reports the headers of one connection or one
// transmission, which the middleware never stores (notStored) and a replay
// makes anew: replayed from a record stored otherwise, a Content-Length
// other than the body's, say, would break the answer, and a hop-by-hop
// header (RFC 9110 7.6.1) or a proxy's challenge was for the first
// caller's connection only.
func connectionHeader(name string) bool {
	return slices.Contains(connectionHeaders, http.CanonicalHeaderKey(name))
}

// connectionHeaders are the headers of one connection or one transmission:
// the body's length and coding, and the hop-by-hop ones.
var connectionHeaders = []string{"Content-Length", "Transfer-Encoding", "Connection", "Keep-Alive", "Proxy-Connection",
	"Upgrade", "Trailer", "Te", "Proxy-Authenticate", "Proxy-Authorization"}

// attemptKey is the context key of the running attempt.
type attemptKey struct{}

// Attempt is the claim a handler runs under.
type Attempt struct {
	Principal, Endpoint, Key string
	// Token is the attempt's fencing token: opaque, only the current
	// attempt's is accepted by the store.
	Token string
	// Number counts the attempts of this key (1, 2, ...): a later attempt
	// has a larger number, which an application's database can compare.
	Number int
}

// FromContext returns the attempt a handler runs under.
func FromContext(ctx context.Context) (Attempt, bool) {
	a, ok := ctx.Value(attemptKey{}).(Attempt)
	return a, ok
}

// run runs the handler under the claim and stores or releases its answer.
func (m *mw) run(w http.ResponseWriter, r *http.Request, next http.Handler, s scope, c *client.ClaimResponse, sentAt time.Time) {
	granted, known := grantedLease(c, m.o.Lease)
	if !known {
		// A retry in the record's last Lease of retention: the store cut
		// the lease at the record's expires_at, which may be at once, and
		// a claim after it makes a new record (attempt 1) and runs the
		// handler again, beside this one (a review: it was taken for a
		// whole Lease). The key is new again once the record expires.
		m.release(r, s, c.Token, "the record expires within the lease")
		writeProblem(w, http.StatusServiceUnavailable, "unavailable",
			"this Idempotency-Key's record reaches the end of its retention within the lease, so the request cannot be protected while it runs; retry after Retry-After", retrySeconds(m.o.Lease))
		return
	}
	// While the attempt runs and its answer is stored, a queued claim of
	// the key (a retry refused in an outage) is not sent again: it could
	// take the key over from this attempt (unclaimOne).
	defer m.running.hold(s)()
	a := Attempt{Principal: s.principal, Endpoint: s.endpoint, Key: s.key, Token: c.Token, Number: c.Attempt}
	// The caller going away does not cancel the handler at once: its
	// answer is stored for the caller's retry (cancelled, a handler that
	// stopped without writing had an empty 200 stored and replayed as
	// success). A lost lease does (keepLease), and so does the caller
	// having gone for CallerGoneTimeout (a stream, a long poll that ends
	// only on its context ran for ever, and its key answered 409 to every
	// retry). Not a lease: a slow payment whose caller gave up would be
	// cut short, released, and run again by the retry.
	ctx, cancel := context.WithCancelCause(context.WithValue(context.WithoutCancel(r.Context()), attemptKey{}, a))
	defer cancel(nil)
	gone := context.AfterFunc(r.Context(), func() {
		t := time.NewTimer(m.o.CallerGoneTimeout)
		defer t.Stop()
		select {
		case <-t.C:
			cancel(ErrCallerGone)
		case <-ctx.Done():
		}
	})
	defer gone()
	stop := m.keepLease(ctx, cancel, s, c.Token, leaseHeld(sentAt, granted), c.ExpiresAt)
	var held time.Time // when the lease surely still runs, once the handler returned
	rec := newRecorder(w, r, m.o.MaxStoredBody)
	done := false
	defer func() {
		stop()
		if done {
			return
		}
		// The handler panicked (http.ErrAbortHandler included) or its
		// goroutine exited: release, so a retry runs again, then go on
		// panicking.
		v := recover()
		m.release(r, s, c.Token, "handler panicked")
		if v != nil {
			panic(v)
		}
	}()
	next.ServeHTTP(rec, r.WithContext(ctx))
	done = true
	held = stop()
	switch {
	case rec.hijacked:
		m.release(r, s, c.Token, "connection hijacked")
	case rec.code == http.StatusSwitchingProtocols:
		// A 101 the handler wrote without taking the connection: no
		// final answer, as a hijack's. Stored, every retry of the key
		// was answered 500 stored_answer_not_final until it expired
		// (before that, a 101 that hung the caller).
		m.release(r, s, c.Token, "handler answered 101 without taking the connection")
	case rec.code == 0 && rec.body.Len() == 0 && errors.Is(context.Cause(ctx), ErrLeaseLost):
		// Stopped by its context without an answer: stored, an empty 200
		// was replayed as the request's success though nothing was done
		// (a review: a lease that ran out while the store was away, with
		// no other attempt to refuse the complete). Released; the caller
		// is told to retry at once, not held for a release that an
		// unreachable store answers only after StoreTimeout.
		rec.withhold() // the headers the handler set go with nothing
		writeProblem(w, http.StatusServiceUnavailable, "unavailable",
			"this request's idempotency key could not be kept in the store while it ran (its lease ran out), so it was stopped before it answered; retry", 1)
		_ = http.NewResponseController(w).Flush()
		m.release(r, s, c.Token, "the lease was lost and the handler stopped without an answer")
	case rec.code == 0 && rec.body.Len() == 0 && errors.Is(context.Cause(ctx), ErrCallerGone):
		m.storeThenAnswer(rec, func() bool {
			m.release(r, s, c.Token, "the caller went away and the handler stopped without an answer")
			return false
		})
	case rec.status() >= 500 || notYet(rec.status()) || notThisCaller(rec.status()):
		reason := fmt.Sprintf("handler answered %d", rec.status())
		m.storeThenAnswer(rec, func() bool { m.release(r, s, c.Token, reason); return false })
	case rec.broken():
		// Its Content-Length is not what it wrote: the caller's transfer
		// breaks, so the retry runs again, as after a truncated upstream
		// answer in idem proxy (a 502, which is released).
		m.storeThenAnswer(rec, func() bool {
			m.release(r, s, c.Token, "the answer's Content-Length is not the length of its body")
			return false
		})
	default:
		resp, dropped := rec.response(), rec.dropped
		m.storeThenAnswer(rec, func() bool { return m.complete(r, s, c.Token, resp, dropped, held, c.ExpiresAt) })
	}
}

// answerWait is the longest a held answer waits for the store to take its
// complete (or release) before it goes to the caller all the same.
const answerWait = time.Second

// storeThenAnswer runs tell (the complete or release of the answer) and
// sends the held answer (recorder.finish) once it is done, so that a caller
// that has its answer finds it stored (the retry replays it), or after
// answerWait if the store has not answered by then: the caller does not
// wait StoreTimeout for an answer it already has, and tell goes on. It
// returns once both are done (a server's Shutdown waits for tell).
//
// When tell says the key is another attempt's now (the store refused this
// attempt's complete: its lease ran out and a retry took the key over), a
// held answer is not sent: every retry replays the other attempt's, and
// this caller would be the only one told otherwise. It gets 409 lease_lost
// instead, and its retry gets the stored answer.
func (m *mw) storeThenAnswer(rec *recorder, tell func() (lost bool)) {
	told := make(chan bool, 1)
	go func() { told <- tell() }()
	t := time.NewTimer(answerWait)
	defer t.Stop()
	select {
	case lost := <-told:
		if lost && rec.withhold() {
			writeProblem(rec.w, http.StatusConflict, "lease_lost",
				"this attempt's lease ran out while it ran and another attempt holds the key now; retry to get the answer that is stored", 1)
			return
		}
		rec.finish()
	case <-t.C:
		rec.finish()
		<-told
	}
}

// notYet reports the 4xx answers that say "not now" rather than answer
// the request: 408 Request Timeout, 425 Too Early, 429 Too Many Requests.
// Stored, a rate limiter's 429 was replayed to every retry for the whole
// retention, each telling the client to retry; released, as a 5xx is, the
// retry runs.
func notYet(status int) bool {
	return status == http.StatusRequestTimeout || status == http.StatusTooEarly || status == http.StatusTooManyRequests
}

// notThisCaller reports 401 Unauthorized and 403 Forbidden: the handler
// (an upstream, behind idem proxy) refused the caller's credential or its
// rights, and did not do the work. Stored, an expired token's 401 was
// replayed for the whole retention to the caller's retry with a fresh one
// (under a Principal that names the account, not the token), and the
// payment never ran; a payment API (Stripe) stores no answer of a request
// that failed authentication. Released, as a 5xx is, the retry runs; an
// authorization that refuses again refuses again.
func notThisCaller(status int) bool {
	return status == http.StatusUnauthorized || status == http.StatusForbidden
}

// keepLease extends the lease every third of it until stop, that is until
// the handler returns: not until the client goes away, since a handler
// that goes on (a payment committing) must keep its key, or a retry would
// run it a second time. A lost lease cancels the handler's context: with
// ErrLeaseLost when the store says another attempt holds the key, with
// ErrLeaseExpired when no extend got through before the lease ran out
// (the store unreachable or not answering), since a retry that reaches the
// store may take the key over from then on, and run the handler beside
// this one. held is when the claim's lease surely still runs (grantedLease).
// A failed extend is asked again after a backoff (extendPause: always
// before held while there is time); after ErrLeaseExpired the extends go
// on (while no other attempt took the key, they keep it from a retry),
// until stop, which returns when the lease surely still runs.
func (m *mw) keepLease(ctx context.Context, cancel context.CancelCauseFunc, s scope, token string, held, recordExpires time.Time) (stop func() time.Time) {
	quit := make(chan struct{})
	finished := make(chan struct{})
	// stop aborts an extend in flight: the handler has returned, and its
	// answer must not wait StoreTimeout for an extend it no longer needs.
	lctx, lcancel := context.WithCancel(context.WithoutCancel(ctx))
	go func() {
		defer close(finished)
		expire := time.NewTimer(time.Until(held))
		defer expire.Stop()
		next := time.NewTimer(m.o.Lease / 3)
		defer next.Stop()
		var b backoff
		for {
			select {
			case <-quit:
				return
			case <-expire.C:
				m.log.Error("idempotency lease ran out: the store did not extend it in time; cancelling the handler, since a retry may now take the key over and run it again", "endpoint", s.endpoint, "lease", m.o.Lease)
				cancel(ErrLeaseExpired)
				continue
			case <-next.C:
			}
			select {
			case <-quit: // the handler returned while an extend was due
				return
			default:
			}
			res, sent, err := m.extendBefore(lctx, s, token, held)
			switch {
			case err == nil:
				// A lease the store cut at the record's expires_at (its last
				// Lease of retention) ends then, at an unknown time this
				// side: it holds no longer than before.
				if res.LeaseExpiresAt.Before(recordExpires) {
					held = leaseHeld(sent, m.o.Lease)
					expire.Reset(time.Until(held))
				}
				b.reset()
				next.Reset(m.o.Lease / 3)
			case errors.Is(err, client.ErrTokenMismatch) || errors.Is(err, client.ErrNotFound):
				m.log.Error("idempotency lease lost while the handler ran: cancelling it", "endpoint", s.endpoint, "error", err)
				cancel(ErrLeaseLost)
				return
			case lctx.Err() != nil: // stopped
				return
			default:
				pause := extendPause(&b, m.o.Lease, held)
				m.log.Warn("idempotency lease extension failed; retrying", "endpoint", s.endpoint, "error", err, "lease-runs-out-in", time.Until(held).Round(time.Millisecond), "in", pause.Round(time.Millisecond))
				next.Reset(pause)
			}
		}
	}()
	var once bool
	return func() time.Time {
		if !once {
			once = true
			close(quit)
			lcancel()
			<-finished
		}
		return held // the goroutine's last, read once it ended
	}
}

// leaseHeld is when a lease of d asked for at sent surely still runs: the
// store starts it when it decides the call, after sent, by its clock; a
// tenth of it is kept for the clocks' rates and for the handler to see its
// context cancelled.
func leaseHeld(sent time.Time, d time.Duration) time.Time { return sent.Add(d - d/10) }

// grantedLease is how long the claim's lease runs from when the store
// decided it, and false when that cannot be known from the answer. A new
// record's (attempt 1) is its lease_expires_at minus its created_at, both
// stamped then: the lease asked for, or less where the retention is
// shorter. A later attempt keeps the record's created_at and expires_at,
// so its lease is the one asked for, unless the store cut it at expires_at
// (a retry in the record's last Lease of retention): then it ends at a
// time this side cannot tell, maybe at once, and the record expires with
// it.
func grantedLease(c *client.ClaimResponse, asked time.Duration) (time.Duration, bool) {
	if c.Attempt == 1 && !c.CreatedAt.IsZero() && !c.LeaseExpiresAt.IsZero() {
		return min(c.LeaseExpiresAt.Sub(c.CreatedAt), asked), true
	}
	if !c.ExpiresAt.IsZero() && !c.LeaseExpiresAt.Before(c.ExpiresAt) {
		return 0, false
	}
	return asked, true
}

// storeCtx is the context of a complete or release: the client's
// disconnect must not cancel it (a lost complete runs the payment again on
// the client's retry), so it keeps only the request's values.
func (m *mw) storeCtx(r *http.Request) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(r.Context()), m.o.StoreTimeout)
}

// completeFor is how long an answer's complete is asked before it goes on
// in the background (complete): StoreTimeout, at most half the Lease.
func (m *mw) completeFor() time.Duration { return min(m.o.StoreTimeout, m.o.Lease/2) }

// retry calls f until it succeeds, a problem other than unavailable comes
// back, or ctx ends: at once, then pausing between tries as backoff says
// from retryFloor (50 ms) to retryCap (1 s), each pause drawn at random:
// complete and release are idempotent with their token, a claim with its
// claim_id. (The background complete backs off longer: retryBackoff.)
func retry(ctx context.Context, f func() error) error {
	return retrying(ctx, backoff{floor: retryFloor, cap: retryCap}, false, f)
}

// retryBackoff is retry in the background: it pauses first, the first
// try having just failed in the foreground, and as backoff says from
// backoffFloor (1 s) to backoffCap (10 s).
func retryBackoff(ctx context.Context, f func() error) error {
	return retrying(ctx, backoff{}, true, f)
}

// retrying calls f until it succeeds, a problem other than unavailable
// comes back (refusedByStore), or ctx ends, pausing between tries as b
// says, and before the first one too if pauseFirst. At ctx's end it
// returns f's last error, or ctx's if f was never called.
func retrying(ctx context.Context, b backoff, pauseFirst bool, f func() error) error {
	var err error
	for pause := pauseFirst; ; pause = true {
		if pause {
			t := time.NewTimer(b.next())
			select {
			case <-ctx.Done():
				t.Stop()
				return cmp.Or(err, ctx.Err())
			case <-t.C:
			}
		}
		if err = f(); err == nil || refusedByStore(err) {
			return err
		}
	}
}

// refusedByStore reports whether err is the store's answer below 500: a
// refusal that asking again would only repeat (retry stops at it).
func refusedByStore(err error) bool {
	var p *client.Problem
	return errors.As(err, &p) && p.Status < 500
}

// complete stores the answer; lost reports that the store refused this
// attempt's token: another attempt holds the key. held is when the lease
// surely still runs (keepLease's last extend), recordExpires the record's
// expires_at.
func (m *mw) complete(r *http.Request, s scope, token string, resp client.Response, dropped []string, held, recordExpires time.Time) (lost bool) {
	// Nothing extends the lease from the handler's return until the
	// background complete keeps it (holdLease): asked for a StoreTimeout
	// longer than the lease has left (a lease of 2 s, the default 5 s,
	// a store that refused the complete with 503 while it took claims),
	// the lease ran out, and the caller's retry took the key over and ran
	// the request a second time while the first answer waited. Half the
	// lease, at most, leaves the first extend of holdLease time.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), m.completeFor())
	defer cancel()
	if len(dropped) > 0 {
		m.log.Warn("idempotency: headers of the answer left out of the stored copy: the store refuses their names or values (control characters, not UTF-8); a replay lacks them", "endpoint", s.endpoint, "headers", fmt.Sprintf("%q", dropped))
	}
	call := func(ctx context.Context, resp client.Response) error {
		ctx, cancel := context.WithTimeout(ctx, m.callTimeout())
		defer cancel()
		_, err := m.o.Store.Complete(ctx, client.CompleteRequest{Principal: s.principal, Endpoint: s.endpoint, Key: s.key,
			Token: token, Response: resp})
		return err
	}
	var refusedSince time.Time // the store's first refusal of this answer's arrays
	sendIn := func(ctx context.Context) func() error {
		return func() error {
			err := call(ctx, resp)
			if refusedSince.IsZero() && arraysRefused(err) {
				refusedSince = time.Now()
			}
			return err
		}
	}
	send := sendIn(ctx)
	err := retry(ctx, send)
	if tooLarge(err) && len(resp.Body) > 0 {
		// Over the store's limits after all (its --max-response-bytes, or
		// its --max-request-bytes for the complete that carries it, is
		// below MaxStoredBody): keep the status and the headers, and say
		// what is missing. Left failed, the key stayed taken until its
		// lease ran out, and the retry ran it again. Said, or answers
		// went unstored without a word while every replay lacked its
		// body. The headers go with it, as the package doc says: stored
		// with the status alone, the replay of a 201 lost its Location
		// and Set-Cookie for a body the store would not take.
		if n := m.bodiesOmitted.Add(1); m.bodyLog.Allow(10 * time.Second) {
			m.log.Warn("idempotency: an answer was stored without its body: the store refused it as too large; its --max-response-bytes (or --max-request-bytes) is below MaxStoredBody (idem proxy's --max-stored-body): set them alike (said at most every 10s)",
				"endpoint", s.endpoint, "status", resp.Status, "body-bytes", len(resp.Body), "max-stored-body", m.o.MaxStoredBody, "answers-without-body", n, "error", err)
		}
		resp.Body = nil
		resp.SetHeader(HeaderBodyOmitted, OmittedTooLarge)
		err = retry(ctx, send)
	}
	if tooLarge(err) {
		// The headers themselves are more than the store keeps (its
		// --max-response-headers or --max-response-header-bytes): the
		// status alone, with a note that the answer is not whole.
		if n := m.statusesAlone.Add(1); m.statusLog.Allow(10 * time.Second) {
			m.log.Warn("idempotency: an answer was stored with its status alone: the store refused its headers as too many or too large (its --max-response-headers, --max-response-header-bytes); a replay lacks its headers and body (said at most every 10s)",
				"endpoint", s.endpoint, "status", resp.Status, "headers", resp.HeaderCount(), "answers-status-alone", n, "error", err)
		}
		resp = client.Response{Status: resp.Status, ContentType: resp.ContentType}
		resp.SetHeader(HeaderBodyOmitted, OmittedTooLarge)
		err = retry(ctx, send)
	} else if errors.Is(err, client.ErrInvalidRequest) {
		// The store refused the answer as given (something response()
		// does not foresee): the status alone is stored, rather than
		// leave the key in progress for the retry to run again.
		m.log.Error("idempotency: the store refused the answer; storing its status alone", "endpoint", s.endpoint, "status", resp.Status, "error", err)
		resp = client.Response{Status: resp.Status}
		resp.SetHeader(HeaderBodyOmitted, OmittedRefused)
		err = retry(ctx, send)
	}
	if err != nil && !refusedByStore(err) {
		// The store did not answer within completeFor. The caller has its
		// answer; the record is in progress, and a retry once its lease has
		// run out takes it over and runs the request again. Asked on in
		// the background, a store back in time stores the answer, and the
		// retry replays it (one after an outage of a few seconds ran
		// again). The lease runs by the store's clock, which stands still
		// while the store is down: a complete with this token succeeds
		// until a retry takes the key over, whatever the wall clock says,
		// so it is asked for completeRetryFor, not just the lease (a
		// store back 35 s after a 30 s lease ran the request again). A
		// takeover makes this token stale: the store refuses it, and that
		// ends it. At most maxPendingCompletes wait at once.
		if pendingCompletes.Add(1) > maxPendingCompletes {
			pendingCompletes.Add(-1)
			m.log.Error("idempotency complete failed, and too many others wait for the store to store this one later: a retry of this request may run it again", "endpoint", s.endpoint, "status", resp.Status, "error", err)
			return false
		}
		m.log.Warn("idempotency complete not stored yet: the store did not take it in time; retrying in the background, the key held meanwhile", "endpoint", s.endpoint, "status", resp.Status, "for", completeRetryFor(m.o.Lease), "error", err)
		unhold := m.running.hold(s) // taken while run's hold is
		go func() {
			defer pendingCompletes.Add(-1)
			defer unhold()
			bctx, bcancel := context.WithTimeout(context.Background(), completeRetryFor(m.o.Lease))
			defer bcancel()
			// The lease is kept meanwhile: a store that answers but does
			// not take this complete (its 503) let the lease run out, and
			// the caller's retry took the key over and ran the request a
			// second time, though its first answer had gone out.
			lctx, lcancel := context.WithCancel(bctx)
			defer lcancel()
			go m.holdLease(lctx, s, token, held, recordExpires)
			send := sendIn(bctx)
			if len(resp.HeaderLists) > 0 {
				send = m.foldingListsAfter(bctx, s, resp, send, call, &refusedSince)
			}
			if err := retryBackoff(bctx, send); err != nil {
				m.log.Error("idempotency complete failed: a retry of this request may run it again", "endpoint", s.endpoint, "status", resp.Status, "error", err)
				return
			}
			m.log.Info("idempotency complete stored once the store answered again", "endpoint", s.endpoint)
		}()
		return false
	}
	if err != nil {
		m.log.Error("idempotency complete failed: a retry of this request may run it again", "endpoint", s.endpoint, "status", resp.Status, "error", err)
	}
	// Not found is an evicted or expired record: nothing holds the key, and
	// the answer the caller gets is the only one (a retry runs again
	// whatever it is told), so it is sent.
	return errors.Is(err, client.ErrTokenMismatch)
}

// foldListsAfter is how long the store may refuse an answer with headers
// sent more than once (503) before it is sent with them folded
// (foldLists). A variable for tests.
var foldListsAfter = time.Minute

// arraysRefusedDetail begins the detail of the store's 503 to a complete
// that stores a header as an array while a member does not read arrays
// (api's headerListsProblem, its words since arrays were stored). The
// store answers every other 503 (no leader, a commit of unknown outcome,
// a load limit shedding: --max-inflight) with the code unavailable alike:
// its detail alone tells this one apart.
const arraysRefusedDetail = "a header stored as an array (sent more than once) needs every member"

// arraysRefused reports the store's 503 to an answer's headers stored as
// arrays: a member reads no arrays (foldingListsAfter).
func arraysRefused(err error) bool {
	var p *client.Problem
	return errors.As(err, &p) && p.Status == http.StatusServiceUnavailable && strings.HasPrefix(p.Detail, arraysRefusedDetail)
}

// foldingListsAfter wraps send, the background complete of resp, an answer
// with headers sent more than once: once the store has refused it for
// them (arraysRefused) for foldListsAfter, each such refusal is followed
// at once by the answer with them folded (foldLists). The one complete the store refuses for
// good with 503 while it takes everything else is such an answer: a
// header stored as an array needs every member to run a version that
// reads arrays, and a member of an older version (a rolling upgrade that
// stopped halfway, an old node added back) or one no member has seen
// answer keeps it refused. Asked again as it is, it held its key in
// progress (409 to every retry) for the ten minutes of completeRetryFor,
// and then a retry ran the request a second time. Folded, it is stored in
// a form every member reads. The store's other 503s (no leader, a load
// limit shedding) are answered alike to any write, and never fold: a
// store that shed the answer as it is took the folded one sent at once
// after it, and the answer was stored without its Set-Cookie where the
// next try would have stored it whole. The answer as it is is tried
// first each time.
func (m *mw) foldingListsAfter(ctx context.Context, s scope, resp client.Response, send func() error, call func(context.Context, client.Response) error, refusedSince *time.Time) func() error {
	limit := headerBytes(resp) // the arrays': the member that refused them took their bytes
	return func() error {
		err := send()
		if !arraysRefused(err) || refusedSince.IsZero() || time.Since(*refusedSince) < foldListsAfter {
			return err
		}
		f, ferr := storeFolded(resp, &limit, func(r client.Response) error { return call(ctx, r) })
		if ferr != nil {
			return ferr
		}
		if n := m.foldedLists.Add(1); m.foldLog.Allow(10 * time.Second) {
			m.log.Warn("idempotency: an answer was stored with the headers it sent more than once folded into one value each (Set-Cookie, which cannot be folded, left out; a header that takes one value, such as Location, with its first alone; where joining made the headers larger than the store counted them as arrays, or than a member of a smaller --max-response-header-bytes takes, those joined left out, the largest first): the store refused it for "+foldListsAfter.String()+" (a header stored as an array needs every member of the store to run a version that reads arrays: see the store's answer); a replay has them on one line, and lacks those left out",
				"endpoint", s.endpoint, "status", resp.Status, "left-out", fmt.Sprintf("%q", f.left), "first-only", fmt.Sprintf("%q", f.first), "answers-folded", n, "error", err)
		}
		if f.resp.Headers[HeaderBodyOmitted] != "" && resp.Headers[HeaderBodyOmitted] == "" {
			if n := m.foldsOmitted.Add(1); m.foldOmitLog.Allow(10 * time.Second) {
				m.log.Warn("idempotency: a folded answer was stored without its body, or with its status alone: a member of the store refused it as too large (its --max-response-bytes, --max-response-headers or --max-response-header-bytes are below the other members'): set them alike (said at most every 10s)",
					"endpoint", s.endpoint, "status", resp.Status, "headers", f.resp.HeaderCount(), "body-bytes", len(f.resp.Body), "folded-answers-cut", n)
			}
		}
		return nil
	}
}

// holdLease extends the lease of an attempt whose answer waits to be
// stored, about every third of the lease (a random time between a fourth
// and a third of it: answers whose store came back together are not
// extended together), until ctx ends or the store says the key is no
// longer this attempt's. held is when the lease surely still runs. A
// failed extend is asked again after a backoff (extendPause), always
// before held while there is time: the point of the lease is that a
// retry never takes the key over while the answer waits.
func (m *mw) holdLease(ctx context.Context, s scope, token string, held, recordExpires time.Time) {
	wait := time.Duration(0)
	var b backoff
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		res, sent, err := m.extendBefore(ctx, s, token, held)
		switch {
		case err == nil:
			if recordExpires.IsZero() || res.LeaseExpiresAt.Before(recordExpires) {
				held = leaseHeld(sent, m.o.Lease) // not when cut at the record's expires_at
			}
			b.reset()
			wait = jitter(m.o.Lease/4, m.o.Lease/3)
		case errors.Is(err, client.ErrTokenMismatch) || errors.Is(err, client.ErrNotFound):
			return
		default:
			wait = extendPause(&b, m.o.Lease, held)
		}
	}
}

// extendBefore asks the store once to extend the lease of token's
// attempt, for callTimeout and never past held (when the lease surely
// still runs): a call that hangs must not use up the time left, nor hold
// up keepLease's cancel at the expiry. sent is when it was asked, what a
// lease it grants runs from (leaseHeld).
func (m *mw) extendBefore(ctx context.Context, s scope, token string, held time.Time) (res *client.ExtendResponse, sent time.Time, err error) {
	sent = time.Now()
	deadline := sent.Add(m.callTimeout())
	if until := held.Add(-time.Millisecond); sent.Before(until) && until.Before(deadline) {
		deadline = until
	}
	ectx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	res, err = m.o.Store.Extend(ectx, client.ExtendRequest{Principal: s.principal, Endpoint: s.endpoint, Key: s.key,
		Token: token, LeaseMs: m.o.Lease.Milliseconds()})
	return res, sent, err
}

// tooLarge reports the store refusing an answer as over its limits.
func tooLarge(err error) bool {
	return errors.Is(err, client.ErrResponseTooLarge) || errors.Is(err, client.ErrRequestTooLarge)
}

// completeRetryFor is how long a complete the store did not answer is
// asked again in the background: ten minutes, or the lease if longer.
func completeRetryFor(lease time.Duration) time.Duration { return max(lease, 10*time.Minute) }

// pendingCompletes counts the completes asked again in the background, in
// every middleware of the process; each holds its answer (up to
// MaxStoredBody), so their number is bounded.
var pendingCompletes atomic.Int64

const maxPendingCompletes = 10_000

// WaitCompletes waits until every complete asked again in the background
// (the store did not take it in time, and its caller has its answer) is
// stored or given up, or until ctx is done. A server calls it after its
// Shutdown: exiting with one on its way left the key claimed, and the
// caller's retry ran the request again after the lease though it had been
// answered.
func WaitCompletes(ctx context.Context) error {
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for pendingCompletes.Load() > 0 {
		select {
		case <-ctx.Done():
			return fmt.Errorf("%d answers not stored: %w", pendingCompletes.Load(), ctx.Err())
		case <-tick.C:
		}
	}
	return nil
}

func (m *mw) release(r *http.Request, s scope, token, reason string) {
	ctx, cancel := m.storeCtx(r)
	defer cancel()
	err := retry(ctx, func() error {
		ctx, cancel := context.WithTimeout(ctx, m.callTimeout())
		defer cancel()
		_, err := m.o.Store.Release(ctx, client.ReleaseRequest{Principal: s.principal, Endpoint: s.endpoint, Key: s.key, Token: token, Reason: reason})
		return err
	})
	if err != nil && !errors.Is(err, client.ErrTokenMismatch) {
		m.log.Warn("idempotency release failed: the key stays taken until its lease runs out", "endpoint", s.endpoint, "error", err)
	}
}

func newClaimID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// correlationID links the record to the request in the application's logs:
// X-Request-Id as a correlation_id the store takes (UTF-8, at most 255
// bytes), so that no value of the header keeps the request from running.
// Invalid bytes are dropped, and a cut falls between characters.
func correlationID(r *http.Request) string {
	id := strings.ToValidUTF8(r.Header.Get("X-Request-Id"), "")
	if len(id) > 255 {
		n := 255
		for n > 0 && !utf8.RuneStart(id[n]) {
			n--
		}
		id = id[:n]
	}
	return id
}
