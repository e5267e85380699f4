package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/idem-store/idem/client"
	"github.com/idem-store/idem/raftfsm"
)

func init() {
	extraCommands["keys"] = command{Run: runKeys, Summary: "encryption at rest: generate a key, show which key ids stored records still need"}
}

const keysUsage = `Usage: idem keys <status|generate> [flags]

  status     which encryption key ids the stored records still need, from any
             node (GET /metrics: an operator or admin token). A key id with no
             values left may be removed from every node's --encryption-key-file
             (keep it as long as you keep backups taken while it was in use).
             Per key id it says whether the cluster recorded a check value
             (which key the id names) and whether the node's key under the
             id is that key (matches, WRONG KEY, or not checked).
             With --encryption-key-file, also checks that file holds every
             key id still needed, and the recorded keys, and exits 1 if it
             does not: run it on a new key file before rolling it out. Key
             ids found only in that file are listed too (only in file).
  generate   print a new key file with one random 256-bit key (--id), or
             write it to --out (created 0600, never overwritten)

Key rotation, with nodes restarted one at a time at each step:
  1. add the new key to every node's key file AFTER the current first key
     (every node can then read what the new key will write);
  2. move the new key first on every node (new values are encrypted with it);
  3. wait until idem keys status shows no values for the old key (at most the
     retention plus one bucket width), then remove it from the files.

Flags:
`

// keysFlags are the flags each keys subcommand reads (they share one flag
// set).
var keysFlags = subcommandFlags{
	{"status", []string{"addr", "auth-token", "token-file", "ca-file", "cert-file", "key-file", "encryption-key-file", "json", "timeout"}},
	{"generate", []string{"id", "out"}},
}

func runKeys(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("idem keys", flag.ContinueOnError)
	fs.SetOutput(stderr)
	addr := fs.String("addr", envOr("IDEM_ADDR", client.DefaultAddr), "HTTP address of any node (status; env IDEM_ADDR)")
	token := authTokenFlag(fs, "bearer token with access to /metrics (status; env IDEM_AUTH_TOKEN)")
	keyFile := fs.String("encryption-key-file", "", "a key file to check against the key ids still needed (status)")
	asJSON := fs.Bool("json", false, "print the key use as JSON (status)")
	timeout := fs.Duration("timeout", 10*time.Second, "give up after this long (status)")
	tlsFlags := addClientTLSFlags(fs, "addr")
	id := fs.String("id", "", "id of the new key: 1-64 letters, digits, '.', '_' or '-' (generate)")
	out := fs.String("out", "", "write the key file here, mode 0600, instead of to stdout (generate)")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), keysUsage)
		printFlags(fs.Output(), fs)
	}
	sub, code, done := parseSubcommand(fs, "idem keys", args, stdout, stderr)
	if done {
		return code
	}
	if err := authTokenProblem(fs, stderr, "idem keys "+sub); err != nil {
		fmt.Fprintf(stderr, "idem keys %s: %v\n", sub, err)
		return 2
	}
	if _, msg := keysFlags.problem(fs, sub); msg != "" {
		// keys generate --encryption-key-file keys.json, read as "add a key
		// to that file" (rotation's first step), printed a new key file
		// with the secret key to the terminal and left keys.json as it was.
		fmt.Fprintf(stderr, "idem keys %s: %s (see idem keys --help)\n", sub, msg)
		return 2
	}
	switch sub {
	case "status":
		if *timeout <= 0 {
			// As idem cluster: 0 gave up at once, "context deadline exceeded".
			fmt.Fprintf(stderr, "idem keys status: --timeout %s must be positive (e.g. --timeout 10s)\n", *timeout)
			return 2
		}
		a, err := addrFlag(fs, *addr)
		if err != nil {
			fmt.Fprintf(stderr, "idem keys status: %v\n", err)
			return 2
		}
		*addr = a
		return keysStatus(ctx, *addr, token(), *keyFile, *asJSON, *timeout, tlsFlags, stdout, stderr)
	case "generate":
		return keysGenerate(*id, *out, stdout, stderr)
	}
	fmt.Fprintf(stderr, "idem keys: unknown subcommand %q\n", sub)
	fs.SetOutput(stderr)
	fs.Usage()
	return 2
}

// syncKeyFile syncs a new key file; a test fails it, as a disk would.
var syncKeyFile = (*os.File).Sync

func keysGenerate(id, out string, stdout, stderr io.Writer) int {
	if id == "" {
		fmt.Fprintln(stderr, "idem keys generate: --id is required (it is stored with every value the key encrypts)")
		return 2
	}
	key := make([]byte, 32)
	rand.Read(key)
	b, _ := json.MarshalIndent(raftfsm.KeyFile{Keys: []raftfsm.KeyFileEntry{{ID: id, Key: base64.StdEncoding.EncodeToString(key)}}}, "", "  ")
	b = append(b, '\n')
	if _, err := raftfsm.ParseKeyring(b); err != nil {
		fmt.Fprintf(stderr, "idem keys generate: --id: %v\n", strings.TrimPrefix(err.Error(), raftfsm.ErrKeyFile.Error()+": "))
		return 2
	}
	if out == "" {
		stdout.Write(b)
		return 0
	}
	if st, err := os.Stat(out); err == nil && st.IsDir() {
		// It said "file exists" for a directory (a CLI walk).
		fmt.Fprintf(stderr, "idem keys generate: --out %s is a directory: name the key file to write (e.g. %s)\n", out, filepath.Join(out, "keys.json"))
		return 2
	}
	f, err := os.OpenFile(out, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		fmt.Fprintf(stderr, "idem keys generate: --out: %v (an existing key file is never overwritten)\n", err)
		return 1
	}
	// Synced, file and directory, before it is reported written: the
	// node started with it fsyncs every value it encrypts into the raft
	// log, while the key file could still sit in the page cache, and a
	// machine crash then left an empty keys.json beside records no key
	// reads. Written in part (a full disk, an I/O error), it is removed:
	// it was ours (O_EXCL), and left there it made every retry refuse
	// ("never overwritten") and idem serve refuse it as no key file.
	_, err = f.Write(b)
	if err == nil {
		err = syncKeyFile(f)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = syncDirErr(filepath.Dir(out))
	}
	if err != nil {
		os.Remove(out)
		fmt.Fprintf(stderr, "idem keys generate: --out %s: %v (no key was written: free space or fix the disk, then run it again)\n", out, err)
		return 1
	}
	fmt.Fprintf(stderr, "wrote key %q to %s (mode 0600); keep a copy where you keep secrets: without it the records it encrypts cannot be read\n", id, out)
	return 0
}

// keyStatus is one key id as `idem keys status` shows it.
type keyStatus struct {
	ID      string `json:"id"`
	Values  uint64 `json:"values"`
	Buckets uint64 `json:"buckets"`
	// NeededUntil is when every value under the key has expired (cluster
	// time), absent when no value needs it.
	NeededUntil string `json:"needed_until,omitempty"`
	// Node is how the node asked uses it: encrypt, decrypt, or missing
	// (values need it and the node does not hold it).
	Node string `json:"node"`
	// InFile is whether --encryption-key-file holds it (when given).
	InFile *bool `json:"in_file,omitempty"`
	// Check is the check value the cluster recorded for the id (hex),
	// absent until a leader of a release that records them sealed under it.
	Check string `json:"check,omitempty"`
	// NodeMismatch: the node asked holds another key under this id.
	NodeMismatch bool `json:"node_mismatch,omitempty"`
	// FileMismatch: --encryption-key-file holds another key under this id.
	FileMismatch bool `json:"file_mismatch,omitempty"`
	// FileOnly: the id was found only in --encryption-key-file: the node
	// asked does not hold it, and the cluster has no value or check value
	// under it (a key being rotated in, before step 1 reached this node).
	FileOnly bool `json:"file_only,omitempty"`
	// FileFirst: --encryption-key-file makes this id its first key, the
	// one a node started with it would encrypt with.
	FileFirst bool `json:"file_first,omitempty"`
	// Members are the members holding the id, by the check value of the
	// key they hold under it, as the leader's health checks saw them
	// (GET /v1/cluster); MembersLack those measured without it. Before a
	// check value is recorded, it is what shows a key generated on each
	// node instead of copied.
	Members     map[string][]string `json:"members,omitempty"`
	MembersLack []string            `json:"members_lack,omitempty"`
	// FileDiffers: --encryption-key-file holds another key under the id
	// than a member does (none recorded).
	FileDiffers bool `json:"file_differs,omitempty"`
}

// memberKeys fills keys' Members and MembersLack from the cluster status
// (the leader's measurements), adding the ids only members hold. An error
// (a node of an earlier release, a token without the role) leaves them out.
func memberKeys(ctx context.Context, cl *client.Client, keys []keyStatus) []keyStatus {
	raw, err := cl.Do(ctx, http.MethodGet, "/v1/cluster", nil, nil)
	if err != nil {
		return keys
	}
	var st raftfsm.Status
	if json.Unmarshal(raw, &st) != nil {
		return keys
	}
	idx := map[string]int{}
	for i, k := range keys {
		idx[k.ID] = i
	}
	for _, m := range st.Nodes {
		if m.Keys == nil {
			continue // not measured
		}
		has := map[string]bool{}
		for _, nk := range m.Keys {
			has[nk.ID] = true
			i, ok := idx[nk.ID]
			if !ok {
				keys = append(keys, keyStatus{ID: nk.ID, Node: "not held"})
				i = len(keys) - 1
				idx[nk.ID] = i
			}
			if keys[i].Members == nil {
				keys[i].Members = map[string][]string{}
			}
			keys[i].Members[nk.Check] = append(keys[i].Members[nk.Check], m.ID)
		}
		for id, i := range idx {
			if !has[id] {
				keys[i].MembersLack = append(keys[i].MembersLack, m.ID)
			}
		}
	}
	for i := range keys {
		slices.Sort(keys[i].MembersLack)
	}
	return keys
}

// nodeHoldsKeys reports whether the node asked holds any key. Rotating to
// a key file's first key, a node with keys must hold it first (step 1);
// one without any is turning encryption on, which has no step 1.
func nodeHoldsKeys(keys []keyStatus) bool {
	return slices.ContainsFunc(keys, func(k keyStatus) bool { return k.Node == "encrypt" || k.Node == "decrypt" })
}

// membersDiffer says, for a key whose members hold different keys under its
// id, which hold which ("n1 / n2, n3"); "" when they agree.
func (k keyStatus) membersDiffer() string {
	if len(k.Members) < 2 {
		return ""
	}
	groups := make([]string, 0, len(k.Members))
	for _, ids := range k.Members {
		groups = append(groups, strings.Join(ids, ", "))
	}
	slices.Sort(groups)
	return strings.Join(groups, " / ")
}

func keysStatus(ctx context.Context, addr, token, keyFile string, asJSON bool, timeout time.Duration, tlsFlags *clientTLSFlags, stdout, stderr io.Writer) int {
	var file *raftfsm.Keyring
	if keyFile != "" {
		var err error
		if file, err = raftfsm.LoadKeyring(keyFile); err != nil {
			fmt.Fprintf(stderr, "idem keys status: --encryption-key-file: %v\n", keyFileProblem(err))
			return 2
		}
		// The check SECURITY.md says to run on each key file before
		// rolling it out: the jq recipe's > makes a 0644 file without
		// its umask 077, which this check passed without a word, and
		// only idem serve warned once the file was on every node.
		warnOpenFileTo(stderr, "idem keys status", "--encryption-key-file", keyFile, keyFileWhy)
	}
	var opts []client.Option
	if token != "" {
		opts = append(opts, client.WithToken(token))
	}
	tlsOpts, err := tlsFlags.options()
	if err != nil {
		fmt.Fprintf(stderr, "idem keys status: %v\n", err)
		return 2
	}
	cl, err := client.New(addr, append(opts, tlsOpts...)...)
	if err != nil {
		fmt.Fprintf(stderr, "idem keys status: --addr: %v\n", err)
		return 2
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	raw, err := cl.Do(ctx, http.MethodGet, "/metrics", nil, nil)
	if err != nil {
		var p *client.Problem
		if errors.As(err, &p) {
			printProblem(stderr, "idem keys status", p.Detail, p.Code, p.Status, token)
		} else {
			fmt.Fprintf(stderr, "idem keys status: %v\n", notHTTP(err))
		}
		return 1
	}
	keys := memberKeys(ctx, cl, parseKeyMetrics(string(raw)))
	if file != nil {
		// The file's ids the node told nothing of were left out: a file
		// checked before rotation step 1 showed no row for its new key.
		known := map[string]bool{}
		for _, k := range keys {
			known[k.ID] = true
		}
		for _, id := range file.IDs() {
			if !known[id] {
				keys = append(keys, keyStatus{ID: id, Node: "not held", FileOnly: true})
			}
		}
		sort.Slice(keys, func(i, j int) bool { return keys[i].ID < keys[j].ID })
	}
	missingInFile, wrongInFile, earlyFirst := false, []string{}, []string{}
	nodeHolds := nodeHoldsKeys(keys)
	for i := range keys {
		if file != nil {
			in := file.Has(keys[i].ID)
			keys[i].InFile = &in
			if !in && keys[i].Values > 0 {
				missingInFile = true
			}
			if in && keys[i].Check != "" && hex.EncodeToString(file.Check(keys[i].ID)) != keys[i].Check {
				keys[i].FileMismatch = true
				wrongInFile = append(wrongInFile, keys[i].ID)
			}
			keys[i].FileFirst = file.Primary() == keys[i].ID
			if keys[i].FileOnly && keys[i].FileFirst && nodeHolds {
				earlyFirst = append(earlyFirst, keys[i].ID)
			}
			if in && keys[i].Check == "" {
				own := hex.EncodeToString(file.Check(keys[i].ID))
				for c := range keys[i].Members {
					keys[i].FileDiffers = keys[i].FileDiffers || c != own
				}
				if keys[i].FileDiffers {
					wrongInFile = append(wrongInFile, keys[i].ID)
				}
			}
		}
	}
	if asJSON {
		b, _ := json.MarshalIndent(struct {
			Keys []keyStatus `json:"keys"`
		}{keys}, "", "  ")
		fmt.Fprintf(stdout, "%s\n", b)
	} else {
		printKeyStatus(stdout, keys, file != nil)
	}
	code := 0
	if missingInFile {
		fmt.Fprintf(stderr, "idem keys status: %s lacks a key id that stored values need: a node started with it would refuse to start\n", keyFile)
		code = 1
	}
	if len(wrongInFile) > 0 {
		fmt.Fprintf(stderr, "idem keys status: %s holds key %s, but not the key the cluster recorded, or a member holds, under that id (the check values differ): rolled out, it would be refused or make the nodes disagree. "+
			"Build the file from the key file the nodes use (never regenerate a key that is in use)\n", keyFile, strings.Join(wrongInFile, ", "))
		code = 1
	}
	if len(earlyFirst) > 0 {
		fmt.Fprintf(stderr, "idem keys status: %s makes %s the first key while this node does not hold it: a node started with it would encrypt with a key the others cannot read (it refuses, 503). Roll out rotation step 1 first\n", keyFile, strings.Join(earlyFirst, ", "))
		code = 1
	}
	var differ []string
	for _, k := range keys {
		if d := k.membersDiffer(); d != "" {
			differ = append(differ, fmt.Sprintf("%s (%s)", k.ID, d))
		}
	}
	if len(differ) > 0 {
		fmt.Fprintf(stderr, "idem keys status: the members hold different keys under %s: each node generated its own instead of one file copied to all. Do not make it the first key (no node may encrypt with it); make the key once and copy the same file to every node\n", strings.Join(differ, ", "))
		code = 1
	}
	return code
}

// parseKeyMetrics reads the idem_encryption_* series of a Prometheus text
// exposition (key ids are plain names, so no label escaping arises).
func parseKeyMetrics(text string) []keyStatus {
	by := map[string]*keyStatus{}
	get := func(id string) *keyStatus {
		if by[id] == nil {
			by[id] = &keyStatus{ID: id, Node: "missing"}
		}
		return by[id]
	}
	sc := bufio.NewScanner(strings.NewReader(text))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "idem_encryption_") {
			continue
		}
		name, rest, ok := strings.Cut(line, "{")
		if !ok {
			continue
		}
		labelText, value, ok := strings.Cut(rest, "} ")
		if !ok {
			continue
		}
		labels := map[string]string{}
		for _, kv := range strings.Split(labelText, ",") {
			k, v, _ := strings.Cut(kv, "=")
			labels[k] = strings.Trim(v, `"`)
		}
		v, err := strconv.ParseFloat(strings.TrimSpace(value), 64)
		if err != nil || labels["key_id"] == "" {
			continue
		}
		k := get(labels["key_id"])
		switch name {
		case "idem_encryption_key_values":
			k.Values = uint64(v)
		case "idem_encryption_key_buckets":
			k.Buckets = uint64(v)
		case "idem_encryption_key_needed_until_seconds":
			k.NeededUntil = time.UnixMilli(int64(v * 1000)).UTC().Format(time.RFC3339)
		case "idem_encryption_keyring":
			k.Node = labels["use"]
		case "idem_encryption_key_check":
			k.Check = labels["check"]
		case "idem_encryption_key_mismatch":
			k.NodeMismatch = v == 1
		}
	}
	out := make([]keyStatus, 0, len(by))
	for _, k := range by {
		if k.Values == 0 {
			k.NeededUntil = ""
			if k.Node == "missing" {
				k.Node = "not held" // a recorded check value, and nothing needs it
			}
		}
		out = append(out, *k)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// printKeyStatus prints the key use as a table. Per key id it says
// whether the cluster recorded which key the id names (its check value),
// and whether the node's key, and the --encryption-key-file's, are that
// key: an operator must not have to read hex from --json for that.
func printKeyStatus(w io.Writer, keys []keyStatus, withFile bool) {
	if len(keys) == 0 {
		fmt.Fprintln(w, "no stored value is encrypted, and this node runs without --encryption-key-file")
		return
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	head := "KEY ID\tTHIS NODE\tCHECK VALUE\tTHIS NODE'S KEY\tVALUES\tBUCKETS\tNEEDED UNTIL (cluster time)"
	if withFile {
		head += "\tKEY IN FILE"
	}
	fmt.Fprintln(tw, head)
	var notes []string
	unchecked := false
	for _, k := range keys {
		until := k.NeededUntil
		if until == "" {
			until = "-"
		}
		check := "recorded"
		if k.Check == "" {
			check = "not recorded"
		}
		held := k.Node == "encrypt" || k.Node == "decrypt"
		line := fmt.Sprintf("%s\t%s\t%s\t%s\t%d\t%d\t%s", k.ID, k.Node, check, keyVerdict(held, k.Check != "", k.NodeMismatch, "-"), k.Values, k.Buckets, until)
		if withFile {
			if k.FileOnly {
				line += "\tonly in file"
			} else {
				line += "\t" + keyVerdict(*k.InFile, k.Check != "", k.FileMismatch || k.FileDiffers, "not in file")
				unchecked = unchecked || (*k.InFile && k.Check == "")
			}
		}
		unchecked = unchecked || (held && k.Check == "")
		fmt.Fprintln(tw, line)
		if k.NodeMismatch {
			notes = append(notes, fmt.Sprintf("%s: this node holds another key under this id than the one the cluster recorded: it cannot read values sealed under it and refuses to seal with it; copy the key file the other nodes use to it and restart it (never regenerate a key in use)", k.ID))
		}
		if k.FileDiffers {
			notes = append(notes, fmt.Sprintf("%s: the key file holds another key under this id than a member does (none is recorded yet): do not roll it out; copy the file the nodes use", k.ID))
		}
		if k.FileMismatch {
			notes = append(notes, fmt.Sprintf("%s: the key file holds another key under this id than the one the cluster recorded: do not roll it out", k.ID))
		}
		switch {
		case k.FileOnly && k.FileFirst && nodeHoldsKeys(keys):
			notes = append(notes, fmt.Sprintf("%s: the key file makes it the first key (rotation step 2) while this node does not hold it: roll out step 1 (the key after the current first one) on every node before this file", k.ID))
		case k.FileOnly:
			notes = append(notes, fmt.Sprintf("%s: found only in the key file: this node does not hold it, and no stored value or check value names it; if it is the key being rotated in, add it to every node's key file after the current first key (rotation step 1) before moving it first", k.ID))
		case k.Node == "missing" && k.Values > 0:
			notes = append(notes, fmt.Sprintf("%s: stored values need it and this node does not hold it: its reads of them fail, and it will not start again without it", k.ID))
		case k.membersDiffer() != "":
			notes = append(notes, fmt.Sprintf("%s: the members hold different keys under this id (%s): do not move it first; make the key once and copy the same key file to every node", k.ID, k.membersDiffer()))
		case k.Values == 0 && k.Node == "decrypt" && len(k.MembersLack) > 0:
			notes = append(notes, fmt.Sprintf("%s: no value is encrypted with it yet, and %s do not hold it: add it to their key files and restart them (rotation step 1) before moving it first", k.ID, strings.Join(k.MembersLack, ", ")))
		case k.Values == 0 && k.Node == "decrypt":
			// Nothing tells a key being rotated in (step 1) from one whose
			// values have all expired: the leader records a check value for
			// both as soon as every node holds them. Say both.
			notes = append(notes, fmt.Sprintf("%s: no value is encrypted with it yet, or none any more: if it is the key being rotated in, keep it and move it first next (rotation step 2); if it encrypted values before, it may now be removed from every node's key file (keep it while you keep backups taken when it was in use)", k.ID))
		case k.Values > 0 && k.Node == "decrypt":
			notes = append(notes, fmt.Sprintf("%s: still needed until %s; keep it in every node's key file", k.ID, k.NeededUntil))
		}
	}
	tw.Flush()
	for _, n := range notes {
		fmt.Fprintln(w, n)
	}
	fmt.Fprintln(w, "CHECK VALUE recorded: the cluster knows which key the id names (a fingerprint, not the key). A key shown as matches is that key; WRONG KEY is another key under the same id, which cannot read what the cluster stored under it.")
	if unchecked {
		fmt.Fprintln(w, "not checked: the cluster has no check value for that id yet, so nothing could be compared: make sure every node has the same key file (the leader records one once every node runs a release that records them and most voters hold the same key).")
	}
	fmt.Fprintln(w, "VALUES counts encrypted responses and correlation ids written into buckets not dropped yet (an upper bound on the records that need the key).")
}

// keyVerdict says whether a held key is the one the cluster recorded
// under its id (absent when it is not held).
func keyVerdict(held, recorded, mismatch bool, absent string) string {
	switch {
	case !held:
		return absent
	case mismatch:
		return "WRONG KEY"
	case !recorded:
		return "not checked"
	}
	return "matches"
}

// loadKeyFile reads --encryption-key-file ("" means no encryption) and
// warns when the file is readable by others.
func loadKeyFile(path string, log *slog.Logger) (*raftfsm.Keyring, error) {
	if path == "" {
		return nil, nil
	}
	kr, err := raftfsm.LoadKeyring(path)
	if err != nil {
		return nil, fmt.Errorf("--encryption-key-file: %w", keyFileProblem(err))
	}
	warnOpenFile(log, "--encryption-key-file", path, keyFileWhy)
	return kr, nil
}

// keyFileProblem is a key file refused by raftfsm.LoadKeyring, said
// without the package's name: "--encryption-key-file: raftfsm: bad
// encryption key file: open keys.json: ..." read as an internal error,
// where --auth-file's says only what is wrong with the file. It still
// unwraps to raftfsm.ErrKeyFile.
func keyFileProblem(err error) error {
	return trimmedError{err, strings.TrimPrefix(err.Error(), "raftfsm: ")}
}

// trimmedError is err, told as msg.
type trimmedError struct {
	err error
	msg string
}

func (e trimmedError) Error() string { return e.msg }
func (e trimmedError) Unwrap() error { return e.err }

// keyFileWhy is why an --encryption-key-file is kept from other users.
const keyFileWhy = "it holds the keys that encrypt every record"

// warnOpenFile warns when a secret file (--encryption-key-file,
// --node-token-file, --auth-file, --tls-key-file) gives group or other
// users any access:
// readable, a node token is an admin token and a key file every record;
// writable, an auth file takes whatever admin entry is added at the next
// SIGHUP.
func warnOpenFile(log *slog.Logger, flag, path, why string) {
	if msg, mode := openFile(flag, path, why); msg != "" {
		log.Warn(msg, "path", path, "mode", mode)
	}
}

// warnOpenFileTo is warnOpenFile for a command's one-line messages on w
// (stderr): "idem get: warning: --token-file ... (path, mode)".
func warnOpenFileTo(w io.Writer, name, flag, path, why string) {
	if msg, mode := openFile(flag, path, why); msg != "" {
		fmt.Fprintf(w, "%s: warning: %s (%s, mode %s)\n", name, msg, path, mode)
	}
}

// openFile is warnOpenFile's message about the file at path, which flag
// gave, and the file's mode; "" when only its owner may use it.
func openFile(flag, path, why string) (msg, mode string) {
	st, err := os.Stat(path)
	if err != nil || st.Mode().Perm()&0o077 == 0 {
		return "", ""
	}
	access := "readable"
	switch perm := st.Mode().Perm(); {
	case perm&0o022 != 0 && perm&0o044 != 0:
		access = "readable and writable"
	case perm&0o022 != 0:
		access = "writable"
	case perm&0o044 == 0:
		access = "open (execute bits)"
	}
	return flag + " is " + access + " by other users (" + why + "): make it mode 0600 (chmod 600), owned by the user idem runs as", st.Mode().Perm().String()
}
