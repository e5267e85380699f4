package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"regexp"
	"runtime/debug"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/idem-store/idem/client"
	"github.com/idem-store/idem/internal/editdist"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		usage(stderr)
		return 2
	}
	cmd, rest := args[0], args[1:]
	switch cmd {
	case "serve":
		return runServe(ctx, rest, stdout, stderr)
	case "version", "--version", "-version":
		// idem version --json (or a word pasted after it) printed the
		// version and exited 0 as if the argument had been understood.
		if len(rest) > 0 {
			if rest[0] == "--help" || rest[0] == "-h" || rest[0] == "-help" {
				fmt.Fprintln(stdout, "Usage: idem version\n\nPrints the version of this idem binary and the Go release it was built with. It takes no flags.")
				return 0
			}
			fmt.Fprintf(stderr, "idem version: takes no flags or arguments (got %q)\n", rest[0])
			return 2
		}
		fmt.Fprintf(stdout, "idem %s (%s)\n", version, goVersion())
		return 0
	case "help", "-h", "--help", "-help":
		if len(rest) > 0 {
			return run(ctx, []string{rest[0], "--help"}, stdout, stderr)
		}
		usage(stdout)
		return 0
	}
	// IDEM_ADRR=10.0.0.5:7070 idem get asked 127.0.0.1:7070 without a
	// word: a variable one or two letters from one of the command's is
	// named, as serve names its own (misspeltVariables). Said, not refused.
	if vars := commandVariables(cmd); vars != nil {
		for _, note := range misspeltVariablesOf("idem "+cmd, vars, os.Environ()) {
			fmt.Fprintf(stderr, "idem %s: %s\n", cmd, note)
		}
	}
	if c, ok := clientCommands[cmd]; ok {
		return c.Run(ctx, rest, stdout, stderr)
	}
	if c, ok := extraCommands[cmd]; ok {
		return c.Run(ctx, rest, stdout, stderr)
	}
	fmt.Fprintf(stderr, "idem: unknown command %q\n\n", cmd)
	usage(stderr)
	return 2
}

type command struct {
	Run     func(context.Context, []string, io.Writer, io.Writer) int
	Summary string
}

// extraCommands are registered by other files (bench, cluster tools).
var extraCommands = map[string]command{}

func usage(w io.Writer) {
	fmt.Fprint(w, `idem — a replicated idempotency-key store

Usage: idem <command> [flags]

Server:
  serve       run a node (one-node cluster by default; see idem serve --help)
  version     print the version

Client (speak the HTTP API of a running node; each takes --help):
`)
	names := make([]string, 0, len(clientCommands))
	for n := range clientCommands {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-11s %s\n", n, clientCommands[n].Summary)
	}
	if len(extraCommands) > 0 {
		fmt.Fprint(w, "\nTools:\n")
		names = names[:0]
		for n := range extraCommands {
			names = append(names, n)
		}
		sort.Strings(names)
		for _, n := range names {
			fmt.Fprintf(w, "  %-11s %s\n", n, extraCommands[n].Summary)
		}
	}
	fmt.Fprint(w, "\nRun 'idem <command> --help' for the flags of a command.\n")
}

// releaseVersion is version, or for a build without -ldflags ("dev": go
// build, go run) the commit it was built from, where the Go tool
// recorded it: the nodes of a rolling upgrade built either way tell
// apart in cluster status.
func releaseVersion() string {
	if version != "dev" {
		return version
	}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return version
	}
	rev, dirty := "", false
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	if len(rev) < 7 {
		return version
	}
	v := "dev+" + rev[:7]
	if dirty {
		v += "-dirty"
	}
	return v
}

func goVersion() string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		return bi.GoVersion
	}
	return "unknown"
}

// parseArgs parses the flags of command name. It returns done when the
// command must return code at once: 0 after --help (printed to stdout), 2
// after a usage error (named on stderr with a pointer to --help).
func parseArgs(fs *flag.FlagSet, args []string, name string, stdout, stderr io.Writer) (code int, done bool) {
	err := parseFlags(fs, args)
	switch {
	case errors.Is(err, flag.ErrHelp):
		fs.SetOutput(stdout)
		fs.Usage()
		return 0, true
	case err != nil:
		fmt.Fprintf(stderr, "%s: %v (see %s --help)\n", name, err, name)
		return 2, true
	case fs.NArg() > 0:
		if hint := strayBoolValue(fs, args); hint != "" {
			fmt.Fprintf(stderr, "%s: unexpected argument %q: %s\n", name, fs.Arg(0), hint)
			return 2, true
		}
		fmt.Fprintf(stderr, "%s: unexpected argument %q (see %s --help)\n", name, fs.Arg(0), name)
		return 2, true
	}
	return 0, false
}

// parseSubcommand parses `name SUB [flags]`: with no arguments or a help
// word it prints the usage (exit 2 and 0); otherwise it parses the flags
// after SUB. done means the command returns code at once.
func parseSubcommand(fs *flag.FlagSet, name string, args []string, stdout, stderr io.Writer) (sub string, code int, done bool) {
	if len(args) == 0 || args[0] == "--help" || args[0] == "-h" || args[0] == "help" {
		fs.SetOutput(stdout)
		fs.Usage()
		if len(args) == 0 {
			return "", 2, true
		}
		return "", 0, true
	}
	sub = args[0]
	fs.SetOutput(io.Discard) // the flag package would print its error and the whole usage
	if err := parseFlagsOf(fs, args[1:], subcommandTables[name], sub); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fs.SetOutput(stdout)
			fs.Usage()
			return sub, 0, true
		}
		fmt.Fprintf(stderr, "%s %s: %v (see %s --help)\n", name, sub, err, name)
		fs.SetOutput(stderr)
		return sub, 2, true
	}
	fs.SetOutput(stderr)
	if fs.NArg() > 0 {
		// "cluster remove n4" was told "flags go as --name value", a flag
		// it does not have (an operator walk): name the one it has.
		hint := "flags go as --flag value"
		if h := strayBoolValue(fs, args[1:]); h != "" {
			hint = h
		} else if (sub == "remove" || sub == "join" || sub == "transfer-leadership") && fs.Lookup("id") != nil && !flagSet(fs, "id") {
			hint = fmt.Sprintf("did you mean --id %s?", fs.Arg(0))
		}
		fmt.Fprintf(stderr, "%s %s: unexpected argument %q (%s)\n", name, sub, fs.Arg(0), hint)
		return sub, 2, true
	}
	return sub, 0, false
}

// strayBoolValue says how to give the value left as an argument after a
// true/false flag: --insecure false (or --json true) set the flag and left
// "false" as an argument, refused as unexpected without a word of why; the
// flag package takes such a value only after '='. "" for anything else.
func strayBoolValue(fs *flag.FlagSet, args []string) string {
	rest := fs.Args()
	if len(rest) == 0 || len(args) < len(rest)+1 {
		return ""
	}
	if _, err := strconv.ParseBool(rest[0]); err != nil {
		return ""
	}
	name := strings.TrimLeft(args[len(args)-len(rest)-1], "-")
	f := fs.Lookup(name)
	if f == nil {
		return ""
	}
	if b, ok := f.Value.(interface{ IsBoolFlag() bool }); !ok || !b.IsBoolFlag() {
		return ""
	}
	return fmt.Sprintf("a true/false flag takes its value after '=': --%s=%s", name, rest[0])
}

// flagSet reports whether the flag name was given on the command line.
func flagSet(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

// authTokenVariable is the variable the client and admin commands take
// their bearer token from (--auth-token's).
const authTokenVariable = "IDEM_AUTH_TOKEN"

// clientVariables are the IDEM_* variables of the commands that call a
// node (the client commands, bench, cluster, keys status, snapshot save;
// the proxy's --ca-file, --cert-file and --key-file too), by the flag each
// gives the value of when the flag is not on the command line.
// IDEM_AUTH_TOKEN is read apart (bearerToken), and names itself.
var clientVariables = map[string]string{
	"addr": "IDEM_ADDR", "ca-file": "IDEM_CA_FILE", "cert-file": "IDEM_CERT_FILE", "key-file": "IDEM_KEY_FILE",
}

// commandVariables are the IDEM_* variables command cmd reads (flag name
// -> variable), nil for a command that reads none (serve names its own).
func commandVariables(cmd string) map[string]string {
	switch _, client := clientCommands[cmd]; {
	case cmd == "proxy":
		return proxyVariables
	case client || cmd == "bench" || cmd == "cluster" || cmd == "keys" || cmd == "snapshot":
		vars := maps.Clone(clientVariables)
		vars["auth-token"] = authTokenVariable
		return vars
	}
	return nil
}

// variablesUsed says which flags of fs their variable of vars (flag name
// -> IDEM_* variable) gave the value of: flags of fs not given on the
// command line whose variable is set, empty too. As on serve, a variable
// set is its flag's value: an empty one is the flag given empty, refused
// by a flag that needs a value, naming the variable (withVariables).
func variablesUsed(fs *flag.FlagSet, vars map[string]string) map[string]string {
	used := map[string]string{}
	for name, v := range vars {
		if fs == nil || fs.Lookup(name) == nil || flagSet(fs, name) {
			continue
		}
		if _, ok := os.LookupEnv(v); ok {
			used[name] = v
		}
	}
	return used
}

// parseFlags is fs.Parse for every command. A value a flag refuses is
// reported by flagValueError, where the flag package says only `invalid
// value "48" for flag -retention: parse error`, which neither writes the
// flag as it is typed nor says that a duration needs a unit.
//
// A flag given twice is refused, naming it, unless its value is
// repeatable (--header): the flag package keeps the last value silently,
// so `--join a --join b` or `--data-dir x --data-dir y` pasted together
// from two commands ran with half of what was typed.
func parseFlags(fs *flag.FlagSet, args []string) error {
	return parseFlagsOf(fs, args, nil, "")
}

// parseFlagsOf is parseFlags for subcommand sub of a flag set shared as
// table lists: a flag not defined is named as the misspelling of one sub
// reads, and one only another subcommand reads is named with it ("cluster
// status --http-addr" was asked "did you mean --node-http-addr?", a flag
// of join, which status then refused in turn).
func parseFlagsOf(fs *flag.FlagSet, args []string, table subcommandFlags, sub string) error {
	var bad func() error
	var flags []*flag.Flag
	given := map[string]string{}
	fs.VisitAll(func(f *flag.Flag) {
		flags = append(flags, f)
		f.Value = watchedValue{f.Value, func(v string) error {
			first, twice := given[f.Name]
			if twice && !isRepeatable(f.Value.(watchedValue).Value) {
				err := fmt.Errorf("--%s is given twice: give it once", f.Name)
				// A secret is not echoed: a bearer token (--auth-token,
				// --store-token) or a claim's fencing token (--token).
				if f.Name != "token" && !strings.HasSuffix(f.Name, "-token") {
					err = fmt.Errorf("--%s is given twice (%s, then %s): give it once", f.Name, quoteFlagValue(first), quoteFlagValue(v))
				}
				bad = func() error { return err }
				return err
			}
			given[f.Name] = v
			return nil
		}, func(v string, err error) {
			bad = func() error { return flagValueError(f, v, err, "") }
		}}
	})
	err := fs.Parse(args)
	// The flags get their own values back: flagValueError, --help and
	// flag.UnquoteUsage look at their types.
	for _, f := range flags {
		f.Value = f.Value.(watchedValue).Value
	}
	if err != nil && bad != nil {
		return bad() // Parse stops at the first refused value
	}
	if err != nil {
		// "flag provided but not defined: -adr": one dash, where the user
		// typed two, and no word of the flag meant.
		if name, ok := strings.CutPrefix(err.Error(), "flag provided but not defined: -"); ok {
			read := table.of(sub)
			if read == nil {
				return unknownFlag(flags, name)
			}
			own := slices.DeleteFunc(slices.Clone(flags), func(f *flag.Flag) bool { return !slices.Contains(read, f.Name) })
			if flagMeant(flagNames(own), name) == "" && !servesDataDir(flagNames(own), name) {
				// Not one of sub's: another subcommand's, misspelt?
				if other := flagMeant(flagNames(flags), name); other != "" {
					return fmt.Errorf("--%s is not a flag of this command (--%s is a flag of %s)", name, other, table.readers(other))
				}
			}
			return unknownFlag(own, name)
		}
	}
	return err
}

// subcommandFlags lists, in the order of the command's help, the flags
// each subcommand of a command reads, where they share one flag set.
type subcommandFlags []subcommand

// subcommand is one subcommand and the flags it reads.
type subcommand struct {
	sub   string
	flags []string
}

// subcommandTables are the commands whose subcommands share a flag set,
// by the name parseSubcommand is given.
var subcommandTables = map[string]subcommandFlags{
	"idem cluster":  clusterFlags,
	"idem keys":     keysFlags,
	"idem snapshot": snapshotFlags,
}

// of is the flags sub reads, nil when sub is not listed.
func (s subcommandFlags) of(sub string) []string {
	i := slices.IndexFunc(s, func(e subcommand) bool { return e.sub == sub })
	if i < 0 {
		return nil
	}
	return s[i].flags
}

// problem names the first flag given on the command line that sub does not
// read, and says whose it is ("", "" when there is none, or sub is not
// listed). Such a flag was ignored, silently: the command ran as if it had
// not been given.
func (s subcommandFlags) problem(fs *flag.FlagSet, sub string) (name, msg string) {
	i := slices.IndexFunc(s, func(e subcommand) bool { return e.sub == sub })
	if i < 0 {
		return "", ""
	}
	fs.Visit(func(f *flag.Flag) {
		if msg != "" || slices.Contains(s[i].flags, f.Name) {
			return
		}
		name = f.Name
		msg = fmt.Sprintf("--%s is a flag of %s, not of %s: nothing was done", f.Name, s.readers(f.Name), sub)
	})
	return name, msg
}

// readers lists the subcommands that read flag: "a", "a and b", "a, b and c".
func (s subcommandFlags) readers(flag string) string {
	var of []string
	for _, e := range s {
		if slices.Contains(e.flags, flag) {
			of = append(of, e.sub)
		}
	}
	if len(of) > 2 {
		return strings.Join(of[:len(of)-1], ", ") + " and " + of[len(of)-1]
	}
	return strings.Join(of, " and ")
}

// flagNames is the names of flags.
func flagNames(flags []*flag.Flag) []string {
	names := make([]string, len(flags))
	for i, f := range flags {
		names[i] = f.Name
	}
	return names
}

// flagMeant is the flag of names that name most likely misspells, "" when
// none is close.
func flagMeant(names []string, name string) string {
	if best := closestName(name, names); best != "" {
		return best
	}
	return nodeFlagOf(name, names)
}

// unknownFlag is the error for --name, which the command does not define,
// naming the flag of flags it most likely misspells, if one is close.
func unknownFlag(flags []*flag.Flag, name string) error {
	names := flagNames(flags)
	best := flagMeant(names, name)
	if best == "" && servesDataDir(names, name) {
		// idem recover and snapshot restore write a data dir that idem
		// serve then starts: "snapshot restore --http-addr" said only
		// that it is not a flag (an operator walk), as if no command had it.
		if name == "raft-addr" && slices.Contains(names, "peers") {
			return fmt.Errorf("--raft-addr is a flag of idem serve, not of this command: give this node's new raft address in --peers (ID=RAFTADDR, this node included), and the same as --raft-addr to idem serve when you start it; nothing was done")
		}
		return fmt.Errorf("--%s is a flag of idem serve, not of this command: give it to idem serve when you start the node on the data dir; nothing was done", name)
	}
	if best == "" {
		return fmt.Errorf("--%s is not a flag of this command", name)
	}
	return fmt.Errorf("--%s is not a flag of this command: did you mean --%s?", name, best)
}

// servesDataDir reports whether --name is idem serve's, given to a
// command of flags names that writes a data dir for it (recover, snapshot
// restore).
func servesDataDir(names []string, name string) bool {
	return slices.Contains(names, "data-dir") && isServeFlag(name)
}

// isServeFlag reports whether idem serve defines --name.
func isServeFlag(name string) bool {
	fs := flag.NewFlagSet("idem serve", flag.ContinueOnError)
	serveFlags(fs)
	return fs.Lookup(name) != nil
}

// nodeFlagOf is the flag of names that name is with "node-" added or
// taken away, "" when there is none: idem serve names the node's own
// flags (--node-id, --http-addr) as cluster join and remove name a
// node's (--id, --node-http-addr), and the one typed where the other is
// meant is five edits away, past closestName's reach (an operator walk:
// "cluster remove --node-id n3" said only that it is not a flag).
func nodeFlagOf(name string, names []string) string {
	want := "node-" + name
	if rest, ok := strings.CutPrefix(name, "node-"); ok {
		want = rest
	}
	if slices.Contains(names, want) {
		return want
	}
	// A node's own --http-addr where a client command's --addr, the
	// address of a node to ask, is meant.
	if name == "http-addr" && slices.Contains(names, "addr") {
		return "addr"
	}
	return ""
}

// closestName is the one of names at most two edits from name, the
// closest, the first of names on a tie; "" when none is that close.
func closestName(name string, names []string) string {
	best, bestDist := "", 3
	for _, n := range names {
		if d := editdist.Distance(name, n, 2); d < bestDist {
			best, bestDist = n, d
		}
	}
	return best
}

// watchedValue is a flag's value that asks first whether it may be set
// (not given before) and tells failed which value it refused.
type watchedValue struct {
	flag.Value
	first  func(v string) error
	failed func(v string, err error)
}

func (w watchedValue) Set(v string) error {
	if err := w.first(v); err != nil {
		return err
	}
	err := w.Value.Set(v)
	if err != nil {
		w.failed(v, err)
	}
	return err
}

// repeatable is a flag value that takes every value given, in order, as
// --header does; parseFlags lets it be given more than once.
type repeatable interface{ repeatable() }

func isRepeatable(v flag.Value) bool {
	_, ok := v.(repeatable)
	return ok
}

// quoteFlagValue writes a flag's value as an error shows it: quoted when
// empty or holding a space.
func quoteFlagValue(v string) string {
	if v == "" || strings.ContainsAny(v, " \t") {
		return strconv.Quote(v)
	}
	return v
}

// IsBoolFlag keeps --force meaning --force=true.
func (w watchedValue) IsBoolFlag() bool {
	b, ok := w.Value.(interface{ IsBoolFlag() bool })
	return ok && b.IsBoolFlag()
}

// flagValueError says, on one line, why the value v of flag f was
// refused: given as $env when env is not "", else on the command line.
// The flag package's own error for the basic types is a bare "parse
// error" or "value out of range", which names neither the flag nor the
// value.
func flagValueError(f *flag.Flag, v string, err error, env string) error {
	from, given := "--"+f.Name, "--"+f.Name+" "+v
	if env != "" {
		from, given = fmt.Sprintf("$%s (--%s)", env, f.Name), fmt.Sprintf("$%s=%s (--%s)", env, v, f.Name)
	}
	if _, ok := f.Value.(sizeFlag); ok {
		if errors.Is(err, errSizeRange) {
			return fmt.Errorf("%s: invalid size %q: out of range", from, v)
		}
		return fmt.Errorf("%s: invalid size %q: %s", from, v, sizeForms)
	}
	kind := "value"
	if g, ok := f.Value.(flag.Getter); ok {
		switch g.Get().(type) {
		case time.Duration:
			kind = "duration"
			// "48" meant as 48h is the likeliest mistake: say what fixes it.
			if isPlainNumber(v) {
				return fmt.Errorf("%s: a duration needs a unit, e.g. 48h, 30m or 90s", given)
			}
			// Days and weeks are the units a retention is thought of in,
			// and Go's durations have neither.
			if h, ok := daysOrWeeks(v); ok {
				return fmt.Errorf("%s: a duration takes the units h, m, s, ms, us and ns, not days or weeks: write %s", given, h)
			}
			// Well formed but past what a duration holds: time.ParseDuration
			// calls that invalid too.
			if durationForm.MatchString(v) {
				return fmt.Errorf("%s: invalid duration %q: out of range, the longest is 2562047h (about 292 years)", from, v)
			}
		case int, int64, uint, uint64:
			kind = "integer"
		case float64:
			kind = "number"
		case bool:
			kind = "boolean"
		}
	}
	msg := fmt.Sprintf("%s: invalid %s %q", from, kind, v)
	switch err.Error() {
	case "parse error":
		return errors.New(msg)
	case "value out of range":
		return errors.New(msg + ": out of range")
	}
	return fmt.Errorf("%s: %w", msg, err)
}

// daysOrWeeks is v, a whole number of days or weeks ("1d", "7d", "2w"),
// in hours.
func daysOrWeeks(v string) (string, bool) {
	n, unit := v[:max(len(v)-1, 0)], strings.ToLower(v[max(len(v)-1, 0):])
	per := map[string]int{"d": 24, "w": 7 * 24}[unit]
	if per == 0 || !isPlainNumber(n) || strings.ContainsAny(n, ".-+") {
		return "", false
	}
	k, err := strconv.Atoi(n)
	if err != nil || k > 2562047/per {
		return "", false
	}
	return strconv.Itoa(k*per) + "h", true
}

// durationForm is what time.ParseDuration accepts, whatever the size.
var durationForm = regexp.MustCompile(`^[-+]?(([0-9]+(\.[0-9]*)?|\.[0-9]+)(ns|us|µs|μs|ms|s|m|h))+$`)

// isPlainNumber reports whether s is digits with at most a sign and a
// decimal point: 48, -5, 1.5.
func isPlainNumber(s string) bool {
	s = strings.TrimLeft(s, "+-")
	return strings.ContainsAny(s, "0123456789") && strings.Trim(s, "0123456789.") == "" && strings.Count(s, ".") <= 1
}

// authTokenFlag registers --auth-token and returns its value, or when it
// is not given, IDEM_AUTH_TOKEN's. The variable is not the flag's default:
// --help prints defaults, and a token would land in terminals and CI logs.
func authTokenFlag(fs *flag.FlagSet, usage string) func() string {
	v := fs.String("auth-token", "", usage)
	// The client commands' --token-file: without it an operator's or
	// admin's token (cluster, snapshot, keys) could only be given on the
	// command line or in the environment, though SECURITY.md says to keep
	// tokens in a file of mode 0600.
	file := fs.String("token-file", "", "read the bearer token (as --auth-token) from the one line of `path` that is not empty or a # comment")
	return func() string {
		t, _ := bearerToken(*v, *file) // authTokenProblem has refused flags that give none
		return t
	}
}

// bearerToken is the bearer token of --auth-token token and --token-file
// file, which exclude each other; without either, $IDEM_AUTH_TOKEN.
func bearerToken(token, file string) (string, error) {
	from := "--auth-token"
	switch {
	case token != "" && file != "":
		return "", errors.New("--auth-token and --token-file exclude each other")
	case file != "":
		var err error
		if token, err = readTokenFile("--token-file", file); err != nil {
			return "", err
		}
		from = "--token-file " + file
	case token == "":
		token, from = os.Getenv(authTokenVariable), "$"+authTokenVariable
	}
	// As --token-file's line: a token pasted with a space or a line end
	// around it, or read by $(cat token) from a file with Windows line
	// endings (the shell strips the newline, not the carriage return
	// before it), is the token. The carriage return failed every request
	// with "client: invalid value for header \"Authorization\"", naming
	// neither the flag nor the byte.
	token = strings.TrimSpace(token)
	if i := strings.IndexFunc(token, func(r rune) bool { return r < ' ' || r == 0x7f }); i >= 0 {
		return "", fmt.Errorf("%s: the token holds a control character (byte 0x%02x at offset %d), which no HTTP header can carry: check what was pasted", from, token[i], i)
	}
	// client.New refuses it too, but as it cannot name the flag.
	if len(token) > client.MaxTokenBytes {
		return "", fmt.Errorf("%s: the token is %d bytes, more than %d, the most a node can be sent (it reads at most 1 MiB of request headers)", from, len(token), client.MaxTokenBytes)
	}
	return token, nil
}

// authTokenProblem says what is wrong with the flags authTokenFlag
// registered on fs (both given, a --token-file that gives no token, a
// token no node could be sent), or nil.
// A --token-file other users may read or write is warned of on stderr,
// under the command's name, as idem serve warns of its secret files.
func authTokenProblem(fs *flag.FlagSet, stderr io.Writer, name string) error {
	tok, file := fs.Lookup("auth-token"), fs.Lookup("token-file")
	if tok == nil || file == nil {
		return nil
	}
	if _, err := bearerToken(tok.Value.String(), file.Value.String()); err != nil {
		return err
	}
	if file.Value.String() != "" {
		warnOpenFileTo(stderr, name, "--token-file", file.Value.String(), tokenFileWhy)
	}
	return nil
}

// tokenFileWhy is why a client command's --token-file is kept from other
// users.
const tokenFileWhy = "whoever reads it can use its bearer token"

// readTokenFile reads a bearer token from the one line of path that is
// not empty or a # comment; errors name flag, the flag that gave path.
// It reads a file as serve's --node-token-file does (tokenLine): a
// removed node's add-back command gives that file as --token-file, so a
// leading byte order mark is skipped and a second token is refused.
func readTokenFile(flag, path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("%s: %w", flag, err)
	}
	// Room for a token of client.MaxTokenBytes and the spaces around it.
	for line := range strings.Lines(string(b)) {
		if len(strings.TrimRight(line, "\r\n")) > client.MaxTokenBytes+4096 {
			return "", fmt.Errorf("%s %s: a line is longer than %d bytes, more than any token a node can be sent (it reads at most 1 MiB of request headers)", flag, path, client.MaxTokenBytes)
		}
	}
	token, _, err := tokenLine(string(b))
	if err != nil {
		return "", fmt.Errorf("%s %s %w", flag, path, err)
	}
	return token, nil
}

// printFlags prints every flag of fs with its usage string, as --name
// rather than flag.PrintDefaults's -name, since that is how the usage
// texts, the error messages and scripts write them. Every command's
// --help uses it, so all print their flags alike.
func printFlags(w io.Writer, fs *flag.FlagSet) {
	fs.VisitAll(func(f *flag.Flag) {
		arg, text := flag.UnquoteUsage(f)
		if _, ok := f.Value.(sizeFlag); ok && arg == "value" {
			arg = "size"
		}
		line := "  --" + f.Name
		if arg != "" {
			line += " " + arg
		}
		switch f.DefValue {
		case "", "0", "0s", "false":
		default:
			// Quoted for strings only, as flag.PrintDefaults does.
			if g, ok := f.Value.(flag.Getter); ok {
				if _, isString := g.Get().(string); !isString {
					text += fmt.Sprintf(" (default %s)", f.DefValue)
					break
				}
			}
			text += fmt.Sprintf(" (default %q)", f.DefValue)
		}
		fmt.Fprintf(w, "%s\n    \t%s\n", line, strings.ReplaceAll(text, "\n", "\n    \t"))
	})
}
