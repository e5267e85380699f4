package main

import (
	"bytes"
	"context"
	"crypto/x509"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"syscall"
	"time"

	"github.com/idem-store/idem/client"
	"github.com/idem-store/idem/internal/redact"
)

// clientCommands are the subcommands that speak the HTTP API of a running
// node through package client. Run takes the arguments after the command
// name and returns the exit status: 0 on a 2xx answer (its JSON on stdout),
// 1 when the server answered with a problem or could not be reached (the
// detail on stderr), 2 for a usage error.
var clientCommands = map[string]struct {
	Run     func(context.Context, []string, io.Writer, io.Writer) int
	Summary string
}{
	"claim":    {runClaim, "claim a key for one attempt (or get the stored response)"},
	"complete": {runComplete, "store the response of a claimed attempt"},
	"release":  {runRelease, "end a claimed attempt without an effect"},
	"extend":   {runExtend, "extend the lease of a claimed attempt"},
	"get":      {runGet, "show the record of a key"},
	"delete":   {runDelete, "evict the record of a key (operator)"},
}

// cliStdin is where --body-file - reads from; tests replace it.
var cliStdin io.Reader = os.Stdin

const (
	cliExitAPI   = 1
	cliExitUsage = 2
)

// cliCmd holds what every client subcommand shares: its flag set, the
// connection flags and the scope of the record.
type cliCmd struct {
	name     string
	synopsis string
	fs       *flag.FlagSet
	stdout   io.Writer
	stderr   io.Writer

	addr, authToken, tokenFile string
	principal, endpoint, key   string
	timeout                    time.Duration
	tls                        *clientTLSFlags

	problems []string // usage problems found after parsing
}

func newCLICmd(name, synopsis string, stdout, stderr io.Writer) *cliCmd {
	c := &cliCmd{name: name, synopsis: synopsis, stdout: stdout, stderr: stderr}
	c.fs = flag.NewFlagSet("idem "+name, flag.ContinueOnError)
	c.fs.SetOutput(io.Discard) // parse errors and help are printed by parse
	c.fs.Usage = func() {}

	c.fs.StringVar(&c.addr, "addr", envOr("IDEM_ADDR", client.DefaultAddr), "HTTP `address` of any node, host:port or URL (env IDEM_ADDR)")
	c.fs.StringVar(&c.authToken, "auth-token", "", "bearer `token` for a server started with --auth-file (env IDEM_AUTH_TOKEN)")
	c.fs.StringVar(&c.tokenFile, "token-file", "", "read the bearer token (as --auth-token; not the fencing --token) from the one line of `path` that is not empty or a # comment")
	c.fs.StringVar(&c.principal, "principal", "", "tenant the calling service acts for (required)")
	c.fs.StringVar(&c.endpoint, "endpoint", "", "operation the key belongs to, e.g. 'POST /payments' (required)")
	c.fs.StringVar(&c.key, "key", "", "idempotency key, printable ASCII (required)")
	c.fs.DurationVar(&c.timeout, "timeout", 10*time.Second, "give up when the server has not answered within this `duration` (0: never)")
	c.tls = addClientTLSFlags(c.fs, "addr")
	return c
}

// parse parses args and checks the scope flags. It returns done when the
// command must return code right away (--help, or a parse error).
func (c *cliCmd) parse(args []string) (code int, done bool) {
	err := parseFlags(c.fs, args)
	switch {
	case errors.Is(err, flag.ErrHelp):
		c.usage(c.stdout)
		return 0, true
	case err != nil:
		return c.usageError(err.Error()), true
	case c.fs.NArg() > 0:
		if hint := strayBoolValue(c.fs, args); hint != "" {
			return c.usageError(fmt.Sprintf("unexpected argument %q: %s", c.fs.Arg(0), hint)), true
		}
		return c.usageError(fmt.Sprintf("unexpected argument %q (every value is given by a flag)", c.fs.Arg(0))), true
	}
	c.require("principal", c.principal == "")
	c.require("endpoint", c.endpoint == "")
	c.require("key", c.key == "")
	if c.timeout < 0 {
		c.invalid("timeout", "must not be negative")
	}
	return 0, false
}

// require notes that --name is missing when missing is true.
func (c *cliCmd) require(name string, missing bool) {
	if missing {
		c.problems = append(c.problems, "--"+name+" is required")
	}
}

func (c *cliCmd) invalid(name, why string) {
	c.problems = append(c.problems, "--"+name+" "+why)
}

// checked reports the usage problems noted so far, all of them at once.
func (c *cliCmd) checked() (code int, bad bool) {
	if len(c.problems) == 0 {
		return 0, false
	}
	for _, p := range c.problems {
		fmt.Fprintf(c.stderr, "idem %s: %s\n", c.name, p)
	}
	fmt.Fprintf(c.stderr, "run 'idem %s --help' for usage\n", c.name)
	return cliExitUsage, true
}

func (c *cliCmd) usageError(msg string) int {
	fmt.Fprintf(c.stderr, "idem %s: %s\nrun 'idem %s --help' for usage\n", c.name, msg, c.name)
	return cliExitUsage
}

// usage prints the synopsis and every flag with its usage string.
func (c *cliCmd) usage(w io.Writer) {
	fmt.Fprintf(w, "Usage: idem %s [flags]\n\n%s\n\nFlags:\n", c.name, c.synopsis)
	printFlags(w, c.fs)
	fmt.Fprint(w, "\nExit status: 0 on success (the server's JSON answer on stdout), 1 when the\n"+
		"server answered with a problem or could not be reached, 2 for a usage error.\n")
}

// bearer returns the bearer token: --auth-token, else --token-file, else
// $IDEM_AUTH_TOKEN. The token is never a flag default, so --help never
// prints it.
func (c *cliCmd) bearer() (string, error) { return bearerToken(c.authToken, c.tokenFile) }

// call connects, runs do within --timeout and prints its answer.
func (c *cliCmd) call(ctx context.Context, do func(context.Context, *client.Client) (json.RawMessage, error)) int {
	token, err := c.bearer()
	if err != nil {
		return c.usageError(err.Error())
	}
	if c.tokenFile != "" {
		warnOpenFileTo(c.stderr, "idem "+c.name, "--token-file", c.tokenFile, tokenFileWhy)
	}
	var opts []client.Option
	if token != "" {
		opts = append(opts, client.WithToken(token))
	}
	tlsOpts, err := c.tls.options()
	if err != nil {
		return c.usageError(err.Error())
	}
	addr, err := addrFlag(c.fs, c.addr)
	if err != nil {
		return c.usageError(err.Error())
	}
	cl, err := client.New(addr, append(opts, tlsOpts...)...)
	if err != nil {
		return c.usageError("--addr: " + err.Error())
	}
	if c.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.timeout)
		defer cancel()
	}
	raw, err := do(ctx, cl)
	if err != nil {
		return c.fail(err, token)
	}
	cliWriteJSON(c.stdout, raw)
	return 0
}

// fail prints why a call failed: the problem's detail and code, or the
// transport error. token is the bearer token the call carried, if any.
func (c *cliCmd) fail(err error, token string) int {
	withToken := token != ""
	var p *client.Problem
	if !errors.As(err, &p) {
		if errors.Is(err, context.DeadlineExceeded) {
			fmt.Fprintf(c.stderr, "idem %s: no answer from %s within --timeout %s (a write may or may not have happened)\n", c.name, c.addr, c.timeout)
			return cliExitAPI
		}
		fmt.Fprintf(c.stderr, "idem %s: %v\n", c.name, notHTTP(err))
		return cliExitAPI
	}
	msg := p.Detail
	if msg == "" {
		msg = p.Title
	}
	var facts []string
	if p.Code != "" {
		facts = append(facts, "code "+p.Code)
	}
	facts = append(facts, fmt.Sprintf("HTTP %d", p.Status))
	if !p.LeaseExpiresAt.IsZero() {
		facts = append(facts, "lease expires at "+p.LeaseExpiresAt.UTC().Format("2006-01-02T15:04:05.000Z07:00"))
	}
	if p.RetryAfter > 0 {
		facts = append(facts, "retry after "+p.RetryAfter.String())
	}
	fmt.Fprintf(c.stderr, "idem %s: %s (%s)\n", c.name, msg, strings.Join(facts, ", "))
	if hint := authHint(p.Code, withToken, "--auth-token, --token-file or IDEM_AUTH_TOKEN"); hint != "" {
		fmt.Fprintf(c.stderr, "idem %s: %s\n", c.name, hint)
	}
	if hint := tokenIsAFile(p.Code, token); hint != "" {
		fmt.Fprintf(c.stderr, "idem %s: %s\n", c.name, hint)
	}
	return cliExitAPI
}

// tokenIsAFile says, after a 401, that the token given names a file: a
// walk of the docs gave --auth-token node.token (IDEM_AUTH_TOKEN=app.token
// alike), the file's name where its token goes, and was told only that
// the token is not one of the node's, as of a token the auth file lacks.
// "" for other codes, or a token that names no regular file.
func tokenIsAFile(code, token string) string {
	if code != "unauthorized" || token == "" {
		return ""
	}
	if fi, err := os.Stat(token); err != nil || !fi.Mode().IsRegular() {
		return ""
	}
	return fmt.Sprintf("%q is a file: --auth-token and IDEM_AUTH_TOKEN take the token itself; give the file as --token-file %s", token, token)
}

// authHint says what to do about a 401 in the CLI's terms, naming the
// flags (ways) that give a token: the server's detail speaks of an
// Authorization header, which no command line has. "" for other codes.
func authHint(code string, withToken bool, ways string) string {
	if code != "unauthorized" {
		return ""
	}
	if withToken {
		return "the token given (" + ways + ") is not one of the node's: its --auth-file lists the tokens it takes (idem token new makes one)"
	}
	return "the node runs with --auth-file: give one of its tokens with " + ways
}

// printProblem prints a node's problem for the admin commands that take
// --auth-token, with authHint's and tokenIsAFile's lines after a 401;
// token is the one the call carried ("" for none).
func printProblem(w io.Writer, name, detail, code string, status int, token string) {
	fmt.Fprintf(w, "%s: %s (code %s, HTTP %d)\n", name, detail, code, status)
	if hint := authHint(code, token != "", "--auth-token, --token-file or IDEM_AUTH_TOKEN"); hint != "" {
		fmt.Fprintf(w, "%s: %s\n", name, hint)
	}
	if hint := tokenIsAFile(code, token); hint != "" {
		fmt.Fprintf(w, "%s: %s\n", name, hint)
	}
}

// notHTTPAnswer says how an address that was reached did not answer HTTP
// (a raft port closes the connection on an HTTP request), "" when err is
// not that.
func notHTTPAnswer(err error) string {
	switch {
	case errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF):
		return "it closed the connection"
	case strings.Contains(err.Error(), "malformed HTTP"): // net/http's words for an answer that is not HTTP
		return "it sent something else"
	}
	return ""
}

// notHTTP says which flag to fix when a node's certificate is not signed by
// a CA the command trusts (https:// without --ca-file). And it says what
// probably happened when err is a request's address
// closing the connection before any answer, or answering something that
// is not HTTP: it is not a node's HTTP address. A node's raft port (serve
// --raft-addr, 7071 by default, next to --http-addr's 7070) reads a
// request as an unknown raft message and closes, which the HTTP client
// reports as a bare "unexpected EOF" (or "EOF"). A node's HTTP port always
// answers HTTP, a 503 even when it refuses the connection. An unknown CA
// names --ca-file. A connection refused says --addr is wrong or the node
// is down (it said only "connection refused", naming no flag). Other
// errors (a timeout, another TLS error) are returned as they are.
func notHTTP(err error) error {
	if hint := clientCertHint(err.Error()); hint != "" {
		return fmt.Errorf("%w; %s", err, hint)
	}
	var unknownCA x509.UnknownAuthorityError
	if errors.As(err, &unknownCA) {
		// https:// without --ca-file, or with another CA: crypto/tls's
		// words name no flag.
		return fmt.Errorf("%w; the node's certificate is not signed by a CA this command trusts: give the CA of the nodes' certificates (their --tls-ca-file) with --ca-file (or IDEM_CA_FILE)", err)
	}
	var ue *url.Error
	if !errors.As(err, &ue) {
		return err // not a failed request: a body cut short, an answer that does not decode
	}
	host := ue.URL
	if u, perr := url.Parse(ue.URL); perr == nil && u.Host != "" {
		host = u.Host
	}
	if errors.Is(err, syscall.ECONNREFUSED) {
		// The request never left: nothing was asked, so nothing changed.
		return fmt.Errorf("%w: nothing listens at %s, so nothing was asked or changed; check that the node runs and that --addr is its HTTP address (its --http-addr, default %s)",
			err, host, client.DefaultAddr)
	}
	what := notHTTPAnswer(err)
	if what == "" {
		return err
	}
	return fmt.Errorf("%w: %s did not answer HTTP (%s); --addr takes a node's HTTP address (its --http-addr, default %s), not its raft address (its --raft-addr, default 127.0.0.1:7071)",
		err, host, what, client.DefaultAddr)
}

// cliWriteJSON prints an answer indented, or as received when it is not JSON.
func cliWriteJSON(w io.Writer, raw []byte) {
	var buf bytes.Buffer
	if err := json.Indent(&buf, bytes.TrimSpace(raw), "", "  "); err != nil {
		buf.Reset()
		buf.Write(bytes.TrimRight(raw, "\n"))
	}
	buf.WriteByte('\n')
	w.Write(buf.Bytes())
}

// leaseMs converts a --lease value to the lease_ms of docs/API.md.
func (c *cliCmd) leaseMs(name string, d time.Duration) int64 {
	if d != 0 && d < time.Millisecond {
		c.invalid(name, fmt.Sprintf("must be at least 1ms (got %s)", d))
	}
	return d.Milliseconds()
}

func runClaim(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	c := newCLICmd("claim", `Claim a key for one attempt of a request. The answer is either
  {"outcome":"claimed","token":...}  (HTTP 201: run the request, then
                                       'idem complete' or 'idem release')
  {"outcome":"replay","record":...}  (HTTP 200: the stored response).
Another live attempt (409 in_progress) or a different fingerprint (422) is an
error. After a timeout or a 503, repeat the claim with the same --claim-id.`, stdout, stderr)
	fingerprint := c.fs.String("fingerprint", "", "hex hash of the request: an even number of hex characters, from 2 to the node's --max-fingerprint-chars (128 by default) (required)")
	lease := c.fs.Duration("lease", 0, "how long the attempt may run before another may take over, e.g. 30s (0: the server's default)")
	claimID := c.fs.String("claim-id", "", "`id` of this attempt: repeating a claim with it returns the same claim")
	correlationID := c.fs.String("correlation-id", "", "`id` stored with the record, e.g. a request id for tracing")
	if code, done := c.parse(args); done {
		return code
	}
	c.require("fingerprint", *fingerprint == "")
	if *lease < 0 {
		c.invalid("lease", "must not be negative")
	}
	leaseMs := c.leaseMs("lease", *lease)
	if code, bad := c.checked(); bad {
		return code
	}
	return c.call(ctx, func(ctx context.Context, cl *client.Client) (json.RawMessage, error) {
		res, err := cl.Claim(ctx, client.ClaimRequest{
			Principal: c.principal, Endpoint: c.endpoint, Key: c.key,
			Fingerprint: *fingerprint, LeaseMs: leaseMs,
			ClaimID: *claimID, CorrelationID: *correlationID,
		})
		if err != nil {
			return nil, err
		}
		return res.Raw, nil
	})
}

// cliHeaders is the repeatable --header flag. A name given more than once
// (Set-Cookie) is stored as an array of its values, in the order given; the
// first spelling of a name is kept, as HTTP names are case-insensitive.
type cliHeaders struct {
	names  []string
	values map[string][]string
}

func (h *cliHeaders) String() string {
	if h == nil {
		return ""
	}
	var parts []string
	for _, n := range h.names {
		for _, v := range h.values[n] {
			parts = append(parts, n+": "+v)
		}
	}
	return strings.Join(parts, ", ")
}

func (*cliHeaders) repeatable() {} // parseFlags: --header may be given again

func (h *cliHeaders) Set(v string) error {
	name, value, ok := strings.Cut(v, ":")
	name = strings.TrimSpace(name)
	if !ok || name == "" || strings.ContainsAny(name, " \t") {
		return fmt.Errorf("want 'Name: value', got %q", v)
	}
	if h.values == nil {
		h.values = map[string][]string{}
	}
	for _, n := range h.names {
		if strings.EqualFold(n, name) {
			name = n
			break
		}
	}
	if _, seen := h.values[name]; !seen {
		h.names = append(h.names, name)
	}
	h.values[name] = append(h.values[name], strings.TrimSpace(value))
	return nil
}

// apply stores the headers in r: a name given once as a string, several
// times as an array.
func (h *cliHeaders) apply(r *client.Response) {
	for _, n := range h.names {
		r.SetHeader(n, h.values[n]...)
	}
}

func runComplete(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	c := newCLICmd("complete", `Store the response of the attempt that holds --token; later claims with the
same fingerprint replay it. Repeating it with the same token and response
succeeds again.`, stdout, stderr)
	token := c.fs.String("token", "", "fencing `token` the claim returned (required)")
	status := c.fs.Int("status", 0, "HTTP `status` of the response, 100-599 (required)")
	contentType := c.fs.String("content-type", "", "media `type` of the response body, e.g. application/json")
	headers := &cliHeaders{}
	c.fs.Var(headers, "header", "store the response header `'Name: value'`; repeat for more, and repeat a name (Set-Cookie) to store its values as a list")
	body := c.fs.String("body", "", "response body as a `string`")
	bodyFile := c.fs.String("body-file", "", "read the response body from `path` ('-' for stdin)")
	if code, done := c.parse(args); done {
		return code
	}
	c.require("token", *token == "")
	switch {
	case *status == 0:
		c.require("status", true)
	case *status < 100 || *status > 599:
		c.invalid("status", fmt.Sprintf("must be an HTTP status 100-599 (got %d)", *status))
	}
	var data []byte
	switch {
	case *body != "" && *bodyFile != "":
		c.problems = append(c.problems, "--body and --body-file exclude each other")
	case *bodyFile == "-":
		b, err := io.ReadAll(cliStdin)
		if err != nil {
			c.invalid("body-file", "-: "+err.Error())
		}
		data = b
	case *bodyFile != "":
		b, err := os.ReadFile(*bodyFile)
		if err != nil {
			c.invalid("body-file", "cannot be read: "+err.Error())
		}
		data = b
	default:
		data = []byte(*body)
	}
	if code, bad := c.checked(); bad {
		return code
	}
	return c.call(ctx, func(ctx context.Context, cl *client.Client) (json.RawMessage, error) {
		resp := client.Response{Status: *status, ContentType: *contentType, Body: data}
		headers.apply(&resp)
		res, err := cl.Complete(ctx, client.CompleteRequest{
			Principal: c.principal, Endpoint: c.endpoint, Key: c.key, Token: *token, Response: resp,
		})
		if err != nil {
			return nil, err
		}
		return res.Raw, nil
	})
}

func runRelease(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	c := newCLICmd("release", `End the attempt that holds --token without an effect (e.g. the handler
failed before committing): the record becomes failed and the next claim with
the same fingerprint runs again.`, stdout, stderr)
	token := c.fs.String("token", "", "fencing `token` the claim returned (required)")
	reason := c.fs.String("reason", "", "why the attempt ended, for the operator")
	if code, done := c.parse(args); done {
		return code
	}
	c.require("token", *token == "")
	if code, bad := c.checked(); bad {
		return code
	}
	return c.call(ctx, func(ctx context.Context, cl *client.Client) (json.RawMessage, error) {
		res, err := cl.Release(ctx, client.ReleaseRequest{
			Principal: c.principal, Endpoint: c.endpoint, Key: c.key, Token: *token, Reason: *reason,
		})
		if err != nil {
			return nil, err
		}
		return res.Raw, nil
	})
}

func runExtend(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	c := newCLICmd("extend", `Extend the lease of the attempt that holds --token (the heartbeat of a long
attempt). The new lease runs --lease from now.`, stdout, stderr)
	token := c.fs.String("token", "", "fencing `token` the claim returned (required)")
	lease := c.fs.Duration("lease", 0, "new lease from now, e.g. 30s (required)")
	if code, done := c.parse(args); done {
		return code
	}
	c.require("token", *token == "")
	switch {
	case *lease == 0 && !flagSet(c.fs, "lease"):
		c.require("lease", true)
	case *lease <= 0:
		// --lease 0 said "--lease is required" (a CLI walk).
		c.invalid("lease", "must be positive")
	}
	leaseMs := c.leaseMs("lease", *lease)
	if code, bad := c.checked(); bad {
		return code
	}
	return c.call(ctx, func(ctx context.Context, cl *client.Client) (json.RawMessage, error) {
		res, err := cl.Extend(ctx, client.ExtendRequest{
			Principal: c.principal, Endpoint: c.endpoint, Key: c.key, Token: *token, LeaseMs: leaseMs,
		})
		if err != nil {
			return nil, err
		}
		return res.Raw, nil
	})
}

func runGet(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	c := newCLICmd("get", `Show the live record of a key: its state, fingerprint, attempt, times and,
once completed, the stored response (body in base64). Tokens are never shown.
A missing or expired record is an error (404 not_found).`, stdout, stderr)
	consistency := c.fs.String("consistency", "", "'linearizable' (the server's default: never misses an acknowledged write)\nor 'stale' (this node's replica)")
	if code, done := c.parse(args); done {
		return code
	}
	switch *consistency {
	case "", client.ConsistencyLinearizable, client.ConsistencyStale:
	default:
		c.invalid("consistency", fmt.Sprintf("must be linearizable or stale (got %q)", *consistency))
	}
	if code, bad := c.checked(); bad {
		return code
	}
	return c.call(ctx, func(ctx context.Context, cl *client.Client) (json.RawMessage, error) {
		q := url.Values{"principal": {c.principal}, "endpoint": {c.endpoint}, "key": {c.key}}
		if *consistency != "" {
			q.Set("consistency", *consistency)
		}
		// Do rather than Get: the answer is printed as the server sent it.
		return cl.Do(ctx, http.MethodGet, "/v1/records", q, nil)
	})
}

func runDelete(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	c := newCLICmd("delete", `Evict the record of a key (an operator's tool): a retry after it runs the
request again.`, stdout, stderr)
	if code, done := c.parse(args); done {
		return code
	}
	if code, bad := c.checked(); bad {
		return code
	}
	return c.call(ctx, func(ctx context.Context, cl *client.Client) (json.RawMessage, error) {
		res, err := cl.Delete(ctx, c.principal, c.endpoint, c.key)
		if err != nil {
			return nil, err
		}
		return res.Raw, nil
	})
}

// addrFlag checks the --addr of a client command before any call, and
// returns the address to give client.New. Each comma-separated address
// must be host:port or an http(s) URL: client.New takes "nonsense" as
// http://nonsense:80, so a typo became a DNS lookup and a network error
// (exit 1) instead of a usage error. A URL's path prefixes every route
// (client.New), so a path ending in /v1, the API's own prefix, would send
// GET /v1/v1/records: that /v1 is dropped. The error names $IDEM_ADDR
// when the value came from it, an empty one included.
func addrFlag(fs *flag.FlagSet, addr string) (string, error) {
	name, unset := "--addr", ""
	if _, fromEnv := variablesUsed(fs, clientVariables)["addr"]; fromEnv {
		name, unset = "$IDEM_ADDR (--addr)", "; unset it for the default, "+client.DefaultAddr
	}
	var out []string
	for part := range strings.SplitSeq(addr, ",") {
		p := strings.TrimSpace(part)
		if p == "" {
			if strings.Contains(addr, ",") {
				continue // a stray comma, as client.New reads it
			}
			return "", fmt.Errorf("%s is empty: want host:port or a URL (e.g. 127.0.0.1:7070 or https://idem.example.com)%s", name, unset)
		}
		s, scheme := p, strings.Contains(p, "://")
		if !scheme {
			s = "http://" + p
		}
		u, err := url.Parse(s)
		bad := err != nil || u.Host == "" || u.Opaque != ""
		if !bad && !scheme {
			// Without a scheme only host:port: "nonsense" or "h:x" is a typo.
			bad = checkHostPort(u.Host) != nil
		}
		if bad {
			if hint := ipv6Hint(strings.TrimSuffix(strings.TrimPrefix(strings.TrimPrefix(p, "http://"), "https://"), "/")); hint != "" {
				return "", fmt.Errorf("%s %q is not host:port or a URL: %s", name, redact.BrokenAddr(p), hint)
			}
			return "", fmt.Errorf("%s %q is not host:port or a URL (e.g. 127.0.0.1:7070 or https://idem.example.com)", name, redact.BrokenAddr(p))
		}
		if strings.Contains(p, "@") {
			// client.New refuses user info too, but idem bench's own
			// driver took u:pass@ as Basic auth and printed it in its
			// report. An '@' url.Parse read as part of a host or path
			// (a password of digits before a '/') is user info as well.
			return "", fmt.Errorf("%s %q: an address takes no user info (a bearer token authenticates: --auth-token or --token-file; an '@' of a path is written %%40)", name, redact.BrokenAddr(p))
		}
		if path := strings.TrimRight(u.Path, "/"); path == "/v1" || strings.HasSuffix(path, "/v1") {
			u.Path, u.RawPath = strings.TrimSuffix(path, "/v1"), ""
			p = u.String()
			if !scheme {
				// No scheme given: client.New picks http or https from
				// the TLS flags, so none is added here.
				p = strings.TrimPrefix(p, "http://")
			}
		}
		out = append(out, p)
	}
	return strings.Join(out, ","), nil
}

// clientCertHint names the flags when a node refused the TLS handshake for
// this command's client certificate (crypto/tls's alert names none): it
// asks for one (--tls-client-auth require) and got none, or got one its CA
// did not sign. "" for any other error.
func clientCertHint(msg string) string {
	switch {
	case strings.Contains(msg, "tls: certificate required"):
		return "the node asks every client for a certificate (--tls-client-auth require): give one from the nodes' CA with --cert-file and --key-file (or IDEM_CERT_FILE and IDEM_KEY_FILE; idem tls cert --client makes one)"
	case strings.Contains(msg, "remote error: tls: unknown certificate authority"), strings.Contains(msg, "remote error: tls: bad certificate"):
		return "the node refused this command's client certificate (--cert-file): it is not signed by a CA in the nodes' --tls-ca-file, or has expired"
	}
	return ""
}
