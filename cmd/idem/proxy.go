package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/idem-store/idem/api"
	"github.com/idem-store/idem/client"
	"github.com/idem-store/idem/internal/mono"
	"github.com/idem-store/idem/middleware"
)

func init() {
	extraCommands["proxy"] = command{runProxy, "a reverse proxy that makes any HTTP API idempotent (Idempotency-Key)"}
}

const proxyUsage = `Usage: idem proxy --listen ADDR --upstream URL --store URL[,URL...] [flags]

A reverse proxy that gives any HTTP service Idempotency-Key semantics
(draft-ietf-httpapi-idempotency-key-header), with a running idem cluster as
its store. POST and PATCH (--methods) need an Idempotency-Key header; the
first request runs and its answer is stored, a retry gets the stored answer
back with Idempotency-Replayed: true, a retry while the first still runs gets
409, the same key with another request 422. Other methods pass through.

  idem proxy --listen :8080 --upstream http://127.0.0.1:9000 --store 127.0.0.1:7070

The principal (whose keys these are) is the --principal-header value, or else
a hash of the Authorization header: a keyed request without one is refused
with 401 unless --allow-anonymous makes such requests share one principal.
A token refreshed between a request and its retry is a new principal, and
the retry runs again: where tokens rotate, use --principal-header.
The endpoint is the method and path (a path too long for the store ends in a
hash of it). When no store node answers, the proxy answers 503 and does not
call the upstream.

Flags:
`

// minHashKey is the fewest characters --hash-key-file's key may have.
const minHashKey = 32

// proxyConfig is what idem proxy's flags say.
type proxyConfig struct {
	// hup receives SIGHUP from the start of runProxy: Go's default for it
	// is to exit, which ended the proxy and every request it held.
	hup                        chan os.Signal
	listen, upstream, stores   string
	principalHeader, methods   string
	fingerprintHeaders         string
	allowAnonymous             bool
	storeToken, storeTokenFile string
	hashKeyFile                string
	storeTLS                   *clientTLSFlags
	tlsCert, tlsKey            string
	storeTimeout               time.Duration
	lease                      time.Duration
	maxStoredBody              int
	storeBatch                 int
	shutdownTimeout            time.Duration
	upstreamTimeout            time.Duration
	writeTimeout               time.Duration
	bodyReadTimeout            time.Duration
	streamStallTimeout         time.Duration
	maxInFlight                int
	maxConns                   int
	logLevel                   string
	// vars are the IDEM_* variables that gave flags their value (flag
	// name -> variable; variablesUsed), named in the refusals of those.
	vars map[string]string
}

// proxyVariables are idem proxy's IDEM_* variables, by the flag each
// gives the value of when the flag is not on the command line.
var proxyVariables = map[string]string{
	"listen": "IDEM_PROXY_LISTEN", "upstream": "IDEM_PROXY_UPSTREAM", "store": "IDEM_PROXY_STORE", "store-token": "IDEM_STORE_TOKEN",
	"ca-file": "IDEM_CA_FILE", "cert-file": "IDEM_CERT_FILE", "key-file": "IDEM_KEY_FILE",
}

func runProxy(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	const name = "idem proxy"
	c := proxyConfig{hup: make(chan os.Signal, 1)}
	signal.Notify(c.hup, syscall.SIGHUP)
	defer signal.Stop(c.hup)
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), proxyUsage)
		fs.SetOutput(fs.Output())
		printFlags(fs.Output(), fs)
	}
	fs.StringVar(&c.listen, "listen", os.Getenv("IDEM_PROXY_LISTEN"), "`address` to listen on, host:port (required; env IDEM_PROXY_LISTEN)")
	fs.StringVar(&c.upstream, "upstream", os.Getenv("IDEM_PROXY_UPSTREAM"), "`URL` of the service behind the proxy, http:// or https:// (required; env IDEM_PROXY_UPSTREAM)")
	fs.StringVar(&c.stores, "store", os.Getenv("IDEM_PROXY_STORE"), "comma-separated `addresses` of idem nodes, host:port or URL; a node that cannot be reached or answers 503 is skipped for the next (required; env IDEM_PROXY_STORE)")
	fs.StringVar(&c.principalHeader, "principal-header", "", "request header `name` that carries the principal (set by your gateway, never by callers; sent twice or with a comma, two values, it is refused with 401); every caller with the same value shares keys, and so stored answers (Set-Cookie included): make it a tenant whose users may see each other's answers, or have callers use unguessable keys. Without it the principal is a hash of the Authorization header")
	fs.BoolVar(&c.allowAnonymous, "allow-anonymous", false, "without --principal-header, keyed requests with no Authorization header share the principal \"anonymous\" instead of being refused with 401: only when every caller may be handed another's stored answer (Set-Cookie included) for the same key")
	fs.StringVar(&c.hashKeyFile, "hash-key-file", "", "key the hashes of the principal (without --principal-header) and of the request's fingerprint with the secret on the one line of `path` that is not empty or a # comment, at least 32 characters (openssl rand -hex 32): HMAC-SHA256, principals authk:…. Without it both are plain SHA-256, which the store keeps, logs (the principal) and backs up: a reader of those can test guessed credentials (a Basic-auth password) and guessed requests against them. Every proxy in front of one store needs the same key; adding, changing or removing it changes every principal and fingerprint, so a request retried across the change runs again (or gets 422)")
	fs.StringVar(&c.fingerprintHeaders, "fingerprint-header", "", "comma-separated request header `names` that count in the fingerprint besides Content-Type: the headers (or Host) by which your service picks what a request acts on, such as an account header; without them a key sent for one account and then another is replayed the first one's answer. A request without any of them keeps its fingerprint; one with any gets another, so a retry of it across adding or changing the flag gets 422 (naming Host: every request). Not Authorization, Proxy-Authorization or Cookie (the principal already), Content-Type or Idempotency-Key (counted already), nor a hop-by-hop header or Content-Length (each hop sets its own), nor X-Forwarded-For, X-Real-IP, Forwarded and their kin (the proxy sets its own)")
	fs.StringVar(&c.methods, "methods", "POST,PATCH", "comma-separated `methods` that need an Idempotency-Key; the others pass through")
	// IDEM_STORE_TOKEN is read after the flags, never made --store-token's
	// default: --help prints defaults, and the token would land in
	// terminals and CI logs (as authTokenFlag says of IDEM_AUTH_TOKEN).
	fs.StringVar(&c.storeToken, "store-token", "", "bearer `token` for a store started with --auth-file (an app token needs the principals the proxy uses; env IDEM_STORE_TOKEN)")
	fs.StringVar(&c.storeTokenFile, "store-token-file", "", "read the store's bearer token from the one line of `path` that is not empty or a # comment")
	c.storeTLS = addClientTLSFlags(fs, "store")
	fs.StringVar(&c.tlsCert, "tls-cert-file", "", "PEM `file` of the certificate to serve HTTPS on --listen with (with --tls-key-file)")
	fs.StringVar(&c.tlsKey, "tls-key-file", "", "PEM `file` of the key of --tls-cert-file")
	fs.IntVar(&c.storeBatch, "store-batch", 0, "coalesce the store calls of concurrent requests into POST /v1/batch requests of at most `n` ops (the Go client's batcher: fewer, larger requests under load; a call waits only while other batches are in flight, until its batch holds as many calls as they do, at most 0.5 ms); at or below the store's --max-batch-ops (256 by default) is best, a larger batch is sent again in halves; 0: one store request per call")
	fs.DurationVar(&c.storeTimeout, "store-timeout", 5*time.Second, "give up on a store call after this `duration` (the caller gets 503); an answer's complete is asked for at most half --lease, then in the background with its lease kept (a warning at start when this is longer)")
	fs.DurationVar(&c.lease, "lease", 30*time.Second, "the lease of an attempt (100ms to 1h), extended every third of it while the upstream works; if no extend reaches the store before it runs out, the upstream call is cancelled (a retry through another proxy could take the key over) and the caller gets 503. A retry after a proxy crash waits this long for the key. Keep it within the store's --min-lease/--max-lease (checked at start: outside them every keyed request is answered 503) and at 10s or more: an answer not stored before it runs out (the store electing a leader) lets a retry call the upstream again")
	fs.DurationVar(&c.upstreamTimeout, "upstream-timeout", 0, "give up on an upstream call after this `duration` (the caller gets 504 and a retry runs again, told Idempotency-Attempt; 0: never). The upstream may still be running the call given up on (the proxy only hangs up), so the retry can run beside it: fence its writes with Idempotency-Attempt. A call goes on when its caller disconnects, so its answer is stored for the retry. Keep it within --shutdown-timeout (a warning at start says when it is not): a SIGTERM cuts a call still running at the end of that grace, and its retry runs it again after the lease")
	fs.DurationVar(&c.bodyReadTimeout, "body-read-timeout", 10*time.Second, "how long a keyed request's body (read whole, up to 1 MiB, before the store is asked) may take to arrive, from the end of its headers (400 after it, and the connection is closed); any other request's body is bounded by --stream-stall-timeout. A body the proxy or the upstream answers without reading is not waited for: the connection is closed after the answer")
	fs.DurationVar(&c.streamStallTimeout, "stream-stall-timeout", 10*time.Second, "an unkeyed request's body (a method outside --methods: an upload, a chunked event stream) streams to the upstream for as long as it keeps coming: it may stall for at most this `duration` at a time and must average 1 KiB per duration (about 100 bytes a second at 10s); one that falls behind is cut and the upstream call abandoned: 408 when the upstream has not answered yet, and the connection is closed. Raise it for clients that go quiet longer between writes (log shipping over one long upload); 0: no bound, each such body holds its --max-inflight slot for as long as its caller likes")
	fs.DurationVar(&c.writeTimeout, "write-timeout", 30*time.Second, "how long a caller has to take each write of an answer (each event of a stream): a caller that stops reading is cut off, and a keyed request's attempt is completed from the upstream's whole answer")
	sizeVar(fs, &c.maxStoredBody, "max-stored-body", 65536, "largest answer body stored for replays, a size (bytes, or e.g. 64KiB): the store's --max-response-bytes (a larger answer reaches its caller and is stored without its body)")
	fs.DurationVar(&c.shutdownTimeout, "shutdown-timeout", 30*time.Second, "on SIGTERM or Ctrl-C, let requests in flight finish for up to this `duration`, connections switched to another protocol (WebSocket) included: the proxy exits once the last closes")
	fs.IntVar(&c.maxInFlight, "max-inflight", defaultProxyMaxInFlight, "most requests handled at once, `n`, from their headers to the end of their answer (a stream's included); beyond it a request is answered 503 unavailable with Retry-After: 1, before its body is read and without calling the store or the upstream")
	fs.IntVar(&c.maxConns, "max-conns", defaultProxyMaxConns, "most open connections from callers, `n`; one more takes the slot of the oldest that holds no request (a header still arriving, a silent one open for 1s, or keep-alive idle for 1s; with --tls-cert-file, one without a request for 1s), which is closed, or, when every one holds a request, is answered 503 unavailable with Retry-After: 1 and closed at once (with --tls-cert-file the refused caller sees its TLS handshake fail instead). Lowered to fit the open-files limit (raised to its hard limit at start), keeping one descriptor per --max-inflight request for its upstream call")
	fs.StringVar(&c.logLevel, "log-level", "info", "debug, info, warn or error")
	if code, done := parseArgs(fs, args, name, stdout, stderr); done {
		return code
	}
	if c.storeToken == "" && c.storeTokenFile == "" {
		c.storeToken = os.Getenv("IDEM_STORE_TOKEN")
	}
	c.vars = variablesUsed(fs, proxyVariables)
	if c.storeTokenFile != "" {
		delete(c.vars, "store-token") // IDEM_STORE_TOKEN is not read
	}
	p, problems := c.build()
	if len(problems) > 0 {
		// IDEM_PROXY_LISTEN=:99999 was refused as --listen, a flag the
		// command line did not hold: each line names the variable too.
		for _, e := range problems {
			fmt.Fprintf(stderr, "%s: %v\n", name, withVariables(e.Error(), c.vars))
		}
		fmt.Fprintf(stderr, "(see %s --help)\n", name)
		return 2
	}
	if err := p.run(ctx); err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", name, err)
		return 1
	}
	return 0
}

// lowerStoredBody lowers --max-stored-body past the most a store takes
// (its --max-response-bytes is at most maxResponseBytesLimit) to it, as
// serve lowers --max-response-bytes, and says so; and says when that many
// bytes held by each of --max-inflight requests at once would take more
// memory than the machine has, as serve says of --max-inflight-bytes. A
// keyed request holds its answer's body up to --max-stored-body to store
// it; --max-stored-body 1TB was taken without a word.
func (p *proxy) lowerStoredBody() []string {
	var notes []string
	if p.cfg.maxStoredBody > maxResponseBytesLimit {
		notes = append(notes, fmt.Sprintf("--max-stored-body %d lowered to %d, the maximum: a store stores no larger body (its --max-response-bytes is at most 62 MiB, what one raft log entry holds)", p.cfg.maxStoredBody, maxResponseBytesLimit))
		p.cfg.maxStoredBody = maxResponseBytesLimit
	}
	if note := storedBodyMemory(p.cfg.maxStoredBody, p.cfg.maxInFlight, physicalMemory()); note != "" {
		notes = append(notes, note)
	}
	return notes
}

// answerMemoryFactor is the memory a keyed request's held answer takes,
// per byte of it, as its complete is sent: the copy the middleware keeps
// for the replay, and its base64 in the complete's JSON (a third larger),
// which encoding/json builds three times (the encoding, the encoder's
// buffer, the Encoder's output) before any is freed: 1 + 3*4/3 (the
// copy wholeAnswer read is garbage by then). 4 keyed requests of 40 MiB
// answers took the proxy's live heap to 779 MB, 4.6 times their bytes
// (1,022 MB before that collection, VmHWM 1.2 GB).
const answerMemoryFactor = 5

// storedBodyMemory says when maxStoredBody held by each of maxInFlight
// requests at once takes more than mem (0: unknown, nothing said).
func storedBodyMemory(maxStoredBody, maxInFlight int, mem uint64) string {
	need := uint64(max(maxStoredBody, 0)) * uint64(max(maxInFlight, 0)) * answerMemoryFactor
	if mem == 0 || need <= mem {
		return ""
	}
	return fmt.Sprintf("--max-stored-body %s held by each of --max-inflight %d requests at once can take about %s of memory (%d times their bytes: the answer kept for the replay, and its base64 for the store, built three times over), more than this machine's %s: lower one of them",
		formatShortest(uint64(maxStoredBody)), maxInFlight, formatApprox(need), answerMemoryFactor, formatApprox(mem))
}

// proxy is a validated configuration, ready to listen.
type proxy struct {
	cfg       proxyConfig
	upstream  *url.URL
	store     *client.Client
	failover  *storeFailover
	methods   []string
	listenTLS *tls.Config
	log       *slog.Logger
	batcher   *client.Batcher // with --store-batch; closed after the last request
	// unkeyedLog spaces the log lines about a keyed
	// request refused for want of a principal.
	unkeyedLog mono.Spacer
	// signedLog spaces the log lines about a keyed
	// request whose credential is signed per request (signedPerRequest).
	signedLog mono.Spacer
	noToken   bool // neither --store-token nor --store-token-file
	// byCredential and anonymous are the principal without
	// --principal-header, and with --allow-anonymous, and fingerprint the
	// request's: keyed with --hash-key-file's key, or plain SHA-256.
	byCredential, anonymous func(*http.Request) (string, error)
	fingerprint             func(r *http.Request, endpoint string, body []byte) (string, error)
	fingerprintHeaders      []string // --fingerprint-header, canonical
}

// credentialHeaders carry a caller's secret: neither the principal
// header (stored in clear) nor a fingerprint header (the credential is
// the principal already) may name one.
var credentialHeaders = []string{"Authorization", "Proxy-Authorization", "Cookie"}

// transportHeaders are the hop-by-hop headers (RFC 9110 section 7.6.1)
// and the body's framing: set by each hop, never what a request acts on.
var transportHeaders = []string{"Connection", "Keep-Alive", "Proxy-Connection", "Te", "Trailer", "Transfer-Encoding", "Upgrade", "Content-Length"}

// sameListener reports whether addr (host:port) reaches the proxy's own
// --listen address: the same port, and the same host, or a loopback host
// when the proxy listens on every interface.
func sameListener(listen, addr string) bool {
	lh, lp, err1 := net.SplitHostPort(listen)
	ah, ap, err2 := net.SplitHostPort(addr)
	if err1 != nil || err2 != nil || lp != ap {
		return false
	}
	if strings.EqualFold(lh, ah) {
		return true
	}
	loop := func(h string) bool {
		ip := net.ParseIP(h)
		return strings.EqualFold(h, "localhost") || (ip != nil && ip.IsLoopback())
	}
	wildcard := lh == "" || lh == "0.0.0.0" || lh == "::"
	return wildcard && (loop(ah) || ah == "")
}

// build checks every flag and names each one that is wrong; nothing is
// started until all are right.
func (c proxyConfig) build() (*proxy, []error) {
	var problems []error
	bad := func(flag, format string, a ...any) {
		problems = append(problems, fmt.Errorf("--%s: %s", flag, fmt.Sprintf(format, a...)))
	}
	p := &proxy{cfg: c, byCredential: middleware.AuthorizationPrincipal, anonymous: middleware.AnonymousPrincipal, fingerprint: middleware.DefaultFingerprint}
	// required is what a required flag left empty is told: an empty
	// IDEM_PROXY_* variable is named as such, not taken for no flag at all.
	required := func(flag, what, example string) string {
		if v, ok := c.vars[flag]; ok {
			return fmt.Sprintf("$%s is set but empty: give it %s (e.g. %s), or unset it and give --%s", v, what, example, flag)
		}
		return fmt.Sprintf("required: %s (e.g. --%s %s)", what, flag, example)
	}

	if c.listen == "" {
		bad("listen", "%s", required("listen", "the address to listen on", "127.0.0.1:8080"))
	} else if _, port, err := net.SplitHostPort(c.listen); err != nil || port == "" {
		if hint := ipv6Hint(c.listen); hint != "" {
			bad("listen", "%q is not host:port: %s", c.listen, hint)
		} else {
			bad("listen", "%q is not host:port", c.listen)
		}
	} else if err := checkHostPort(c.listen); err != nil {
		// 127.0.0.1:99999 got as far as listening (exit 1, "invalid port").
		bad("listen", "%q is not host:port with a port from 1 to 65535: %v", c.listen, err)
	}

	if c.upstream == "" {
		bad("upstream", "%s", required("upstream", "the URL of the service behind the proxy", "http://127.0.0.1:9000"))
	} else if u, err := url.Parse(c.upstream); strings.Contains(c.upstream, "@") && (err != nil || u.User == nil) {
		// Neither the URL nor url.Parse's error, which quotes it: a
		// password in it would reach the terminal or the log. A password
		// of digits (or none) before a '/', '?' or '#' parses as a port
		// and the rest as a path, query or fragment: the proxy ran
		// against host "u", or printed the address whole.
		bad("upstream", "an address with user info is not a URL; want an http:// or https:// URL with a host")
	} else if err == nil && u.User != nil {
		bad("upstream", "%q: a base URL takes no user info (put the upstream's credentials in its callers' requests)", u.Redacted())
	} else if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		bad("upstream", "%q must be an http:// or https:// URL with a host", c.upstream)
	} else if u.RawQuery != "" || u.Fragment != "" {
		bad("upstream", "%q: a base URL takes no query or fragment", c.upstream)
	} else {
		p.upstream = u
	}

	if p.upstream != nil && sameListener(c.listen, p.upstream.Host) {
		bad("upstream", "%s is --listen's address: the proxy would send each request to itself", c.upstream)
	}

	storeTLS, err := c.storeTLS.config()
	if err != nil {
		problems = append(problems, err) // names --ca-file, --cert-file or --key-file
	}
	if c.stores == "" {
		bad("store", "%s", required("store", "the address of at least one idem node", "127.0.0.1:7070"))
	} else if nodes, err := parseStores(c.stores, storeTLS != nil); err != nil {
		bad("store", "%v", err)
	} else if err == nil {
		p.failover = newStoreFailover(nodes, storeTLS)
		for _, n := range nodes {
			if sameListener(c.listen, n.Host) {
				bad("store", "%s is --listen's address: the store is an idem node (idem serve --http-addr), not this proxy", n.Host)
			}
		}
	}

	token := c.storeToken
	if c.storeTokenFile != "" {
		if c.storeToken != "" {
			bad("store-token-file", "give --store-token or --store-token-file, not both")
		} else if t, err := readTokenFile("--store-token-file", c.storeTokenFile); err != nil {
			problems = append(problems, err)
		} else {
			token = t
		}
	}
	if c.hashKeyFile != "" {
		if k, err := readTokenFile("--hash-key-file", c.hashKeyFile); err != nil {
			problems = append(problems, err)
		} else if len(k) < minHashKey {
			bad("hash-key-file", "the key in %s is %d characters: give at least %d random ones (umask 077; openssl rand -hex 32 > %s)", c.hashKeyFile, len(k), minHashKey, c.hashKeyFile)
		} else {
			p.byCredential = middleware.KeyedAuthorizationPrincipal([]byte(k))
			p.anonymous = middleware.KeyedAnonymousPrincipal([]byte(k))
			p.fingerprint = middleware.KeyedFingerprint([]byte(k))
		}
	}
	if strings.ContainsAny(token, " \t\r\n") {
		bad("store-token", "a bearer token holds no spaces or line breaks")
	}
	p.noToken = token == ""

	for _, m := range strings.Split(c.methods, ",") {
		m = strings.ToUpper(strings.TrimSpace(m))
		switch {
		case m == "":
			continue
		case !proxyIsToken(m):
			bad("methods", "%q is not an HTTP method", m)
		case m == http.MethodGet || m == http.MethodHead || m == http.MethodOptions || m == http.MethodTrace || m == http.MethodConnect:
			bad("methods", "%s is safe or a transport method: it has no effect to make idempotent", m)
		default:
			p.methods = append(p.methods, m)
		}
	}
	if len(p.methods) == 0 && c.methods != "" && len(problems) == 0 {
		bad("methods", "no method given")
	}
	if len(p.methods) == 0 && c.methods == "" {
		bad("methods", "no method given (the default is POST,PATCH)")
	}

	for _, h := range strings.Split(c.fingerprintHeaders, ",") {
		if h = strings.TrimSpace(h); h == "" {
			continue
		} else if !proxyIsToken(h) {
			bad("fingerprint-header", "%q is not a header name", h)
		} else if slices.Contains(credentialHeaders, http.CanonicalHeaderKey(h)) {
			// A secret, kept in the store as a hash no key protects without
			// --hash-key-file; a cookie also changes between a request and
			// its retry (a tracker's), making every retry a 422.
			bad("fingerprint-header", "%s carries a credential: the caller's credential is the principal already (a hash of Authorization, or --principal-header); name the headers that pick what a request acts on", http.CanonicalHeaderKey(h))
		} else if slices.Contains(transportHeaders, http.CanonicalHeaderKey(h)) {
			// Each hop sets its own (an HTTP/2 client sends no Connection,
			// a load balancer re-frames the body): a retry through another
			// path would get 422 for a change the caller never made.
			bad("fingerprint-header", "%s describes the connection or the body's framing, which each hop sets anew, not what a request acts on: a retry over another connection or proxy would get 422; name the headers that pick what a request acts on", http.CanonicalHeaderKey(h))
		} else if forwardingHeader(h) {
			// The proxy drops the caller's and sets its own for the
			// upstream: what would count is a value the upstream never
			// sees, and a retry from another address (a phone that moved
			// from Wi-Fi to mobile data) or through another balancer
			// would get 422 for ever.
			bad("fingerprint-header", "%s says where a request came from (the proxy sets it for the upstream from what it saw, and drops the caller's), not what it acts on: a retry from another address or through another balancer would get 422; name the headers that pick what a request acts on", http.CanonicalHeaderKey(h))
		} else if slices.Contains([]string{"Content-Type", "Idempotency-Key"}, http.CanonicalHeaderKey(h)) {
			// Counted already (the key is the record's name): named, it
			// would change every request's fingerprint for nothing, and
			// every retry across the change would get 422.
			bad("fingerprint-header", "%s counts already (Content-Type is in every fingerprint, Idempotency-Key names the record); name the headers that pick what a request acts on", http.CanonicalHeaderKey(h))
		} else {
			p.fingerprintHeaders = append(p.fingerprintHeaders, http.CanonicalHeaderKey(h))
		}
	}
	if len(p.fingerprintHeaders) > 0 {
		p.fingerprint = middleware.HeaderFingerprint(p.fingerprint, p.fingerprintHeaders...)
	}

	if c.principalHeader != "" && !proxyIsToken(c.principalHeader) {
		bad("principal-header", "%q is not a header name", c.principalHeader)
	}
	if c.principalHeader != "" && forwardingHeader(c.principalHeader) {
		// An address is no tenant: callers behind one NAT or balancer
		// would share keys, and so each other's stored answers, and a
		// client whose address changed before its retry would run again.
		bad("principal-header", "%s says where a request came from, not who sent it: callers behind one address (a NAT, a balancer) would share keys and each other's stored answers, and a retry from another address would run again (the proxy also drops the caller's value on the way to the upstream); name the header your gateway sets to the tenant", http.CanonicalHeaderKey(c.principalHeader))
	}
	if strings.EqualFold(c.principalHeader, "Idempotency-Key") {
		bad("principal-header", "the principal cannot be the key itself")
	}
	if c.principalHeader != "" && (slices.Contains(transportHeaders, http.CanonicalHeaderKey(c.principalHeader)) || strings.EqualFold(c.principalHeader, "Host")) {
		// No tenant either: Content-Length made every caller sending a
		// body of one length one tenant, sharing stored answers, and
		// Connection every keep-alive caller; Go's server takes Host and
		// Transfer-Encoding out of the headers, so every keyed request
		// was refused with 401 saying a header the caller sent was missing.
		bad("principal-header", "%s describes the connection, the body's framing or the server asked, not who sent the request: callers would share keys and each other's stored answers, or every keyed request would be refused; name the header your gateway sets to the tenant", http.CanonicalHeaderKey(c.principalHeader))
	}
	for _, secret := range credentialHeaders {
		if strings.EqualFold(c.principalHeader, secret) {
			bad("principal-header", "%s carries a secret, which would be stored as the principal in plain text (and a new token would be a new tenant); leave the flag out to key by a hash of Authorization, or name the header a gateway sets to the tenant", secret)
		}
	}
	if c.allowAnonymous && c.principalHeader != "" {
		bad("allow-anonymous", "has no effect with --principal-header, which is required on every keyed request")
	}

	switch {
	case c.tlsCert != "" && c.tlsKey == "":
		bad("tls-key-file", "required with --tls-cert-file")
	case c.tlsKey != "" && c.tlsCert == "":
		bad("tls-cert-file", "required with --tls-key-file")
	case c.tlsCert != "":
		pair, err := tls.LoadX509KeyPair(c.tlsCert, c.tlsKey)
		if err != nil {
			bad("tls-cert-file", "%s with --tls-key-file %s: %v", c.tlsCert, c.tlsKey, err)
		} else {
			p.listenTLS = &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{pair}}
		}
	}
	if c.storeTimeout <= 0 {
		bad("store-timeout", "must be positive")
	}
	if c.maxStoredBody <= 0 {
		bad("max-stored-body", "must be positive")
	} else if why := memoryBound("max-stored-body", uint64(c.maxStoredBody), physicalMemory()); why != "" {
		// As serve refuses a size past the memory: 1TB is a typo, and
		// every keyed request would hold up to it of its answer.
		problems = append(problems, fmt.Errorf("%s: the proxy would run out of memory before reaching it (each keyed request holds up to this much of its answer); give the store's --max-response-bytes (64KiB by default)", why))
	}
	if c.lease < 100*time.Millisecond || c.lease > time.Hour {
		bad("lease", "%s must be between 100ms and 1h", c.lease)
	}
	if c.upstreamTimeout < 0 {
		bad("upstream-timeout", "must not be negative")
	}
	if c.writeTimeout <= 0 {
		bad("write-timeout", "must be positive")
	}
	if c.bodyReadTimeout <= 0 {
		bad("body-read-timeout", "must be positive")
	}
	if c.streamStallTimeout < 0 {
		bad("stream-stall-timeout", "must not be negative (0: no bound on an unkeyed request's body)")
	}
	if c.storeBatch < 0 || c.storeBatch > 4096 {
		bad("store-batch", "%d: want 0 (off) to 4096, at or below the store's --max-batch-ops", c.storeBatch)
	}
	if c.shutdownTimeout < 0 {
		bad("shutdown-timeout", "must not be negative")
	}
	if c.maxInFlight < 1 {
		bad("max-inflight", "%d: must be at least 1", c.maxInFlight)
	}
	if c.maxConns < 1 {
		bad("max-conns", "%d: must be at least 1", c.maxConns)
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(c.logLevel)); err != nil {
		bad("log-level", "%q: want debug, info, warn or error", c.logLevel)
	}
	if len(problems) > 0 {
		return nil, problems
	}
	p.log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	for _, note := range p.lowerStoredBody() {
		p.log.Warn(note)
	}
	if c.storeTokenFile != "" {
		warnOpenFile(p.log, "--store-token-file", c.storeTokenFile, "its token acts for every principal the proxy serves")
	}
	if c.hashKeyFile != "" {
		warnOpenFile(p.log, "--hash-key-file", c.hashKeyFile, "with it, guessed credentials can be tested against the principals in the store's logs and backups")
	}
	opts := []client.Option{client.WithHTTPClient(&http.Client{Transport: p.failover})}
	if token != "" {
		opts = append(opts, client.WithToken(token))
	}
	p.store, err = client.New(p.failover.base(), opts...)
	if err != nil {
		return nil, []error{fmt.Errorf("--store: %w", err)}
	}
	return p, nil
}

// proxyIsToken says whether s is an RFC 9110 token (a method or header name).
func proxyIsToken(s string) bool {
	if s == "" {
		return false
	}
	for _, r := range s {
		if r > 0x7e || r <= 0x20 || strings.ContainsRune(`"(),/:;<=>?@[\]{}`, r) {
			return false
		}
	}
	return true
}

// principal is the scope's principal of a request: the configured header,
// or a hash of the credential the caller presented, so that two callers
// with different credentials never share a key. The header sent twice is
// refused rather than read: a gateway that appends its value instead of
// replacing the caller's would otherwise let the caller pick the tenant.
// So is one value with a comma, the same two values joined on one line
// (RFC 9110 5.3: Apache's RequestHeader append writes that, and httpd
// joins a header sent twice so before passing it on): "victim, attacker"
// was taken whole, and an upstream that reads the first item of the list
// acted for the tenant the caller named.
func (p *proxy) principal(r *http.Request) (string, error) {
	if h := p.cfg.principalHeader; h != "" {
		vals := r.Header.Values(h)
		switch {
		case len(vals) == 0 || strings.TrimSpace(vals[0]) == "":
			return "", &middleware.CallerError{Detail: fmt.Sprintf("the %s header (--principal-header) is required", h)}
		case len(vals) > 1:
			return "", &middleware.CallerError{Detail: fmt.Sprintf("the %s header (--principal-header) is sent more than once", h)}
		case strings.Contains(vals[0], ","):
			return "", &middleware.CallerError{Detail: fmt.Sprintf("the %s header (--principal-header) holds a comma: it reads as more than one value (a header sent twice, joined), so it is refused as two would be", h)}
		}
		return strings.TrimSpace(vals[0]), nil
	}
	if p.cfg.allowAnonymous {
		pr, err := p.anonymous(r)
		p.warnSigned(r, err)
		return pr, err
	}
	pr, err := p.byCredential(r)
	p.warnSigned(r, err)
	if err != nil && r.Header.Get("Authorization") == "" {
		// The caller hears 401; the operator, who may not know that keys
		// belong to credentials, hears why and what to set (once a minute).
		if p.unkeyedLog.Allow(time.Minute) {
			p.log.Warn("refused a keyed request without an Authorization header (401): a key belongs to the caller's credential. "+
				"If a gateway in front authenticates callers, have it pass the tenant in a header and name it with --principal-header; "+
				"--allow-anonymous lets such callers share one tenant (and each other's stored answers)",
				"method", r.Method, "path", r.URL.Path)
		}
	}
	return pr, err
}

// warnSigned tells the operator, once a minute, of a keyed request whose
// Authorization is signed for each request it is sent in (AWS SigV4,
// OAuth 1.0a, Digest: signedPerRequest). Its principal is a hash of the
// whole header, the only part a caller cannot make up for someone else,
// so a retry that its client signs anew (every SDK does) is another
// principal, and runs again: only a resend of the same bytes is replayed.
func (p *proxy) warnSigned(r *http.Request, err error) {
	if err != nil || !signedPerRequest(r.Header.Get("Authorization")) {
		return
	}
	if p.signedLog.Allow(time.Minute) {
		scheme, _, _ := strings.Cut(strings.TrimSpace(r.Header.Get("Authorization")), " ")
		p.log.Warn("a keyed request is authenticated by "+scheme+", which signs each request anew: its principal is a hash of the signature, so a retry its client signs again is another principal and runs again (a second charge). "+
			"Have a gateway that verifies the signature pass the account in a header and name it with --principal-header",
			"method", r.Method, "path", r.URL.Path)
	}
}

// signedPerRequest reports an Authorization value of a scheme that signs
// each request (a date or nonce in what is signed): AWS SigV4 and its
// kin, HTTP Signatures, Hawk, Digest, OAuth 1.0a, Azure's shared keys.
func signedPerRequest(v string) bool {
	scheme, rest, _ := strings.Cut(strings.TrimSpace(v), " ")
	switch strings.ToLower(scheme) {
	case "aws4-hmac-sha256", "goog4-hmac-sha256", "goog4-rsa-sha256", "hmac-sha256", "signature", "hawk", "digest", "sharedkey", "sharedkeylite":
		return true
	case "oauth": // OAuth 1.0a, not a bearer token sent as "OAuth <token>"
		return strings.Contains(rest, "oauth_signature")
	}
	return false
}

// reverseProxy forwards to the upstream. An answer of a streaming type
// (text/event-stream, NDJSON, gRPC: streamingType) is flushed to the caller
// as it arrives, so a stream reaches the caller as it is produced; the
// middleware then stores it without its body and marks replays
// Idempotency-Body-Omitted: streamed, since a stream is never replayed as if
// it were complete. Any other answer, with a Content-Length or chunked, is
// stored whole (up to --max-stored-body). A transport
// error is a 502 problem, which is not stored (5xx): a retry runs again.
func (p *proxy) reverseProxy() *httputil.ReverseProxy {
	return &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(p.upstream)
			// X-Forwarded-For, -Host and -Proto say what this hop saw
			// (Rewrite drops the caller's). X-Real-IP too: passed on as the
			// caller wrote it, an upstream that takes it for the client's
			// address (nginx's real_ip, many frameworks) took a forged one.
			// The rest of the caller's claims of where it came from, and
			// every spelling of these with '_' for '-', go too
			// (forwardingHeader).
			for name := range pr.Out.Header {
				if forwardingHeader(name) {
					delete(pr.Out.Header, name)
				}
			}
			for name := range pr.Out.Header {
				if p.shadowsAKeyedHeader(name) {
					delete(pr.Out.Header, name)
				}
			}
			pr.SetXForwarded()
			if ip, _, err := net.SplitHostPort(pr.In.RemoteAddr); err == nil {
				pr.Out.Header.Set("X-Real-IP", ip)
			}
			pr.Out.Host = pr.In.Host // the upstream sees the name the caller used
			if up := pr.Out.Header.Get("Upgrade"); up != "" && h2cOnly(up) {
				// An h2c offer (curl --http2 on http://) is for this hop,
				// whose server ignores it and answers in HTTP/1.1. Passed
				// on (without its HTTP2-Settings, dropped as a header
				// Connection names), an upstream that took it up would
				// switch the caller's connection to HTTP/2 under the
				// proxy, a hijack that no key protects.
				pr.Out.Header.Del("Upgrade")
				pr.Out.Header.Del("Connection")
			}
			// The attempt the request runs under, for an upstream to fence
			// its own writes with: after a proxy crash or an upstream
			// timeout a retry runs again, and only the attempt number
			// tells the upstream which run is the later. Never the
			// caller's own values.
			if a, ok := middleware.FromContext(pr.In.Context()); ok {
				pr.Out.Header.Set(headerAttempt, strconv.Itoa(a.Number))
				pr.Out.Header.Set(headerAttemptToken, a.Token)
				// The stored answer is replayed to every retry, whatever
				// encodings it accepts: a gzip answer stored for a caller
				// that accepted gzip was replayed gzipped to one that did
				// not. Without the caller's Accept-Encoding, the transport
				// asks for gzip itself and decompresses the answer, so
				// what is stored is the identity.
				pr.Out.Header.Del("Accept-Encoding")
				// The body was read whole before the store was asked:
				// the caller's Expect: 100-continue, passed on, had the
				// transport wait for the upstream's 100 before it sent
				// a body it already held, 1 s on every such request to
				// an upstream that sends none (older curl sends Expect
				// with any POST body over 1 KiB).
				pr.Out.Header.Del("Expect")
			}
		},
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			if errors.Is(context.Cause(r.Context()), middleware.ErrLeaseLost) {
				// The middleware cancelled the call: the attempt's lease
				// could not be kept (and it logged why). Released, as
				// any 5xx is: the retry runs again.
				p.log.Warn("upstream call cancelled: the attempt's lease was lost", "path", r.URL.Path, "cause", context.Cause(r.Context()))
				w.Header().Set("Retry-After", "1")
				problemDoc(w, http.StatusServiceUnavailable, "unavailable", "Idempotency store unavailable",
					"the proxy could not keep this request's idempotency key in the store, so the upstream call was cancelled before it could finish; retry")
				return
			}
			if berr := callerBodyErr(r); berr != nil {
				// The caller's body, not the upstream, failed: a caller
				// still there is told (its connection is closed after).
				p.log.Debug("the caller's request body could not be read", "path", r.URL.Path, "err", berr)
				w.Header().Set("Connection", "close")
				if errors.Is(berr, errBodyStalled) {
					problemDoc(w, http.StatusRequestTimeout, "request_timeout", "Request timeout",
						fmt.Sprintf("the request body stopped coming: it arrived at less than %d bytes per %s (--stream-stall-timeout), so the proxy gave up on it and on the upstream call", bodyProgress, p.cfg.streamStallTimeout))
					return
				}
				problemDoc(w, http.StatusBadRequest, "invalid_request", "Invalid request", "the request body could not be read: it was cut short or is not valid chunked encoding")
				return
			}
			if errors.Is(err, context.Canceled) && r.Context().Err() != nil {
				p.log.Debug("caller went away", "path", r.URL.Path)
			} else {
				p.log.Warn("upstream failed", "path", r.URL.Path, "err", err)
			}
			// The detail names what happened, not the addresses inside
			// (the log has the whole error).
			if errors.Is(err, context.DeadlineExceeded) {
				what := "did not answer"
				if errors.Is(err, errAnswerCut) {
					// Its status came: it ran the request.
					what = "began its answer but did not finish it"
				}
				problemDoc(w, http.StatusGatewayTimeout, "upstream_timeout", "Upstream timeout",
					fmt.Sprintf("the upstream %s within %s (--upstream-timeout); it may have done the work or still be doing it, and a retry runs it again, perhaps beside it", what, p.cfg.upstreamTimeout))
				return
			}
			what := "did not answer"
			switch {
			case errors.Is(err, errAnswerCut):
				// Its status came, so it ran the request; its body was
				// cut short, so there is no answer to store or replay.
				what = "began its answer but cut it short (it ended before its Content-Length or last chunk, or the connection was reset): it may have done the work, and a retry runs it again (told Idempotency-Attempt)"
			case errors.Is(err, syscall.ECONNREFUSED):
				what = "refused the connection"
			case errors.Is(err, syscall.ECONNRESET), errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
				// The request went out: the upstream may have run it
				// before the connection broke.
				what = "closed the connection before it answered: it may have done the work, and a retry runs it again (told Idempotency-Attempt)"
			case strings.Contains(err.Error(), "backend tried to switch"):
				// It answered 101 Switching Protocols to a request that
				// asked for no such switch (httputil.ReverseProxy's
				// words): it ran the request.
				what = "answered 101 Switching Protocols to a request that did not ask for that protocol: it may have done the work, and a retry runs it again (told Idempotency-Attempt)"
			case strings.Contains(err.Error(), "malformed"):
				// It answered, with a status line or a header net/http
				// cannot read: it may well have done the work.
				what = "answered something that is not HTTP (a malformed status line or header): it may have done the work, and a retry runs it again (told Idempotency-Attempt)"
			}
			problemDoc(w, http.StatusBadGateway, "upstream_unavailable", "Upstream unavailable", "the upstream "+what)
		},
		ModifyResponse: func(res *http.Response) error {
			p.callerFaultNotWarned(res)
			return p.wholeAnswer(res)
		},
		ErrorLog: slog.NewLogLogger(p.log.Handler(), slog.LevelWarn),
	}
}

// callerFaultNotWarned has the reverse proxy read the upstream's answer
// through answerBody. When the caller's body fails after the upstream has
// begun its answer (a streamed body that stalled past
// --stream-stall-timeout, one cut short), the transport closes the
// upstream connection, the answer's read fails, and the reverse proxy
// logged it through ErrorLog at WARN ("ReverseProxy read error during body
// copy"): once per connection, at any caller's will, no credential needed.
// It is the caller's fault, said at debug as a body that fails before the
// answer is (ErrorHandler). A 101's body is the connection itself, and
// left as it is.
func (p *proxy) callerFaultNotWarned(res *http.Response) {
	if res.StatusCode != http.StatusSwitchingProtocols && res.Request != nil && res.Request.Context().Value(callerBodyKey{}) != nil {
		res.Body = &answerBody{ReadCloser: res.Body, req: res.Request, log: p.log}
	}
}

// errAnswerCut is an upstream answer whose body ended before its framing
// said it would: short of its Content-Length, a chunked body without its
// last chunk, a connection reset or a gzip stream without its end.
var errAnswerCut = errors.New("the upstream's answer was cut short")

// wholeAnswer reads a keyed request's answer (one that is not a stream),
// up to --max-stored-body, before its status goes to the middleware. The
// middleware holds such an answer until it is whole anyway; read here, one
// the upstream cuts short is known before anything is written, and is
// answered 502 and released like an upstream that closed the connection
// before it answered. Read by the reverse proxy instead, the cut aborted
// the handler (http.ErrAbortHandler): released as it should be (it is no
// answer to replay), but the caller's connection was closed without a
// word, and a client that had sent on a kept-alive connection took that
// for a connection the proxy had closed while idle and sent the request
// again on its own (Go's transport does for a request with an
// Idempotency-Key): the upstream ran twice for one call. An answer longer
// than --max-stored-body goes on as it arrives: cut later, its caller has
// its status and part of its body, and the connection is cut.
func (p *proxy) wholeAnswer(res *http.Response) error {
	if _, keyed := middleware.FromContext(res.Request.Context()); !keyed || res.StatusCode < 200 ||
		res.Body == nil || res.Body == http.NoBody || streamingType(res.Header.Get("Content-Type")) {
		return nil
	}
	held, err := io.ReadAll(io.LimitReader(res.Body, int64(p.cfg.maxStoredBody)+1))
	if err != nil {
		res.Body.Close()
		return fmt.Errorf("%w after %d bytes of its body (%d %s): %w", errAnswerCut, len(held), res.StatusCode, http.StatusText(res.StatusCode), err)
	}
	res.Body = readCloser{io.MultiReader(bytes.NewReader(held), res.Body), res.Body}
	return nil
}

type readCloser struct {
	io.Reader
	io.Closer
}

// answerBody is the upstream's answer to a request with a body.
type answerBody struct {
	io.ReadCloser
	req    *http.Request
	log    *slog.Logger
	logged bool
}

func (b *answerBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err != nil && err != io.EOF {
		if berr := callerBodyErr(b.req); berr != nil {
			if !b.logged {
				b.logged = true
				b.log.Debug("the caller's request body could not be read; the upstream's answer is abandoned", "path", b.req.URL.Path, "err", berr, "answer-err", err)
			}
			// The one error the reverse proxy copies an answer to its
			// end with without a log line; it then aborts the caller's
			// connection as for any other error.
			return n, context.Canceled
		}
	}
	return n, err
}

// shadowsAKeyedHeader reports a request header spelt otherwise than one
// the proxy keys the request by (the --principal-header, a
// --fingerprint-header, Idempotency-Key, Content-Type) but read as the
// same by many servers: with '_' for '-' (X_Tenant for X-Tenant), which
// CGI, WSGI and Rack servers turn into the same variable (HTTP_X_TENANT).
// Passed on, the upstream could act on the caller's X_Tenant or X_Account
// (a server that keeps the last of the two: Puma before 6.4.3,
// CVE-2024-45614) while the proxy keyed and fingerprinted the request by
// the other: a gateway that sets X-Tenant seldom touches X_Tenant, and a
// retry with another X_Account was replayed the first one's answer. It is
// dropped on the way to the upstream, as nginx drops every header with '_'
// by default.
func (p *proxy) shadowsAKeyedHeader(name string) bool {
	n := strings.ReplaceAll(strings.ToLower(name), "_", "-")
	keyed := append([]string{"Idempotency-Key", "Content-Type"}, p.fingerprintHeaders...)
	if p.cfg.principalHeader != "" {
		keyed = append(keyed, http.CanonicalHeaderKey(p.cfg.principalHeader))
	}
	for _, k := range keyed {
		if k != "Host" && name != k && n == strings.ReplaceAll(strings.ToLower(k), "_", "-") {
			return true
		}
	}
	return false
}

// forwardingHeader reports a request header that tells the upstream where
// the request came from and how, which the proxy sets for the upstream
// from what it saw, or drops when a caller sent it: X-Forwarded-For, -Host
// and -Proto (set), -Protocol, -Port, -Ssl, -Scheme, -Prefix and -Server
// (dropped: Rack takes X-Forwarded-Ssl: on for https ahead of
// X-Forwarded-Proto, Spring and Express build a redirect's URL from -Port
// and -Prefix), Forwarded, X-Real-IP and the attempt's headers. Not the
// rest of the X-Forwarded-* names: a gateway in front says who the caller
// is in X-Forwarded-User or -Email (oauth2-proxy), which may be the
// --principal-header. A name is read in any case and with '_' as '-': CGI,
// WSGI and Rack servers read X_Forwarded_For as the same variable as
// X-Forwarded-For (HTTP_X_FORWARDED_FOR), and one that keeps the last such
// header (Puma before 6.4.3, CVE-2024-45614) took the caller's spelling
// over the proxy's.
func forwardingHeader(name string) bool {
	return slices.Contains(forwardingHeaders, strings.ReplaceAll(strings.ToLower(name), "_", "-"))
}

var forwardingHeaders = []string{"x-forwarded-for", "x-forwarded-host", "x-forwarded-proto", "x-forwarded-protocol",
	"x-forwarded-port", "x-forwarded-ssl", "x-forwarded-scheme", "x-forwarded-prefix", "x-forwarded-server",
	"forwarded", "x-real-ip", "idempotency-attempt", "idempotency-attempt-token"}

// h2cOnly reports whether an Upgrade value offers h2c and nothing else.
func h2cOnly(v string) bool {
	for p := range strings.SplitSeq(v, ",") {
		if p = strings.TrimSpace(p); p != "" && !strings.EqualFold(p, "h2c") { // an empty element offers nothing
			return false
		}
	}
	return true
}

// The headers that tell the upstream the attempt a keyed request runs
// under: its number (1, 2, ...; a later attempt has a larger one) and its
// fencing token.
const (
	headerAttempt      = "Idempotency-Attempt"
	headerAttemptToken = "Idempotency-Attempt-Token"
)

// problemDoc writes a problem document the command makes itself (the
// proxy's answers, serve's --health-addr listener).
func problemDoc(w http.ResponseWriter, status int, code, title, detail string) {
	w.Header().Set("Content-Type", "application/problem+json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(map[string]any{
		"type": "https://idem.dev/problems/" + code, "title": title, "status": status, "detail": detail, "code": code,
	})
}

// checkStores says, once at start, which --store nodes do not answer
// their health check: a typo in --store otherwise showed only as 503s on
// the first keyed requests.
func (p *proxy) checkStores(ctx context.Context) {
	for _, n := range p.failover.nodes {
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		req, err := http.NewRequestWithContext(cctx, http.MethodGet, n.String()+"/healthz", nil)
		var resp *http.Response
		if err == nil {
			resp, err = p.failover.rt.RoundTrip(req)
		}
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				err = fmt.Errorf("answered %s", resp.Status)
			}
		}
		cancel()
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			if what := notHTTPAnswer(err); what != "" {
				// A raft port (7071 beside 7070) closes an HTTP request:
				// "EOF" alone named no flag.
				p.log.Warn("a --store node did not answer HTTP ("+what+"): --store takes nodes' HTTP addresses (their --http-addr, default "+client.DefaultAddr+"), not their raft addresses (their --raft-addr, default 127.0.0.1:7071); keyed requests go to the other nodes, and are answered 503 while none answers", "store", n.String(), "error", err)
				continue
			}
			p.log.Warn("a --store node does not answer its health check: keyed requests go to the other nodes, and are answered 503 while none answers", "store", n.String(), "error", err)
			continue
		}
		if p.noToken && p.storeWantsToken(ctx, n.String()) {
			p.log.Error("the store runs with --auth-file and the proxy has no store token: every keyed request will be answered 503. Give the proxy an app token with --principals '*' (idem token new --role app --principals '*') in --store-token or --store-token-file", "store", n.String())
			return
		}
	}
}

// checkStoreLimit says, once at start, when --max-stored-body is above the
// store's --max-response-bytes (GET /v1/config, which a store with
// --auth-file shows only to a read or admin token): every answer between
// the two would be stored without its body, each one logged only as it
// comes. And when --lease is outside the store's --min-lease/--max-lease:
// every claim would be refused. Both are said, not refused at start: the
// store may be away then, and one node's flags may not be the others'.
func (p *proxy) checkStoreLimit(ctx context.Context) {
	cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	cfg, err := p.store.Config(cctx)
	if err != nil {
		p.log.Debug("cannot read the store's limits to check --max-stored-body", "error", err)
		return
	}
	if limit, ok := cfg.Limits["max_response_bytes"].(float64); ok && limit < float64(p.cfg.maxStoredBody) {
		p.log.Warn("--max-stored-body is above the store's --max-response-bytes: answers between the two are stored without their body; set --max-stored-body to the store's limit",
			"max-stored-body", p.cfg.maxStoredBody, "store-max-response-bytes", int64(limit))
	}
	if outside, lo, hi := cfg.LeaseOutside(p.cfg.lease); outside {
		// Every keyed request's claim would be refused (the caller gets
		// 503): said at start, not found in the first request's log.
		p.log.Error("--lease is outside the store's --min-lease/--max-lease: the store refuses every claim, and every keyed request is answered 503; set --lease within the store's bounds",
			"lease", p.cfg.lease.String(), "store-min-lease", lo, "store-max-lease", hi)
	}
}

// storeCalls is a middleware.Store with the store's calls alone.
type storeCalls struct{ middleware.Store }

// storeWantsToken reports whether the store node at base answers a call
// without a token 401: it runs with --auth-file. /v1/config needs a token
// there and none without.
func (p *proxy) storeWantsToken(ctx context.Context, base string) bool {
	cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(cctx, http.MethodGet, base+"/v1/config", nil)
	if err != nil {
		return false
	}
	resp, err := p.failover.rt.RoundTrip(req)
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusUnauthorized
}

// run listens until ctx is done (SIGTERM, Ctrl-C), then stops taking new
// requests and lets those in flight finish, so an attempt is completed or
// released rather than left to its lease.
// warnUpstreamOutlivesShutdown says at start that --upstream-timeout lets
// an upstream call outlive --shutdown-timeout: a SIGTERM then cuts it
// while it runs, nothing is stored, and the caller's retry runs it again
// once the lease runs out. Not for the default 0 (never), which every
// proxy left at its defaults has: a warning at every start would be one
// to ignore, and the exit after a cut says what was cut.
func (p *proxy) warnUpstreamOutlivesShutdown() {
	if up, grace := p.cfg.upstreamTimeout, p.cfg.shutdownTimeout; up > 0 && up > grace {
		p.log.Warn("--upstream-timeout is longer than --shutdown-timeout: on SIGTERM an upstream call still running at the end of the grace is cut, its answer is not stored, and the caller's retry runs it again once its lease (--lease) runs out; set --shutdown-timeout to at least --upstream-timeout (or --upstream-timeout to at most --shutdown-timeout)",
			"upstream-timeout", up.String(), "shutdown-timeout", grace.String(), "lease", p.cfg.lease.String())
	}
}

// ignoreHUP logs each SIGHUP and goes on (serve's reloadOnHUP, with no
// reload): an operator who reloads every idem process after editing an
// auth file or renewing certificates ended the proxy and the requests it
// held (the upstream may have done their work, their keys left in
// progress until the lease ran out). The proxy reads its files only at
// start.
func (p *proxy) ignoreHUP(ctx context.Context) {
	reloadOnHUP(ctx, p.cfg.hup, func() {
		p.log.Warn("SIGHUP ignored: idem proxy reads its files (--store-token-file, --hash-key-file, --tls-*, --ca-file) only at start; restart it to read them again")
	}, true, p.log)
}

func (p *proxy) run(ctx context.Context) error {
	h, err := p.handler()
	if err != nil {
		return err
	}
	if p.batcher != nil {
		defer p.batcher.Close()
	}
	p.warnUpstreamOutlivesShutdown()
	ln, err := net.Listen("tcp", p.cfg.listen)
	if err != nil {
		return fmt.Errorf("--listen: %w", err)
	}
	conns := p.cfg.maxConns
	switch soft, hard, err := raiseOpenFiles(); {
	case errors.Is(err, errNoRlimit):
	case err != nil:
		p.log.Warn("cannot read or raise the open-files limit", "error", err)
	default:
		if soft < 2*uint64(p.cfg.maxInFlight)+proxyFdReserve {
			// A request holds its caller's connection and one to the upstream.
			p.log.Warn("the open-files limit may not hold --max-inflight requests (two connections each): lower --max-inflight, or raise the hard limit (ulimit -Hn, LimitNOFILE=)",
				"max-inflight", p.cfg.maxInFlight, "open-files", soft, "hard-limit", hard)
		}
		// Callers' connections beyond what the descriptors hold would take
		// the ones the requests in flight need for the upstream (one each).
		room := int64(soft) - proxyFdReserve
		if int64(conns+min(p.cfg.maxInFlight, conns)) > room {
			if int64(p.cfg.maxInFlight) <= room/2 {
				conns = int(room) - p.cfg.maxInFlight
			} else {
				conns = int(room / 2)
			}
			conns = max(conns, 16)
			p.log.Warn("--max-conns lowered to fit the open-files limit; raise the hard limit (ulimit -Hn, LimitNOFILE=) to allow more",
				"max-conns", p.cfg.maxConns, "lowered-to", conns, "open-files", soft, "hard-limit", hard)
		}
	}
	cl := api.ListenNoHeadroom(ln, conns, p.log)
	ln = cl
	scheme := "http"
	if p.listenTLS != nil {
		ln = tls.NewListener(ln, p.listenTLS)
		scheme = "https"
	}
	// Handlers running, a switched connection's (WebSocket) included,
	// which srv.Shutdown no longer waits for once it is hijacked.
	var running atomic.Int64
	srv := &http.Server{
		Handler:           countRunning(&running, writeDeadlines(p.framing(p.limitInFlight(h)), p.cfg.writeTimeout)),
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       60 * time.Second,
		ErrorLog:          slog.NewLogLogger(p.log.Handler(), slog.LevelDebug),
		// OPTIONS * reaches framing (which answers it as net/http would):
		// answered by net/http before any handler, a chunked one kept its
		// connection, and a request after it went unchecked (a review).
		DisableGeneralOptionsHandler: true,
		// A newcomer to a full --max-conns closes the oldest connection
		// that holds no request (api.ConnListener).
		ConnState: cl.ConnState,
	}
	var stores []string
	for _, n := range p.failover.nodes {
		stores = append(stores, n.String())
	}
	p.log.Info("proxy listening", "addr", scheme+"://"+ln.Addr().String(), "upstream", p.upstream.String(),
		"store", strings.Join(stores, ","), "methods", strings.Join(p.methods, ","), "principal-header", p.cfg.principalHeader,
		"fingerprint-header", strings.Join(p.fingerprintHeaders, ","), "max-inflight", p.cfg.maxInFlight, "max-conns", conns)
	go func() {
		p.checkStores(ctx)
		p.checkStoreLimit(ctx)
	}()
	go p.ignoreHUP(ctx)
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	p.log.Info("proxy stopping", "in-flight-grace", p.cfg.shutdownTimeout.String())
	sctx, cancel := context.WithTimeout(context.Background(), p.cfg.shutdownTimeout)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		srv.Close()
		return fmt.Errorf("shutdown: requests still running after --shutdown-timeout %s: %w", p.cfg.shutdownTimeout, err)
	}
	// What runs still is a connection switched to another protocol (a
	// WebSocket), which Shutdown lets go of. Exiting at once cut each one
	// at the SIGTERM, within the grace any other request gets (1006 at a
	// WebSocket client, a message on its way lost); they get it too.
	if n := running.Load(); n > 0 {
		p.log.Info("waiting for upgraded connections (WebSocket) to close", "open", n, "in-flight-grace", p.cfg.shutdownTimeout.String())
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for running.Load() > 0 {
			select {
			case <-sctx.Done():
				return fmt.Errorf("shutdown: upgraded connections (WebSocket) still open after --shutdown-timeout %s: %d cut", p.cfg.shutdownTimeout, running.Load())
			case <-tick.C:
			}
		}
	}
	// Answers whose callers have them but whose completes the store has
	// not taken yet are asked again in the background: exiting dropped
	// them, and each key's retry ran again after its lease.
	if err := middleware.WaitCompletes(sctx); err != nil {
		return fmt.Errorf("shutdown: answers not stored after --shutdown-timeout %s (their retries may run again): %w", p.cfg.shutdownTimeout, err)
	}
	p.log.Info("proxy stopped")
	return nil
}

// countRunning keeps n at the number of handlers running.
func countRunning(n *atomic.Int64, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.Add(1)
		defer n.Add(-1)
		next.ServeHTTP(w, r)
	})
}

// defaultProxyMaxConns is the default of --max-conns: callers' connections,
// idle keep-alive ones included (each closed after 60 s idle).
const defaultProxyMaxConns = 4096

// proxyFdReserve is how many descriptors the proxy keeps from callers'
// connections and upstream calls: the store's connections, its TLS files,
// the listener.
const proxyFdReserve = 256

// defaultProxyMaxInFlight is the default of --max-inflight. Each request
// in flight holds the caller's connection and, while it runs, one to the
// upstream: 1,024 of them fit the open-files limit most systems give a
// process (raised as far as the hard limit allows at start).
const defaultProxyMaxInFlight = 1024

// framing closes the connection after any request with a
// Transfer-Encoding, and refuses a keyed method sent in another case.
//
// A request with both Content-Length and Transfer-Encoding was framed by
// the latter and the connection kept: the bytes a front end framing by
// Content-Length took for the body ran as a second request, past whatever
// that front end checks (attack on loopback; RFC 9112 6.3 says to close).
// Go's server drops the Content-Length before a handler sees it, so every
// request with a Transfer-Encoding is answered and its connection closed,
// as a node does.
//
// "post" is not "POST" to the proxy (methods are case-sensitive), so it
// passed through without a key, to an upstream that may take it for POST.
func (p *proxy) framing(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if len(r.TransferEncoding) > 0 {
			w.Header().Set("Connection", "close")
		}
		if r.RequestURI == "*" {
			// OPTIONS * (DisableGeneralOptionsHandler), answered as
			// net/http's own handler does, never sent upstream. A body
			// is not read (net/http's handler reads up to 4 KiB of it,
			// at whatever pace the caller sends it, a byte a minute
			// holding the connection for hours): the connection is
			// closed after the answer instead.
			if r.ContentLength != 0 {
				w.Header().Set("Connection", "close")
				_ = http.NewResponseController(w).SetReadDeadline(time.Now())
			}
			w.Header().Set("Content-Length", "0")
			return
		}
		if up := strings.ToUpper(r.Method); up != r.Method && slices.Contains(p.methods, up) {
			w.Header().Set("Connection", "close")
			if r.ContentLength != 0 {
				// Not read, as for OPTIONS *: refused here, outside
				// bodyDeadlines, net/http waited for the rest of the
				// body with no deadline at all, and a caller that held
				// it back kept the connection (one of --max-conns) for
				// as long as it liked.
				_ = http.NewResponseController(w).SetReadDeadline(time.Now())
			}
			problemDoc(w, http.StatusBadRequest, "invalid_request", "Invalid request",
				fmt.Sprintf("method %q: methods are case-sensitive, and %s needs an Idempotency-Key here; send it as %s", r.Method, up, up))
			return
		}
		next.ServeHTTP(w, r)
	})
}

// limitInFlight answers 503 to a request beyond --max-inflight handled at
// once, as a node does beyond its own --max-inflight: before its body is
// read, and without a call to the store or the upstream. Without a bound,
// callers that open many requests (or slow streams) took the proxy's
// file descriptors, memory and goroutines until it failed everyone,
// including the callers whose attempts it held claims for.
func (p *proxy) limitInFlight(next http.Handler) http.Handler {
	max := int64(p.cfg.maxInFlight)
	var inFlight, refused atomic.Int64
	var lastLog mono.Spacer // the warning's
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := inFlight.Add(1)
		defer inFlight.Add(-1)
		if n > max {
			total := refused.Add(1)
			if lastLog.Allow(10 * time.Second) {
				p.log.Warn("refusing requests: too many in flight", "max-inflight", max, "refused-total", total)
			}
			if r.ContentLength != 0 {
				// Not read: close rather than wait for, or drain, the body.
				w.Header().Set("Connection", "close")
				_ = http.NewResponseController(w).SetReadDeadline(time.Now())
			}
			w.Header().Set("Retry-After", "1")
			problemDoc(w, http.StatusServiceUnavailable, "unavailable", "Service unavailable",
				fmt.Sprintf("the proxy is handling %d requests, the most it takes at once (--max-inflight); retry shortly", max))
			return
		}
		next.ServeHTTP(w, r)
	})
}

// handler is the idempotency middleware in front of the reverse proxy.
func (p *proxy) handler() (http.Handler, error) {
	// Its calls alone: the middleware would read the store's lease bounds
	// and name Options.Lease; checkStoreLimit names --lease.
	var store middleware.Store = storeCalls{p.store}
	if p.cfg.storeBatch > 0 {
		// A batch gets --store-timeout, as a single call does: a store that
		// hangs must not hold the batcher's slots (or the shutdown) longer.
		p.batcher = p.store.NewBatcher(client.BatcherConfig{MaxOps: p.cfg.storeBatch, Timeout: p.cfg.storeTimeout})
		store = p.batcher
	}
	mw, err := middleware.New(middleware.Options{
		Store:         store,
		Principal:     p.principal,
		Fingerprint:   p.fingerprint,
		Methods:       p.methods,
		StoreTimeout:  p.cfg.storeTimeout,
		Lease:         p.cfg.lease,
		MaxStoredBody: p.cfg.maxStoredBody,
		Logger:        p.log,
	})
	if err != nil {
		return nil, fmt.Errorf("middleware: %w", err)
	}
	return p.bodyDeadlines(p.keptHeaders(mw(finishUpstream(p.reverseProxy(), p.cfg.upstreamTimeout)))), nil
}

// keptHeaders refuses (400) a keyed request whose Connection header names
// a header the proxy keys it by: the principal's (Authorization, or
// --principal-header), Content-Type and the --fingerprint-header ones
// but Host (the fingerprint), Idempotency-Key. A header Connection names is for
// this hop only, and the reverse proxy drops it: the upstream ran a
// request other than the one the proxy claimed and stored the answer of
// (Connection: Authorization reached it without a credential, and its
// answer to no one was stored under the caller's principal).
func (p *proxy) keptHeaders(next http.Handler) http.Handler {
	used := []string{"Content-Type", "Idempotency-Key"}
	if p.cfg.principalHeader != "" {
		used = append(used, http.CanonicalHeaderKey(p.cfg.principalHeader))
	} else {
		used = append(used, "Authorization")
	}
	for _, h := range p.fingerprintHeaders {
		// Not Host: the request's host (r.Host), which the reverse proxy
		// keeps for the upstream whatever Connection names.
		if h != "Host" {
			used = append(used, h)
		}
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if slices.Contains(p.methods, r.Method) {
			for _, v := range r.Header.Values("Connection") {
				for name := range strings.SplitSeq(v, ",") {
					if name = http.CanonicalHeaderKey(strings.TrimSpace(name)); slices.Contains(used, name) {
						problemDoc(w, http.StatusBadRequest, "invalid_request", "Invalid request",
							fmt.Sprintf("the Connection header names %s, which would not reach the upstream, and the proxy keys this request by it; send the request without naming it in Connection", name))
						return
					}
				}
			}
		}
		next.ServeHTTP(w, r)
	})
}

// bodyDeadlines bounds how long a caller may take to send a request's body,
// as a node bounds its requests' bodies. A keyed request's body, which the
// middleware reads whole before anything else, must arrive whole within
// --body-read-timeout. Any other request's body streams to the upstream
// (an upload of any size) and must keep coming instead, at bodyProgress
// bytes per --stream-stall-timeout (progressBody). Unbounded, a caller with
// no credential that announced a large upload and sent a byte every two
// seconds held one of --max-inflight's slots for as long as it liked,
// and eight of them starved every other caller of a proxy with
// --max-inflight 8 (an attack walk). The two are apart because a streamed
// body may rightly go quiet for longer than a keyed one may take whole (a
// log shipper's upload between events): one flag for both made loosening
// the one loosen the other. --stream-stall-timeout 0 leaves streamed
// bodies unbounded, as they were before the bound.
//
// A body not read to its end when the handler returns (a request refused
// unread, an upload the upstream answered without reading it whole) is
// not waited for: net/http would read up to 256 KiB of it to keep the
// connection, before it wrote the answer, at the caller's pace. The read
// deadline is moved to now, so the answer goes out at once and the
// connection is closed after it.
func (p *proxy) bodyDeadlines(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Body == nil || r.Body == http.NoBody {
			next.ServeHTTP(w, r)
			return
		}
		keyed := slices.Contains(p.methods, r.Method)
		var deadline time.Time // none: a streamed body with --stream-stall-timeout 0
		if keyed {
			deadline = time.Now().Add(p.cfg.bodyReadTimeout)
		} else if p.cfg.streamStallTimeout > 0 {
			deadline = time.Now().Add(p.cfg.streamStallTimeout)
		}
		rc := http.NewResponseController(w)
		if rc.SetReadDeadline(deadline) != nil {
			next.ServeHTTP(w, r)
			return
		}
		// On a copy of the request: net/http decides after the handler by
		// the type of its own request's body whether to read what the
		// handler left. Given the wrapper, it read (and waited for) the
		// body of every request refused unread, a 400 for a missing key
		// included, and for one sent with Expect: 100-continue, whose
		// client waits for the answer before it sends its body, the answer
		// came only at --body-read-timeout (a protocol walk).
		r = r.WithContext(r.Context())
		var body interface{ ended() bool }
		if keyed {
			b := &readDeadlineBody{ReadCloser: r.Body, rc: rc, timeout: p.cfg.bodyReadTimeout}
			r.Body, body = b, b
		} else {
			b := &progressBody{ReadCloser: r.Body, rc: rc, timeout: p.cfg.streamStallTimeout}
			r.Body, body = b, b
		}
		next.ServeHTTP(w, r)
		if !body.ended() {
			_ = rc.SetReadDeadline(time.Now())
		}
	})
}

// readDeadlineBody clears the read deadline once the body is read to its
// end; on any other error it stays, so the server does not wait to drain
// the rest of the body. A deadline that ran out is said as a node says it,
// naming the flag (the caller's 400 carries it), not as net's "read tcp
// ADDR->ADDR: i/o timeout".
type readDeadlineBody struct {
	io.ReadCloser
	rc      *http.ResponseController
	timeout time.Duration
	eof     atomic.Bool
}

func (b *readDeadlineBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err == io.EOF {
		b.eof.Store(true)
		b.rc.SetReadDeadline(time.Time{})
	} else if errors.Is(err, os.ErrDeadlineExceeded) {
		err = fmt.Errorf("the body did not arrive within %s (--body-read-timeout)", b.timeout)
	}
	return n, err
}

func (b *readDeadlineBody) ended() bool { return b.eof.Load() }

// bodyProgress is how much of an unkeyed request's body must arrive, on
// average, per --stream-stall-timeout the proxy waits on it: 1 KiB, about
// 100 bytes a second at the default 10 s, below the least rate Apache
// (mod_reqtimeout's MinRate=500) and Kestrel (240 B/s) take from a body,
// and far below any working link.
//
// The rate is per the flag's period, not a fixed 100 bytes a second: the
// flag is raised for clients that go quiet between writes, and such a
// client's average is low by nature (a log shipper with a minute between
// small batches). A fixed rate would cut the very clients the flag was
// raised for, after a few gaps, whatever the flag said. Tied to the
// period, a body allowed to stall for D must still bring 1 KiB per D: a
// caller that holds a slot pays a kilobyte for every D it holds it, and
// D of silence is what the operator chose to allow anyway.
const bodyProgress = 1 << 10

// progressBody is an unkeyed request's body on its way to the upstream. It
// must keep coming (with timeout 0, --stream-stall-timeout 0, it need not:
// no deadline is set, and only Close's and ended's part is left): the caller has timeout in hand, each byte that arrives
// adds timeout/bodyProgress to it (never above timeout), and the proxy's
// waiting on the body spends it. So a body may stall for at most timeout
// at a time, as nginx's client_body_timeout allows between two reads, and
// must average bodyProgress bytes per timeout, as Apache's MinRate and
// Kestrel's MinRequestBodyDataRate require: a byte at a time, each within
// the timeout, is the attack. Only the time spent in Read counts: while
// the upstream is slow to take the body the proxy does not read, and what
// the caller sent meanwhile is there at the next read. A slow upload that
// keeps coming passes, however long it takes; a body that stalls fails
// with errBodyStalled (408, or the connection closed when the answer has
// begun), and the deadline stays on the connection so that net/http does
// not wait to drain the rest.
type progressBody struct {
	io.ReadCloser
	rc      *http.ResponseController
	timeout time.Duration

	mu     sync.Mutex
	closed bool
	eof    bool
	spent  time.Duration // of the timeout in hand: waited, less what arrivals earned back
}

// errBodyStalled is an unkeyed body's failure to keep coming.
var errBodyStalled = errors.New("the body stalled")

func (b *progressBody) Read(p []byte) (int, error) {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return 0, http.ErrBodyReadAfterClose
	}
	start := time.Now()
	if b.timeout > 0 {
		b.rc.SetReadDeadline(start.Add(b.timeout - b.spent))
	}
	b.mu.Unlock()

	n, err := b.ReadCloser.Read(p)

	b.mu.Lock()
	defer b.mu.Unlock()
	b.spent += time.Since(start)
	if n >= bodyProgress {
		b.spent = 0
	} else {
		b.spent = max(0, b.spent-time.Duration(n)*(b.timeout/bodyProgress))
	}
	switch {
	case err == io.EOF:
		b.eof = true
		b.rc.SetReadDeadline(time.Time{})
	case errors.Is(err, os.ErrDeadlineExceeded) && !b.closed:
		err = fmt.Errorf("%w: it came at less than %d bytes per %s (--stream-stall-timeout)", errBodyStalled, bodyProgress, b.timeout)
	}
	return n, err
}

// Close does not wait for the rest of a body not read to its end (the
// upstream answered without it): the connection is closed instead.
func (b *progressBody) Close() error {
	b.mu.Lock()
	if !b.closed && !b.eof {
		b.rc.SetReadDeadline(time.Now())
	}
	b.closed = true
	b.mu.Unlock()
	return b.ReadCloser.Close()
}

func (b *progressBody) ended() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.eof
}

// writeDeadlines gives every write of an answer to the caller timeout to
// complete. Without it, a caller that sent a keyed request and read none of
// a large answer held the write, and so the handler, for ever: the
// middleware extended the attempt's lease (a write to the store) every
// third of it for as long as the connection stayed. Cut off, the caller is
// one that went away: keepReading reads the upstream's answer to its end
// and it is stored for the retry. A stream's writes each get the time
// afresh.
func writeDeadlines(next http.Handler, timeout time.Duration) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		d := &deadlineWriter{ResponseWriter: w, timeout: timeout}
		next.ServeHTTP(d, r)
		if !d.hijacked {
			d.arm() // net/http flushes the end of the answer after the handler
		}
	})
}

type deadlineWriter struct {
	http.ResponseWriter
	timeout  time.Duration
	hijacked bool
}

func (d *deadlineWriter) arm() {
	_ = http.NewResponseController(d.ResponseWriter).SetWriteDeadline(time.Now().Add(d.timeout))
}

func (d *deadlineWriter) WriteHeader(code int) {
	if code >= 200 {
		d.arm()
	}
	d.ResponseWriter.WriteHeader(code)
}

func (d *deadlineWriter) Write(b []byte) (int, error) {
	d.arm()
	return d.ResponseWriter.Write(b)
}

func (d *deadlineWriter) FlushError() error {
	d.arm()
	return http.NewResponseController(d.ResponseWriter).Flush()
}

// Hijack hands the connection over (a WebSocket) without a deadline.
func (d *deadlineWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	c, rw, err := http.NewResponseController(d.ResponseWriter).Hijack()
	if err == nil {
		d.hijacked = true
		c.SetWriteDeadline(time.Time{})
	}
	return c, rw, err
}

// Unwrap lets http.ResponseController reach the server's writer.
func (d *deadlineWriter) Unwrap() http.ResponseWriter { return d.ResponseWriter }

// finishUpstream lets an upstream call run to its end when the caller goes
// away. The upstream's effect (a payment) happens whether or not the caller
// still listens, so cancelling the call would only lose its answer: the
// attempt would be released and the caller's retry would run it a second
// time. Instead the answer is read whole and stored, and the retry replays
// it. The call is bounded by --upstream-timeout when set. A keyed call is
// cancelled by a lost lease (middleware.ErrLeaseLost) alone: detached from
// it too, the call ran on past a lease the proxy could not extend, beside
// the retry that took the key over. The middleware's other cancel, its
// caller gone for CallerGoneTimeout, is not the proxy's: a call goes on.
func finishUpstream(next http.Handler, timeout time.Duration) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx := context.WithoutCancel(r.Context())
		if _, keyed := middleware.FromContext(r.Context()); keyed {
			var cancel context.CancelCauseFunc
			ctx, cancel = context.WithCancelCause(ctx)
			defer cancel(nil)
			defer context.AfterFunc(r.Context(), func() {
				if cause := context.Cause(r.Context()); errors.Is(cause, middleware.ErrLeaseLost) {
					cancel(cause)
				}
			})()
		}
		if timeout > 0 {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, timeout)
			defer cancel()
		}
		var body *callerBody
		if r.Body != nil && r.Body != http.NoBody {
			body = &callerBody{ReadCloser: r.Body}
			ctx = context.WithValue(ctx, callerBodyKey{}, body)
		}
		// A request of its own: the lost-lease hook above reads the
		// caller's request, r, when it fires (given this one, it never
		// saw the lease lost, and the call ran on past it).
		out := r.WithContext(ctx)
		if body != nil {
			out.Body = body
		}
		_, keyed := middleware.FromContext(r.Context())
		k := &keepReading{ResponseWriter: w, http10: !r.ProtoAtLeast(1, 1), keyed: keyed}
		defer func() {
			// A keyed stream cut because its caller went away (keepReading)
			// is an answer that was given, not a failure: the reverse
			// proxy aborts the handler on the failed write all the same
			// (http.ErrAbortHandler), which the middleware took for a
			// failure and released, and the caller's retry ran the
			// upstream a second time. Returning, the attempt is completed
			// as a stream (Idempotency-Body-Omitted: streamed).
			if keyed && k.callerGone {
				if v := recover(); v != nil && v != http.ErrAbortHandler {
					panic(v)
				}
			}
		}()
		next.ServeHTTP(k, out)
	})
}

// callerBody is the caller's request body as the reverse proxy sends it
// on: it keeps the error its reading failed with, if any, so that the
// failure is known for the caller's (a chunked body net/http cannot read,
// one cut short) rather than the upstream's. Taken for the upstream's,
// each such request was a WARN "upstream failed" line, which any caller
// could cause once per connection without a credential, and a 502 that
// blamed the upstream.
type callerBody struct {
	io.ReadCloser
	mu  sync.Mutex
	err error
}

type callerBodyKey struct{}

func (b *callerBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err != nil && err != io.EOF {
		b.mu.Lock()
		b.err = err
		b.mu.Unlock()
	}
	return n, err
}

// callerBodyErr is the error reading r's body failed with, or nil.
func callerBodyErr(r *http.Request) error {
	b, _ := r.Context().Value(callerBodyKey{}).(*callerBody)
	if b == nil {
		return nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.err
}

// keepReading hides from ReverseProxy that the caller has gone, so it goes
// on copying the upstream's answer into the middleware's recorder (which
// records before it writes to the connection). A stream (an answer flushed
// as it is written) is stored without its body anyway, so once its caller
// is gone it is cut off instead of being read to an end that may never
// come, and completed as a stream, not released (finishUpstream).
type keepReading struct {
	http.ResponseWriter
	flushed bool
	// http10: the caller spoke HTTP/1.0, which has no interim answers.
	http10 bool
	// keyed: the answer is recorded for the store (a keyed request).
	keyed bool
	// callerGone: a write of a stream to the caller failed; the stream
	// is cut there (finishUpstream).
	callerGone bool
}

// WriteHeader passes on every status but an upstream's 100 Continue. A
// caller that sent Expect: 100-continue hears it from the proxy's own
// server, which sends it as the body is first read (by the middleware for
// a keyed request, by the transport for another); the upstream's, which it
// sends for the Expect the reverse proxy passes on, tells only the
// transport to send the body. Passed on, it was a second 100 Continue to a
// keyed request (the body was read whole before the upstream was called),
// and to any other whose upstream sent it after the transport had stopped
// waiting for it (1 s) and sent the body. A caller of HTTP/1.0 hears no
// interim answer at all (RFC 9110 15.2: a server must not send it one):
// net/http's server writes whatever 1xx it is given, and the upstream's
// 103 Early Hints reached such a caller, which took it for the answer and
// the real answer for its body.
func (k *keepReading) WriteHeader(code int) {
	if code == http.StatusContinue || k.http10 && code >= 100 && code < 200 && code != http.StatusSwitchingProtocols {
		return
	}
	k.ResponseWriter.WriteHeader(code)
}

func (k *keepReading) Write(b []byte) (int, error) {
	n, err := k.ResponseWriter.Write(b)
	if err != nil && !k.flushed {
		return len(b), nil
	}
	if err != nil {
		k.callerGone = true
	}
	return n, err
}

func (k *keepReading) FlushError() error {
	if k.keyed && !streamingType(k.Header().Get("Content-Type")) {
		// ReverseProxy flushes every answer without Content-Length as it
		// copies it, but a Go service sends any answer over 2 KiB chunked:
		// that is a complete answer (a payment's JSON) which must be stored
		// and replayed whole, not a stream. Its bytes still go out as
		// they are copied; only the flush, which marks a stream, is skipped.
		// Not for an unkeyed request, whose answer nothing stores: skipped
		// there, a chunked answer of any other type (a log tail in
		// text/plain, a watch in application/json) sat in the caller's
		// write buffer, its headers too, until 4 KiB gathered or it ended.
		return nil
	}
	k.flushed = true
	err := http.NewResponseController(k.ResponseWriter).Flush()
	if errors.Is(err, http.ErrNotSupported) {
		return nil
	}
	if err != nil {
		k.callerGone = true
	}
	return err
}

// streamingType reports whether a Content-Type is one of a stream, whose
// answer goes on for as long as the upstream likes: Server-Sent Events,
// newline-delimited JSON, multipart replace, gRPC.
func streamingType(ct string) bool {
	mt, _, err := mime.ParseMediaType(ct)
	if err != nil {
		return false
	}
	switch mt {
	case "text/event-stream", "application/x-ndjson", "application/jsonl", "application/stream+json", "multipart/x-mixed-replace":
		return true
	}
	return strings.HasPrefix(mt, "application/grpc")
}

// Unwrap lets ReverseProxy reach the connection for a protocol switch
// (WebSocket), which the middleware sees as a hijack.
func (k *keepReading) Unwrap() http.ResponseWriter { return k.ResponseWriter }
