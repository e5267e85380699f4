package api

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/idem-store/idem/internal/jsonstrict"
	"github.com/idem-store/idem/internal/mono"
)

// Authentication and roles. With an auth file every route but /healthz and
// /readyz needs "Authorization: Bearer <token>" (the scheme in any case).
// A missing or unknown token is 401; a known token outside its role or its
// principals is 403 forbidden. Both are decided before anything is read
// from the store, so a refusal writes nothing and says nothing of whether
// a record exists. A refusal decided from the headers alone is sent before
// the body is read, with Connection: close, and the connection is not kept
// to drain the body: a client sending a slow body without credentials
// holds nothing.
//
// The file is JSON, tokens stored only as the hex SHA-256 of the token:
//
//	{"tokens":[{"name":"payments-api","sha256":"<hex>","role":"app","principals":["cus_*"],"max_principals":10000},
//	           {"name":"oncall","sha256":"<hex>","role":"operator"},
//	           {"name":"deploy","sha256":"<hex>","role":"admin"}]}
//
// An older file of one plain token per line still works: each is an admin
// token. docs/SECURITY.md says how to make, store and rotate tokens.

// Role is what a credential may do; each role may do everything the roles
// below it may.
type Role int

// The roles, from least to most.
const (
	// RoleApp may claim, complete, release, extend and look up records of
	// the principals its patterns match.
	RoleApp Role = iota + 1
	// RoleOperator may do what an app may for every principal, evict
	// records, and read /metrics, /v1/config and GET /v1/cluster.
	RoleOperator
	// RoleAdmin may do everything: membership, leadership transfer,
	// /v1/admin/* (state hash, snapshots) and /debug/pprof.
	RoleAdmin
)

var roleNames = map[Role]string{RoleApp: "app", RoleOperator: "operator", RoleAdmin: "admin"}

func (r Role) String() string {
	if n, ok := roleNames[r]; ok {
		return n
	}
	return fmt.Sprintf("role(%d)", int(r))
}

// ParseRole reads a role name: app, operator or admin.
func ParseRole(s string) (Role, error) {
	for r, n := range roleNames {
		if n == s {
			return r, nil
		}
	}
	return 0, fmt.Errorf("api: unknown role %q (want app, operator or admin)", s)
}

// Credential is one token of the auth file.
type Credential struct {
	Name string
	Role Role
	// Principals limits an app token: exact principal names, or a prefix
	// ending in '*' ("cus_*"; "*" alone matches every principal).
	Principals []string
	// MaxPrincipals, for an app token with prefix patterns, bounds how
	// many principals under its prefixes may hold live keys (0: no bound
	// but the cluster's --max-principals). Claims carry it (capPrefixes)
	// and Apply decides it: engine.ClaimArgs.CredentialMaxPrincipals.
	MaxPrincipals int64
	hash          [sha256.Size]byte
}

// capPrefixes are the prefixes of c's patterns, without their '*': the
// principals its MaxPrincipals counts. Exact names are bounded by the
// file already and are not counted.
func (c *Credential) capPrefixes() []string {
	var out []string
	for _, p := range c.Principals {
		if prefix, ok := strings.CutSuffix(p, "*"); ok {
			out = append(out, prefix)
		}
	}
	return out
}

// Allows reports whether c may act for principal.
func (c *Credential) Allows(principal string) bool {
	if c.Role != RoleApp {
		return true
	}
	for _, p := range c.Principals {
		if prefix, ok := strings.CutSuffix(p, "*"); ok {
			if strings.HasPrefix(principal, prefix) {
				return true
			}
		} else if p == principal {
			return true
		}
	}
	return false
}

// Credentials are the tokens of one auth file. They never change: a reload
// makes new ones and swaps them in (Auth).
type Credentials struct {
	list []Credential
	// legacy holds the plain tokens of an old-format file, in file order.
	legacy []string
	// legacyLines is the line of the file each legacy token is on
	// (ParseAuthFile; nil otherwise): comments and blank lines are
	// skipped, so it is not the N of the token's name line-N.
	legacyLines []int
	// legacyOpenEnd: the old-format file's last token has no line end
	// after it (OpenLastToken).
	legacyOpenEnd bool
}

// HashToken returns the hex SHA-256 of a token: what the auth file stores.
func HashToken(token string) string {
	h := sha256.Sum256([]byte(token))
	return hex.EncodeToString(h[:])
}

// LegacyCredentials are plain tokens, each an admin token (the old auth
// file format, and tests).
func LegacyCredentials(tokens []string) *Credentials {
	c := &Credentials{legacy: slices.Clone(tokens)}
	for i, t := range tokens {
		c.list = append(c.list, Credential{Name: fmt.Sprintf("line-%d", i+1), Role: RoleAdmin, hash: sha256.Sum256([]byte(t))})
	}
	return c
}

// Legacy reports whether the credentials come from an old-format file.
func (c *Credentials) Legacy() bool { return c.legacy != nil }

// ShortLegacy names (line-N) the tokens of an old-format file shorter than
// n bytes, each with the line of the file it is on: each is an admin
// token, and a short one ("changeme", "hi") is guessed by trying. JSON
// files hold hashes, whose tokens are unknown.
func (c *Credentials) ShortLegacy(n int) []string {
	var short []string
	for i, t := range c.legacy {
		if len(t) < n {
			name := c.list[i].Name
			if i < len(c.legacyLines) {
				name += fmt.Sprintf(" (file line %d)", c.legacyLines[i])
			}
			short = append(short, name)
		}
	}
	return short
}

// List returns the tokens (names, roles, principals) in file order.
func (c *Credentials) List() []Credential { return slices.Clone(c.list) }

// Len is the number of tokens.
func (c *Credentials) Len() int { return len(c.list) }

// Digest is a short hex digest of what the credentials grant: each token's
// hash with its role, principals and max_principals, in hash order (names
// and file order left out). Nodes publish it at GET /v1/config, so that a
// node whose --auth-file differs from the others' is found: a follower
// decides a consistency=stale lookup with its own file alone, so a token
// that file gives other principals reads their records there, and a token
// only some nodes list works or not with the node asked and the leader.
// It is a hash of hashes: it says nothing of a token.
func (c *Credentials) Digest() string {
	entries := make([]string, 0, len(c.list))
	for _, e := range c.list {
		ps := slices.Clone(e.Principals)
		slices.Sort(ps)
		entries = append(entries, fmt.Sprintf("%x %s %q %d", e.hash, e.Role, ps, e.MaxPrincipals))
	}
	slices.Sort(entries)
	h := sha256.Sum256([]byte(strings.Join(entries, "\n")))
	return hex.EncodeToString(h[:8])
}

// FirstLegacyToken is the first plain token of an old-format file ("" for
// a JSON file, which holds no plain token): with the old format, nodes
// used it for their calls to each other, and still do.
func (c *Credentials) FirstLegacyToken() string {
	if len(c.legacy) == 0 {
		return ""
	}
	return c.legacy[0]
}

// Authenticate returns the credential of token. It compares the token's
// hash with every entry in constant time, without stopping at a match, so
// the time taken says nothing of which entry matched or how closely.
func (c *Credentials) Authenticate(token string) (*Credential, bool) {
	if token == "" {
		return nil, false
	}
	h := sha256.Sum256([]byte(token))
	found := -1
	for i := range c.list {
		if subtle.ConstantTimeCompare(h[:], c.list[i].hash[:]) == 1 {
			found = i
		}
	}
	if found < 0 {
		return nil, false
	}
	return &c.list[found], true
}

// authFileJSON is the JSON auth file.
type authFileJSON struct {
	Tokens []authEntryJSON `json:"tokens"`
}

type authEntryJSON struct {
	Name       string   `json:"name"`
	SHA256     string   `json:"sha256"`
	Role       string   `json:"role"`
	Principals []string `json:"principals,omitempty"`
	// MaxPrincipals is a pointer so that 0 is told from absent.
	MaxPrincipals *int64 `json:"max_principals,omitempty"`
}

// maxPatternBytes bounds a principal pattern (a principal is at most 255
// bytes by default, and a pattern longer than any principal matches none).
const maxPatternBytes = 1024

// ParseAuthFile reads an auth file: JSON when its first non-blank character
// is '{', else the old format (one plain token per line; blank lines and
// lines starting with '#' ignored). Every error names the entry at fault.
//
// A UTF-8 byte-order mark before the JSON is skipped. In the old format a
// line that cannot be a bearer token (a space, a control or non-ASCII byte,
// a start of JSON: '{', '[' or '"', or a null or boolean word in any
// case: null, true, false, None, undefined, nil, <nil>) is refused, naming the line: every
// line there is an admin token, so a file of another format, or JSON
// behind a byte-order mark, would otherwise turn its own text into one.
func ParseAuthFile(b []byte) (*Credentials, error) {
	b = bytes.TrimPrefix(b, []byte("\xef\xbb\xbf"))
	if t := bytes.TrimSpace(b); len(t) > 0 && t[0] == '{' {
		return parseAuthJSON(t)
	}
	var tokens []string
	var lines []int
	n, openEnd := 0, false
	for line := range strings.Lines(string(b)) {
		n++
		t := strings.TrimSpace(line)
		if t == "" || strings.HasPrefix(t, "#") {
			continue
		}
		if err := plainToken(t); err != nil {
			return nil, fmt.Errorf("api: the auth file is neither JSON (it does not start with '{') nor plain tokens, one per line: line %d %w; see docs/SECURITY.md for the JSON format", n, err)
		}
		tokens = append(tokens, t)
		lines = append(lines, n)
		openEnd = !strings.HasSuffix(line, "\n") // only the file's last line may lack one
	}
	if len(tokens) == 0 {
		return nil, errors.New("api: the auth file holds no token")
	}
	c := LegacyCredentials(tokens)
	c.legacyLines = lines
	c.legacyOpenEnd = openEnd
	return c, nil
}

// OpenLastToken says whether c, read from an old-format file to replace
// prev, ends in a token that may be cut short: it has no line end after
// it and is not a token prev takes. Such a file may have been read
// part-way through a save (an editor or a copy writing it in place as
// SIGHUP came, or a token being appended), and in this format every line
// is an admin token: the cut start of one, as short as a byte, would have
// become one. A line end is how the file says its last token is whole.
// It names the file line of that token.
func (c *Credentials) OpenLastToken(prev *Credentials) (line int, open bool) {
	if c == nil || !c.legacyOpenEnd || len(c.legacy) == 0 {
		return 0, false
	}
	if prev != nil {
		if _, ok := prev.Authenticate(c.legacy[len(c.legacy)-1]); ok {
			return 0, false
		}
	}
	return c.legacyLines[len(c.legacyLines)-1], true
}

// valueWords are what a tool prints for a value that is not there or a
// boolean, in place of a token: a line that is one of them, in any case,
// is refused (plainToken). jq and yq print null, Python None, JavaScript
// (node -p) undefined, Ruby's p and Lua nil, Go's fmt <nil>.
var valueWords = []string{"null", "true", "false", "none", "undefined", "nil", "<nil>"}

// plainToken says why t, a line of an old-format file, cannot be a bearer
// token.
func plainToken(t string) error {
	if t[0] == '[' || t[0] == '"' || t[0] == '{' {
		return fmt.Errorf("starts with %q, as JSON does", t[0])
	}
	if slices.ContainsFunc(valueWords, func(w string) bool { return strings.EqualFold(t, w) }) {
		// jq writes null for a path the file lacks: an auth file rebuilt
		// with a mistaken filter (jq '.token' auth.json > new.json) was,
		// after a SIGHUP, the admin token "null" in place of every token.
		// Other tools spell the same mistake otherwise (YAML's NULL and
		// True, Python's None and False, node's undefined, Go's <nil>),
		// and each was an admin token.
		return fmt.Errorf("is the word %s (what jq, yq, Python, node or Go print for a field that is not there, or a true/false value), not a token", t)
	}
	for i := 0; i < len(t); i++ {
		if c := t[i]; c <= ' ' || c >= 0x7f {
			return fmt.Errorf("has byte 0x%02x at column %d (a token is printable ASCII without spaces)", c, i+1)
		}
	}
	return nil
}

func parseAuthJSON(b []byte) (*Credentials, error) {
	var f authFileJSON
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&f); err != nil {
		return nil, fmt.Errorf("api: the auth file is not valid JSON of the form {\"tokens\":[{\"name\",\"sha256\",\"role\",\"principals\",\"max_principals\"}]}: %w", err)
	}
	if dec.More() {
		return nil, errors.New("api: the auth file has data after its JSON object")
	}
	if err := jsonstrict.DuplicateMember(b); err != nil {
		// {"role":"app",…,"Role":"operator"} loaded as an operator token
		// while the file read as an app token (a fuzz walk).
		return nil, fmt.Errorf("api: the auth file: %w", err)
	}
	if len(f.Tokens) == 0 {
		return nil, errors.New("api: the auth file holds no token (\"tokens\" is empty or missing)")
	}
	c := &Credentials{}
	names := map[string]int{}
	hashes := map[[sha256.Size]byte]int{}
	var errs []error
	for i, e := range f.Tokens {
		at := fmt.Sprintf("tokens[%d]", i)
		if e.Name != "" {
			at += fmt.Sprintf(" (%q)", e.Name)
		}
		bad := func(format string, args ...any) {
			errs = append(errs, fmt.Errorf("api: auth file %s: %s", at, fmt.Sprintf(format, args...)))
		}
		cred := Credential{Name: e.Name}
		switch {
		case e.Name == "":
			bad("name is required (it names the token in logs and errors)")
		case len(e.Name) > 64 || !utf8.ValidString(e.Name) || strings.ContainsFunc(e.Name, isControl):
			bad("name must be 1-64 bytes of UTF-8 without control characters")
		default:
			if j, dup := names[e.Name]; dup {
				bad("name is also the name of tokens[%d]", j)
			}
			names[e.Name] = i
		}
		raw, err := hex.DecodeString(e.SHA256)
		switch {
		case e.SHA256 == "":
			bad("sha256 is required: the hex SHA-256 of the token (make it with: idem token hash < token-file)")
		case err != nil || len(raw) != sha256.Size:
			bad("sha256 must be 64 hex digits, the SHA-256 of the token, not the token itself (make it with: idem token hash < token-file)")
		default:
			copy(cred.hash[:], raw)
			if j, dup := hashes[cred.hash]; dup {
				bad("the same token as tokens[%d] (each token must be listed once, with one role)", j)
			}
			hashes[cred.hash] = i
		}
		if cred.Role, err = ParseRole(e.Role); err != nil {
			bad("role %q is not app, operator or admin", e.Role)
		}
		switch {
		case cred.Role == RoleApp && len(e.Principals) == 0:
			bad("an app token needs principals: the principal names it may act for, or prefixes ending in '*' (\"*\" alone for all)")
		case cred.Role != RoleApp && cred.Role != 0 && len(e.Principals) > 0:
			bad("principals limit app tokens only; an %s token acts for every principal (remove principals, or make it an app token)", cred.Role)
		}
		for _, p := range e.Principals {
			switch {
			case p == "":
				bad("a principal pattern is empty")
			case strings.Contains(strings.TrimSuffix(p, "*"), "*"):
				bad("principal pattern %q: '*' may only end a pattern", p)
			case len(p) > maxPatternBytes || !utf8.ValidString(p):
				bad("principal pattern %q is not 1-%d bytes of UTF-8", truncate(p, 40), maxPatternBytes)
			}
		}
		cred.Principals = slices.Clone(e.Principals)
		if e.MaxPrincipals != nil {
			cred.MaxPrincipals = *e.MaxPrincipals
			switch {
			case cred.Role != RoleApp && cred.Role != 0:
				bad("max_principals bounds the principals an app token's prefix patterns create; an %s token has none (remove max_principals)", cred.Role)
			case *e.MaxPrincipals < 1:
				bad("max_principals must be at least 1 (%d); leave it out for no bound but the cluster's --max-principals", *e.MaxPrincipals)
			case cred.Role == RoleApp && len(e.Principals) > 0 && len(cred.capPrefixes()) == 0:
				bad("max_principals bounds the principals of prefix patterns ending in '*', and this token has only exact names (remove max_principals)")
			}
		}
		c.list = append(c.list, cred)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return c, nil
}

func isControl(r rune) bool { return r < 0x20 || r == 0x7f }

// LoadAuthFile reads and parses the auth file at path.
func LoadAuthFile(path string) (*Credentials, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("api: %w", err)
	}
	c, err := ParseAuthFile(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return c, nil
}

// Auth holds the credentials a server checks. Set swaps them whole
// (SIGHUP): a request is decided by one version, never a mix.
type Auth struct {
	cur atomic.Pointer[Credentials]
	// reloadErr is why the last reload of the file failed, nil once one
	// succeeds: the credentials in force are then older than the file.
	reloadErr atomic.Pointer[string]
}

// NewAuth returns an Auth holding c.
func NewAuth(c *Credentials) *Auth {
	a := &Auth{}
	a.cur.Store(c)
	return a
}

// Set replaces the credentials.
func (a *Auth) Set(c *Credentials) { a.cur.Store(c) }

// Credentials returns the credentials in force.
func (a *Auth) Credentials() *Credentials { return a.cur.Load() }

// SetReloadError records why the last reload of the auth file failed ("":
// it succeeded). GET /v1/config publishes it (auth_file_reload_error) and
// idem cluster status warns of it: a token removed from a file that then
// failed to load still works, and the operator's SIGHUP told them nothing.
func (a *Auth) SetReloadError(why string) {
	if why == "" {
		a.reloadErr.Store(nil)
		return
	}
	a.reloadErr.Store(&why)
}

// ReloadError is what SetReloadError recorded last, "" for none.
func (a *Auth) ReloadError() string {
	if p := a.reloadErr.Load(); p != nil {
		return *p
	}
	return ""
}

// setupAuth turns Config.AuthTokens (plain admin tokens) into an Auth, and
// gives the node the first plain token for its calls to other nodes when
// it has no node token of its own (the old format's behaviour).
func (s *Server) setupAuth() {
	if s.cfg.Auth == nil && len(s.cfg.AuthTokens) > 0 {
		s.cfg.Auth = NewAuth(LegacyCredentials(s.cfg.AuthTokens))
	}
	if s.cfg.NodeToken == "" && s.cfg.Auth != nil {
		s.cfg.NodeToken = s.cfg.Auth.Credentials().FirstLegacyToken()
	}
}

// codeForbidden is the problem code of a known token outside its role or
// its principals.
const codeForbidden = "forbidden"

// where an app token's request names the principal it acts for.
type principalIn int

const (
	principalNowhere principalIn = iota // the route is not for app tokens
	principalInBody                     // the JSON body's "principal"
	principalInQuery                    // the "principal" query parameter
)

// app guards a route any role may call, an app token only for its
// principals, named in the JSON body.
func (s *Server) app(h http.HandlerFunc) http.HandlerFunc {
	return s.guard(h, func(*http.Request) (Role, principalIn) { return RoleApp, principalInBody })
}

// operator guards a route for operators and admins.
func (s *Server) operator(h http.HandlerFunc) http.HandlerFunc {
	return s.guard(h, func(*http.Request) (Role, principalIn) { return RoleOperator, principalNowhere })
}

// admin guards a route for admins only. Routes not in the role table of
// docs/API.md are guarded so.
func (s *Server) admin(h http.HandlerFunc) http.HandlerFunc {
	return s.guard(h, func(*http.Request) (Role, principalIn) { return RoleAdmin, principalNowhere })
}

// records guards /v1/records: a lookup is an app's (principal in the
// query), an eviction an operator's. Other methods need only a valid token
// to be told 405.
func (s *Server) records(h http.HandlerFunc) http.HandlerFunc {
	return s.guard(h, func(r *http.Request) (Role, principalIn) {
		switch r.Method {
		case http.MethodGet, http.MethodHead:
			return RoleApp, principalInQuery
		case http.MethodDelete:
			return RoleOperator, principalNowhere
		}
		return RoleApp, principalNowhere
	})
}

// Admin guards h (e.g. /debug/pprof), a route served beside the API's own,
// like the admin routes: through the API's front door (shield: a headroom
// connection serves only probes, Content-Length with Transfer-Encoding is
// refused, --max-inflight counts it), then, with auth on, only an admin
// token passes.
func (s *Server) Admin(h http.Handler) http.Handler {
	guarded := s.admin(h.ServeHTTP)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { s.shield(w, r, guarded) })
}

// guard authenticates a request and checks its role and, for an app
// token, its principal, before h reads anything. policy says the least
// role of the request and where an app names its principal
// (principalNowhere with RoleApp: any valid token).
func (s *Server) guard(h http.HandlerFunc, policy func(*http.Request) (Role, principalIn)) http.HandlerFunc {
	if s.cfg.Auth == nil {
		return h
	}
	return func(w http.ResponseWriter, r *http.Request) {
		if n := len(r.Header.Values("Authorization")); n > 1 {
			// One field (RFC 9110 11.6.2): with two, a proxy in front may
			// have checked the other one.
			s.refuseUnread(w, r, invalid("the request has %d Authorization headers; send one", n))
			return
		}
		creds := s.credentialsOf(r)
		cred, reason := authenticate(creds, r)
		if cred == nil {
			s.countRefused(reason)
			w.Header().Set("WWW-Authenticate", `Bearer realm="idem"`)
			s.refuseUnread(w, r, newProblem(http.StatusUnauthorized, codeUnauthorized, "a valid Authorization: Bearer token is required"))
			return
		}
		least, where := policy(r)
		if cred.Role < least {
			s.countRefused("role")
			s.logRefused(cred, "request refused: role", "role", cred.Role.String(), "method", r.Method, "path", r.URL.Path)
			s.refuseUnread(w, r, forbidden(fmt.Sprintf("the %s token %q may not call %s %s: it needs an %s token", cred.Role, cred.Name, r.Method, r.URL.Path, least)))
			return
		}
		if cred.Role == RoleApp && r.Context().Value(credentialsKey{}) == nil {
			// A tenant's request itself, not an op of a batch
			// (authorizeOp), which its batch's slot covers. Operators and
			// admins are not tenants (an old-format file's tokens, admins
			// all, may be every client's and the nodes' own).
			release, ok := s.tokenSlot(w, r, cred)
			if !ok {
				return // answered
			}
			defer release()
		}
		// For the claim handlers (claimArgs: a principal cap goes in the
		// entry) and the batch answers' share (answersHeldBy).
		ctx := context.WithValue(r.Context(), credentialKey{}, cred)
		if ctx.Value(credentialsKey{}) == nil {
			// The ops of a batch are judged (authorizeOp) by the version
			// that admitted the batch, not by one a SIGHUP loads meanwhile.
			ctx = context.WithValue(ctx, credentialsKey{}, creds)
		}
		r = r.WithContext(ctx)
		if cred.Role == RoleApp && where != principalNowhere {
			principal, ok := s.principalOf(w, r, where)
			if !ok {
				return // answered
			}
			if principal != nil && !cred.Allows(*principal) {
				s.countRefused("principal")
				s.logRefused(cred, "request refused: principal", "principal", truncate(*principal, 64), "path", r.URL.Path)
				writeProblem(w, forbidden(fmt.Sprintf("the app token %q may act only for the principals %s, not %q",
					cred.Name, strings.Join(cred.Principals, ", "), truncate(*principal, 64))))
				return
			}
		}
		h(w, r)
	}
}

// authenticate is the credential of r's one Authorization header in
// creds, or nil and why not: no_token or unknown_token, as
// idem_http_auth_refused_total counts them.
func authenticate(creds *Credentials, r *http.Request) (*Credential, string) {
	token := bearerToken(r.Header.Get("Authorization"))
	if cred, ok := creds.Authenticate(token); ok {
		return cred, ""
	}
	if token == "" {
		return nil, "no_token"
	}
	return nil, "unknown_token"
}

// countRefused counts a request the auth guard refused (Collectors).
func (s *Server) countRefused(reason string) {
	if s.authRefused != nil { // nil in a Server not made by New (tests)
		s.authRefused.WithLabelValues(reason).Inc()
	}
}

// logRefused logs a request of cred refused for its role or principal,
// at most one a second for each token: a token sending batches of ops for
// principals it may not act for made a line per op, 256 a request, as fast
// as it could send them (attack on loopback), and a log fills a disk too.
// The token's next line says how many went unlogged. The second was the
// node's, not the token's: one tenant's flood of refusals kept every other
// token's refusals (another tenant's stolen token probing principals) out
// of the log. The tokens are those of the auth file, so the lines are too.
func (s *Server) logRefused(cred *Credential, msg string, args ...any) {
	l := &s.tokenLoadOf(cred.Name).refusals
	if !l.spacer.Allow(time.Second) {
		l.unlogged.Add(1)
		return
	}
	if n := l.unlogged.Swap(0); n > 0 {
		args = append(args, "refused_unlogged", n)
	}
	s.log.Info(msg, append([]any{"token", cred.Name}, args...)...)
}

// refusalLog spaces one token's refusal lines (logRefused) and counts
// those left out since its last.
type refusalLog struct {
	spacer   mono.Spacer
	unlogged atomic.Int64
}

// credentialKey holds, in a request's context, the credential that
// authenticated it.
type credentialKey struct{}

// credentialsKey holds, in a request's context, the version of the auth
// file that authenticated it: a request is decided by one version.
type credentialsKey struct{}

// credentialsOf is the version of the auth file r is decided by: the one
// that admitted the request it is part of, else the one in force.
func (s *Server) credentialsOf(r *http.Request) *Credentials {
	if c, ok := r.Context().Value(credentialsKey{}).(*Credentials); ok {
		return c
	}
	return s.cfg.Auth.Credentials()
}

// cappedCredential is the credential of r when it has a principal cap.
func cappedCredential(r *http.Request) *Credential {
	if c := credentialOf(r); c != nil && c.MaxPrincipals > 0 {
		return c
	}
	return nil
}

// credentialOf is the credential that authenticated r (nil with auth off).
func credentialOf(r *http.Request) *Credential {
	c, _ := r.Context().Value(credentialKey{}).(*Credential)
	return c
}

// principalOf returns the principal a request names. A body is read (up
// to the request limit) and put back for the handler. It returns a nil
// principal for a body that is not a JSON object with a string principal:
// the handler's stricter decoding refuses that body with 400 before it
// reads or writes anything. ok is false when the answer is written.
func (s *Server) principalOf(w http.ResponseWriter, r *http.Request, where principalIn) (*string, bool) {
	if where == principalInQuery {
		q, bad := recordsQuery(r) // exactly what the handler reads
		if bad != nil {
			return nil, true // the handler refuses the query with 400
		}
		p := q.Get("principal")
		return &p, true
	}
	body, p := s.readBody(w, r)
	if p != nil {
		writeProblem(w, p)
		return nil, false
	}
	r.Body = &readBytes{Reader: bytes.NewReader(body), b: body}
	// The same decoder and field tag as the handler's (case-insensitive
	// match, the last of repeated members), so both see one principal.
	var named struct {
		Principal *string `json:"principal"`
	}
	if json.Unmarshal(body, &named) != nil || notObject(body) != nil {
		return nil, true // null too: not an object, a 400 as for anyone
	}
	if named.Principal == nil {
		empty := "" // no principal acts for none: refused, as the handler would refuse it
		return &empty, true
	}
	return named.Principal, true
}

// refuseUnread answers a refusal decided from the headers alone. The body
// is not read: the connection closes after the answer, and the server does
// not wait for the rest of the body (which it would otherwise drain).
func (s *Server) refuseUnread(w http.ResponseWriter, r *http.Request, p *problem) {
	if r.ContentLength != 0 {
		w.Header().Set("Connection", "close")
		// net/http drains up to 256 KiB of an unread body after the
		// handler, even on a connection it then closes; an expired read
		// deadline makes that drain fail at once. Unsupported (HTTP/2,
		// which resets the stream instead): nothing to do.
		_ = http.NewResponseController(w).SetReadDeadline(time.Now())
	}
	writeProblem(w, p)
}

func forbidden(detail string) *problem {
	p := newProblem(http.StatusForbidden, codeForbidden, detail)
	p.Title = "Forbidden"
	return p
}

// bearerToken returns the token of an Authorization header of the Bearer
// scheme, whose name is case-insensitive (RFC 9110 11.1); "" otherwise.
func bearerToken(h string) string {
	scheme, token, ok := strings.Cut(h, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return ""
	}
	return strings.TrimLeft(token, " \t")
}
