package chaos

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/idem-store/idem/client"
)

// Node is one `idem serve` process of the cluster, on its own loopback IP.
type Node struct {
	ID       string
	IP       string
	HTTPAddr string
	RaftAddr string // the raft address peers dial (--raft-advertise)
	// RaftListen is where the node's raft listens (--raft-addr): RaftAddr,
	// or behind a proxy RaftAddr's port + ProxyRaftOffset.
	RaftListen string
	DataDir    string
	LogPath    string
	Client     *client.Client

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{} // closed when the process has exited
	// ended is set when the harness signals the process to end (SIGTERM
	// or SIGKILL), so an exit without it is one the harness did not cause.
	ended       *atomic.Bool
	paused      bool
	clockOffset time.Duration
	// retention, when set, is this node's own --retention, given after the
	// cluster's (the retention nemesis).
	retention time.Duration
	injectBug string
	// noSnapshots: the node never takes a snapshot of its own, so its raft
	// log goes back to index 1 (the fsm-loss nemesis needs such a node).
	noSnapshots bool
}

// Running reports whether the process is alive (paused or not).
func (n *Node) Running() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.runningLocked()
}

func (n *Node) runningLocked() bool {
	if n.done == nil {
		return false
	}
	select {
	case <-n.done:
		return false
	default:
		return true
	}
}

// Paused reports whether the process is stopped by SIGSTOP.
func (n *Node) Paused() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.paused && n.runningLocked()
}

// ClusterConfig says how to start the nodes.
type ClusterConfig struct {
	Binary   string
	Nodes    int
	Dir      string // data dirs and logs go under it
	HTTPPort int    // each node listens on 127.0.0.<i>:HTTPPort
	RaftPort int    // and 127.0.0.<i>:RaftPort
	// RaftProxy puts each node's real raft listener on RaftPort +
	// ProxyRaftOffset, for a Proxy on RaftPort (see ProxyNet).
	RaftProxy bool
	InjectBug string // passed to the nodes in InjectInto
	// InjectInto is "all" or a node id.
	InjectInto string
	// ExtraArgs go to every `idem serve`.
	ExtraArgs []string
	// NoSnapshots names a node that takes no snapshots of its own.
	NoSnapshots string
	// TLSDir, when set, holds what MakeTLS wrote: the nodes run with TLS
	// and the harness speaks HTTPS (tls.go).
	TLSDir string
}

// Cluster is a set of real `idem serve` processes.
type Cluster struct {
	cfg ClusterConfig
	// stopGrace is how long Stop waits after SIGTERM before SIGKILL
	// (StopGrace when zero).
	stopGrace time.Duration
	// clock stamps forced stops (the history's clock in a run).
	clock  func() int64
	mu     sync.Mutex
	forced []ForcedStop
	exits  []Exit
	Nodes  []*Node
	hc     *http.Client
	scheme string // "http://" or "https://"
}

// NewCluster prepares (but does not start) the nodes of cfg.
func NewCluster(cfg ClusterConfig) (*Cluster, error) {
	if err := os.MkdirAll(cfg.Dir, 0o755); err != nil {
		return nil, err
	}
	c := &Cluster{cfg: cfg, hc: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64, MaxIdleConns: 512}}}
	scheme := "http://"
	if cfg.TLSDir != "" {
		tc, err := harnessTLS(cfg.TLSDir)
		if err != nil {
			return nil, err
		}
		c.hc.Transport.(*http.Transport).TLSClientConfig = tc
		scheme = "https://"
	}
	c.scheme = scheme
	for i := 1; i <= cfg.Nodes; i++ {
		ip := fmt.Sprintf("127.0.0.%d", i)
		n := &Node{
			ID: fmt.Sprintf("n%d", i), IP: ip,
			HTTPAddr: fmt.Sprintf("%s:%d", ip, cfg.HTTPPort),
			RaftAddr: fmt.Sprintf("%s:%d", ip, cfg.RaftPort),
			DataDir:  filepath.Join(cfg.Dir, fmt.Sprintf("n%d", i)),
			LogPath:  filepath.Join(cfg.Dir, fmt.Sprintf("n%d.log", i)),
		}
		n.RaftListen = n.RaftAddr
		if cfg.RaftProxy {
			n.RaftListen = fmt.Sprintf("%s:%d", ip, cfg.RaftPort+ProxyRaftOffset)
		}
		n.noSnapshots = n.ID == cfg.NoSnapshots
		if cfg.InjectBug != "" && (cfg.InjectInto == "all" || cfg.InjectInto == n.ID) {
			n.injectBug = cfg.InjectBug
		}
		cl, err := client.New(scheme+n.HTTPAddr, client.WithHTTPClient(c.hc))
		if err != nil {
			return nil, err
		}
		n.Client = cl
		c.Nodes = append(c.Nodes, n)
	}
	return c, nil
}

// Node returns the node with the given id, or nil.
func (c *Cluster) Node(id string) *Node {
	for _, n := range c.Nodes {
		if n.ID == id {
			return n
		}
	}
	return nil
}

func (c *Cluster) args(n *Node) []string {
	var peers []string
	for _, m := range c.Nodes {
		peers = append(peers, m.HTTPAddr)
	}
	a := []string{"serve",
		"--node-id", n.ID, "--data-dir", n.DataDir,
		"--http-addr", n.HTTPAddr, "--raft-addr", n.RaftListen, "--raft-advertise", n.RaftAddr,
		// Snapshots always, so nemeses exercise compaction and catch-up
		// by snapshot; a threshold of one entry makes a quiet node
		// snapshot too (there is no way to force one from outside), which
		// the quiet-restart nemesis needs.
		"--snapshot-threshold", "1", "--trailing-logs", "16", "--snapshot-interval", "2s",
		// Goroutine dumps of a node that stays unready (diag.go).
		"--pprof",
	}
	if len(c.Nodes) > 1 {
		// One node forms its cluster alone without them (and refuses
		// --bootstrap-expect 1 with --join).
		a = append(a, "--bootstrap-expect", strconv.Itoa(len(c.Nodes)), "--join", strings.Join(peers, ","))
	}
	if n.noSnapshots {
		a = setFlag(a, "--snapshot-threshold", strconv.FormatUint(1<<62, 10))
		a = setFlag(a, "--snapshot-interval", "24h")
	}
	if n.clockOffset != 0 {
		a = append(a, "--clock-offset", n.clockOffset.String())
	}
	if n.injectBug != "" {
		a = append(a, "--inject-bug", n.injectBug)
	}
	if c.cfg.TLSDir != "" {
		a = append(a, tlsArgs(c.cfg.TLSDir, n.ID)...)
	}
	for i := 0; i < len(c.cfg.ExtraArgs); i++ {
		if x := c.cfg.ExtraArgs; i+1 < len(x) && !strings.HasPrefix(x[i+1], "--") {
			a = setFlag(a, x[i], x[i+1])
			i++
		} else if !slices.Contains(a, x[i]) { // a switch: --pprof
			a = append(a, x[i])
		}
	}
	if n.retention != 0 {
		a = setFlag(a, "--retention", n.retention.String())
	}
	return a
}

// setFlag sets flag to value in args, a command and "--flag value"
// pairs: in place when args has it, else at the end. idem refuses a flag
// given twice, so a later setting replaces an earlier one here.
func setFlag(args []string, flag, value string) []string {
	for i := 1; i+1 < len(args); i++ {
		if args[i] == flag {
			args[i+1] = value
			return args
		}
	}
	return append(args, flag, value)
}

// Start starts the node's process (it must not be running).
func (c *Cluster) Start(n *Node) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.runningLocked() {
		return fmt.Errorf("chaos: %s is already running", n.ID)
	}
	lf, err := os.OpenFile(n.LogPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	args := c.args(n)
	fmt.Fprintf(lf, "\n=== chaos %s: start %s %s\n", time.Now().Format(time.RFC3339Nano), c.cfg.Binary, strings.Join(args, " "))
	cmd := exec.Command(c.cfg.Binary, args...)
	cmd.Stdout, cmd.Stderr = lf, lf
	// The nodes die with the harness, even if it is killed.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	if err := cmd.Start(); err != nil {
		lf.Close()
		return fmt.Errorf("chaos: start %s: %w", n.ID, err)
	}
	done, ended := make(chan struct{}), new(atomic.Bool)
	go func() {
		err := cmd.Wait()
		fmt.Fprintf(lf, "=== chaos %s: exited: %v\n", time.Now().Format(time.RFC3339Nano), err)
		lf.Close()
		if !ended.Load() {
			c.exited(n)
		}
		close(done)
	}()
	n.cmd, n.done, n.ended, n.paused = cmd, done, ended, false
	return nil
}

// Kill sends SIGKILL and waits for the process to exit.
func (c *Cluster) Kill(n *Node) { c.signalAndWait(n, syscall.SIGKILL, 0) }

// StopGrace is how long a node has to exit after SIGTERM: a clean stop
// takes a few seconds.
const StopGrace = 10 * time.Second

// ForcedStop is a graceful stop that did not end the process within the
// grace period, so SIGKILL ended it. A node that hangs on SIGTERM is a bug
// of its own (a chaos run found raft's Shutdown waiting for ever on a
// wedged replication goroutine), which SIGKILL would otherwise hide.
type ForcedStop struct {
	Node  string        `json:"node"`
	At    int64         `json:"at_ns"` // when SIGTERM was sent
	Grace time.Duration `json:"grace_ns"`
}

// Stop sends SIGTERM, and SIGKILL after StopGrace; a stop that needed
// SIGKILL is recorded (ForcedStops).
func (c *Cluster) Stop(n *Node) {
	grace := c.stopGrace
	if grace == 0 {
		grace = StopGrace
	}
	var at int64
	if c.clock != nil {
		at = c.clock()
	}
	if c.signalAndWait(n, syscall.SIGTERM, grace) {
		c.mu.Lock()
		c.forced = append(c.forced, ForcedStop{Node: n.ID, At: at, Grace: grace})
		c.mu.Unlock()
	}
}

// Exit is a node's process that ended without the harness stopping or
// killing it: a crash, a node that gave up (a full disk), or a signal
// from outside the harness. Liveness then reports the node unready for
// as long as nothing starts it again, with its readiness probe's last
// answer; this says why it went (a soak found two of three nodes gone for
// six minutes after SIGTERMs the harness never sent, reported only as
// "no leader").
type Exit struct {
	Node string `json:"node"`
	At   int64  `json:"at_ns"`
	Said string `json:"said"` // lastWords of its log: why it ended
}

func (c *Cluster) exited(n *Node) {
	var at int64
	if c.clock != nil {
		at = c.clock()
	}
	said := n.exitTail()
	c.mu.Lock()
	c.exits = append(c.exits, Exit{Node: n.ID, At: at, Said: said})
	c.mu.Unlock()
}

// Exits are the exits the harness did not cause so far.
func (c *Cluster) Exits() []Exit {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]Exit(nil), c.exits...)
}

// ForcedStops are the stops that needed SIGKILL so far.
func (c *Cluster) ForcedStops() []ForcedStop {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]ForcedStop(nil), c.forced...)
}

// signalAndWait sends sig and waits for the process to exit; after grace,
// when positive, it sends SIGKILL, and reports that it had to.
func (c *Cluster) signalAndWait(n *Node, sig syscall.Signal, grace time.Duration) (killed bool) {
	n.mu.Lock()
	if !n.runningLocked() {
		n.mu.Unlock()
		return false
	}
	cmd, done, paused := n.cmd, n.done, n.paused
	n.ended.Store(true)
	n.mu.Unlock()
	cmd.Process.Signal(sig)
	if paused {
		cmd.Process.Signal(syscall.SIGCONT)
	}
	if grace > 0 {
		select {
		case <-done:
			return false
		case <-time.After(grace):
			cmd.Process.Signal(syscall.SIGKILL)
			killed = true
		}
	}
	<-done
	n.mu.Lock()
	n.paused = false
	n.mu.Unlock()
	return killed
}

// Pause stops the process with SIGSTOP.
func (c *Cluster) Pause(n *Node) error { return c.sig(n, syscall.SIGSTOP, true) }

// Resume continues a paused process with SIGCONT.
func (c *Cluster) Resume(n *Node) error { return c.sig(n, syscall.SIGCONT, false) }

func (c *Cluster) sig(n *Node, s syscall.Signal, paused bool) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if !n.runningLocked() {
		return fmt.Errorf("chaos: %s is not running", n.ID)
	}
	if err := n.cmd.Process.Signal(s); err != nil {
		return err
	}
	n.paused = paused
	return nil
}

// Restart kills (SIGKILL) and starts the node again.
func (c *Cluster) Restart(n *Node) error {
	c.Kill(n)
	return c.Start(n)
}

// SetClockOffset sets the --clock-offset the node gets at its next start.
func (c *Cluster) SetClockOffset(n *Node, d time.Duration) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.clockOffset = d
}

// SetRetention sets the --retention the node gets at its next start,
// in place of the cluster's; 0 gives it the cluster's again.
func (c *Cluster) SetRetention(n *Node, d time.Duration) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.retention = d
}

// Wipe removes the node's data dir (the node must be down).
func (c *Cluster) Wipe(n *Node) error {
	if n.Running() {
		return fmt.Errorf("chaos: wipe %s while it runs", n.ID)
	}
	return os.RemoveAll(n.DataDir)
}

// StartAll starts every node.
func (c *Cluster) StartAll() error {
	for _, n := range c.Nodes {
		if err := c.Start(n); err != nil {
			return err
		}
	}
	return nil
}

// StopAll stops every node gracefully (in parallel).
func (c *Cluster) StopAll() { c.StopNodes(c.Nodes) }

// StopNodes stops the given nodes gracefully (SIGTERM), in parallel, and
// waits for them.
func (c *Cluster) StopNodes(nodes []*Node) {
	var wg sync.WaitGroup
	for _, n := range nodes {
		wg.Add(1)
		go func() { defer wg.Done(); c.Stop(n) }()
	}
	wg.Wait()
}

// StartNodes starts the given nodes that are not running.
func (c *Cluster) StartNodes(nodes []*Node) error {
	var errs []error
	for _, n := range nodes {
		if !n.Running() {
			errs = append(errs, c.Start(n))
		}
	}
	return errors.Join(errs...)
}

// Transfer asks the leader l to hand leadership to another voter.
func (c *Cluster) Transfer(ctx context.Context, l *Node) error {
	return c.TransferTo(ctx, l, nil)
}

// TransferTo asks the leader l to hand leadership to the voter to, or to
// another voter (raft picks the most up to date) when to is nil.
func (c *Cluster) TransferTo(ctx context.Context, l, to *Node) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	var in any
	if to != nil {
		in = map[string]string{"id": to.ID}
	}
	_, err := l.Client.Do(ctx, http.MethodPost, "/v1/cluster/transfer-leadership", nil, in)
	return err
}

// SnapshotInfo is the newest raft snapshot in a node's data dir.
type SnapshotInfo struct {
	Index  uint64
	Marker bool // a marker of the node's own state, not a received stream
}

// Snapshots lists the raft snapshots in the node's data dir (read from
// disk: the node may be down), newest first.
func (c *Cluster) Snapshots(n *Node) []SnapshotInfo {
	metas, _ := filepath.Glob(filepath.Join(n.DataDir, "snapshots", "*", "meta.json"))
	var out []SnapshotInfo
	for _, m := range metas {
		b, err := os.ReadFile(m)
		if err != nil {
			continue
		}
		var meta struct{ Index uint64 }
		if jsonUnmarshal(b, &meta) != nil {
			continue
		}
		si := SnapshotInfo{Index: meta.Index}
		if f, err := os.Open(filepath.Join(filepath.Dir(m), "state.bin")); err == nil {
			head := make([]byte, 8)
			k, _ := f.Read(head)
			f.Close()
			si.Marker = string(head[:k]) == "IDEMLIVE"
		}
		out = append(out, si)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Index > out[j].Index })
	return out
}

// Live returns the nodes whose process runs and is not paused.
func (c *Cluster) Live() []*Node {
	var out []*Node
	for _, n := range c.Nodes {
		if n.Running() && !n.Paused() {
			out = append(out, n)
		}
	}
	return out
}

// Status asks one node for its view of the cluster.
func (c *Cluster) Status(ctx context.Context, n *Node) (*client.Cluster, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	return n.Client.Cluster(ctx)
}

// Leader returns the node that live nodes name as leader, if any, asking
// them in turn.
func (c *Cluster) Leader(ctx context.Context) (*Node, error) {
	for _, n := range c.Live() {
		st, err := c.Status(ctx, n)
		if err != nil || st.Leader == nil {
			continue
		}
		if l := c.Node(st.Leader.ID); l != nil {
			return l, nil
		}
	}
	return nil, errors.New("chaos: no node knows a leader")
}

// WaitLeader polls until some node names a leader that itself answers as
// leader, or the timeout passes.
func (c *Cluster) WaitLeader(ctx context.Context, timeout time.Duration) (*Node, error) {
	deadline := time.Now().Add(timeout)
	for {
		l, err := c.Leader(ctx)
		if err == nil {
			if st, err2 := c.Status(ctx, l); err2 == nil && st.Leader != nil && st.Leader.ID == l.ID {
				return l, nil
			}
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return nil, fmt.Errorf("chaos: no leader within %s", timeout)
		}
		sleep(ctx, 200*time.Millisecond)
	}
}

// Followers returns the live members that are not the leader.
func (c *Cluster) Followers(ctx context.Context) ([]*Node, *Node, error) {
	l, err := c.WaitLeader(ctx, 10*time.Second)
	if err != nil {
		return nil, nil, err
	}
	var out []*Node
	for _, n := range c.Live() {
		if n != l {
			out = append(out, n)
		}
	}
	return out, l, nil
}

// WaitReady polls /readyz of the given nodes until all answer 200.
func (c *Cluster) WaitReady(ctx context.Context, nodes []*Node, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for _, n := range nodes {
		for {
			rctx, cancel := context.WithTimeout(ctx, time.Second)
			err := n.Client.Readyz(rctx)
			cancel()
			if err == nil {
				break
			}
			if !n.Running() {
				return fmt.Errorf("chaos: %s is not running: %s", n.ID, n.exitTail())
			}
			if time.Now().After(deadline) || ctx.Err() != nil {
				return fmt.Errorf("chaos: %s not ready within %s: %v", n.ID, timeout, err)
			}
			sleep(ctx, 200*time.Millisecond)
		}
	}
	return nil
}

// IsMember reports whether the leader's configuration lists the node.
func (c *Cluster) IsMember(ctx context.Context, n *Node) bool {
	l, err := c.Leader(ctx)
	if err != nil {
		return false
	}
	st, err := c.Status(ctx, l)
	if err != nil {
		return false
	}
	for _, m := range st.Nodes {
		if m.ID == n.ID {
			return true
		}
	}
	return false
}

func pick[T any](r *rand.Rand, xs []T) T { return xs[r.IntN(len(xs))] }

func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// AppliedIndex is the index the node's state was taken at
// (/v1/admin/state).
func (c *Cluster) AppliedIndex(ctx context.Context, n *Node) (uint64, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	raw, err := n.Client.Do(ctx, "GET", "/v1/admin/state", nil, nil)
	if err != nil {
		return 0, err
	}
	var st struct {
		Applied uint64 `json:"applied_index"`
	}
	err = jsonUnmarshal(raw, &st)
	return st.Applied, err
}

// WaitApplied polls until the node has applied index.
func (c *Cluster) WaitApplied(ctx context.Context, n *Node, index uint64, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		a, err := c.AppliedIndex(ctx, n)
		if err == nil && a >= index {
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("chaos: %s did not apply index %d within %s (at %d, %v)", n.ID, index, timeout, a, err)
		}
		sleep(ctx, 100*time.Millisecond)
	}
}
