package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"os/signal"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/idem-store/idem/api"
	"github.com/idem-store/idem/engine"
	"github.com/idem-store/idem/internal/editdist"
	"github.com/idem-store/idem/internal/gcfloor"
	"github.com/idem-store/idem/raftfsm"
	"github.com/idem-store/idem/ttl"
)

// serveConfig is everything `idem serve` is told, from flags and IDEM_*
// environment variables.
type serveConfig struct {
	nodeID, dataDir string
	// hup receives SIGHUP from the start of runServe (reloadOnHUP): Go's
	// default for it is to exit, which killed a node signalled while it
	// opened its data dir, or at any time with neither --auth-file nor TLS.
	hup chan os.Signal
	// nodeFileAuth is node.json's auth when the data dir had one
	// (serve records the mode this start runs with once it holds the dir).
	nodeFileAuth string
	// authDigest is the digest of --auth-file at start ("none" without
	// one), compared with the other members' (warnSettingsDrift).
	authDigest                   string
	httpAddr, raftAddr           string
	httpAdvertise, raftAdvertise string
	healthAddr                   string
	join                         string
	bootstrapExpect              int
	// nodeFileScope is node.json's scope when an explicit --scope differs
	// from it: serve decides once the node's state says the cluster's mode.
	nodeFileScope                   string
	retention, bucketWidth, lease   time.Duration
	allowShortRetention             bool
	scope                           string
	authFile, nodeTokenFile         string
	insecure                        bool
	noAuth                          bool
	logLevel, logFormat             string
	limits                          api.Limits
	maxBatchOps                     int
	conns                           connConfig // listen.go: connection caps and timeouts
	snapshotThreshold, trailingLogs uint64
	snapshotInterval                time.Duration
	cacheBytes                      int64
	gcFloorBytes                    int64
	encryptionKeyFile               string
	minFreeDisk                     uint64
	clockOffset                     time.Duration
	shutdownTimeout                 time.Duration
	fullDiskStopTimeout             time.Duration
	commitTimeout                   time.Duration
	pprof                           bool
	injectBug                       string
	tls                             serveTLSFlags // tls.go
	// given are the flags set on the command line or by IDEM_*
	// (parseWithEnv): a limit checked against another flag's value is
	// refused only when given, so that lowering one flag does not make
	// another's default an error.
	given map[string]bool
	// lowered says which request limits validate lowered to their
	// maximum (lowerUnreachableLimits), logged once the logger exists.
	lowered []string
}

// minCommitTimeout and maxCommitTimeout bound --commit-timeout. Under a
// second, an fsync or an election of the usual length turns writes a
// moment from committed into 503s of unknown outcome. Past a minute the
// disk has failed rather than slowed, and each write waiting holds its
// --max-inflight slot and its body's --max-inflight-bytes that long,
// after its client has given up.
const (
	minCommitTimeout = time.Second
	maxCommitTimeout = time.Minute
)

// fewTrailingLogs is the --trailing-logs below which a start warns: a
// follower that falls that far behind gets the whole state as a snapshot.
const fewTrailingLogs = 1024

// trailingLogsNote warns of a --trailing-logs so low that a follower back
// from a restart finds the entries it lacks compacted away and gets the
// whole state: a walk with 32 saw a follower install ~40 snapshots in two
// minutes, not ready for 225 s, with nothing saying why (the leader now
// keeps its log above a snapshot it is sending, so an install is no
// longer followed by another, but each restart still costs one).
func trailingLogsNote(n uint64) string {
	if n >= fewTrailingLogs {
		return ""
	}
	return fmt.Sprintf("--trailing-logs %d is low: a follower more than %d entries behind (a restart, a pause of seconds under load) gets the whole state as a snapshot instead of the entries it lacks; keep it at %d or more (default %d)",
		n, n, fewTrailingLogs, raftfsm.DefaultConfig().TrailingLogs)
}

// maxScopeBytesLimit is the most --max-scope-bytes can be. GET /v1/records
// carries principal, endpoint and key in its URL, which a node reads with
// the request's headers, at most 1 MiB (net/http's default, which idem
// serve keeps); percent-encoded (up to 3 bytes a byte), three fields of
// 64 KiB take 576 KiB, leaving room for a bearer token of up to
// client.MaxTokenBytes and the rest of the headers. Twice that (1152 KiB)
// could never be looked up.
const maxScopeBytesLimit = api.MaxScopeBytesLimit

// maxResponseBytesLimit is the largest --max-response-bytes: a response is
// stored through one raft log entry, with its headers (at most 8 KiB) and
// its record, and an entry may hold raftfsm.MaxEntryBytes (63 MiB).
const maxResponseBytesLimit = 62 << 20

// maxClockOffset is the most --clock-offset skews a node's wall clock
// either way, with --retention retention: 24h, or twice the retention when
// that is more. The flag is for tests of clock skew: a clock off by
// minutes or hours (chaos's clock nemesis and the cluster tests use ±10m)
// and a cluster time pushed past every record's expiry (chaos's fsm-loss
// nemesis, chaos.SkewFor: twice the retention, at least 1h). It took up
// to ±2562047h, a wall clock centuries off, with only a warning at start.
func maxClockOffset(retention time.Duration) time.Duration {
	return max(24*time.Hour, 2*min(retention, math.MaxInt64/2))
}

func serveFlags(fs *flag.FlagSet) *serveConfig {
	c := &serveConfig{limits: api.DefaultLimits()}
	d := raftfsm.DefaultConfig()
	fs.StringVar(&c.nodeID, "node-id", "n1", "unique id of this node in the cluster")
	fs.StringVar(&c.dataDir, "data-dir", "./idem-data", "directory for the raft log, snapshots and Pebble state (created if missing; an existing directory must be empty or a node's data dir)")
	fs.StringVar(&c.httpAddr, "http-addr", "127.0.0.1:7070", "address the HTTP API listens on")
	fs.StringVar(&c.raftAddr, "raft-addr", "127.0.0.1:7071", "address raft listens on")
	fs.StringVar(&c.httpAdvertise, "http-advertise", "", "HTTP address other nodes forward to (default: --http-addr)")
	fs.StringVar(&c.healthAddr, "health-addr", "", "address of a second HTTP listener that serves only /healthz and /readyz, for probes: it answers while the API's connections are all taken (--max-conns; a flood of slow connections), where the API's own /healthz waits behind them. HTTPS with --http-addr's certificate, but it never asks for a client certificate (probes present none, whatever --tls-client-auth says); off by default")
	fs.StringVar(&c.raftAdvertise, "raft-advertise", "", "raft address other nodes dial (default: --raft-addr)")
	fs.StringVar(&c.join, "join", "", "comma-separated HTTP addresses of cluster members to join (ignored once this node has state)")
	fs.IntVar(&c.bootstrapExpect, "bootstrap-expect", 0, "form a new cluster once this many nodes (this one included) are reachable through --join, without a designated first node")
	fs.DurationVar(&c.retention, "retention", 24*time.Hour, "how long a record is kept, from its first claim; the retry window promised to clients (at least 1m). The first claim pins it as the cluster's (from the leader's flag: until then give every node the same, a node joining with another is refused and one added by hand is kept a non-voter); later, idem cluster set-retention changes it and this flag does not")
	fs.BoolVar(&c.allowShortRetention, "allow-short-retention", false, "allow --retention below 1m (tests and demos only)")
	fs.DurationVar(&c.bucketWidth, "bucket-width", d.BucketWidth, "width of the time buckets expiry drops whole; fixed when the data dir is created")
	fs.DurationVar(&c.lease, "lease", 30*time.Second, "default lease of a claim when the request has no lease_ms")
	fs.StringVar(&c.scope, "scope", "endpoint", "uniqueness scope: endpoint (principal+endpoint+key) or principal (principal+key); fixed when the data dir is created")
	fs.StringVar(&c.authFile, "auth-file", "", "JSON file of hashed bearer tokens with roles (app, operator, admin; see idem token); when set every route but /healthz and /readyz needs a token. Reloaded on SIGHUP. A file of plain tokens, one per line, still works: each is an admin token")
	fs.StringVar(&c.nodeTokenFile, "node-token-file", "", "file holding this node's own bearer token (one line; blank lines and # comments are skipped), sent on its calls to other nodes (join, health, readiness); its SHA-256 must be an admin entry of --auth-file")
	fs.BoolVar(&c.noAuth, "no-auth", false, "start without --auth-file a data dir last served with it, turning token checks off for this node on purpose (node.json records it); without this flag such a start is refused, since the node would answer any caller, every tenant's records included")
	fs.BoolVar(&c.insecure, "insecure", false, "allow listening on a non-loopback --http-addr without --auth-file, and raft on a non-loopback address without TLS (--tls-cert-file)")
	fs.StringVar(&c.logLevel, "log-level", "info", "log level: debug, info, warn, error")
	fs.StringVar(&c.logFormat, "log-format", "text", "log format: text or json")
	sizeVar(fs, &c.limits.MaxScopeBytes, "max-scope-bytes", c.limits.MaxScopeBytes, "largest principal, endpoint and key, in bytes (at most 64KiB, and at most --max-request-bytes)")
	fs.IntVar(&c.limits.MaxFingerprintChars, "max-fingerprint-chars", c.limits.MaxFingerprintChars, "longest fingerprint, in hex characters")
	sizeVar(fs, &c.limits.MaxIDBytes, "max-id-bytes", c.limits.MaxIDBytes, "largest claim_id, correlation_id and reason, in bytes (at most --max-request-bytes)")
	fs.DurationVar(&c.limits.MinLease, "min-lease", c.limits.MinLease, "shortest lease_ms a request may ask for")
	fs.DurationVar(&c.limits.MaxLease, "max-lease", c.limits.MaxLease, "longest lease_ms a request may ask for")
	sizeVar(fs, &c.limits.MaxRequestBytes, "max-request-bytes", c.limits.MaxRequestBytes, "largest request body, in bytes (413 request_too_large above)")
	sizeVar(fs, &c.limits.MaxResponseBytes, "max-response-bytes", c.limits.MaxResponseBytes, "largest stored response body, decoded bytes (413 response_too_large above; at most 62MiB)")
	fs.IntVar(&c.limits.MaxResponseHeaders, "max-response-headers", c.limits.MaxResponseHeaders, "most stored response headers")
	sizeVar(fs, &c.limits.MaxResponseHeaderBytes, "max-response-header-bytes", c.limits.MaxResponseHeaderBytes, "largest stored response headers, names and values together")
	fs.Int64Var(&c.limits.MaxKeysPerPrincipal, "max-keys-per-principal", c.limits.MaxKeysPerPrincipal, "live keys one principal may hold (429 quota_exceeded above)")
	fs.IntVar(&c.maxBatchOps, "max-batch-ops", api.DefaultMaxBatchOps, "most operations in one POST /v1/batch (413 request_too_large above); at most what a body of --max-request-bytes holds (19417 for 1MiB)")
	fs.Uint64Var(&c.snapshotThreshold, "snapshot-threshold", d.SnapshotThreshold, "raft log entries between snapshots")
	fs.DurationVar(&c.snapshotInterval, "snapshot-interval", d.SnapshotInterval, "how often raft checks whether to snapshot")
	fs.Uint64Var(&c.trailingLogs, "trailing-logs", d.TrailingLogs, "raft log entries kept after a snapshot, for followers to catch up without one")
	sizeVar(fs, &c.cacheBytes, "cache-bytes", 64<<20, "Pebble block cache size in bytes")
	sizeVar(fs, &c.gcFloorBytes, "gc-floor-bytes", 64<<20, "Go garbage collection waits until the heap reaches this many bytes while less than half of it is live: a young node's live heap is a few MiB, which Go's default pacing (GOGC) collected ~25 times a second under load; 0 leaves Go's pacing")
	fs.StringVar(&c.encryptionKeyFile, "encryption-key-file", "", `JSON {"keys":[{"id":"k2","key":"<base64 of 32 bytes>"},...]}: stored responses and correlation ids are encrypted (AES-256-GCM) with the first key; the others only decrypt older records (idem keys --help)`)
	sizeVar(fs, &c.minFreeDisk, "min-free-disk", d.MinFreeDisk, "free space the data dir's disk keeps, a size (bytes, or e.g. 256MiB, 1GiB, 500MB): below it, or below 96 MiB (room for the raft log's next segment) if that is more, the leader refuses writes with 507 storage_full; a ballast file of a quarter of it is kept in the data dir and removed when the disk fills (0 turns both off; a size under 1MiB is refused, since a plain number is bytes)")
	fs.DurationVar(&c.clockOffset, "clock-offset", 0, "TEST ONLY: skew this node's wall clock, by at most 24h either way (or twice --retention when that is more) (cluster time must not follow it)")
	fs.BoolVar(&c.pprof, "pprof", false, "serve Go profiles under /debug/pprof/ on the HTTP address (for profiling; admin tokens only when --auth-file is set)")
	fs.StringVar(&c.injectBug, "inject-bug", "", "TEST ONLY: break this node on purpose to prove the chaos checker fails (local-reads, skip-uniqueness)")
	fs.DurationVar(&c.shutdownTimeout, "shutdown-timeout", 10*time.Second, "how long to drain HTTP requests on SIGINT/SIGTERM")
	fs.DurationVar(&c.commitTimeout, "commit-timeout", d.ApplyTimeout, "how long the leader waits for a write to be stored by a quorum and applied before it answers 503 unavailable, outcome unknown (a retry with the same claim_id is safe; the write stays in the raft log); it also bounds linearizable reads and membership changes. Raise it for disks whose fsyncs take seconds, with the clients' timeouts (idem proxy's --store-timeout). From 1s to 1m")
	fs.DurationVar(&c.fullDiskStopTimeout, "full-disk-stop-timeout", 30*time.Second, "on SIGINT/SIGTERM with the data dir's disk under --min-free-disk, how long stopping waits for raft log applies held up for space before the node exits without them, with status 1 (they are in the raft log and are applied at the next start)")
	connFlags(fs, c) // listen.go
	c.tls.register(fs)
	return c
}

// envName is the IDEM_* variable of a flag: --max-keys-per-principal -> IDEM_MAX_KEYS_PER_PRINCIPAL.
func envName(flagName string) string {
	return "IDEM_" + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// parseWithEnv parses args; flags not given on the command line take their
// IDEM_* environment variable when set. It returns the names of flags set
// either way.
func parseWithEnv(fs *flag.FlagSet, args []string) (map[string]bool, error) {
	set, _, err := parseWithEnvFrom(fs, args)
	return set, err
}

// parseWithEnvFrom is parseWithEnv, and says which flags took their
// IDEM_* variable (fromEnv).
func parseWithEnvFrom(fs *flag.FlagSet, args []string) (set, fromEnv map[string]bool, err error) {
	fs.VisitAll(func(f *flag.Flag) { f.Usage += fmt.Sprintf(" [$%s]", envName(f.Name)) })
	if err := parseFlags(fs, args); err != nil {
		return nil, nil, err
	}
	if fs.NArg() > 0 {
		if hint := strayBoolValue(fs, args); hint != "" {
			return nil, nil, fmt.Errorf("unexpected argument %q: %s", fs.Arg(0), hint)
		}
		return nil, nil, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	set, fromEnv = map[string]bool{}, map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	var errs []error
	fs.VisitAll(func(f *flag.Flag) {
		if set[f.Name] {
			return
		}
		if v, ok := os.LookupEnv(envName(f.Name)); ok {
			if err := fs.Set(f.Name, v); err != nil {
				errs = append(errs, flagValueError(f, v, err, envName(f.Name)))
			}
			set[f.Name] = true
			fromEnv[f.Name] = true
		}
	})
	return set, fromEnv, errors.Join(errs...)
}

// misspeltVariables says which IDEM_* variables of env are no flag's but
// one or two letters from one: IDEM_RETENTON=48h was ignored without a
// word, and the node kept 24h, where --retenton is refused. Said, not
// refused: a unit file that started the node before must still start it.
func misspeltVariables(fs *flag.FlagSet, env []string) []string {
	vars := map[string]string{}
	fs.VisitAll(func(f *flag.Flag) { vars[f.Name] = envName(f.Name) })
	return misspeltVariablesOf("idem serve", vars, env)
}

// misspeltVariablesOf is misspeltVariables for command cmd, whose IDEM_*
// variables are vars (flag name -> variable). A variable of another idem
// command (IDEM_ADDR beside serve's, IDEM_RETENTION beside idem get's) is
// not taken for a misspelling: one shell may hold both.
func misspeltVariablesOf(cmd string, vars map[string]string, env []string) []string {
	flagOf := map[string]string{}
	var known []string
	for f, v := range vars {
		flagOf[v] = f
		known = append(known, v)
	}
	slices.Sort(known)
	var notes []string
	for _, kv := range env {
		name, _, _ := strings.Cut(kv, "=")
		if !strings.HasPrefix(name, "IDEM_") || flagOf[name] != "" || isIdemVariable(name) {
			continue
		}
		if best := closestName(name, known); best != "" {
			notes = append(notes, fmt.Sprintf("$%s is set but is not a variable of %s, and is ignored: did you mean $%s? (--%s)", name, cmd, best, flagOf[best]))
		}
	}
	slices.Sort(notes)
	return notes
}

// isIdemVariable says whether name is a variable some idem command reads.
func isIdemVariable(name string) bool { return idemVariables()[name] }

// idemVariables is every variable some idem command reads, built once.
var idemVariables = sync.OnceValue(func() map[string]bool {
	all := map[string]bool{authTokenVariable: true}
	fs := flag.NewFlagSet("idem serve", flag.ContinueOnError)
	serveFlags(fs)
	fs.VisitAll(func(f *flag.Flag) { all[envName(f.Name)] = true })
	for _, vars := range []map[string]string{clientVariables, proxyVariables} {
		for _, v := range vars {
			all[v] = true
		}
	}
	return all
})

// flagMention is a flag named in an error line.
var flagMention = regexp.MustCompile(`--[a-z0-9][a-z0-9-]*`)

// withEnvNames adds to each line of a refused start that names a flag set
// by its IDEM_* variable which variable that was: IDEM_NODE_ID=" n1" was
// refused as --node-id " n1", a flag the operator's command line did not
// hold.
func withEnvNames(msg string, fromEnv map[string]bool) string {
	vars := map[string]string{}
	for name, set := range fromEnv {
		if set {
			vars[name] = envName(name)
		}
	}
	return withVariables(msg, vars)
}

// withVariables is withEnvNames for vars, the IDEM_* variable that set
// each flag it holds (flag name -> variable): the other commands' are not
// all envName's (the proxy's --listen is $IDEM_PROXY_LISTEN). A line that
// names the variable already ($IDEM_ADDR (--addr) ...) is left as it is.
func withVariables(msg string, vars map[string]string) string {
	lines := strings.Split(msg, "\n")
	for i, l := range lines {
		var envs []string
		for _, m := range flagMention.FindAllString(l, -1) {
			v, ok := vars[strings.TrimPrefix(m, "--")]
			if e := "$" + v; ok && !slices.Contains(envs, e) && !strings.Contains(l, e) {
				envs = append(envs, e)
			}
		}
		if len(envs) > 0 {
			lines[i] = l + " (set by " + strings.Join(envs, ", ") + ")"
		}
	}
	return strings.Join(lines, "\n")
}

// nodeIDPattern is what a node id may be: the one rule the join API holds too.
var nodeIDPattern = api.NodeIDPattern

// validate reports every bad flag at once, each naming its flag.
func (c *serveConfig) validate() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	mem := physicalMemory()
	if !c.given["max-inflight-bytes"] {
		c.limits.MaxInFlightBytes = defaultInFlightBytes(mem, c.limits.MaxRequestBytes)
	}
	if !nodeIDPattern.MatchString(c.nodeID) {
		bad("--node-id %q must be 1-64 letters, digits, '.', '_' or '-'", c.nodeID)
	}
	if c.dataDir == "" {
		bad("--data-dir must not be empty")
	} else if strings.TrimSpace(c.dataDir) != c.dataDir && !holdsNode(c.dataDir) {
		// IDEM_DATA_DIR="/var/lib/idem " (a unit file's trailing space)
		// started a new, empty store beside the node's: every key free
		// again. One already holding a node is still served.
		bad("--data-dir %q begins or ends with a space (or is only spaces): a new, empty store would be made there; give the path without it", c.dataDir)
	}
	if c.minFreeDisk > 0 && c.minFreeDisk < 1<<20 {
		// A plain number is bytes: --min-free-disk 10, meant as 10GiB,
		// kept 10 bytes free with a 2-byte ballast.
		bad("--min-free-disk %s is less than 1MiB, no free space to keep: a plain number is bytes; give a unit (e.g. 10GiB, 512MiB), or 0 to turn the guard off", formatShortest(c.minFreeDisk))
	}
	for _, a := range []struct{ flag, addr, example string }{
		{"--http-addr", c.httpAddr, "127.0.0.1:7070"}, {"--raft-addr", c.raftAddr, "127.0.0.1:7071"},
	} {
		if err := checkHostPort(a.addr); err != nil {
			bad("%s %q is not host:port with a port from 1 to 65535 (e.g. %s): %v", a.flag, a.addr, a.example, err)
		}
	}
	if c.healthAddr != "" {
		switch err := checkHostPort(c.healthAddr); {
		case err != nil:
			bad("--health-addr %q is not host:port with a port from 1 to 65535 (e.g. 127.0.0.1:7072): %v", c.healthAddr, err)
		case sameAddr(c.healthAddr, c.httpAddr) || sameAddr(c.healthAddr, c.raftAddr):
			bad("--health-addr %s is --http-addr's or --raft-addr's: the probes' listener needs a port of its own (e.g. 127.0.0.1:7072)", c.healthAddr)
		}
	}
	if sameAddr(c.httpAddr, c.raftAddr) {
		bad("--http-addr and --raft-addr are both %s: HTTP and raft need a port each (e.g. --http-addr 127.0.0.1:7070 --raft-addr 127.0.0.1:7071)", c.httpAddr)
	}
	// What other nodes are told and dialled is checked as the join API
	// checks a member's addresses: accepted here, a bad one was retried
	// forever (--join 127.0.0.1 dialled port 80, --join ,, never
	// bootstrapped and said nothing) or recorded as the node's address.
	for _, a := range []struct{ flag, addr, example string }{
		{"--http-advertise", c.httpAdvertise, "10.0.0.4:7070"}, {"--raft-advertise", c.raftAdvertise, "10.0.0.4:7071"},
	} {
		if err := checkHostPort(a.addr); a.addr != "" && err != nil {
			bad("%s %q is not host:port with a port from 1 to 65535, the address other nodes reach this node at (e.g. %s): %v", a.flag, a.addr, a.example, err)
		}
	}
	// The raft address other nodes dial must name one (raftfsm refuses
	// 0.0.0.0 too, but only once it has opened the stores).
	raftAdv, flag := c.raftAdvertise, "--raft-advertise"
	if raftAdv == "" {
		raftAdv, flag = c.raftAddr, "--raft-addr"
	}
	if checkHostPort(raftAdv) == nil {
		host, _, _ := net.SplitHostPort(raftAdv)
		if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
			bad("%s %q names no address other nodes can dial: give --raft-advertise, this node's raft address as they reach it (e.g. 10.0.0.4:7071)", flag, raftAdv)
		}
	}
	if c.join != "" {
		addrs := splitAddrs(c.join)
		if len(addrs) == 0 {
			bad("--join %q names no address: give the HTTP addresses of cluster members, comma-separated (e.g. 10.0.0.1:7070,10.0.0.2:7070)", c.join)
		}
		for _, a := range addrs {
			if err := checkHostPort(a); err != nil {
				bad("--join: %q is not host:port with a port from 1 to 65535, a member's --http-addr (e.g. 10.0.0.1:7070): %v", a, err)
			}
		}
	}
	if c.noAuth && c.authFile != "" {
		bad("--no-auth and --auth-file contradict each other: --no-auth turns token checks off; give one of them")
	}
	if c.bootstrapExpect < 0 || c.bootstrapExpect > 9 {
		bad("--bootstrap-expect %d must be between 0 and 9", c.bootstrapExpect)
	}
	if c.bootstrapExpect > 1 && c.join == "" {
		bad("--bootstrap-expect %d needs --join with the HTTP addresses of the other nodes", c.bootstrapExpect)
	}
	if err := ttl.ValidateRetention(c.retention, c.allowShortRetention); err != nil {
		bad("--retention: %s", strings.TrimPrefix(err.Error(), "ttl: "))
	}
	if c.bucketWidth < time.Millisecond {
		bad("--bucket-width %s must be at least 1ms", c.bucketWidth)
	} else if err := ttl.ValidateSpan(c.retention, c.bucketWidth); err != nil {
		bad("--retention %s with --bucket-width %s: %s", c.retention, c.bucketWidth, strings.TrimPrefix(err.Error(), "ttl: "))
	}
	if c.lease < c.limits.MinLease || c.lease > c.limits.MaxLease {
		bad("--lease %s must be between --min-lease %s and --max-lease %s", c.lease, c.limits.MinLease, c.limits.MaxLease)
	}
	if c.scope != "endpoint" && c.scope != "principal" {
		bad("--scope %q must be endpoint or principal", c.scope)
	}
	if c.shutdownTimeout < 0 {
		bad("--shutdown-timeout %s must not be negative (0 stops without draining requests)", c.shutdownTimeout)
	}
	if c.logFormat != "text" && c.logFormat != "json" {
		bad("--log-format %q must be text or json", c.logFormat)
	}
	if _, err := parseLevel(c.logLevel); err != nil {
		bad("--log-level %q must be debug, info, warn or error", c.logLevel)
	}
	if c.maxBatchOps < 1 {
		bad("--max-batch-ops must be at least 1 (got %d)", c.maxBatchOps)
	}
	// A size past the memory is refused as given, before a limit past its
	// maximum is lowered: 1000TiB is a typo, not an old unit file.
	// --max-inflight-bytes only when given: its default fits
	// (defaultInFlightBytes) unless --max-request-bytes does not, which is
	// refused by name.
	var inFlightGiven uint64
	if c.given["max-inflight-bytes"] {
		inFlightGiven = uint64(max(c.limits.MaxInFlightBytes, 0))
	}
	for _, f := range []struct {
		name string
		v    uint64
	}{
		{"cache-bytes", uint64(c.cacheBytes)},
		{"gc-floor-bytes", uint64(max(c.gcFloorBytes, 0))},
		{"max-request-bytes", uint64(max(c.limits.MaxRequestBytes, 0))},
		{"max-response-bytes", uint64(max(c.limits.MaxResponseBytes, 0))},
		{"max-response-header-bytes", uint64(max(c.limits.MaxResponseHeaderBytes, 0))},
		{"max-inflight-bytes", inFlightGiven},
	} {
		if why := memoryBound(f.name, f.v, mem); why != "" {
			bad("%s: the node would run out of memory before reaching it; give a size that fits beside everything else the machine runs", why)
		}
	}
	c.lowered = c.lowerUnreachableLimits()
	if err := c.limits.Validate(); err != nil {
		bad("%s", strings.ReplaceAll(err.Error(), "api: ", ""))
	}
	if c.snapshotThreshold == 0 || c.trailingLogs == 0 {
		bad("--snapshot-threshold and --trailing-logs must be at least 1")
	}
	if c.snapshotInterval < 5*time.Millisecond {
		bad("--snapshot-interval %s is too short", c.snapshotInterval)
	}
	switch c.injectBug {
	case "", raftfsm.BugLocalReads, raftfsm.BugSkipUniqueness:
	default:
		bad("--inject-bug %q must be %s or %s", c.injectBug, raftfsm.BugLocalReads, raftfsm.BugSkipUniqueness)
	}
	errs = append(errs, c.conns.validate()...)
	if c.cacheBytes < 1<<20 {
		bad("--cache-bytes %d must be at least 1 MiB", c.cacheBytes)
	}
	if c.fullDiskStopTimeout < 0 {
		bad("--full-disk-stop-timeout %s must be 0 or more", c.fullDiskStopTimeout)
	}
	if c.commitTimeout < minCommitTimeout || c.commitTimeout > maxCommitTimeout {
		bad("--commit-timeout %s must be from 1s to 1m: how long a write may wait to be committed before it is answered 503 (outcome unknown); the default is %s", c.commitTimeout, raftfsm.DefaultConfig().ApplyTimeout)
	}
	if most := maxClockOffset(c.retention); c.clockOffset < -most || c.clockOffset > most {
		bad("--clock-offset %s is more than %s either way, the most it takes (24h, or twice --retention when that is more): it is a test flag, for a clock off by hours or pushed past every record's expiry; leave it out on a real node", c.clockOffset, most)
	}
	errs = append(errs, c.tls.validate()...)
	return errors.Join(errs...)
}

// lowerUnreachableLimits lowers the request limits no request could reach
// to the most one can, and says so (runServe logs it at WARN):
// --max-scope-bytes over maxScopeBytesLimit, --max-response-bytes and
// --max-response-header-bytes over maxResponseBytesLimit; and, when given,
// --max-scope-bytes, --max-id-bytes and --max-response-header-bytes over
// --max-request-bytes (their fields travel in request bodies) and --max-batch-ops over the ops of the smallest kind a body of
// --max-request-bytes holds. Lowered, not refused: a unit file that ran
// under an earlier release, which took these values, must still start in
// a rolling upgrade; the values lowered are the ones no request reached
// (or, for --max-response-bytes, that no node could read back), so no
// request that worked before is refused.
func (c *serveConfig) lowerUnreachableLimits() []string {
	var notes []string
	l := &c.limits
	lower := func(flag string, from, to int64, why string) {
		notes = append(notes, fmt.Sprintf("--%s %d lowered to %d, the maximum: %s", flag, from, to, why))
	}
	if l.MaxScopeBytes > maxScopeBytesLimit {
		lower("max-scope-bytes", int64(l.MaxScopeBytes), maxScopeBytesLimit, "GET /v1/records carries principal, endpoint and key in its URL, and a node reads at most 1 MiB of request line and headers")
		l.MaxScopeBytes = maxScopeBytesLimit
	}
	if l.MaxResponseBytes > maxResponseBytesLimit {
		lower("max-response-bytes", int64(l.MaxResponseBytes), maxResponseBytesLimit, "a response is stored through one raft log entry, which holds at most 63 MiB (a larger one was acknowledged, and the node could not start on its log)")
		l.MaxResponseBytes = maxResponseBytesLimit
	}
	if l.MaxResponseHeaderBytes > maxResponseBytesLimit {
		// Past it, as past --max-response-bytes's: the headers are stored
		// with the body, through the same one raft log entry.
		lower("max-response-header-bytes", int64(l.MaxResponseHeaderBytes), maxResponseBytesLimit, "a response's headers are stored with it through one raft log entry, which holds at most 63 MiB")
		l.MaxResponseHeaderBytes = maxResponseBytesLimit
	}
	if l.MaxRequestBytes < 1 {
		return notes // refused by Limits.Validate
	}
	body := fmt.Sprintf("--max-request-bytes %d allows", l.MaxRequestBytes)
	if c.given["max-scope-bytes"] && int64(l.MaxScopeBytes) > l.MaxRequestBytes {
		lower("max-scope-bytes", int64(l.MaxScopeBytes), l.MaxRequestBytes, body+": principal, endpoint and key travel in request bodies")
		l.MaxScopeBytes = int(l.MaxRequestBytes)
	}
	if c.given["max-id-bytes"] && int64(l.MaxIDBytes) > l.MaxRequestBytes {
		lower("max-id-bytes", int64(l.MaxIDBytes), l.MaxRequestBytes, body+": claim_id, correlation_id and reason travel in request bodies")
		l.MaxIDBytes = int(l.MaxRequestBytes)
	}
	if c.given["max-response-header-bytes"] && int64(l.MaxResponseHeaderBytes) > l.MaxRequestBytes {
		lower("max-response-header-bytes", int64(l.MaxResponseHeaderBytes), l.MaxRequestBytes, body+": a stored response's headers travel in the body of its complete request")
		l.MaxResponseHeaderBytes = int(l.MaxRequestBytes)
	}
	if most := max(api.MaxBatchOpsFor(l.MaxRequestBytes), 1); c.given["max-batch-ops"] && c.maxBatchOps > most {
		lower("max-batch-ops", int64(c.maxBatchOps), int64(most), body+": a batch of more ops, each at least a get of one-byte principal, endpoint and key (53 bytes), does not fit in a request body")
		c.maxBatchOps = most
	}
	return notes
}

// checkHostPort is the check the join API applies to a member's
// addresses: the flags that name addresses hold the same rule.
var checkHostPort = api.CheckHostPort

// ipv6Hint says how to write an IPv6 address given without brackets.
var ipv6Hint = api.IPv6Hint

// checkDialableRaftAddr is the rule for a raft address written into a raft
// configuration offline (snapshot restore --raft-addr, recover --peers):
// idem serve refuses the same address as its --raft-addr or
// --raft-advertise, so a configuration holding it names a node that can
// never be started or dialled there.
func checkDialableRaftAddr(addr string) error {
	if err := checkHostPort(addr); err != nil {
		return fmt.Errorf("is not host:port with a port from 1 to 65535 (e.g. 10.0.0.4:7071): %v", err)
	}
	host, _, _ := net.SplitHostPort(addr)
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		return errors.New("names no address other nodes can dial: give the node's raft address as they reach it (its --raft-advertise, else its --raft-addr; e.g. 10.0.0.4:7071)")
	}
	return nil
}

// sameAddr reports whether two host:port addresses are written the same
// (a busy port written another way is found when the ports are opened).
func sameAddr(a, b string) bool {
	ha, pa, err1 := net.SplitHostPort(a)
	hb, pb, err2 := net.SplitHostPort(b)
	return err1 == nil && err2 == nil && strings.EqualFold(ha, hb) && strings.TrimLeft(pa, "0") == strings.TrimLeft(pb, "0")
}

func parseLevel(s string) (slog.Level, error) {
	var l slog.Level
	err := l.UnmarshalText([]byte(s))
	return l, err
}

func newLogger(c *serveConfig, w io.Writer) *slog.Logger {
	level, _ := parseLevel(c.logLevel)
	opts := &slog.HandlerOptions{Level: level}
	if c.logFormat == "json" {
		opts.ReplaceAttr = escapeInvisible
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}

// escapeInvisible writes, in a JSON log, each non-ASCII rune that prints
// nothing (bidi controls such as U+202E, zero-width and other format
// characters) as \u followed by its hex code, in strings, errors and the
// strings inside any other value (a slice, a struct). The
// node logs what clients send (principals, tokens' names, paths, bodies'
// members in errors): the text format quotes such runes, but JSON wrote
// them raw, so a log viewer showed a line reordered or with a hidden
// part, as a caller chose.
func escapeInvisible(_ []string, a slog.Attr) slog.Attr {
	switch a.Value.Kind() {
	case slog.KindString:
		if s, ok := escapedInvisible(a.Value.String(), `\u%04x`); ok {
			a.Value = slog.StringValue(s)
		}
	case slog.KindAny:
		v := a.Value.Any()
		if err, isErr := v.(error); isErr {
			if err != nil {
				if s, ok := escapedInvisible(err.Error(), `\u%04x`); ok {
					a.Value = slog.StringValue(s)
				}
			}
			return a
		}
		// Any other value (a slice of principals, a struct) is written
		// as the JSON handler writes it, marshalled, with the runes
		// inside its strings escaped the same way: "\\u202e" in the
		// JSON reads back as the text \u202e, as in a string attribute.
		var buf bytes.Buffer
		enc := json.NewEncoder(&buf)
		enc.SetEscapeHTML(false)
		if enc.Encode(v) == nil {
			s, sep := jsonSeparatorsAsText(strings.TrimSuffix(buf.String(), "\n"))
			if s, ok := escapedInvisible(s, `\\u%04x`); ok || sep {
				a.Value = slog.AnyValue(json.RawMessage(s))
			}
		}
	}
	return a
}

// jsonSeparatorsAsText rewrites, in the JSON text s, encoding/json's own
// escapes of U+2028 and U+2029 (it writes these two escaped, never raw) as
// the text \u2028, as escapedInvisible writes the other invisible runes:
// decoded, the escape was the separator itself. It reports whether it
// found any. A backslash in JSON text only starts an escape, inside a
// string, so each is read with the character after it.
func jsonSeparatorsAsText(s string) (string, bool) {
	if !strings.Contains(s, `\u202`) {
		return s, false
	}
	var b strings.Builder
	found := false
	for i := 0; i < len(s); i++ {
		switch {
		case s[i] != '\\' || i+1 == len(s):
			b.WriteByte(s[i])
		case strings.HasPrefix(s[i:], `\u2028`) || strings.HasPrefix(s[i:], `\u2029`):
			b.WriteString(`\\`)
			b.WriteString(s[i+1 : i+6])
			i += 5
			found = true
		default:
			b.WriteString(s[i : i+2])
			i++
		}
	}
	return b.String(), found
}

// escapedInvisible is s with escapeInvisible's runes written as format
// gives them, and whether it held any.
func escapedInvisible(s, format string) (string, bool) {
	i := strings.IndexFunc(s, invisible)
	if i < 0 {
		return s, false
	}
	var b strings.Builder
	b.WriteString(s[:i])
	for _, r := range s[i:] {
		if invisible(r) {
			fmt.Fprintf(&b, format, r)
			continue
		}
		b.WriteRune(r)
	}
	return b.String(), true
}

// invisible: a non-ASCII rune that prints nothing by itself. ASCII
// controls are JSON's own to escape; U+FFFD is what an invalid byte reads
// as.
func invisible(r rune) bool {
	return r >= utf8.RuneSelf && r != utf8.RuneError && !unicode.IsPrint(r)
}

func runServe(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("idem serve", flag.ContinueOnError)
	fs.SetOutput(io.Discard) // errors and help are printed below, once
	c := serveFlags(fs)
	// Before anything slow: a SIGHUP that comes while the node starts (an
	// operator reloading every node during a rolling restart) is kept and
	// acted on once the reloads can run, not the end of the process.
	c.hup = make(chan os.Signal, 1)
	signal.Notify(c.hup, syscall.SIGHUP)
	defer signal.Stop(c.hup)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), "Usage: idem serve [flags]\n\nRuns an idem node. With no flags: a one-node cluster in ./idem-data,\nHTTP on 127.0.0.1:7070, raft on 127.0.0.1:7071, 24h retention.\nEvery flag can also be set with the IDEM_* variable shown.\nA size is a number of bytes, or a whole number with a unit: 64KiB, 32MiB, 1GiB\n(powers of 1024) or 500MB (powers of 1000).\n\nFlags:\n")
		printFlags(fs.Output(), fs)
	}
	set, fromEnv, err := parseWithEnvFrom(fs, args)
	if errors.Is(err, flag.ErrHelp) {
		fs.SetOutput(stdout)
		fs.Usage()
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "idem serve: %v\n", strings.ReplaceAll(err.Error(), "\n", "\nidem serve: "))
		return 2
	}
	c.given = set
	if err := c.validate(); err != nil {
		fmt.Fprintf(stderr, "idem serve: %v\n", strings.ReplaceAll(withEnvNames(err.Error(), fromEnv), "\n", "\nidem serve: "))
		return 2
	}
	if err := checkDataDir(c.dataDir); err != nil {
		fmt.Fprintf(stderr, "idem serve: %v\n", withEnvNames(permissionHint(err, c.dataDir).Error(), fromEnv))
		return 2
	}
	// Given only: the default on a disk too small for a node is explained
	// by raftfsm, with what the disk needs.
	if err := minFreeDiskProblem(c.dataDir, c.minFreeDisk); err != nil && set["min-free-disk"] {
		fmt.Fprintf(stderr, "idem serve: %v\n", withEnvNames(err.Error(), fromEnv))
		return 2
	}
	var formationNote string
	if !holdsNode(c.dataDir) {
		var err error
		if formationNote, err = c.formationProblem(); err != nil {
			fmt.Fprintf(stderr, "idem serve: %v\n", err)
			return 2
		}
	}
	log := newLogger(c, stderr)
	for _, note := range c.lowered {
		log.Warn(note)
	}
	for _, note := range misspeltVariables(fs, os.Environ()) {
		log.Warn(note)
	}
	if formationNote != "" {
		log.Warn(formationNote)
	}
	if note := trailingLogsNote(c.trailingLogs); note != "" {
		log.Warn(note)
	}
	if note := c.httpAdvertiseNote(); note != "" {
		log.Warn(note)
	}
	defer gcfloor.Start(c.gcFloorBytes).Stop()
	if err := serve(ctx, c, set, log); err != nil {
		// withEnvNames here too: IDEM_AUTH_FILE=/etc/idem/auth.json, a file
		// not there, said only "--auth-file: open ...", a flag the command
		// line did not hold (so the key, token and TLS files, the ports).
		fmt.Fprintf(stderr, "idem serve: %v\n", withEnvNames(permissionHint(err, c.dataDir).Error(), fromEnv))
		if errors.As(err, new(usageError)) {
			return 2
		}
		return 1
	}
	return 0
}

// permissionHint adds what to do to a start (or an idem recover) refused
// because a file of the data dir could not be opened: the error names the
// file, and only the raft log's own said more ("permission denied" on
// node.json, fsm/, snapshots/ or the data dir itself left the operator
// guessing). The snapshot store reports its failed write test without
// wrapping the error, hence the text.
func permissionHint(err error, dataDir string) error {
	const hint = "check that the user running idem owns"
	msg := err.Error()
	// A filesystem remounted read-only (ext4's errors=remount-ro after an
	// I/O error) said only "read-only file system" on fsm/LOCK.
	if (errors.Is(err, syscall.EROFS) || strings.Contains(msg, "read-only file system")) && !strings.Contains(msg, "mounted read-only") {
		return fmt.Errorf("%w: the filesystem holding %s is mounted read-only, so nothing was changed. A filesystem remounts itself read-only after an I/O error: "+
			"read the kernel log (dmesg) and check the disk first; once it is sound and writable again (mount -o remount,rw, or a repair and a remount), run the node again", err, dataDir)
	}
	if strings.Contains(msg, hint) || (!errors.Is(err, os.ErrPermission) && !strings.Contains(msg, "permission denied")) {
		return err
	}
	return fmt.Errorf("%w: %s %s and everything in it and may read and write them (chown -R and chmod -R u+rwX as root), then run it again", err, hint, dataDir)
}

// dataDirEntries are the names idem keeps at the top of a data dir, in
// this version and older ones (node.json came after fsm/, raft.db and
// snapshots/; raft-wal/ after raft.db held the log), with the temporary
// names they are built under. A directory holding any of them is a
// node's data dir.
var dataDirEntries = map[string]bool{
	"node.json": true, "node.json.tmp": true, "raft.db": true, "raft-wal": true, "raft-wal.tmp": true, "snapshots": true,
	"fsm": true, "fsm.filters": true, "fsm.filters.tmp": true, "fsm.restore": true, // engine: probe filters, a restore being built
	raftfsm.BallastFile: true, raftfsm.BallastFile + ".tmp": true,
	raftfsm.RecoveredFile: true, raftfsm.RecoveredFile + ".tmp": true, raftfsm.SupersededFile: true, // superseded.go
	raftfsm.RecoveringFile: true, raftfsm.RecoveringFile + ".tmp": true, // recovering.go
}

// checkDataDir refuses a --data-dir that exists, is not empty and holds
// no idem node: a typo or the wrong level (the parent of the node dirs,
// a node's fsm/) would otherwise start a new empty store there, and on
// one node that frees every key again. Hidden files (.DS_Store),
// lost+found, which a new filesystem's mount point holds, and *.log files
// (the node's own output redirected into the dir) do not count.
func checkDataDir(dir string) error {
	if pid, exclusive := dirLockHolder(dir); pid > 0 && exclusive {
		return errors.New(dirLockProblem(dir) + "; nothing was changed")
	}
	if msg := unfinishedRestoreProblem(dir); msg != "" {
		return errors.New(msg)
	}
	st, err := os.Stat(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("--data-dir: %w", err)
	}
	if !st.IsDir() {
		return fmt.Errorf("--data-dir %s exists and is not a directory: point it at a node's data dir, or an empty or new directory", dir)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("--data-dir: %w", err)
	}
	var foreign, nodeDirs []string
	for _, e := range entries {
		name := e.Name()
		if dataDirEntries[name] {
			return nil
		}
		if strings.HasPrefix(name, ".") || name == "lost+found" || (e.Type().IsRegular() && strings.HasSuffix(name, ".log")) {
			continue // hidden, a new filesystem's, or the node's own log (serve >d/idem.log)
		}
		foreign = append(foreign, name)
		if e.IsDir() && holdsNode(filepath.Join(dir, name)) {
			nodeDirs = append(nodeDirs, name)
		}
	}
	if len(foreign) == 0 {
		return nil
	}
	held := strings.Join(foreign, ", ")
	if len(foreign) > 5 {
		held = strings.Join(foreign[:5], ", ") + fmt.Sprintf(" and %d more", len(foreign)-5)
	}
	hint := ""
	if len(nodeDirs) == 1 {
		hint = fmt.Sprintf(" (under it, %s holds a node: give that)", nodeDirs[0])
	} else if len(nodeDirs) > 1 {
		hint = fmt.Sprintf(" (under it, %s hold nodes: give one of those)", strings.Join(nodeDirs, ", "))
	} else if parent := filepath.Dir(filepath.Clean(dir)); holdsNode(parent) {
		hint = fmt.Sprintf(" (it is inside the data dir %s: give that)", parent)
	}
	return fmt.Errorf("--data-dir %s is not empty and holds no idem node (no node.json, fsm/, raft.db, raft-wal/): it holds %s%s; point it at a node's data dir, or an empty or new directory", dir, held, hint)
}

// minFreeDiskProblem refuses a --min-free-disk of the whole disk that
// holds dir (or would hold it) or more: --min-free-disk 1TB on a smaller
// disk exited 1 telling the operator to free some space on it, which no
// amount of freeing could do (a value under it but above the free space
// only warns, raftfsm's check: freeing space then helps).
func minFreeDiskProblem(dir string, minFree uint64) error {
	if minFree == 0 {
		return nil
	}
	_, total, err := engine.DiskSizeNear(dir)
	if err != nil || total == 0 || minFree < total {
		return nil
	}
	return fmt.Errorf("--min-free-disk %s is more than the whole disk holding %s (%s): writes would stop for good, whatever is freed on it; give a size well under the disk's (the default is 256MiB), or 0 to turn the guard off; nothing was changed", formatShortest(minFree), dir, formatApprox(total))
}

// nodesBeside lists the directories beside dir (in its parent) that hold a
// node, the names closest to dir's first (a typo: cluster-data/n33 names
// n3 before n1), at most three, and how many more there are: a store
// started in a new dir next to them (/var/lib/idme) serves an empty store.
func nodesBeside(dir string) (near []string, more int) {
	clean := filepath.Clean(dir)
	parent := filepath.Dir(clean)
	entries, err := os.ReadDir(parent)
	if err != nil {
		return nil, 0
	}
	name := filepath.Base(clean)
	for _, e := range entries {
		p := filepath.Join(parent, e.Name())
		if e.IsDir() && p != clean && holdsNode(p) {
			near = append(near, p)
		}
	}
	slices.SortStableFunc(near, func(a, b string) int {
		return editdist.Distance(name, filepath.Base(a), -1) - editdist.Distance(name, filepath.Base(b), -1)
	})
	if len(near) > 3 {
		return near[:3], len(near) - 3
	}
	return near, 0
}

// listenProblem is the error of a port serve could not open. A port in use
// said only "bind: address already in use", naming neither what may hold it
// nor the way out (a make run node beside make cluster, two pasted commands).
func listenProblem(flagName, addr string, err error) error {
	if errors.Is(err, syscall.EADDRINUSE) {
		return fmt.Errorf("%s %s is in use by another process (another idem node? make run and make cluster's n1 both use 127.0.0.1:7070 and :7071): stop it, or give this node another %s; nothing was started or written", flagName, addr, flagName)
	}
	return fmt.Errorf("%s: %w", flagName, err)
}

// formationProblem says why a node on an empty data dir could never
// become a member with the --join and --bootstrap-expect given, or nil;
// and, as a note to log, when it can only be taken in by a peer. Each of
// the refused ones started, made the data dir and waited for ever, logging
// "waiting for peers to bootstrap" (or an ERROR) every few seconds. A node
// with state ignores both flags, so it is asked only of a new data dir.
func (c *serveConfig) formationProblem() (string, error) {
	self := c.httpAdvertise
	if self == "" {
		self = c.httpAddr
	}
	others := map[string]bool{}
	for _, a := range splitAddrs(c.join) {
		if !sameAddr(a, self) {
			others[a] = true
		}
	}
	switch {
	case c.bootstrapExpect == 1 && c.join != "":
		return "", fmt.Errorf("--bootstrap-expect 1 with --join %s: a node started with --join joins that cluster and never forms one of its own, so --bootstrap-expect 1 would be ignored; leave out --join to start a new one-node cluster, or --bootstrap-expect to join", c.join)
	case c.bootstrapExpect > 1 && len(others)+1 < c.bootstrapExpect:
		// Not refused: a peer whose --join names every node bootstraps
		// them all, this one included (TestBootstrapExpectPeersThatAskedToJoinElectALeader).
		return fmt.Sprintf("--bootstrap-expect %d: --join names %d other node(s) besides this one (%s), so this node never finds %d nodes and never bootstraps the cluster itself: it waits for a node whose --join names every node to bootstrap them all. If no node's --join does, the cluster never forms: give every node's HTTP address in --join", c.bootstrapExpect, len(others), self, c.bootstrapExpect), nil
	case c.bootstrapExpect == 0 && c.join != "" && len(others) == 0:
		return "", fmt.Errorf("--join %s names only this node's own address: a node cannot join itself. %s", c.join, joinSelfAdvice)
	}
	return "", nil
}

// httpAdvertiseNote says, for a node of a cluster (--join or
// --bootstrap-expect), that the HTTP address it advertises names every
// interface (--http-addr 0.0.0.0:7070, [::]:7070 or :7070 without
// --http-advertise): the cluster records it, and a member on another
// machine dials its own host there, so its forwards and the leader's
// health checks never reach this node. Not refused: nodes sharing one
// machine reach each other at it.
func (c *serveConfig) httpAdvertiseNote() string {
	if c.join == "" && c.bootstrapExpect == 0 {
		return ""
	}
	adv, flag := c.httpAdvertise, "--http-advertise"
	if adv == "" {
		adv, flag = c.httpAddr, "--http-addr"
	}
	host, _, err := net.SplitHostPort(adv)
	if err != nil {
		return ""
	}
	if ip := net.ParseIP(host); host != "" && (ip == nil || !ip.IsUnspecified()) {
		return ""
	}
	return fmt.Sprintf("%s %s names every interface, not an address other nodes can dial: the cluster records it as this node's HTTP address, and a member on another machine that forwards a request or checks this node's health there reaches its own machine instead. Give --http-advertise, this node's HTTP address as the others reach it (e.g. 10.0.0.4:7070 or n4.example.com:7070)", flag, adv)
}

// holdsNode reports whether dir holds node.json, fsm/ or raft.db.
func holdsNode(dir string) bool {
	for _, name := range []string{"node.json", "fsm", "raft.db"} {
		if _, err := os.Stat(filepath.Join(dir, name)); err == nil {
			return true
		}
	}
	return false
}

// nodeFile records the settings fixed when a data dir is created.
type nodeFile struct {
	NodeID        string `json:"node_id"`
	BucketWidthMs int64  `json:"bucket_width_ms"`
	// Scope is fixed too: switching it would make every existing record
	// unreachable under the other mode and silently re-run their retries.
	Scope string `json:"scope,omitempty"`
	// Auth is "tokens" once the data dir was served with --auth-file. A
	// restart without it (a unit file edited by hand, a command copied
	// from a test setup) made a voter answer any caller, every tenant's
	// records included: nothing stopped it but a warning. Such a start is
	// refused unless --no-auth says it is meant; "none" records that.
	Auth string `json:"auth,omitempty"`
}

// fixedSettings reads the node file and applies it to c. A bucket width
// or scope given explicitly that differs from the one the data dir was
// created with is refused; without the flag the stored value is used.
//
// It writes nothing. When the data dir has no node file yet, it returns
// pin, which writes one with c's settings: serve runs it once the node
// holds the data dir and its ports (raftfsm's BeforeRaft), so a start that
// fails before (a port in use, a bad certificate, a typo) fixes nothing
// and a retry with corrected flags is not refused.
func fixedSettings(c *serveConfig, set map[string]bool) (pin func() error, err error) {
	path := filepath.Join(c.dataDir, "node.json")
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		nf := nodeFile{NodeID: c.nodeID, BucketWidthMs: c.bucketWidth.Milliseconds(), Scope: c.scope}
		if c.authFile != "" {
			nf.Auth = raftfsm.AuthTokens
		}
		return func() error { return writeNodeFile(path, nf) }, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	var nf nodeFile
	if err := json.Unmarshal(b, &nf); err != nil {
		return nil, corruptNodeFile(path, err)
	}
	// A file that parses but records no width ('{}', a hand-made file)
	// failed later as "invalid config: bucket width 0s is below 1ms",
	// naming neither the file nor a flag that was given.
	if nf.BucketWidthMs <= 0 {
		return nil, corruptNodeFile(path, fmt.Errorf("bucket_width_ms is %d", nf.BucketWidthMs))
	}
	stored := time.Duration(nf.BucketWidthMs) * time.Millisecond
	if set["bucket-width"] && stored != c.bucketWidth {
		return nil, usageError{fmt.Errorf("--bucket-width %s differs from %s, the width %s was created with; the width cannot change (omit the flag to use %s)", c.bucketWidth, stored, c.dataDir, stored)}
	}
	c.bucketWidth = stored
	if nf.Scope != "" && nf.Scope != c.scope {
		if set["scope"] {
			// Refused in serve unless the cluster pinned the flag's mode:
			// node.json only seeds the scope, and a member admitted with
			// another one is fixed by naming its cluster's.
			c.nodeFileScope = nf.Scope
		} else {
			c.scope = nf.Scope
		}
	}
	if nf.NodeID != "" && nf.NodeID != c.nodeID {
		// node.json itself may be what is wrong: an earlier release wrote
		// it with whatever --node-id started a data dir that had lost it.
		given := fmt.Sprintf("--node-id %q", c.nodeID)
		if !set["node-id"] {
			// The operator typed no id: "--node-id "n1" differs" named a
			// value nowhere on the command line (an operator walk).
			given = fmt.Sprintf("--node-id was not given, and its default, %q,", c.nodeID)
		}
		return nil, usageError{fmt.Errorf("%s differs from %q, the node %s was created for (%s records it): start it with --node-id %s. "+
			"Only if that file is what is wrong (written by a start under a mistaken --node-id), move it aside (mv %s %s.bad) and start again: without it, --node-id is checked against the raft configuration stored in %s",
			given, nf.NodeID, c.dataDir, path, nf.NodeID, path, path, c.dataDir)}
	}
	if nf.Auth == raftfsm.AuthTokens && c.authFile == "" && !c.noAuth {
		return nil, usageError{fmt.Errorf("--auth-file is missing: %s was last served with --auth-file, or restored from a backup of a cluster that ran with one (%s records it), where every route needed a token. "+
			"Started without it, this node would answer any caller, every tenant's records included (a consistency=stale lookup is decided by the node asked alone). "+
			"Start it with the --auth-file the other nodes use; to turn token checks off for this node on purpose, pass --no-auth. Nothing was changed", c.dataDir, path)}
	}
	c.nodeFileAuth = nf.Auth
	return nil, nil
}

// retentionSpan refuses a --retention that spans more than
// ttl.MaxSpanBuckets of the bucket width in force, once that is the data
// dir's (node.json's, or the cluster's) rather than --bucket-width's. The
// flags were checked against each other alone: a data dir created with
// --bucket-width 1s and started again with --retention 2000h (and no
// --bucket-width, whose default is 2h) passed, the first claim pinned 2000h,
// and every claim and lookup after it probed 7.2 million buckets (0.15-0.3 s
// each) for as long as the cluster lived; PUT /v1/admin/retention refuses the
// same value (400).
func retentionSpan(c *serveConfig, whose string) error {
	err := ttl.ValidateSpan(c.retention, c.bucketWidth)
	if err == nil {
		return nil
	}
	return usageError{fmt.Errorf("--retention %s is too long for %s, %s: %s; give a --retention of at most %s",
		c.retention, whose, c.bucketWidth, strings.TrimPrefix(err.Error(), "ttl: "), ttl.MaxSpanBuckets*c.bucketWidth)}
}

// storedIDError says what to do about a start refused because the raft
// configuration stored in a data dir without node.json shows that
// --node-id is not the data dir's node.
func storedIDError(c *serveConfig, e *raftfsm.StoredIDError) error {
	head := fmt.Sprintf("--node-id %q is not the node %s was created for: it has no node.json (which records the --node-id a data dir was created for), and the raft configuration stored in it ", e.NodeID, c.dataDir)
	fix := fmt.Sprintf("Start it with --node-id %s (node.json then records %s again); if %s is not %s's data dir, start %s on its own --data-dir", e.Stored, e.Stored, c.dataDir, e.Stored, e.NodeID)
	var why string
	switch {
	case e.AtOwnAddr:
		why = fmt.Sprintf("gives this node's raft address %s to member %s", e.StoredAddr(), e.Stored)
	case e.Stored != "":
		why = fmt.Sprintf("is a one-node cluster of %s, at raft address %s", e.Stored, e.StoredAddr())
	default:
		why = "lists " + raftfsm.PeerList(e.Members)
		fix = fmt.Sprintf("Start it with the --node-id of the member whose data dir it is (node.json then records it again); if it is not one of theirs, start %s on its own --data-dir", e.NodeID)
	}
	return usageError{fmt.Errorf("%s%s (no configuration it holds lists %s). Nothing was written. %s", head, why, e.NodeID, fix)}
}

// usageError marks an error of serve that a flag caused and only another
// value of it fixes (a --node-id, --scope or --bucket-width that differs
// from the data dir's, --tls-* files that do not make a pair, a
// non-loopback address without --auth-file or TLS): idem serve exits 2 on
// it, as on other flag errors, rather than 1.
type usageError struct{ error }

func (e usageError) Unwrap() error { return e.error }

// corruptNodeFile says what to do about a node.json that does not parse:
// it only records the flags the data dir was created with, and the
// replicated state holds the cluster's scope and bucket width.
func corruptNodeFile(path string, err error) error {
	return fmt.Errorf("%s is corrupt (%w): it only records the --node-id, --scope and --bucket-width this data dir was created with, and whether it was served with --auth-file; nothing was changed. "+
		"Move it aside (mv %s %s.bad) and start the node again with those flags: it writes the file anew, and the cluster's scope and bucket width still apply", path, err, path, path)
}

// setNodeFileScope records scope in an existing node.json, keeping the
// rest of it.
func setNodeFileScope(path, scope string) error {
	return updateNodeFile(path, func(nf *nodeFile) { nf.Scope = scope })
}

// setNodeFileWidth records the bucket width in an existing node.json,
// keeping the rest of it.
func setNodeFileWidth(path string, width time.Duration) error {
	return updateNodeFile(path, func(nf *nodeFile) { nf.BucketWidthMs = width.Milliseconds() })
}

// updateNodeFile rewrites an existing node.json changed by change.
func updateNodeFile(path string, change func(*nodeFile)) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("read %s: %w", path, err)
	}
	var nf nodeFile
	if err := json.Unmarshal(b, &nf); err != nil {
		return corruptNodeFile(path, err)
	}
	change(&nf)
	return replaceNodeFile(path, nf)
}

// writeNodeFile writes the node file of a data dir that has none. The
// node holds the data dir by then, so no other idem serve writes it
// meanwhile; one that appeared since fixedSettings read the dir (another
// node started and stopped in between) is left alone and the start fails.
func writeNodeFile(path string, nf nodeFile) error {
	if _, err := os.Stat(path); err == nil {
		return fmt.Errorf("%s appeared while this node was starting (another idem serve on the same --data-dir?): nothing was written, start again", path)
	}
	return replaceNodeFile(path, nf)
}

// replaceNodeFile writes nf to path through a synced temporary file, a
// rename and a synced directory, so a crash of the process or of the
// machine leaves the old file or the new one. Without the syncs, an ext4
// that went read-only after an I/O error left node.json empty, and the
// node refused to start until an operator moved it aside.
func replaceNodeFile(path string, nf nodeFile) error {
	b, _ := json.Marshal(nf)
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	_, err = f.Write(b)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err == nil {
		err = syncDirErr(filepath.Dir(path))
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

// syncDirErr makes a rename or a creation in dir durable.
func syncDirErr(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}

func isLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

func serve(ctx context.Context, c *serveConfig, set map[string]bool, log *slog.Logger) (retErr error) {
	restrictUmask()
	// A file flag whose file cannot be read or holds what it must not is
	// a value refused, exit 2 as for the --tls-* files: these exited 1.
	keyring, err := loadKeyFile(c.encryptionKeyFile, log)
	if err != nil {
		return usageError{err}
	}
	auth, nodeToken, err := loadAuth(c, log) // token.go
	if err != nil {
		return usageError{err}
	}
	c.authDigest = "none" // what GET /v1/config publishes; membership compares the members'
	if auth != nil {
		c.authDigest = auth.Credentials().Digest()
	}
	if auth == nil && !isLoopback(c.httpAddr) {
		if !c.insecure {
			return usageError{fmt.Errorf("refusing to listen on non-loopback --http-addr %s without --auth-file; pass --insecure to do it anyway", c.httpAddr)}
		}
		log.Warn("serving without authentication on a non-loopback address (--insecure)", "http-addr", c.httpAddr)
	}
	// Everything that can fail without writing is done before anything is
	// written to the data dir: the certificate files are read and both
	// ports opened here, node.json is written once the node holds the dir
	// (BeforeRaft below). A start that fails leaves the data dir as it was.
	tlsConf, err := c.tls.load(c, log) // tls.go; refuses plaintext raft off loopback
	if err != nil {
		return usageError{err} // what the --tls-* files hold, or plaintext raft off loopback
	}
	// A second serve on a data dir in use says so before its ports can:
	// the first node usually holds the same ports too (the defaults, a
	// copied command), and "address already in use" would hide why.
	// raftfsm.Open takes the lock itself; this only finds the holder first.
	if held, pid := engine.Holder(filepath.Join(c.dataDir, "fsm")); held && pid > 0 {
		return inUse(c.dataDir, &engine.InUseError{Dir: c.dataDir, PID: pid})
	}
	// A restore into the data dir holds it exclusively from its first step
	// to its last (snapshotRestore): started meanwhile, the node ran on
	// what part of the backup was in, or on a new empty cluster. The
	// shared lock is taken here when the dir exists, and otherwise as soon
	// as this node has made it, before anything in it is opened (below).
	var dirLock *os.File
	defer func() { dirLock.Close() }()
	lockData := func() error {
		l, err := lockDir(c.dataDir, false)
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return errors.New(dirLockProblem(c.dataDir) + "; this node did not start, and nothing was changed")
		}
		if err != nil {
			return fmt.Errorf("--data-dir: %w", err)
		}
		dirLock = l
		// Checked again under the lock: a restore may have begun since.
		if msg := unfinishedRestoreProblem(c.dataDir); msg != "" {
			return errors.New(msg)
		}
		return nil
	}
	st, statErr := os.Stat(c.dataDir)
	if statErr == nil && st.IsDir() {
		if err := lockData(); err != nil {
			return err
		}
	}
	ln, err := net.Listen("tcp", c.httpAddr)
	if err != nil {
		return listenProblem("--http-addr", c.httpAddr, err)
	}
	defer ln.Close()
	raftLn, err := net.Listen("tcp", c.raftAddr)
	if err != nil {
		return listenProblem("--raft-addr", c.raftAddr, err)
	}
	var healthLn net.Listener
	if c.healthAddr != "" {
		if healthLn, err = net.Listen("tcp", c.healthAddr); err != nil {
			raftLn.Close()
			return fmt.Errorf("--health-addr: %w", err)
		}
		defer healthLn.Close()
	}
	abandoned := false // the node's close was given up on: the process exits with the node as it is
	defer func() {
		if !abandoned {
			raftLn.Close() // the node's transport owns it once open; a second Close is harmless
		}
	}()
	pin, err := fixedSettings(c, set)
	if err != nil {
		return err
	}
	if err := retentionSpan(c, "the bucket width "+c.dataDir+" was created with"); err != nil {
		return err
	}
	// Once the ports are this node's and its data dir takes these flags:
	// said before, these came above the refusal of a data dir or a port
	// in use, or of a data dir served with --auth-file, as if the node
	// had started open to anyone.
	if auth == nil && isLoopback(c.httpAddr) {
		log.Info("no --auth-file: the API is open to anyone who can reach the loopback address")
	}
	if c.tls.plainOnLoopback {
		log.Info("no TLS: the API is plain HTTP and raft plaintext, on loopback")
	}
	if c.join == "" && c.bootstrapExpect == 0 && !holdsNode(c.dataDir) {
		if near, more := nodesBeside(c.dataDir); len(near) > 0 {
			held := near[0] + " holds"
			if len(near) > 1 {
				held = strings.Join(near[:len(near)-1], ", ") + " and " + near[len(near)-1]
				if more > 0 {
					held += fmt.Sprintf(" (the closest names; %d more)", more)
				}
				held += " each hold"
			}
			log.Warn("--data-dir holds no store: this node starts a NEW, EMPTY one-node cluster there, where every key is free again. "+
				"Beside it, "+held+" a node's data: if --data-dir has a typo, stop this node now (before clients retry through it), "+
				"move the new directory it made aside (mv; not rm: a client may already hold a claim it acknowledged) and start it with the right one",
				"data-dir", c.dataDir)
		}
	}
	if c.httpAdvertise == "" {
		c.httpAdvertise = c.httpAddr
	}
	if c.raftAdvertise == "" {
		c.raftAdvertise = c.raftAddr
	}
	cl, fds := limitConns(ln, c.conns, healthLn != nil, log) // listen.go

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	rc := raftfsm.DefaultConfig()
	rc.NodeID, rc.DataDir = c.nodeID, c.dataDir
	rc.Version = releaseVersion()
	rc.RaftAddr, rc.RaftAdvertise, rc.HTTPAdvertise = c.raftAddr, c.raftAdvertise, c.httpAdvertise
	rc.Bootstrap = c.join == "" && c.bootstrapExpect <= 1
	rc.BucketWidth = c.bucketWidth
	rc.SnapshotThreshold, rc.SnapshotInterval, rc.TrailingLogs = c.snapshotThreshold, c.snapshotInterval, c.trailingLogs
	rc.ApplyTimeout = c.commitTimeout
	rc.ClockOffset = c.clockOffset
	rc.Scope = c.scope
	rc.Retention = c.retention
	rc.ChecksTokens = c.authFile != ""
	rc.CacheBytes = c.cacheBytes
	rc.Keyring = keyring
	rc.MinFreeDisk = c.minFreeDisk
	rc.InjectBug = c.injectBug
	rc.TLS = tlsConf
	rc.RaftListener, rc.BeforeRaft = raftLn, pin
	rc.MaxInboundRaftConns = fds.raftConns
	// Without node.json, --node-id is checked against the raft
	// configuration the data dir holds before pin records it: a data dir
	// whose node.json was lost, started under a mistyped id, ran outside
	// its configuration and had node.json say that id, refusing the right
	// one after.
	rc.CheckStoredID = pin != nil
	rc.Logger, rc.Registry = log, reg
	if w := c.bucketWidth / 4; w < rc.SweepInterval {
		rc.SweepInterval = max(w, 100*time.Millisecond)
	}
	opened := false // raftfsm.Open returned a node
	if dirLock == nil {
		// A dir absent at the start is made here and locked before
		// raftfsm makes anything in it: it was locked only before raft
		// ran (BeforeRaft), after fsm/ and raft.db were made, and a
		// restore that took the new dir in those milliseconds failed at
		// its last step (its rename over a dir no longer empty), the
		// refused node's files left in it. A start refused before
		// anything is written ("nothing was changed": a disk too full to
		// open the stores) removes it again while it is empty, as
		// raftfsm does a dir it made: raftfsm finds this one there, and
		// the refused start left it.
		if err := os.MkdirAll(c.dataDir, 0o700); err != nil {
			return fmt.Errorf("--data-dir: %w", err)
		}
		if err := lockData(); err != nil {
			return err
		}
		if errors.Is(statErr, os.ErrNotExist) {
			// Under the lock only (it is let go after this): a restore
			// that holds the dir is never left without it.
			defer func() {
				if !opened {
					os.Remove(c.dataDir) // only while empty
				}
			}()
		}
	}
	node, err := raftfsm.Open(rc)
	opened = err == nil
	if err != nil {
		if e := (*raftfsm.StoredIDError)(nil); errors.As(err, &e) {
			return storedIDError(c, e)
		}
		return inUse(c.dataDir, err)
	}
	defer func() {
		// A close held up by a full disk is given up on after
		// --full-disk-stop-timeout (CloseBounded logs what it leaves):
		// returning ends the process, as kill -9 would, and the raft
		// log holds every entry not applied.
		err := node.CloseBounded(c.fullDiskStopTimeout)
		if errors.Is(err, raftfsm.ErrCloseAbandoned) {
			abandoned = true
			retErr = errors.Join(retErr, err)
			return
		}
		if err != nil {
			log.Error("close node", "error", err)
		}
		log.Info("stopped")
	}()
	if c.clockOffset != 0 {
		log.Warn("test-only --clock-offset is set", "clock-offset", c.clockOffset)
	}
	// The replicated state decides the scope (every replica applies claims
	// in the mode the first write pinned); node.json only seeds it. A
	// node.json that disagrees comes from a node admitted with another
	// --scope (a bootstrap with mixed --scope, an idem cluster join by
	// hand): it takes the cluster's mode, given no --scope or the cluster's
	// own, else no --scope could restart it (the flag refused here or by
	// node.json). c.nodeFileScope is node.json's when --scope differs.
	mode, pinned := node.ScopeMode()
	if c.nodeFileScope != "" && !pinned && !node.HasState() {
		// No cluster was ever formed or joined here, so no record was
		// written: the fix for nodes that would not bootstrap together
		// with mixed --scope is to restart the odd one with the others'.
		if err := setNodeFileScope(filepath.Join(c.dataDir, "node.json"), c.scope); err != nil {
			return err
		}
		log.Info("this data dir holds no cluster yet: its scope mode is now --scope "+c.scope+" (node.json said "+c.nodeFileScope+")", "scope", c.scope)
		c.nodeFileScope = ""
	}
	switch {
	case c.nodeFileScope != "" && (!pinned || mode != c.scope):
		return usageError{fmt.Errorf("--scope %s differs from %s, the scope %s was created with; the scope cannot change (existing records would be missed and their retries run again)", c.scope, c.nodeFileScope, c.dataDir)}
	case c.nodeFileScope == "" && pinned && mode != c.scope && set["scope"]:
		return usageError{fmt.Errorf("this cluster's scope mode is %s (fixed by its first write); this node was started with --scope %s: start it without --scope (it takes the cluster's, %s)", mode, c.scope, mode)}
	}
	if pinned && (c.nodeFileScope != "" || mode != c.scope) {
		was := c.nodeFileScope
		if was == "" {
			was = c.scope
		}
		if err := setNodeFileScope(filepath.Join(c.dataDir, "node.json"), mode); err != nil {
			return err
		}
		log.Warn("this data dir's node.json says --scope "+was+", but the cluster's scope mode, fixed by its first write, is "+mode+": this node uses "+mode+", and node.json now says so", "scope", mode)
		c.scope = mode
	}
	// node.json records whether the data dir is served with --auth-file,
	// once the node holds it: a later start without the file is refused.
	if pin == nil {
		auth := c.nodeFileAuth
		switch {
		case c.authFile != "":
			auth = raftfsm.AuthTokens
		case c.noAuth && auth == raftfsm.AuthTokens:
			auth = raftfsm.AuthNone
			log.Warn("--no-auth: this data dir was served with --auth-file; this node now checks no token and answers any caller that reaches it, every tenant's records included (node.json records it)", "data-dir", c.dataDir)
		}
		if auth != c.nodeFileAuth {
			if err := updateNodeFile(filepath.Join(c.dataDir, "node.json"), func(nf *nodeFile) { nf.Auth = auth }); err != nil {
				return err
			}
		}
	}
	// The bucket width too: the state's decides (records are bucketed by
	// it on every replica), and node.json, the log and this node's own
	// fallbacks say it. They said the flag's when node.json was written at
	// this start (a data dir of an older idem, or one made by hand, has
	// none), or when the node joined a cluster of another width.
	widthFromCluster := false // the flag's width replaced by the cluster's
	if width, fixed := node.BucketWidth(); fixed && width != c.bucketWidth {
		widthFromCluster = true
		if err := setNodeFileWidth(filepath.Join(c.dataDir, "node.json"), width); err != nil {
			return err
		}
		w, flag := width.String(), c.bucketWidth.String()
		var msg string
		switch {
		case set["bucket-width"]:
			msg = "--bucket-width " + flag + " differs from " + w + ", the cluster's bucket width (fixed by its first write): this node uses " + w + ", and node.json now says so; omit --bucket-width, or give " + w
		case pin != nil:
			msg = "this data dir had no node.json, so it was written with --bucket-width's default " + flag + ", but the cluster's bucket width, fixed by its first write, is " + w + ": this node uses " + w + ", and node.json now says so"
		default:
			msg = "this data dir's node.json says --bucket-width " + flag + ", but the cluster's bucket width, fixed by its first write, is " + w + ": this node uses " + w + ", and node.json now says so"
		}
		log.Warn(msg, "bucket-width", w)
		c.bucketWidth = width
	}
	retention := c.retention // what the first claim will pin, or what an earlier one did
	ret, pinned := node.Retention()
	if !pinned && widthFromCluster {
		if err := retentionSpan(c, "the cluster's bucket width (fixed by its first write)"); err != nil {
			return err
		}
	}
	if pinned && ret != c.retention {
		retention = ret
		warnRetentionDrift(log, c.retention, ret)
	} else if !pinned && node.DB().Meta().MaxRetentionMs > 0 {
		log.Warn("this cluster was started by an earlier release and has no retention of its own yet: each claim gets the --retention of the leader deciding it. Once every node runs this release, run idem cluster set-retention --retention "+c.retention.String()+" (with the value every node has)",
			"retention", c.retention.String())
	}
	warnWideBuckets(log, c.bucketWidth, retention, set["bucket-width"] && !widthFromCluster)
	warnRequestMemory(log, c.limits.MaxInFlightBytes, physicalMemory())

	srv := api.New(node, api.Config{
		Retention: c.retention, DefaultLease: c.lease, BucketWidth: c.bucketWidth,
		PrincipalScope: c.scope == "principal", BootstrapExpect: c.bootstrapExpect, Limits: c.limits, MaxBatchOps: c.maxBatchOps, Auth: auth, NodeToken: nodeToken,
		Logger: log, Gatherer: reg, PeerTLS: tlsConf, TLSReloadError: c.tls.reloadError,
		CommitTimeout: c.commitTimeout,
	})
	reg.MustRegister(srv.Collectors()...)
	reg.MustRegister(api.ListenerCollectors(cl, srv)...)
	var handler http.Handler = srv
	if c.pprof {
		mux := http.NewServeMux()
		mux.Handle("/debug/pprof/", srv.Admin(http.HandlerFunc(pprof.Index)))
		mux.Handle("/debug/pprof/profile", srv.Admin(http.HandlerFunc(pprof.Profile)))
		// An execution trace shows where a request waits (scheduler, raft,
		// the FSM), which a CPU profile cannot.
		mux.Handle("/debug/pprof/trace", srv.Admin(http.HandlerFunc(pprof.Trace)))
		// Only /debug/pprof/ goes through the mux: it would answer an
		// unclean API path (/v1//config) with an HTML redirect, where the
		// API answers a problem document.
		handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if strings.HasPrefix(r.URL.Path, "/debug/pprof/") && !api.Unclean(r) {
				mux.ServeHTTP(w, r)
				return
			}
			srv.ServeHTTP(w, r)
		})
	}
	hs := httpServer(handler, cl, c.conns)
	handshakes := api.HandshakeFailures()
	reg.MustRegister(handshakes)
	hs.ErrorLog = httpErrorLog(log, handshakes)
	defer c.tls.trackConns(hs, log)() // tls.go: a CA reload closes what it no longer trusts
	errc := make(chan error, 2)
	go func() { errc <- hs.Serve(c.tls.listener(cl)) }()
	var hsrv *http.Server // --health-addr's
	if healthLn != nil {
		// Its own connections, so a flood of the API's cannot reach it.
		hcl := api.ListenNoHeadroom(healthLn, fds.healthConns, log)
		hsrv = &http.Server{Handler: healthOnly(srv), ReadHeaderTimeout: c.conns.readHeaderTimeout,
			IdleTimeout: c.conns.idleTimeout, ErrorLog: httpErrorLog(log, handshakes), ConnState: hcl.ConnState}
		go func() {
			if err := hsrv.Serve(c.tls.probeListener(hcl)); !errors.Is(err, http.ErrServerClosed) {
				errc <- fmt.Errorf("--health-addr: %w", err)
			}
		}()
		defer hsrv.Close()
		log.Info("probes served on their own listener", "health-addr", healthLn.Addr().String())
	}
	// A node without state (joining, or before the first write) has only
	// its own width: the cluster's replaces it once known
	// (watchBucketWidth says so when they differ). Its own is the flag's,
	// node.json's (fixedSettings), or the default's: the line said "flag"
	// of a node started without --bucket-width.
	widthFrom := "default"
	switch _, fixed := node.BucketWidth(); {
	case fixed:
		widthFrom = "cluster"
	case set["bucket-width"]:
		widthFrom = "flag"
	case pin == nil:
		widthFrom = "node.json"
	}
	log.Info("idem serving",
		"node-id", c.nodeID, "http-addr", ln.Addr().String(), "raft-addr", c.raftAddr,
		"data-dir", c.dataDir, "retention", retention.String(), "bucket-width", c.bucketWidth.String(), "bucket-width-from", widthFrom,
		"scope", c.scope, "commit-timeout", c.commitTimeout.String(), "version", rc.Version)
	if c.minFreeDisk == 0 {
		// Said once at each start: nothing else says the guard is off
		// until the disk is full.
		log.Warn("the disk guard is off (--min-free-disk 0): no ballast file is kept and no write is refused before the disk is full; then the store's writes wait until space is freed (docs/DISK.md)",
			"data-dir", c.dataDir)
	}
	go membership(ctx, node, c, nodeToken, log)
	// Every node learns which members list the gated features, so that a
	// new leader can tell a member down with the old one from an older
	// release (api.Server.WatchFeatures).
	go srv.WatchFeatures(ctx)
	if _, fixed := node.BucketWidth(); !fixed {
		go watchBucketWidth(ctx, node, c.bucketWidth, c.retention, log)
	}
	if !pinned {
		go watchRetentionPin(ctx, node, c.retention, log)
	}
	go reloadOnHUP(ctx, c.hup, func() {
		c.tls.reload(log)
		if auth != nil {
			reloadAuth(c.authFile, auth, nodeToken, log)
		}
	}, c.tls.loaded != nil || auth != nil, log)
	c.tls.watchExpiry(ctx, log, expiryCheckEvery) // tls.go

	select {
	case <-ctx.Done():
		log.Info("shutting down: draining HTTP")
		if hsrv != nil {
			// The probes see the node go at once: a /readyz still 200
			// during the hand-over and the drain kept traffic coming to a
			// node whose API port already refused connections.
			hsrv.Close()
		}
	case err := <-errc:
		return fmt.Errorf("http server: %w", err)
	}
	// A leader hands over first: writes in flight through followers then
	// reach the new leader instead of a closing one, and the cluster does
	// not wait an election timeout for a leader. A one-node cluster has
	// no one to hand over to, and nothing to say about it.
	if node.IsLeader() && node.OtherVoters() > 0 {
		if err := node.TransferLeadership(); err != nil {
			log.Info("no leadership transfer before stopping", "reason", err)
		} else {
			// Serve on until the others follow the new leader: a forward
			// they send here meanwhile is answered "not the leader" and
			// retried there, where closing its connection at once left
			// the follower unsure whether it arrived.
			wctx, cancel := context.WithTimeout(context.Background(), handOverWait)
			followed := node.WaitOthersFollow(wctx)
			cancel()
			log.Info("handed leadership to another voter before stopping", "others-follow-it", followed)
		}
	}
	sctx, cancel := context.WithTimeout(context.Background(), c.shutdownTimeout)
	defer cancel()
	if err := hs.Shutdown(sctx); err != nil {
		log.Warn("http drain incomplete", "error", err)
	}
	return nil
}

// warnRetentionDrift says that --retention (flag) is not what claims get.
func warnRetentionDrift(log *slog.Logger, flag, cluster time.Duration) {
	advice := "--retention " + cluster.String()
	if cluster < ttl.MinRetention {
		// idem serve refuses such a --retention without it.
		advice += " --allow-short-retention"
	}
	log.Warn("--retention differs from the cluster's retention, which every claim gets whichever node leads: the flag only seeds a new cluster's. Start this node with "+advice+", or, to change the cluster's, run idem cluster set-retention",
		"retention", flag.String(), "cluster-retention", cluster.String())
}

// watchRetentionPin follows the cluster's retention on a node that
// started without it (an empty data dir joining, a cluster before its
// first claim) and warns, once per value, when it differs from
// --retention. The check at start cannot see it: a node that joined with
// another --retention said nothing until its next restart, while its
// startup line had named its own flag. It goes on after the first value:
// a node replaying the log meets each value the cluster ever had, the
// current one last.
func watchRetentionPin(ctx context.Context, node *raftfsm.Node, flag time.Duration, log *slog.Logger) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	seen := flag
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if ret, pinned := node.Retention(); pinned && ret != seen {
			seen = ret
			if ret != flag {
				warnRetentionDrift(log, flag, ret)
			}
		}
	}
}

// watchBucketWidth says which bucket width is in force once a node that
// started without one learns the cluster's: a node that joined with an
// empty data dir logged --bucket-width's at its start ("idem serving")
// and nothing after, while its state, metrics and /v1/config had the
// cluster's, until it restarted. It warns once, naming both, when they
// differ.
func watchBucketWidth(ctx context.Context, node *raftfsm.Node, flag, retentionFlag time.Duration, log *slog.Logger) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		width, fixed := node.BucketWidth()
		if !fixed {
			continue
		}
		if width != flag {
			w := width.String()
			log.Warn("this node's --bucket-width "+flag.String()+" differs from "+w+", the cluster's bucket width (fixed by its first write): this node uses "+w+", as every member does; give it --bucket-width "+w+" or omit the flag (its next restart records "+w+" in node.json, and a restart with "+flag.String()+" after that is refused)",
				"bucket-width", w, "flag-bucket-width", flag.String())
			retention := retentionFlag
			if r, pinned := node.Retention(); pinned {
				retention = r
			}
			warnWideBuckets(log, width, retention, false)
		}
		return
	}
}

// handOverWait bounds how long a leader that handed over keeps serving
// for the others to follow the new leader (WaitOthersFollow): an election
// on a healthy cluster takes milliseconds, and a member that never says
// is not worth holding the stop for.
const handOverWait = 2 * time.Second

// inUse says which process holds a data dir another idem serve tried to
// open, instead of the lock's "resource temporarily unavailable".
func inUse(dataDir string, err error) error {
	var e *engine.InUseError
	if !errors.As(err, &e) {
		return err
	}
	who := "its pid is not known"
	if e.PID > 0 {
		who = fmt.Sprintf("pid %d", e.PID)
	}
	return fmt.Errorf("--data-dir %s is in use by another idem process (%s): stop that process first, or give this node a data dir of its own", dataDir, who)
}

// healthMaxConns bounds the connections of --health-addr: probes make a
// few each, and one more is answered 503 and closed at once. It is lowered
// under a small open-files limit (listenerCap).
const healthMaxConns = 256

// healthOnly serves /healthz and /readyz of the API and nothing else (the
// --health-addr listener).
func healthOnly(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if api.Probe(r) {
			h.ServeHTTP(w, r)
			return
		}
		problemDoc(w, http.StatusNotFound, "not_found", "Not found",
			"this listener (--health-addr) serves only /healthz and /readyz; the API is on --http-addr")
	})
}

// requestMemoryFactor is the memory a request body takes, per byte of it,
// while it is read and decoded: 1,000 bodies of 1 MiB sent at once took a
// node to 2.1 GB (VmHWM).
const requestMemoryFactor = 2

// defaultInFlightBytes is --max-inflight-bytes when not given: an eighth
// of the machine's memory (bodies take about twice their bytes while read
// and decoded, so a quarter of it), at least api.DefaultMaxInFlightBytes
// (but no more than the memory, on a machine of less),
// and at least one body of --max-request-bytes (a smaller value given is
// refused, by Limits.Validate). Scaled to the machine rather than fixed:
// every held body also holds a --max-inflight slot, and a bound far below
// --max-inflight bodies of --max-request-bytes (2 GiB at the defaults)
// lets fewer slow senders, each declaring a large body and trickling it,
// hold every body back; on a machine that has the memory for them, the
// bound does not take that from it.
func defaultInFlightBytes(mem uint64, maxRequest int64) int64 {
	v := int64(api.DefaultMaxInFlightBytes)
	if eighth := mem / 8; eighth > uint64(v) && eighth < 1<<62 {
		v = int64(eighth)
	}
	if mem > 0 && mem < uint64(v) {
		// A machine of less memory than the floor: validate refuses a
		// bound past the memory, and the operator gave none.
		v = int64(mem)
	}
	return max(v, maxRequest)
}

// warnRequestMemory says when the request bodies --max-inflight-bytes lets
// the node hold at once would take more memory than the machine has (it
// refuses a bound past the memory itself, as a typo): any client that
// reaches the API (with --auth-file, any holder of a token) can send that
// many bytes of bodies together, and the node is killed for lack of memory.
func warnRequestMemory(log *slog.Logger, held int64, mem uint64) {
	if held <= 0 || mem == 0 {
		return
	}
	need := uint64(held) * requestMemoryFactor
	if need <= mem {
		return
	}
	log.Warn(fmt.Sprintf("--max-inflight-bytes %s of request bodies held at once can take about %s of memory (twice their bytes, while read and decoded), more than this machine's %s: lower it",
		formatShortest(uint64(held)), formatApprox(need), formatApprox(mem)),
		"max-inflight-bytes", held, "memory-bytes", mem)
}

// warnWideBuckets says when the bucket width is wider than the retention:
// a record's space comes back only once its whole bucket has expired, so
// the disk holds up to a bucket's width of expired records beyond the
// retention (an operator walk created a store with --bucket-width 100000h:
// accepted silently, fixed for the data dir's life, nothing dropped for
// eleven years). The width cannot change, so this is said at every start.
//
// flagSet: the width is --bucket-width's, given on the command line.
// Otherwise it is the default's, or the cluster's: a chaos soak's nodes,
// started with --retention 16m and no --bucket-width, each warned
// "--bucket-width 2h0m0s is wider ... (a new data dir takes another, e.g.
// the default)", naming a flag nobody gave and advising the width they
// had; and a node's new data dir takes its cluster's width when it joins.
func warnWideBuckets(log *slog.Logger, width, retention time.Duration, flagSet bool) {
	if width <= retention {
		return
	}
	what := "--bucket-width " + width.String()
	switch {
	case flagSet:
	case width == raftfsm.DefaultConfig().BucketWidth:
		what = "the bucket width " + width.String() + " (--bucket-width's default)"
	default:
		what = "the cluster's bucket width " + width.String()
	}
	log.Warn(what+" is wider than the retention "+retention.String()+
		": expired records keep their disk space until their whole bucket has expired, up to "+width.String()+
		" after their window. The width is fixed for the cluster's life by its first write: only a new cluster takes another, created with --bucket-width "+retention.String()+" or less",
		"bucket-width", width.String(), "retention", retention.String())
}

// reloadOnHUP reloads the TLS files and the auth file on every SIGHUP of
// hup, one registered as runServe began: a SIGHUP that came while the node
// started is acted on now (it reads the files as they are, so an edit made
// during the start, a token revoked, is not missed). With nothing to
// reload, a SIGHUP is logged and ignored: it ended the process.
func reloadOnHUP(ctx context.Context, hup <-chan os.Signal, reload func(), enabled bool, log *slog.Logger) {
	if hup == nil {
		return
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-hup:
		}
		if !enabled {
			log.Info("SIGHUP: nothing to reload (no --auth-file, no TLS)")
			continue
		}
		reload()
	}
}
