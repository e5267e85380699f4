package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"regexp"
	"slices"
	"strings"
	"time"
	"unicode"

	"github.com/idem-store/idem/api"
)

func init() {
	extraCommands["token"] = command{Run: runToken, Summary: "credentials: make a token and its auth file entry, hash a token, check an auth file"}
}

const tokenUsage = `Usage:
  idem token new --name NAME --role app|operator|admin [--principals 'cus_*,acme'] [--max-principals N] [--token-file FILE]
  idem token hash < TOKEN-FILE
  idem token check AUTH-FILE

new    makes a random token and prints it with its --auth-file entry (the
       entry holds only the token's SHA-256). With --token-file the token is
       written to FILE (mode 0600, never overwritten) and only the entry is
       printed, for scripts.
hash   prints the hex SHA-256 of the token read from stdin (one line; blank
       lines and # comments are skipped), for writing an auth file entry by hand.
check  validates an auth file as idem serve would, and lists its tokens.

Roles: app (claim, complete, release, extend, look up: only for its
principals, exact names or prefixes ending in '*'; --max-principals bounds
how many principals under its prefixes may hold keys), operator (all
principals, evictions, /metrics, /v1/config, cluster status) and admin
(everything: membership, leadership transfer, snapshots, the cluster's
retention, /debug/pprof).
See docs/SECURITY.md.
`

func runToken(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, tokenUsage)
		return 2
	}
	switch args[0] {
	case "new":
		return runTokenNew(args[1:], stdout, stderr)
	case "hash":
		return runTokenHash(args[1:], os.Stdin, stdout, stderr)
	case "check":
		return runTokenCheck(args[1:], stdout, stderr)
	case "help", "-h", "--help", "-help":
		fmt.Fprint(stdout, tokenUsage)
		return 0
	}
	fmt.Fprintf(stderr, "idem token: unknown subcommand %q\n\n%s", args[0], tokenUsage)
	return 2
}

// authEntry is one token of the JSON auth file.
type authEntry struct {
	Name          string   `json:"name"`
	SHA256        string   `json:"sha256"`
	Role          string   `json:"role"`
	Principals    []string `json:"principals,omitempty"`
	MaxPrincipals *int64   `json:"max_principals,omitempty"`
}

func runTokenNew(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("idem token new", flag.ContinueOnError)
	fs.SetOutput(io.Discard) // parseArgs prints errors and help, once
	name := fs.String("name", "", "name of the token in the auth file, logs and errors (e.g. payments-api)")
	role := fs.String("role", "", "app, operator or admin")
	principals := fs.String("principals", "", "app only: comma-separated principals it may act for, exact names or prefixes ending in '*'")
	maxPrincipals := fs.Int64("max-principals", 0, "app only: the most principals under its prefix patterns that may hold keys (429 principal_limit beyond); set it when services share a cluster")
	tokenFile := fs.String("token-file", "", "write the token to this new file (mode 0600) instead of printing it")
	fs.Usage = func() { fmt.Fprint(fs.Output(), tokenUsage+"\nFlags of new:\n"); printFlags(fs.Output(), fs) }
	if code, done := parseArgs(fs, args, "idem token new", stdout, stderr); done {
		return code
	}
	e := authEntry{Name: *name, Role: *role}
	if flagSet(fs, "max-principals") {
		e.MaxPrincipals = maxPrincipals
	}
	if *principals != "" {
		for p := range strings.SplitSeq(*principals, ",") {
			e.Principals = append(e.Principals, strings.TrimSpace(p))
		}
	}
	token, err := newToken()
	if err != nil {
		fmt.Fprintf(stderr, "idem token new: %v\n", err)
		return 1
	}
	e.SHA256 = api.HashToken(token)
	entry, _ := json.Marshal(e)
	// The server's own validation, so a mistake shows now and not at the
	// next start or reload.
	if _, err := api.ParseAuthFile([]byte(`{"tokens":[` + string(entry) + `]}`)); err != nil {
		for _, msg := range tokenNewProblems(err) {
			fmt.Fprintf(stderr, "idem token new: %s\n", msg)
		}
		return 2
	}
	if *tokenFile != "" {
		f, err := os.OpenFile(*tokenFile, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if errors.Is(err, os.ErrExist) {
			// It said only "open node.token: file exists".
			fmt.Fprintf(stderr, "idem token new: --token-file %s exists, and a token file is never overwritten (its token may be in use): nothing was made; name a new file\n", *tokenFile)
			return 1
		}
		if err != nil {
			fmt.Fprintf(stderr, "idem token new: --token-file: %v\n", err)
			return 1
		}
		_, werr := fmt.Fprintln(f, token)
		if err := errors.Join(werr, f.Close()); err != nil {
			fmt.Fprintf(stderr, "idem token new: --token-file: %v\n", err)
			return 1
		}
		fmt.Fprintln(stdout, string(entry))
		return 0
	}
	fmt.Fprintf(stdout, "%s\n%s\n\n", tokenHeading, token)
	fmt.Fprintf(stdout, "auth file entry (add it to \"tokens\" in --auth-file, then send SIGHUP to every node):\n%s\n", entry)
	return 0
}

// authEntryPrefix is how api.ParseAuthFile starts the message of each bad
// field of the one entry idem token new builds: `api: auth file tokens[0]`,
// then ` ("NAME")` when the entry has a name, then `: `.
var authEntryPrefix = regexp.MustCompile(`^(?:api: )?auth file tokens\[0\](?: \("(?:[^"\\]|\\.)*"\))?: `)

// tokenNewProblems turns api.ParseAuthFile's error for the entry of idem
// token new into one line per problem, each naming the flag to fix rather
// than the auth file's field (ParseAuthFile joins one error per problem,
// so its text holds a line break per problem after the first).
func tokenNewProblems(err error) []string {
	errs := []error{err}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		errs = j.Unwrap()
	}
	var out []string
	for _, e := range errs {
		for line := range strings.SplitSeq(e.Error(), "\n") {
			msg := authEntryPrefix.ReplaceAllString(strings.TrimSpace(line), "")
			msg = strings.TrimPrefix(msg, "api: ")
			switch {
			case msg == "":
				continue
			case msg == `role "" is not app, operator or admin`:
				msg = "--role is required: app, operator or admin"
			case strings.HasPrefix(msg, "name "), strings.HasPrefix(msg, "role "):
				msg = "--" + msg
			case strings.HasPrefix(msg, "an app token needs principals"),
				strings.HasPrefix(msg, "principals limit"):
				msg = strings.ReplaceAll(msg, "principals", "--principals")
			case strings.HasPrefix(msg, "a principal pattern"), strings.HasPrefix(msg, "principal pattern"):
				msg = "--principals: " + msg
			case strings.HasPrefix(msg, "max_principals"):
				msg = strings.ReplaceAll(msg, "max_principals", "--max-principals")
			}
			out = append(out, msg)
		}
	}
	return out
}

// newToken returns 32 random bytes, URL-safe base64, with a prefix that
// secret scanners and people can recognise.
func newToken() (string, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("random token: %w", err)
	}
	return "idem_" + base64.RawURLEncoding.EncodeToString(b), nil
}

func runTokenHash(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) > 0 {
		if args[0] == "-h" || args[0] == "--help" || args[0] == "-help" {
			fmt.Fprint(stdout, tokenUsage)
			return 0
		}
		fmt.Fprintf(stderr, "idem token hash: the token is read from stdin, not from arguments (they end up in shell history): idem token hash < TOKEN-FILE\n")
		return 2
	}
	token, err := readOneToken(stdin)
	if err != nil {
		fmt.Fprintf(stderr, "idem token hash: stdin: %v\n", err)
		return 2
	}
	fmt.Fprintln(stdout, api.HashToken(token))
	return 0
}

// readOneToken reads a token: the one line that is not blank or a #
// comment, surrounding blanks and the line end (LF or CR LF) not part of
// it. Blank and # comment lines are skipped as the client commands'
// --token-file and an old-format --auth-file skip them: a token file
// commented for the next operator ("# node token of cluster prod, from
// idem token new") was refused as "more than one line" by
// --node-token-file alone. Two tokens are refused: which one the node
// sends would be a guess.
func readOneToken(r io.Reader) (string, error) {
	b, err := io.ReadAll(io.LimitReader(r, 64<<10))
	if err != nil {
		return "", err
	}
	t, first, err := tokenLine(string(b))
	switch {
	case err != nil:
		return "", err
	case strings.ContainsAny(t, " \t"):
		return "", fmt.Errorf("the token on line %d contains a blank; a bearer token has none", first)
	case strings.ContainsFunc(t, unicode.IsControl):
		// A bare CR (lines are split on LF only) is the likely one: the
		// token could not be sent in a header (net/http refuses it).
		return "", fmt.Errorf("the token on line %d contains a control character (a line ended by a bare CR?); a bearer token has none", first)
	}
	return t, nil
}

// tokenHeading is the line idem token new prints above the token when it
// prints the token (no --token-file).
const tokenHeading = "token (give it to the client and keep it as a secret: idem stores only its hash, and it is not shown again):"

// tokenLine is the one line of text that is not blank or a # comment,
// trimmed (a line ends at LF; a leading byte order mark is skipped), and
// its number: how a token file is read, by serve's --node-token-file
// (readOneToken) and the client commands' --token-file (readTokenFile)
// alike. Two such lines are refused: which one is the token would be a
// guess.
func tokenLine(text string) (token string, line int, err error) {
	// A token file is the token alone. An auth file or an entry given in
	// its place (--node-token-file and --auth-file swapped, the entry
	// file of the README's chain) was read as a token, and serve then
	// offered an auth file entry for the SHA-256 of that JSON; the whole
	// output of idem token new, redirected, was "two tokens".
	if t := strings.TrimSpace(strings.TrimPrefix(text, "\ufeff")); strings.HasPrefix(t, "{") && json.Valid([]byte(t)) {
		return "", 0, errors.New("holds JSON, an auth file or an auth file entry (those hold a token's SHA-256, not the token): give the file that idem token new --token-file wrote, whose one line is the token itself")
	}
	n := 0
	for l := range strings.Lines(strings.TrimPrefix(text, "\ufeff")) {
		n++
		l = strings.TrimSpace(l)
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		if token != "" {
			if strings.HasPrefix(token, strings.TrimSuffix(tokenHeading, ":")) {
				return "", 0, fmt.Errorf("holds the whole output of idem token new (the token is line %d, after its heading, and the auth file entry follows): keep only the token's line, or make the file with idem token new --token-file FILE", n)
			}
			return "", 0, fmt.Errorf("holds two tokens (lines %d and %d); a token file holds one token, on one line (blank lines and # comments aside)", line, n)
		}
		token, line = l, n
	}
	if token == "" {
		return "", 0, errors.New("holds no token (only blank lines or # comments)")
	}
	return token, line, nil
}

func runTokenCheck(args []string, stdout, stderr io.Writer) int {
	if len(args) != 1 || strings.HasPrefix(args[0], "-") {
		if len(args) == 1 && (args[0] == "-h" || args[0] == "--help" || args[0] == "-help") {
			fmt.Fprint(stdout, tokenUsage)
			return 0
		}
		fmt.Fprint(stderr, "idem token check: give one auth file: idem token check AUTH-FILE\n")
		return 2
	}
	creds, err := api.LoadAuthFile(args[0])
	if err != nil {
		fmt.Fprintf(stderr, "idem token check: %s\n", strings.ReplaceAll(strings.ReplaceAll(err.Error(), "api: ", ""), "\n", "\nidem token check: "))
		return 1
	}
	warnOpenFileTo(stderr, "idem token check", "the auth file", args[0], authFileWhy)
	if creds.Legacy() {
		fmt.Fprintf(stdout, "%s: %d plain tokens in the old format, each an admin token; move to the JSON format (docs/SECURITY.md)\n", args[0], creds.Len())
		if short := creds.ShortLegacy(minLegacyTokenBytes); len(short) > 0 {
			fmt.Fprintf(stdout, "note: admin tokens shorter than %d characters, which a caller can guess by trying: %s; replace them with tokens from idem token new\n", minLegacyTokenBytes, strings.Join(short, ", "))
		}
		return 0
	}
	fmt.Fprintf(stdout, "%s: %d tokens\n", args[0], creds.Len())
	for _, c := range creds.List() {
		line := fmt.Sprintf("  %-24s %s", c.Name, c.Role)
		if len(c.Principals) > 0 {
			line += "  principals " + strings.Join(c.Principals, ", ")
		}
		if c.MaxPrincipals > 0 {
			line += fmt.Sprintf("  max_principals %d", c.MaxPrincipals)
		}
		fmt.Fprintln(stdout, line)
	}
	list := creds.List()
	for i := range list {
		for _, b := range list[i+1:] {
			if a := list[i]; a.Role == api.RoleApp && b.Role == api.RoleApp {
				if shared, ok := sharedPrincipals(a.Principals, b.Principals); ok {
					fmt.Fprintf(stdout, "note: app tokens %q and %q may both act for %s: each reads, completes and releases the other's records there (as meant while one service moves to a new token; otherwise narrow one)\n",
						a.Name, b.Name, shared)
				}
			}
		}
	}
	for _, name := range unboundedPrefixTokens(creds) {
		fmt.Fprintf(stdout, "note: app token %q has a prefix pattern and no max_principals: %s\n", name, unboundedWhy)
	}
	return 0
}

// unboundedWhy is what an app token with a prefix pattern and no
// max_principals can do beside other app tokens.
const unboundedWhy = "it can create principals until the cluster's --max-principals is reached, and every other app token's new principals are then refused 429; give it max_principals (idem token new --max-principals N prints the entry; docs/SECURITY.md)"

// unboundedPrefixTokens names the app tokens with a prefix pattern and no
// max_principals, when the file has more than one app token: any of them
// can fill --max-principals for all the others (a one-tenant file has no
// other to refuse). SECURITY.md said to give each one; nothing checked.
func unboundedPrefixTokens(creds *api.Credentials) []string {
	var apps int
	var names []string
	for _, c := range creds.List() {
		if c.Role != api.RoleApp {
			continue
		}
		apps++
		if c.MaxPrincipals == 0 && slices.ContainsFunc(c.Principals, func(p string) bool { return strings.HasSuffix(p, "*") }) {
			names = append(names, c.Name)
		}
	}
	if apps < 2 {
		return nil
	}
	return names
}

// sharedPrincipals names principals that two app tokens' patterns both
// allow (exact names, or prefixes ending in '*'), as the narrower of the
// first two patterns that meet.
func sharedPrincipals(a, b []string) (string, bool) {
	for _, p := range a {
		for _, q := range b {
			pp, pPrefix := strings.CutSuffix(p, "*")
			qp, qPrefix := strings.CutSuffix(q, "*")
			switch {
			case !pPrefix && !qPrefix && p == q:
				return fmt.Sprintf("the principal %q", p), true
			case !pPrefix && qPrefix && strings.HasPrefix(p, qp):
				return fmt.Sprintf("the principal %q", p), true
			case pPrefix && !qPrefix && strings.HasPrefix(q, pp):
				return fmt.Sprintf("the principal %q", q), true
			case pPrefix && qPrefix && strings.HasPrefix(pp, qp):
				return fmt.Sprintf("the principals matching %q", p), true
			case pPrefix && qPrefix && strings.HasPrefix(qp, pp):
				return fmt.Sprintf("the principals matching %q", q), true
			}
		}
	}
	return "", false
}

// loadAuth reads --auth-file and --node-token-file for idem serve: the
// credentials to check, and the token this node sends to other nodes.
func loadAuth(c *serveConfig, log *slog.Logger) (*api.Auth, string, error) {
	var nodeToken string
	if c.nodeTokenFile != "" {
		f, err := os.Open(c.nodeTokenFile)
		if err != nil {
			return nil, "", fmt.Errorf("--node-token-file: %w", err)
		}
		nodeToken, err = readOneToken(bufio.NewReader(f))
		f.Close()
		if err != nil {
			return nil, "", fmt.Errorf("--node-token-file %s: %w", c.nodeTokenFile, err)
		}
		warnOpenFile(log, "--node-token-file", c.nodeTokenFile, "its token is an admin token")
	}
	if c.authFile == "" {
		if nodeToken != "" {
			// Not refused: the token is still sent on this node's calls to
			// its peers, which check it when they run with --auth-file (a
			// cluster part-way through a rolling restart that turns tokens
			// on). But --node-token-file alone protects nothing here.
			log.Warn("--node-token-file without --auth-file: this node's own API takes every request without a token; the node token is only sent on its calls to other nodes, which check it against their --auth-file. Give this node --auth-file too, as the other nodes have (docs/SECURITY.md, the node credential)",
				"node-token-file", c.nodeTokenFile)
		}
		return nil, nodeToken, nil
	}
	creds, err := api.LoadAuthFile(c.authFile)
	if err != nil {
		return nil, "", fmt.Errorf("--auth-file: %s", strings.ReplaceAll(err.Error(), "api: ", ""))
	}
	switch {
	case nodeToken != "":
		if err := nodeTokenRefused(creds, nodeToken, c.nodeTokenFile, c.authFile); err != nil {
			return nil, "", err
		}
	case creds.Legacy():
		// The old format's behaviour: nodes call each other with its first token.
		nodeToken = creds.FirstLegacyToken()
	default:
		log.Warn("no --node-token-file: this node has no credential for its calls to other nodes, so it cannot join a cluster, its peers' health cannot be measured when it leads (non-voters are not promoted), and /readyz on a follower stays 503; give every node --node-token-file with a token whose SHA-256 is an admin entry of --auth-file (idem token new --role admin)",
			"auth-file", c.authFile)
	}
	logAuth(log, "auth file loaded", c.authFile, creds)
	warnOpenFile(log, "--auth-file", c.authFile, authFileWhy)
	return api.NewAuth(creds), nodeToken, nil
}

// nodeTokenRefused says why the auth file does not take the node token as
// an admin's, and what to check first: the entry the cluster's nodes share
// is usually there already, and the node token file is what changed
// (edited, another deployment's), so adding an entry for the token at hand
// on every node would be the wrong fix.
func nodeTokenRefused(creds *api.Credentials, token, tokenFile, authFile string) error {
	cred, ok := creds.Authenticate(token)
	switch {
	case ok && cred.Role == api.RoleAdmin:
		return nil
	case ok:
		return fmt.Errorf("--node-token-file %s: its token is the %s token %q of --auth-file %s, not an admin token: nodes call each other as admins; give --node-token-file an admin token (idem token new --role admin) whose entry is in the auth file of every node",
			tokenFile, cred.Role, cred.Name, authFile)
	}
	var admins []string
	for _, c := range creds.List() {
		if c.Role == api.RoleAdmin {
			admins = append(admins, fmt.Sprintf("%q", c.Name))
		}
	}
	entry := fmt.Sprintf(`{"name":"nodes","sha256":"%s","role":"admin"}`, api.HashToken(token))
	if len(admins) == 0 {
		return fmt.Errorf("--node-token-file %s: its token is not an admin token of --auth-file %s, which has no admin entry; add the entry %s to the auth file of every node",
			tokenFile, authFile, entry)
	}
	return fmt.Errorf("--node-token-file %s: its token is none of --auth-file %s's admin tokens (%s). Check the token file first: edited, or another cluster's? "+
		"Put back the token the nodes share (its SHA-256 is in their auth files); only for a new node token, add the entry %s to the auth file of every node",
		tokenFile, authFile, strings.Join(admins, ", "), entry)
}

// authFileWhy is why the auth file is kept from other users.
const authFileWhy = "it says which token may do what; writable, it takes any admin entry added"

// minLegacyTokenBytes is the shortest plain token of an old-format auth
// file taken without a warning.
const minLegacyTokenBytes = 16

func logAuth(log *slog.Logger, msg, path string, creds *api.Credentials) {
	if creds.Legacy() {
		log.Warn(msg+": it is in the old format (plain tokens, one per line), and each of its tokens is an admin token; move to the JSON format of hashed tokens with roles (docs/SECURITY.md)",
			"auth-file", path, "tokens", creds.Len())
		// A line "changeme" loaded as an admin token without a word.
		if short := creds.ShortLegacy(minLegacyTokenBytes); len(short) > 0 {
			log.Warn(fmt.Sprintf("auth file: admin tokens shorter than %d characters, which a caller can guess by trying: replace them with tokens from idem token new", minLegacyTokenBytes),
				"auth-file", path, "tokens", strings.Join(short, ","))
		}
		return
	}
	log.Info(msg, "auth-file", path, "tokens", creds.Len())
	if names := unboundedPrefixTokens(creds); len(names) > 0 {
		log.Warn("app tokens with a prefix pattern and no max_principals beside other app tokens: "+unboundedWhy,
			"auth-file", path, "tokens", strings.Join(names, ","))
	}
}

// reloadAuth reads the auth file again (on SIGHUP: reloadOnHUP). A file
// that does not load leaves the credentials in force unchanged, and says
// why.
func reloadAuth(path string, auth *api.Auth, nodeToken string, log *slog.Logger) {
	creds, err := api.LoadAuthFile(path)
	if err == nil {
		if line, open := creds.OpenLastToken(auth.Credentials()); open {
			err = fmt.Errorf("%s: its last line (line %d) is a token not in force with no line end after it: the file may have been read part-way through a save (an editor or a copy writing it in place as SIGHUP came), and in this format every line is an admin token, so a cut one would be too. End the last line with a line end and send SIGHUP again; a JSON auth file (docs/SECURITY.md) is never taken part-way", path, line)
		}
	}
	if err != nil {
		why := strings.ReplaceAll(err.Error(), "api: ", "")
		log.Error("auth file not reloaded: the tokens loaded before stay in force", "auth-file", path, "error", why)
		auth.SetReloadError(time.Now().UTC().Format(time.RFC3339) + ": " + why)
		return
	}
	if nodeToken != "" {
		if cred, ok := creds.Authenticate(nodeToken); !ok || cred.Role != api.RoleAdmin {
			log.Warn("the reloaded auth file has no admin entry for this node's --node-token-file: other nodes with the same file will refuse this node's calls", "auth-file", path)
		}
	}
	auth.Set(creds)
	auth.SetReloadError("")
	logAuth(log, "auth file reloaded", path, creds)
	warnOpenFile(log, "--auth-file", path, authFileWhy)
}
