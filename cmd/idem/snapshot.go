package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/idem-store/idem/client"
	"github.com/idem-store/idem/partition"
	"github.com/idem-store/idem/raftfsm"
)

func init() {
	extraCommands["snapshot"] = command{Run: runSnapshot, Summary: "backups: save, inspect, restore (see idem snapshot --help)"}
}

const snapshotUsage = `Usage:
  idem snapshot save FILE [--addr ADDR] [--auth-token TOKEN] [--force]
      Stream a consistent snapshot of the whole state from a running
      cluster (any node; followers forward to the leader) into FILE. It is
      written to FILE.tmp-*, synced, verified, then renamed; an existing FILE
      is kept unless --force; a FILE that is a link to a file is written
      through (the file it names is replaced, the link stays).
  idem snapshot inspect FILE [--json]
      Verify FILE's checksums and print what it holds.
  idem snapshot restore FILE --data-dir DIR --node-id ID --raft-addr ADDR [--force]
      Build, offline, a new data dir DIR (absent or empty) holding the
      snapshot's state as a one-node cluster. Start it with
      'idem serve --data-dir DIR --node-id ID --raft-addr ADDR'; other
      nodes may then join it. On any error DIR is left as it was. When
      ADDR is the raft address of a member of the backup's cluster and
      another of its members answers, it is refused unless --force.

Flags:
`

func runSnapshot(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("idem snapshot", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	addr := fs.String("addr", envOr("IDEM_ADDR", client.DefaultAddr), "save: HTTP address of any node (env IDEM_ADDR)")
	token := authTokenFlag(fs, "save: bearer token for a server started with --auth-file (env IDEM_AUTH_TOKEN)")
	force := fs.Bool("force", false, "save: replace FILE if it exists; restore: skip the check that no other member of the backup's cluster answers when --raft-addr is one of its members' (only if that cluster is gone for good)")
	tlsFlags := addClientTLSFlags(fs, "addr")
	asJSON := fs.Bool("json", false, "inspect: print the header and counts as JSON")
	dataDir := fs.String("data-dir", "", "restore: the data dir to create (absent or empty)")
	nodeID := fs.String("node-id", "", "restore: id of the node that will serve DIR")
	// No default: the address is written into the restored configuration,
	// and a node served on another one runs with a configuration that
	// names an address it does not listen on (nodes joining it dial that).
	raftAddr := fs.String("raft-addr", "", "restore: raft address the node will advertise (its --raft-addr, or --raft-advertise), e.g. 127.0.0.1:7071 (required)")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), snapshotUsage)
		printFlags(fs.Output(), fs)
	}
	if len(args) == 0 || args[0] == "--help" || args[0] == "-h" || args[0] == "help" {
		fs.SetOutput(stdout)
		fs.Usage()
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	sub := args[0]
	name := "idem snapshot " + sub
	files, err := parseInterspersed(fs, args[1:], snapshotFlags, sub)
	if errors.Is(err, flag.ErrHelp) {
		fs.SetOutput(stdout)
		fs.Usage()
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v (see idem snapshot --help)\n", name, err)
		return 2
	}
	if err := authTokenProblem(fs, stderr, name); err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", name, err)
		return 2
	}
	if sub != "save" && sub != "inspect" && sub != "restore" {
		fmt.Fprintf(stderr, "idem snapshot: unknown subcommand %q (save, inspect or restore; see idem snapshot --help)\n", sub)
		return 2
	}
	if msg := snapshotFlagElsewhere(fs, sub); msg != "" {
		fmt.Fprintf(stderr, "%s: %s (see idem snapshot --help)\n", name, msg)
		return 2
	}
	if len(files) == 1 && strings.TrimSpace(files[0]) == "" {
		// An empty $VAR: "want exactly one FILE argument, got 1".
		fmt.Fprintf(stderr, "%s: FILE is empty (an unset shell variable?): give the backup file's path (see idem snapshot --help)\n", name)
		return 2
	}
	if len(files) != 1 {
		fmt.Fprintf(stderr, "%s: want exactly one FILE argument, got %d (see idem snapshot --help)\n", name, len(files))
		return 2
	}
	file := files[0]
	switch sub {
	case "save":
		a, err := addrFlag(fs, *addr)
		if err != nil {
			fmt.Fprintf(stderr, "%s: %v\n", name, err)
			return 2
		}
		*addr = a
		return snapshotSave(ctx, file, *addr, token(), *force, tlsFlags, stdout, stderr)
	case "inspect":
		return snapshotInspect(ctx, file, *asJSON, stdout, stderr)
	default:
		return snapshotRestore(ctx, file, *dataDir, *nodeID, *raftAddr, *force, stdout, stderr)
	}
}

// snapshotFlags are the flags each snapshot subcommand reads; the three
// share one flag set.
var snapshotFlags = subcommandFlags{
	{"save", []string{"addr", "auth-token", "token-file", "ca-file", "cert-file", "key-file", "force"}},
	{"inspect", []string{"json"}},
	{"restore", []string{"data-dir", "node-id", "raft-addr", "force"}},
}

// snapshotFlagElsewhere names a flag given on the command line that sub
// does not read, "" when there is none. Such a flag was ignored: save
// --data-dir DIR, read as "back up that (stopped) node's data dir", saved
// whatever node answered at --addr instead, 127.0.0.1:7070 by default.
func snapshotFlagElsewhere(fs *flag.FlagSet, sub string) string {
	name, msg := snapshotFlags.problem(fs, sub)
	if sub == "save" && (name == "data-dir" || name == "node-id" || name == "raft-addr") {
		msg += "; save never reads a data dir: it asks a running node of the cluster for its state, at --addr (default " + client.DefaultAddr + ")"
	}
	return msg
}

// parseInterspersed parses flags before, between and after positional
// arguments (the flag package stops at the first positional one).
// A flag not defined is named as the misspelling of one sub reads
// (parseFlagsOf).
func parseInterspersed(fs *flag.FlagSet, args []string, table subcommandFlags, sub string) ([]string, error) {
	var pos []string
	for {
		if err := parseFlagsOf(fs, args, table, sub); err != nil {
			return nil, err
		}
		args = fs.Args()
		if len(args) == 0 {
			return pos, nil
		}
		pos = append(pos, args[0])
		args = args[1:]
	}
}

// saveStallTimeout is how long a save waits for the next byte of the
// snapshot before it gives up (a variable for tests).
var saveStallTimeout = 5 * time.Minute

func snapshotSave(ctx context.Context, file, addr, token string, force bool, tlsFlags *clientTLSFlags, stdout, stderr io.Writer) int {
	const name = "idem snapshot save"
	shown := file                // FILE as given, and where the backup went if elsewhere
	st, statErr := os.Stat(file) // through a link
	if statErr == nil && st.IsDir() {
		// --force streamed the whole snapshot, then failed to rename it over
		// the directory and left FILE.tmp-* beside it.
		fmt.Fprintf(stderr, "%s: %s is a directory: give a file's path in it (e.g. %s)\n", name, file, filepath.Join(file, "idem.snap"))
		return 2
	}
	if lst, err := os.Lstat(file); err == nil {
		// A device, a pipe, or a link to one: the backup is written
		// beside FILE and renamed over it, so --force replaced FILE
		// itself (as root, `save --force /dev/stdout` made the system's
		// /dev/stdout a regular file holding every record).
		special := !lst.Mode().IsRegular()
		if lst.Mode()&os.ModeSymlink != 0 {
			special = statErr == nil && !st.Mode().IsRegular() // a dangling link is replaced, as before
		}
		if special {
			fmt.Fprintf(stderr, "%s: %s is not a regular file (a device, a pipe, or a link to one): save writes a new file and renames it into place, which would replace %s itself; give the path of a file (to send a backup elsewhere, save it to a file first, or stream GET /v1/admin/snapshot, docs/API.md)\n", name, file, file)
			return 2
		}
		if !force {
			fmt.Fprintf(stderr, "%s: %s exists; pass --force to replace it\n", name, file)
			return 1
		}
		if lst.Mode()&os.ModeSymlink != 0 && statErr == nil {
			// A link to a regular file (latest.snap -> the newest backup on
			// another disk): --force renamed the new backup over the link,
			// which became a plain file beside it while the file it named
			// kept the old backup. The backup is written through the link,
			// as a shell's > would, into the file it names, replaced as
			// any FILE is (built beside it, on its disk, then renamed); the
			// link stays.
			real, err := filepath.EvalSymlinks(file)
			if err != nil {
				fmt.Fprintf(stderr, "%s: %s is a link that cannot be followed: %v\n", name, file, err)
				return 1
			}
			shown = fmt.Sprintf("%s (through the link, into %s)", file, real)
			file = real
		}
	}
	// Before a byte is streamed: FILE.tmp-*'s "no such file or directory"
	// would name neither the directory nor the way out.
	if dir := filepath.Dir(file); dir != "" {
		// The way out depends on why: mkdir -p on a path that is a
		// file (a save into old.snap/new.snap) fails with "File exists".
		st, err := os.Stat(dir)
		switch {
		case err == nil && !st.IsDir():
			fmt.Fprintf(stderr, "%s: the directory of %s, %s, is a file, not a directory: give FILE a path in a directory (nothing was saved)\n", name, file, dir)
			return 1
		case errors.Is(err, syscall.ENOTDIR):
			fmt.Fprintf(stderr, "%s: the directory of %s, %s, cannot be made: a part of that path is a file, not a directory (nothing was saved)\n", name, file, dir)
			return 1
		case errors.Is(err, os.ErrNotExist):
			fmt.Fprintf(stderr, "%s: the directory of %s, %s, does not exist: create it first (mkdir -p %s)\n", name, file, dir, dir)
			return 1
		case err != nil:
			fmt.Fprintf(stderr, "%s: the directory of %s: %v (nothing was saved)\n", name, file, err)
			return 1
		}
	}
	base := strings.TrimRight(strings.TrimSpace(addr), "/")
	if base == "" {
		fmt.Fprintf(stderr, "%s: --addr is empty\n", name)
		return 2
	}
	tlsCfg, err := tlsFlags.config()
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", name, err)
		return 2
	}
	if !strings.Contains(base, "://") {
		base = "http://" + base
		if tlsCfg != nil {
			base = "https://" + strings.TrimPrefix(base, "http://")
		}
	}
	reqCtx, cancelReq := context.WithCancel(ctx)
	defer cancelReq()
	req, err := http.NewRequestWithContext(reqCtx, http.MethodGet, base+"/v1/admin/snapshot", nil)
	if err != nil {
		fmt.Fprintf(stderr, "%s: --addr %q: %v\n", name, addr, err)
		return 2
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	hc := &http.Client{Transport: &http.Transport{
		Proxy:                 http.ProxyFromEnvironment,
		DialContext:           (&net.Dialer{Timeout: 5 * time.Second}).DialContext,
		ResponseHeaderTimeout: time.Minute,
		TLSClientConfig:       tlsCfg,
	}}
	resp, err := hc.Do(req)
	if err != nil && ctx.Err() != nil {
		// Ctrl-C before the node answered said only `Get "…/v1/admin/snapshot":
		// interrupt signal received`, naming neither FILE nor what became of it.
		fmt.Fprintf(stderr, "%s: interrupted before %s sent the snapshot: nothing was saved (%s is as it was)\n", name, addr, file)
		return 1
	}
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", name, notHTTP(err))
		return 1
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		raw, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		var p struct{ Detail, Code string }
		if json.Unmarshal(raw, &p) == nil && p.Detail != "" {
			printProblem(stderr, name, p.Detail, p.Code, resp.StatusCode, token)
		} else {
			fmt.Fprintf(stderr, "%s: %s answered %s: %s\n", name, addr, resp.Status, strings.TrimSpace(string(raw)))
		}
		return 1
	}
	// A temporary file of this save's own (FILE.tmp-*): two saves into one
	// FILE shared FILE.tmp, each truncating and writing over the other's
	// stream, and both were refused as damaged, blaming the node (an
	// operator walk). CreateTemp's mode is 0600: a backup holds every
	// record, readable by its owner only.
	f, err := os.CreateTemp(filepath.Dir(file), filepath.Base(file)+".tmp-*")
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", name, err)
		return 1
	}
	tmp := f.Name()
	keep := false
	defer func() {
		if !keep {
			os.Remove(tmp)
		}
	}()
	bw := bufio.NewWriterSize(f, 1<<20)
	body := newStallReader(resp.Body, saveStallTimeout, cancelReq)
	received, err := io.Copy(bw, body)
	body.stop()
	if err != nil && body.stalled.Load() {
		err = errSaveStalled
	}
	if err == nil {
		err = bw.Flush()
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		fmt.Fprintf(stderr, "%s: %s\n", name, receiveFailure(err, file, tmp, received))
		nameLeftSaves(stderr, name, file, tmp)
		return 1
	}
	info, err := verifyFile(ctx, tmp)
	if ctx.Err() != nil {
		fmt.Fprintf(stderr, "%s: interrupted while checking the snapshot received from %s: nothing was saved (%s is removed)\n", name, addr, tmp)
		return 1
	}
	if err != nil {
		fmt.Fprintf(stderr, "%s: the snapshot received from %s is incomplete or damaged: %v (nothing was saved)\n", name, addr, err)
		return 1
	}
	if force {
		err = os.Rename(tmp, file)
	} else if err = os.Link(tmp, file); err == nil {
		// A link fails rather than replace a FILE created meanwhile.
		os.Remove(tmp)
	}
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v (the verified snapshot is left in %s)\n", name, err, tmp)
		keep = true
		return 1
	}
	syncDir(filepath.Dir(file))
	nameLeftSaves(stderr, name, file, tmp)
	fmt.Fprintf(stdout, "saved %s: %d records, applied index %d, cluster time %s, %d bytes, sha256 %s\n",
		shown, info.Header.Records, info.Header.AppliedIndex, fmtClusterTime(info.Header.ClusterTimeMs), info.Bytes, info.SHA256)
	return 0
}

// receiveFailure says why a save could not write what it received. A full
// disk said only "write FILE.tmp-*: no space left on device": neither
// which disk, nor how far the save got, nor the way out.
func receiveFailure(err error, file, tmp string, received int64) string {
	if errors.Is(err, syscall.ENOSPC) {
		dir := filepath.Dir(file)
		return fmt.Sprintf("the disk holding %s is full: it filled after %d bytes of the snapshot were received into %s, which is removed (nothing was saved); free space on that disk or save into a directory on another one: the backup takes about the size of the node's state, more than %d bytes", dir, received, tmp, received)
	}
	if errors.Is(err, errSaveStalled) {
		return fmt.Sprintf("the node sent nothing for %s after %d bytes of the snapshot (a stopped or hung node, or a network that drops everything): %s is removed (nothing was saved); run the save again, against another node if this one does not answer", saveStallTimeout, received, tmp)
	}
	if errors.Is(err, io.ErrUnexpectedEOF) {
		// The node's answer stopped short of its end: a node that reads a
		// damaged store file while it streams its state stops, and said so
		// only in its own log.
		return fmt.Sprintf("the node stopped sending the snapshot after %d bytes, before its end (%v): it may have stopped, or failed to read its state; its log (or the leader's, whose stream a follower passes through) says why (a damaged store file stops the node that reads it, and a read its disk fails is logged at ERROR, each with what to do). %s is removed (nothing was saved)", received, err, tmp)
	}
	return fmt.Sprintf("receiving into %s: %v (nothing was saved)", tmp, err)
}

// restoreFailure says why a restore into tmp, built for dataDir, failed.
// The disk filling midway (the check of free space passed, and another
// writer took it) said only "raftfsm: restore: … write …: no space left on
// device": neither the disk nor the way out.
func restoreFailure(err error, file, tmp, dataDir string, need uint64) string {
	if errors.Is(err, syscall.ENOSPC) {
		room := ""
		if need > 0 {
			room = fmt.Sprintf(" (the restore needs about %d MiB)", (need+1<<20-1)>>20)
		}
		return fmt.Sprintf("the disk holding %s filled while %s was restored into %s, which is removed (nothing was written to %s): free space on that disk%s or restore into a data dir on another disk, then run it again (%v)",
			filepath.Dir(tmp), file, tmp, dataDir, room, err)
	}
	return fmt.Sprintf("%s: %v (nothing was written to %s)", file, err, dataDir)
}

// nameLeftSaves names the FILE.tmp-* beside FILE that a save killed
// before it finished (kill -9, a reboot, a lost terminal) left: no later
// save removed or mentioned them, so each stayed, a partial copy of every
// record (a walk killed three saves and found 80 MB of them, unnamed,
// beside the backups, on the disk a full-disk save then failed on). They
// are only named: a save running beside this one may own one (own, this
// save's, is skipped).
func nameLeftSaves(stderr io.Writer, name, file, own string) {
	dir, prefix := filepath.Dir(file), filepath.Base(file)+".tmp-"
	entries, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range entries {
		l := filepath.Join(dir, e.Name())
		if !strings.HasPrefix(e.Name(), prefix) || e.IsDir() || l == filepath.Clean(own) {
			continue
		}
		size := ""
		if st, err := e.Info(); err == nil {
			size = fmt.Sprintf(" (%d bytes)", st.Size())
		}
		fmt.Fprintf(stderr, "%s: %s%s is left from a save into %s that was stopped before it finished (or is another save's, still running): it is not a backup (idem snapshot inspect refuses it); once no save runs, delete it: it holds a partial copy of the records and takes space on that disk\n", name, l, size, file)
	}
}

// ctxReader reads r until ctx is done, then fails every read with ctx's
// error, counting the bytes read.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
	n   int64
}

func (c *ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

// verifyFile checks the backup at path to its last byte; it stops reading
// once ctx is done (Ctrl-C: a check of GBs took minutes and ignored it).
func verifyFile(ctx context.Context, path string) (raftfsm.BackupInfo, error) {
	f, err := os.Open(path)
	if err != nil {
		return raftfsm.BackupInfo{}, err
	}
	defer f.Close()
	return raftfsm.VerifyBackup(&ctxReader{ctx: ctx, r: f})
}

// syncDir is syncDirErr where the file is already safe (a rename's
// durability is best effort here).
func syncDir(dir string) { _ = syncDirErr(dir) }

func fmtClusterTime(ms int64) string {
	if ms == 0 {
		return "none (no command applied)"
	}
	return time.UnixMilli(ms).UTC().Format("2006-01-02T15:04:05.000Z")
}

func snapshotInspect(ctx context.Context, file string, asJSON bool, stdout, stderr io.Writer) int {
	info, err := verifyFile(ctx, file)
	if ctx.Err() != nil {
		fmt.Fprintf(stderr, "idem snapshot inspect: %s: interrupted before its end: not checked\n", file)
		return 1
	}
	if err != nil {
		fmt.Fprintf(stderr, "idem snapshot inspect: %s: %v\n", file, err)
		return 1
	}
	h := info.Header
	use, err := raftfsm.BackupKeyUse(info.Stream.Named, partition.Width(h.BucketWidthMs))
	if err != nil {
		fmt.Fprintf(stderr, "idem snapshot inspect: %s: %v\n", file, err)
		return 1
	}
	keyIDs := []string{}
	for _, u := range use {
		keyIDs = append(keyIDs, u.ID)
	}
	if asJSON {
		b, _ := json.MarshalIndent(map[string]any{
			"file": file, "header": h, "keys": info.Stream.Pairs, "records_counted": info.Stream.Records,
			"bytes": info.Bytes, "sha256": info.SHA256, "checksums": "ok", "encryption_key_ids": keyIDs,
		}, "", "  ")
		fmt.Fprintf(stdout, "%s\n", b)
		return 0
	}
	scope := h.Scope
	if scope == "" {
		scope = "not recorded"
	}
	w := func(k, format string, a ...any) { fmt.Fprintf(stdout, "%-15s %s\n", k+":", fmt.Sprintf(format, a...)) }
	w("file", "%s", file)
	w("format", "%d", h.Format)
	w("created at", "%s", h.CreatedAt.UTC().Format(time.RFC3339))
	w("taken on node", "%s", h.NodeID)
	w("applied index", "%d", h.AppliedIndex)
	w("cluster time", "%s", fmtClusterTime(h.ClusterTimeMs))
	w("bucket width", "%s", time.Duration(h.BucketWidthMs)*time.Millisecond)
	if ms := info.Stream.Meta.RetentionMs; ms > 0 {
		w("retention", "%s (of new records; a node restored from this file keeps it)", time.Duration(ms)*time.Millisecond)
	} else {
		w("retention", "not pinned yet (no claim): the restored node's --retention will be")
	}
	w("max retention", "%s", time.Duration(h.MaxRetentionMs)*time.Millisecond)
	w("scope", "%s", scope)
	switch h.Auth {
	case raftfsm.AuthTokens:
		w("auth", "taken by a node that checked tokens (--auth-file): a node restored from it refuses to start without --auth-file")
	case raftfsm.AuthNone:
		w("auth", "taken by a node that checked no token")
	}
	w("records", "%d", info.Stream.Records)
	w("keys", "%d (Pebble entries: records, lease index, counters and metadata)", info.Stream.Pairs)
	if len(use) == 0 {
		w("encryption", "no value encrypted: restoring it needs no key file")
	} else {
		parts := make([]string, len(use))
		for i, u := range use {
			parts[i] = fmt.Sprintf("%s (%d values)", u.ID, u.Values)
		}
		w("encryption", "restoring it needs key %s in --encryption-key-file", strings.Join(parts, ", "))
	}
	w("size", "%d bytes", info.Bytes)
	w("sha256", "%s", info.SHA256)
	w("checksums", "ok")
	if info.Stream.Records != h.Records {
		fmt.Fprintf(stdout, "note: the header counted %d records (from the bucket stats), the data holds %d\n", h.Records, info.Stream.Records)
	}
	return 0
}

func snapshotRestore(ctx context.Context, file, dataDir, nodeID, raftAddr string, force bool, stdout, stderr io.Writer) int {
	const name = "idem snapshot restore"
	var bad []string
	if dataDir == "" {
		bad = append(bad, "--data-dir is required")
	}
	switch {
	case nodeID == "":
		bad = append(bad, "--node-id is required: the id the restored node will run with (its idem serve --node-id)")
	case !nodeIDPattern.MatchString(nodeID):
		bad = append(bad, fmt.Sprintf("--node-id %q must be 1-64 letters, digits, '.', '_' or '-'", nodeID))
	}
	if raftAddr == "" {
		bad = append(bad, "--raft-addr is required: the raft address the restored node will serve on (its idem serve --raft-addr), e.g. 127.0.0.1:7071")
	} else if err := checkDialableRaftAddr(raftAddr); err != nil {
		bad = append(bad, fmt.Sprintf("--raft-addr %q %v", raftAddr, err))
	}
	if len(bad) > 0 {
		fmt.Fprintf(stderr, "%s: %s\n", name, strings.Join(bad, "\n"+name+": "))
		return 2
	}
	// Before anything in DIR is read or written, and held until the last
	// step: two restores into one mount point, started together (the
	// same command in two terminals), each cleared what the other had
	// moved in or mixed their entries, in the window between writing the
	// marker and taking the copy's lock and the one between removing the
	// copy and removing the marker; and idem serve started on DIR while a
	// restore filled it ran on half a restore. serve holds a shared lock
	// on its data dir, which this one excludes.
	lock, created, msg := lockRestoreTarget(dataDir)
	if msg != "" {
		fmt.Fprintf(stderr, "%s: %s\n", name, msg)
		return 1
	}
	defer lock.Close()
	restored := false
	if created {
		// Made here only to be locked: a restore that fails leaves no
		// trace of it (removed while the lock is still held).
		defer func() {
			if !restored {
				os.Remove(dataDir)
			}
		}()
	}
	existed := false
	if st, err := os.Stat(dataDir); err == nil {
		if !st.IsDir() {
			fmt.Fprintf(stderr, "%s: --data-dir %s exists and is not a directory\n", name, dataDir)
			return 1
		}
		entries, err := os.ReadDir(dataDir)
		if err != nil {
			fmt.Fprintf(stderr, "%s: --data-dir: %v\n", name, err)
			return 1
		}
		if hasRestoreMarker(dataDir) {
			// A restore into this mount point was stopped before it
			// finished: what it moved in is cleared, and this one starts
			// over. Only a restore into a mount point writes the marker:
			// in a plain directory it was copied there with what it sat
			// beside (cp -a, rsync of the disk's contents), and what the
			// directory holds is not a stopped restore's to remove (a
			// review: node.json was removed, then the restore refused the
			// dir as not empty for the marker it kept).
			if real, err := filepath.EvalSymlinks(dataDir); err != nil || !isMountPoint(real) {
				fmt.Fprintf(stderr, "%s: --data-dir %s holds %s, which only a restore into a mount point writes, and %s is not one: its contents were copied or moved there from one, or a disk is not mounted there; nothing in it is a stopped restore's to remove, and nothing was changed. Mount the disk, or, if what %s holds is a copy of an unfinished restore, empty it and run the restore again\n",
					name, dataDir, restoreMarkerName, dataDir, dataDir)
				return 1
			}
			if msg := clearUnfinishedRestore(stderr, name, dataDir); msg != "" {
				fmt.Fprintf(stderr, "%s: %s\n", name, msg)
				return 1
			}
			if entries, err = os.ReadDir(dataDir); err != nil {
				fmt.Fprintf(stderr, "%s: --data-dir: %v\n", name, err)
				return 1
			}
		}
		if len(entries) > 0 && !onlyLeftCopies(dataDir, entries) {
			fmt.Fprintf(stderr, "%s: --data-dir %s is not empty; a restore only creates a new data dir and never replaces one (it may hold the only copy of a node's data): name an absent or empty directory\n", name, dataDir)
			return 1
		}
		existed = true
	} else if lst, lerr := os.Lstat(dataDir); lerr == nil && lst.Mode()&os.ModeSymlink != 0 {
		// A link to a directory not made yet: the whole restore was built
		// beside the link, on the link's disk, and then failed to take its
		// place ("not a directory").
		target, _ := os.Readlink(dataDir)
		fmt.Fprintf(stderr, "%s: --data-dir %s is a link to %s, which cannot be reached (%v): make that directory (mkdir -p %s, empty) and run the restore again, or name another --data-dir; nothing was written\n", name, dataDir, target, err, target)
		return 1
	}
	f, err := os.Open(file)
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", name, err)
		return 1
	}
	defer f.Close()
	abs, err := filepath.Abs(dataDir)
	if err != nil {
		fmt.Fprintf(stderr, "%s: --data-dir: %v\n", name, err)
		return 1
	}
	if existed {
		// A link to an empty directory (on another disk, say): the copy
		// is built beside that directory and renamed into it. Built
		// beside the link, it replaced the link, on a disk whose free
		// space was not the one read.
		if real, err := filepath.EvalSymlinks(abs); err == nil {
			abs = real
		}
	}
	// An empty directory that is a mount point (a disk of its own for the
	// data dir, as /var/lib/idem-new often is) cannot be removed or
	// renamed over: the restore read the whole backup, built the copy
	// beside it, on the parent's disk (whose room was never checked), and
	// failed at the end with "remove DIR: device or resource busy". The
	// copy is built inside it then, on its disk, and moved into place.
	copyParent, copyPrefix := filepath.Dir(abs), filepath.Base(abs)+".restore-"
	inside := existed && isMountPoint(abs)
	if inside {
		copyParent, copyPrefix = abs, ".restore-"
	}
	// Before the backup is read (minutes for one of GBs): the members it
	// records are at its end, and an operator restoring at the address
	// of a member of a running cluster is told no at once. The check
	// after the restore, on the verified state, stays.
	if st, err := f.Stat(); err == nil && !force {
		if refuseLiveSource(ctx, stderr, name, raftfsm.PeekBackupMembers(f, st.Size()), raftAddr, dataDir) {
			return 1
		}
	}
	// Before the free space is read: the copies killed restores left are
	// what filled the disk on each retry.
	clearLeftRestores(stderr, name, copyParent, copyPrefix, dataDir)
	// The raft log preallocates its first segment whole: on a nearly full
	// disk the restore failed midway with a bare ENOSPC. Say up front how
	// much it needs, before anything is written.
	var need uint64
	if st, err := f.Stat(); err == nil {
		var parts string
		need, parts = raftfsm.RestoreSpace(st.Size())
		if err := raftfsm.CheckSpace("the restore", dataDir, need, parts); err != nil {
			fmt.Fprintf(stderr, "%s: %v\n", name, err)
			return 1
		}
	}
	// The restored dir holds what a node's does: only the user idem runs
	// as reads it, as idem serve makes its own (0600 files, 0700 dirs).
	restrictUmask()
	parent := filepath.Dir(abs)
	if err := os.MkdirAll(parent, 0o755); err != nil {
		fmt.Fprintf(stderr, "%s: --data-dir: %v\n", name, err)
		return 1
	}
	if inside {
		// A mount point cannot be renamed into place: the copy's entries
		// are moved into it one by one at the end, so a kill (-9, a
		// reboot) can leave part of them there, or, while the copy is
		// built, only the copy, which serve took for an empty dir and
		// started a new, empty cluster in. The marker says so from now
		// until the last entry is in: serve refuses the dir, and the next
		// restore clears it and starts over.
		if err := writeRestoreMarker(abs); err != nil {
			fmt.Fprintf(stderr, "%s: %v (nothing was written to %s)\n", name, err, dataDir)
			return 1
		}
	}
	// Built beside DIR and renamed into place: DIR never holds half a restore.
	moving := false // entries of the copy go into DIR, a mount point: the marker stays
	tmp, err := os.MkdirTemp(copyParent, copyPrefix+"*")
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", name, err)
		if inside {
			os.Remove(filepath.Join(abs, restoreMarkerName))
		}
		return 1
	}
	done := false
	defer func() {
		if !done {
			os.RemoveAll(tmp)
			if inside && !moving {
				// Nothing of it is in DIR: DIR is as empty as it was.
				os.Remove(filepath.Join(abs, restoreMarkerName))
			}
		}
	}()
	// Held while this restore runs: the next restore into DIR removes a
	// copy whose lock no process holds (clearLeftRestores).
	lockPath := filepath.Join(tmp, restoreLockName)
	if lock, err := lockRestoreCopy(lockPath); err == nil {
		defer lock.Close()
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	// Ctrl-C (or SIGTERM) stops the restore: main catches both into ctx,
	// and a restore that did not read it went on for the minutes a backup
	// of GBs takes, then put the state it had been told to drop into
	// --data-dir and exited 0 (a walk: the wrong backup, noticed and
	// interrupted). The read fails at once; the copy is removed.
	in := &ctxReader{ctx: ctx, r: f}
	// A failed write of the new store stops the process from inside
	// Pebble (engine.Options.Offline): it was worded for a running node
	// ("this node stops … the next start replays it").
	left := fmt.Sprintf("the next restore removes its partial copy %s", tmp)
	if inside {
		left = fmt.Sprintf("the next restore removes its partial copy %s and the %s that makes idem serve refuse %s meanwhile", tmp, restoreMarkerName, dataDir)
	}
	offline := fmt.Sprintf("%s: the restore of %s failed: nothing was restored into %s (%s)", name, file, dataDir, left)
	info, err := raftfsm.RestoreBackup(bufio.NewReaderSize(in, 1<<20), tmp, raftfsm.RestoreOptions{NodeID: nodeID, RaftAddr: raftAddr, Logger: log, Offline: offline})
	if ctx.Err() != nil {
		fmt.Fprintf(stderr, "%s: interrupted after reading %d bytes of %s: nothing was written to %s (its partial copy is removed); run the restore again to restore it\n", name, in.n, file, dataDir)
		return 1
	}
	if err != nil {
		fmt.Fprintf(stderr, "%s: %s\n", name, restoreFailure(err, file, tmp, dataDir, need))
		return 1
	}
	if !force && refuseLiveSource(ctx, stderr, name, info.Members, raftAddr, dataDir) {
		return 1
	}
	h := info.Header
	if h.BucketWidthMs > 0 {
		// The settings fixed at a data dir's creation are the backup's:
		// idem serve then refuses a --bucket-width or --scope that differs.
		// Synced as serve writes it: the directory is renamed into place
		// and synced below, and a machine crash after that must not find
		// an empty node.json (serve refuses one until moved aside).
		nf := nodeFile{NodeID: nodeID, BucketWidthMs: h.BucketWidthMs, Scope: h.Scope}
		if h.Auth == raftfsm.AuthTokens {
			// Taken from a cluster that checked tokens: the backup holds
			// every tenant's records, and the restored node started
			// without --auth-file answered them to anyone (a walk). Serve
			// refuses it so, as a data dir last served with one.
			nf.Auth = raftfsm.AuthTokens
		}
		if err := replaceNodeFile(filepath.Join(tmp, "node.json"), nf); err != nil {
			fmt.Fprintf(stderr, "%s: %v (nothing was written to %s)\n", name, err, dataDir)
			return 1
		}
	}
	// Restored at a member's raft address, the backup's other members are
	// left out: started again on their old data dirs they would hold a
	// quorum of the old cluster and serve its state at the addresses its
	// clients know (a walk: they claimed afresh a key the restored cluster
	// had completed). Recorded as idem recover records whom it left out,
	// the restored node tells each, at its first vote or append, to stop
	// serving (raftfsm's superseded.go).
	var others, leftOut []string
	inPlace := false
	for _, m := range info.Members {
		if m.RaftAddr == raftAddr {
			inPlace = true
			continue
		}
		others = append(others, m.ID+" ("+m.RaftAddr+")")
		if m.ID != nodeID {
			leftOut = append(leftOut, m.ID)
		}
	}
	slices.Sort(others)
	if inPlace && len(leftOut) > 0 {
		if err := raftfsm.RecordRestoreInPlace(tmp, nodeID, leftOut, h.AppliedIndex); err != nil {
			fmt.Fprintf(stderr, "%s: %v (nothing was written to %s)\n", name, err, dataDir)
			return 1
		}
	}
	if inside {
		moving = true
		if err := moveInto(tmp, abs); err != nil {
			fmt.Fprintf(stderr, "%s: %v: %s holds part of the restore, which idem serve refuses (%s marks it); run the restore again: it clears that part first\n", name, err, dataDir, restoreMarkerName)
			return 1
		}
		parent = abs
	} else {
		// Renamed over the empty DIR, which is never absent meanwhile: a
		// restore or a serve started then would make it anew, and neither
		// would meet this one's lock. Where a directory cannot be renamed
		// over, it is removed first.
		if err := os.Rename(tmp, abs); err != nil {
			if !existed {
				fmt.Fprintf(stderr, "%s: %v (nothing was written to %s)\n", name, err, dataDir)
				return 1
			}
			if err := os.Remove(abs); err != nil {
				fmt.Fprintf(stderr, "%s: --data-dir: %v (nothing was written to %s)\n", name, err, dataDir)
				return 1
			}
			if err := os.Rename(tmp, abs); err != nil {
				fmt.Fprintf(stderr, "%s: %v (nothing was written to %s)\n", name, err, dataDir)
				return 1
			}
		}
	}
	done, restored = true, true
	// The lock goes only now, from DIR: removed before the rename, a kill
	// in between left a whole copy without it, which no later restore
	// could tell from one still running, nor remove (a kill -9 walk). A
	// kill here leaves an empty .restore-lock in DIR, which nothing reads.
	os.Remove(filepath.Join(abs, restoreLockName))
	if inside {
		// Last: until it goes, serve refuses DIR and a restore clears it.
		syncDir(abs)
		if err := os.Remove(filepath.Join(abs, restoreMarkerName)); err != nil {
			fmt.Fprintf(stderr, "%s: %v: the restore is whole in %s, but serve refuses it while %s is there; remove that file, or run the restore again\n", name, err, dataDir, restoreMarkerName)
			return 1
		}
	}
	syncDir(parent)
	fmt.Fprintf(stdout, "restored %s into %s: %d records, applied index %d, cluster time %s; the raft log goes on at index %d\n",
		file, dataDir, h.Records, h.AppliedIndex, fmtClusterTime(h.ClusterTimeMs), info.Stream.Meta.Applied+1)
	// A restore is a rollback to the backup: what the cluster decided
	// after it is gone, and nothing in the restored state can say so.
	fmt.Fprintf(stderr, "%s: the restored cluster is the backup's, as of cluster time %s: keys claimed or completed after the backup can be claimed again (their work would run again), records deleted after it are back, and attempt numbers go on from the backup's, so some repeat ones the lost cluster gave out (fencing tokens do not: the raft log goes on far above the backup's index). Reconcile what was done after the backup with your own records (docs/BACKUP.md)\n",
		name, fmtClusterTime(h.ClusterTimeMs))
	if inPlace && len(others) > 0 {
		fmt.Fprintf(stderr, "%s: this node takes the place of a member of the backup's cluster: never start its other members (%s) on their old data dirs again; move those aside and add the nodes back with empty data dirs and --join. Started, they would serve the old cluster's state at the addresses its clients know until this node runs and tells them to stop (they then answer 503 and refuse to start on those data dirs)\n",
			name, strings.Join(others, ", "))
	}
	// The backup's member of this id at this raft address is the node
	// restored in its place: its HTTP address is the one its clients use.
	recorded := ""
	for _, m := range info.Members {
		if m.ID == nodeID && m.RaftAddr == raftAddr {
			recorded = m.HTTPAddr
		}
	}
	printStartHint(stdout, dataDir, nodeID, raftAddr, recorded)
	if h.Auth == raftfsm.AuthTokens {
		fmt.Fprintf(stdout, "  the backup was taken by a node that checked tokens: start it with the cluster's --auth-file (it refuses to start without it, since it would answer every tenant's records to anyone; --no-auth turns the checks off on purpose), and with the --node-token-file the cluster's nodes use once others are to join it\n")
	}
	fmt.Fprintf(stdout, "then other nodes (with empty data dirs) may join it with --join\n")
	return 0
}

// lockRestoreTarget takes the restore's exclusive lock on dataDir
// (lockDir), making it, empty, when it is absent (created). It returns
// why not when another restore into it, or idem serve on it, holds it.
// A dataDir that is not a directory, or a link to one that cannot be
// reached, is left unlocked for the restore's own checks to refuse.
func lockRestoreTarget(dataDir string) (lock *os.File, created bool, problem string) {
	if _, err := os.Lstat(dataDir); errors.Is(err, os.ErrNotExist) {
		if err := os.MkdirAll(filepath.Dir(dataDir), 0o755); err != nil {
			return nil, false, fmt.Sprintf("--data-dir: %v", err)
		}
		if err := os.Mkdir(dataDir, 0o700); err == nil {
			created = true
		} else if !errors.Is(err, os.ErrExist) {
			return nil, false, fmt.Sprintf("--data-dir: %v", err)
		}
	}
	if st, err := os.Stat(dataDir); err != nil || !st.IsDir() {
		return nil, false, ""
	}
	for try := 0; ; try++ {
		lock, err := lockDir(dataDir, true)
		if err == nil {
			return lock, created, ""
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, false, fmt.Sprintf("--data-dir: %v", err)
		}
		// No holder listed: it ended between the two (a restore that
		// just finished); taken now, the dir is checked as any other.
		if pid, _ := dirLockHolder(dataDir); pid > 0 || try == 20 {
			return nil, false, dirLockProblem(dataDir) + "; nothing was changed"
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// dirLockProblem names the process that holds dir's lock (lockDir).
func dirLockProblem(dir string) string {
	pid, exclusive := dirLockHolder(dir)
	who := "its pid is not known"
	if pid > 0 {
		who = fmt.Sprintf("pid %d", pid)
	} else if l, err := lockDir(dir, false); err == nil {
		// Not listed (no /proc/locks), and not held now: it has ended.
		l.Close()
		return fmt.Sprintf("another idem process (a restore into %s, or idem serve on it) held it a moment ago: run this again", dir)
	} else {
		// A shared lock is taken beside serve's, never beside a restore's.
		exclusive = errors.Is(err, syscall.EWOULDBLOCK)
	}
	if exclusive {
		return fmt.Sprintf("a restore into %s is running, %s: wait for it to finish, or stop it", dir, who)
	}
	return fmt.Sprintf("idem serve is running on %s, %s: a restore never replaces a node's data dir; stop that node first, or name another --data-dir", dir, who)
}

// refuseLiveSource says, and returns true, when raftAddr is the raft
// address of one of members (a backup's) and others of them answer: the
// backup's cluster is running, and a node restored there would be a second
// cluster at that member's addresses.
func refuseLiveSource(ctx context.Context, stderr io.Writer, name string, members []raftfsm.NodeInfo, raftAddr, dataDir string) bool {
	live, member := liveSourceMembers(ctx, members, raftAddr)
	if len(live) == 0 {
		return false
	}
	fmt.Fprintf(stderr, "%s: --raft-addr %s is the raft address of %s, a member of the cluster this backup was taken from, and that cluster is running: each of these addresses accepted a connection:\n", name, raftAddr, member)
	for _, l := range live {
		fmt.Fprintf(stderr, "  %s: %s address %s\n", l.id, l.kind, l.addr)
	}
	fmt.Fprintf(stderr, "%s: a node restored there is a one-node cluster of its own at %s's addresses: it elects itself beside that cluster, the clients of %s reach it, and a key claimed in one cluster is claimed again in the other. Nothing was written to %s.\n", name, member, member, dataDir)
	fmt.Fprintf(stderr, "%s: to rebuild %s, start it with an empty data dir and --join a live member: the leader sends it the state (docs/MEMBERSHIP.md). To start a new cluster from the backup beside that one, restore it with another --raft-addr. --force skips this check (only if that cluster is gone for good and these addresses now belong to something else): the restored node then tells the members of that cluster, if any still run, that they were left out, and they stop serving for good.\n", name, member)
	return true
}

// onlyLeftCopies reports whether entries, those of dir, are only copies
// that restores into dir, a mount point, left inside it when stopped
// (.restore-*), and the lost+found directory that mkfs.ext4 (ext2/3/4)
// puts at the root of every filesystem it makes: such a dir is as empty as
// a restore needs, and the restore clears the copies first (lost+found
// stays, fsck's own). A fresh ext4 disk for the data dir was refused as
// "not empty" for its lost+found alone.
func onlyLeftCopies(dir string, entries []os.DirEntry) bool {
	if !isMountPoint(dir) {
		return false
	}
	for _, e := range entries {
		if e.Name() == restoreMarkerName && e.Type().IsRegular() {
			continue
		}
		if !e.IsDir() || !(strings.HasPrefix(e.Name(), ".restore-") || e.Name() == "lost+found") {
			return false
		}
	}
	return true
}

// restoreMarkerName is the file a restore into a mount point keeps in it
// from before it builds its copy there until the copy's last entry is
// moved in (snapshotRestore): serve refuses a data dir holding it, and the
// next restore into it clears what the stopped one left.
const restoreMarkerName = ".restore-unfinished"

const restoreMarkerText = "idem snapshot restore is restoring a backup into this directory, or was stopped before it finished (kill -9, a reboot).\n" +
	"What the directory holds is not a node's data dir: run the restore into it again, which removes what the stopped one left.\n"

// writeRestoreMarker writes dir's restoreMarkerName, synced with dir.
func writeRestoreMarker(dir string) error {
	path := filepath.Join(dir, restoreMarkerName)
	f, err := os.OpenFile(path, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	_, err = f.WriteString(restoreMarkerText)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(path)
		return err
	}
	syncDir(dir)
	return nil
}

// hasRestoreMarker reports whether dir holds a restore's marker
// (restoreMarkerName): a restore into it runs, or was stopped.
func hasRestoreMarker(dir string) bool {
	st, err := os.Lstat(filepath.Join(dir, restoreMarkerName))
	return err == nil && st.Mode().IsRegular()
}

// unfinishedRestoreProblem is serve's refusal of a data dir that holds a
// restore's marker, or "".
func unfinishedRestoreProblem(dir string) string {
	if !hasRestoreMarker(dir) {
		return leftCopyProblem(dir)
	}
	return fmt.Sprintf("--data-dir %s holds a restore that did not finish: idem snapshot restore into it was stopped before it had moved the whole backup in (kill -9, a reboot), or is still running (%s marks it). "+
		"What it holds is not a node's data dir, and started it would serve part of the backup, or a new empty cluster. Once no restore into it runs, run the same idem snapshot restore into %s again: it removes what the stopped one left and restores the backup whole. Nothing was changed",
		dir, filepath.Join(dir, restoreMarkerName), dir)
}

// leftCopyProblem refuses a data dir that holds no node (absent, or
// empty) beside which a restore into it left its copy, DIR.restore-*:
// that restore was killed (-9, a reboot) before it renamed the copy into
// place, or still runs. serve started a new, empty cluster there, where
// the operator meant the backup's. "" otherwise.
func leftCopyProblem(dir string) string {
	if holdsNode(dir) {
		return ""
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return ""
	}
	places := []string{abs}
	if real, err := filepath.EvalSymlinks(abs); err == nil && real != abs {
		places = append(places, real) // a link to a directory: the copy is built beside that
	}
	for _, p := range places {
		copies, _ := filepath.Glob(p + ".restore-*")
		for _, c := range copies {
			if st, err := os.Stat(c); err == nil && st.IsDir() {
				return fmt.Sprintf("--data-dir %s holds no node, and beside it %s is the copy of a restore into it that was stopped before it finished (kill -9, a reboot), or is still running: started, this node would be a new, empty cluster, not the backup's. "+
					"Once no restore into %s runs, run the idem snapshot restore into it again (it removes that copy first); to start a new empty node there instead, delete %s first. Nothing was changed",
					dir, c, dir, c)
			}
		}
	}
	return ""
}

// clearUnfinishedRestore removes from dir, which holds a restore's marker,
// what that restore moved in (the entries of a data dir), and returns ""
// or why it did not: a restore into dir still runs (its copy's lock is
// held), or dir holds something else, which is not the restore's to
// remove. The copies and the marker stay for the caller (clearLeftRestores,
// and the new restore's own marker).
func clearUnfinishedRestore(stderr io.Writer, name, dir string) string {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Sprintf("--data-dir: %v", err)
	}
	var other []string
	for _, e := range entries {
		n := e.Name()
		switch {
		case n == restoreMarkerName || n == "lost+found" || dataDirEntries[n] || n == restoreLockName:
		case e.IsDir() && strings.HasPrefix(n, ".restore-"):
			if restoreCopyHeld(filepath.Join(dir, n, restoreLockName)) {
				return fmt.Sprintf("a restore into %s is running (%s is its copy): wait for it to finish, or stop it, then run this again; nothing was changed", dir, filepath.Join(dir, n))
			}
		default:
			other = append(other, n)
		}
	}
	if len(other) > 0 {
		return fmt.Sprintf("--data-dir %s holds an unfinished restore (%s) and also %s, which no restore puts there: move that away (or empty the dir but for lost+found) and run the restore again; nothing was changed",
			dir, restoreMarkerName, strings.Join(other, ", "))
	}
	var removed []string
	for _, e := range entries {
		n := e.Name()
		if !dataDirEntries[n] && n != restoreLockName {
			continue
		}
		if err := os.RemoveAll(filepath.Join(dir, n)); err != nil {
			return fmt.Sprintf("clearing the unfinished restore in %s: %v", dir, err)
		}
		removed = append(removed, n)
	}
	if len(removed) > 0 {
		fmt.Fprintf(stderr, "%s: removed %s from %s, what a restore into it stopped before it finished had moved in; restoring again\n", name, strings.Join(removed, ", "), dir)
	}
	return ""
}

// moveInto moves what the restore built in tmp (inside dir, on its disk)
// into dir, node.json last (a data dir is taken as a node's with it),
// and removes tmp with its lock.
func moveInto(tmp, dir string) error {
	entries, err := os.ReadDir(tmp)
	if err != nil {
		return err
	}
	var last string
	for _, e := range entries {
		switch e.Name() {
		case restoreLockName:
			continue
		case "node.json":
			last = e.Name()
			continue
		}
		if err := os.Rename(filepath.Join(tmp, e.Name()), filepath.Join(dir, e.Name())); err != nil {
			return err
		}
	}
	// As the copy a restore renames into place is (0700): only the user
	// idem runs as reads the records.
	if err := os.Chmod(dir, 0o700); err != nil {
		return err
	}
	if last != "" {
		syncDir(dir)
		if err := os.Rename(filepath.Join(tmp, last), filepath.Join(dir, last)); err != nil {
			return err
		}
	}
	return os.RemoveAll(tmp)
}

// restoreLockName is the file in a restore's copy (DIR.restore-*) on
// which the restore holds an flock while it runs; it is removed once the
// copy is renamed into DIR.
const restoreLockName = ".restore-lock"

// clearLeftRestores removes the copies, DIR.restore-*, that restores into
// DIR stopped before they finished (kill -9, a reboot, a lost terminal)
// left beside it, and names those it cannot tell from a restore still
// running (no lock file: an earlier release's, or one killed within its
// first instant). Each copy held a part of the backup's state, up to all
// of it: a walk killed six restores of a 900 MB backup and found 560 MB of
// copies, named only once a restore succeeded, while the retry was refused
// for want of 3.5 MiB.
func clearLeftRestores(stderr io.Writer, name, parent, prefix, dataDir string) {
	entries, err := os.ReadDir(parent)
	if err != nil {
		return
	}
	for _, e := range entries {
		if !e.IsDir() || !strings.HasPrefix(e.Name(), prefix) {
			continue
		}
		l := filepath.Join(parent, e.Name())
		size := dirBytes(l)
		if restoreCopyAbandoned(filepath.Join(l, restoreLockName)) {
			if err := os.RemoveAll(l); err == nil {
				fmt.Fprintf(stderr, "%s: removed %s (%d bytes), the copy a restore into %s left when it was stopped before it finished\n", name, l, size, dataDir)
				continue
			}
		}
		fmt.Fprintf(stderr, "%s: %s is left from a restore into %s that was stopped before it finished (or is another restore's, still running): nothing uses it; once no restore into %s runs, delete it (rm -r): it holds a copy of a backup's records, %d bytes on that disk\n", name, l, dataDir, dataDir, size)
	}
}

// dirBytes is the size of the files under dir (what it could be read of).
func dirBytes(dir string) int64 {
	var n int64
	filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			if st, err := d.Info(); err == nil {
				n += st.Size()
			}
		}
		return nil
	})
	return n
}

// liveSourceMembers probes, when raftAddr is the raft address of one of the
// members a backup's state records, the raft and HTTP addresses of the
// others, and returns those that answered, with that member's id. A
// restore at such an address beside the running cluster would be a second
// cluster at a member's addresses.
func liveSourceMembers(ctx context.Context, members []raftfsm.NodeInfo, raftAddr string) ([]liveMember, string) {
	var st raftfsm.OfflineState
	self := ""
	for _, m := range members {
		if m.RaftAddr == raftAddr {
			self = m.ID
		}
		st.Configuration = append(st.Configuration, raftfsm.Peer{ID: m.ID, RaftAddr: m.RaftAddr})
		if m.HTTPAddr != "" {
			if st.HTTPAddrs == nil {
				st.HTTPAddrs = map[string]string{}
			}
			st.HTTPAddrs[m.ID] = m.HTTPAddr
		}
	}
	if self == "" {
		return nil, ""
	}
	return probeMembers(ctx, st, self, time.Second), self
}

var errSaveStalled = errors.New("the node stopped sending the snapshot")

// stallReader cancels the request when no byte arrives for timeout.
type stallReader struct {
	r       io.Reader
	timeout time.Duration
	timer   *time.Timer
	stalled atomic.Bool
}

func newStallReader(r io.Reader, timeout time.Duration, cancel func()) *stallReader {
	s := &stallReader{r: r, timeout: timeout}
	s.timer = time.AfterFunc(timeout, func() {
		s.stalled.Store(true)
		cancel()
	})
	return s
}

func (s *stallReader) Read(p []byte) (int, error) {
	n, err := s.r.Read(p)
	if n > 0 && !s.stalled.Load() {
		s.timer.Reset(s.timeout)
	}
	return n, err
}

func (s *stallReader) stop() { s.timer.Stop() }
