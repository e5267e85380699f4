package chaos

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// A liveness violation found only after the run says that a node was stuck,
// not why: by then the node has recovered or been restarted by the final
// healing. So while the run goes on, a node that is running, not paused and
// unready for half the ready bound has every node's state captured into
// Out/diag/<time>-<node>/: each node's goroutines (GET
// /debug/pprof/goroutine?debug=2; the nodes run with --pprof), its view of
// the cluster (GET /v1/cluster), its metrics (raft's commit and applied
// indexes, the FSM's applied index) and its /readyz answer. A stuck node
// whose HTTP server does not answer is sent SIGQUIT instead (the Go runtime
// writes every goroutine into its log and exits) and started again. The
// capture is repeated once at the full bound, so the two show what moved.

// Diag is one capture of the cluster's state while a node was stuck.
type Diag struct {
	Node string `json:"node"`  // the stuck node
	At   int64  `json:"at_ns"` // when the capture started (history clock)
	Dir  string `json:"dir"`
	// Unready is how long the node had been unready when it was taken.
	Unready time.Duration `json:"unready_ns"`
	Note    string        `json:"note,omitempty"` // what could not be captured, SIGQUIT
}

// diagnoser watches the monitor's probes and captures stuck nodes.
type diagnoser struct {
	cl    *Cluster
	h     *History
	dir   string
	after time.Duration // capture at after and 2*after of unreadiness

	mu      sync.Mutex
	since   map[string]int64 // node -> start of its current unready stretch
	taken   map[string]int   // node -> captures in the current stretch
	diags   []Diag
	pending sync.WaitGroup
}

func newDiagnoser(cl *Cluster, h *History, dir string, after time.Duration) *diagnoser {
	return &diagnoser{cl: cl, h: h, dir: dir, after: after, since: map[string]int64{}, taken: map[string]int{}}
}

// observe is called with every probe of n. Only a node that runs and is
// not paused counts: a killed or stopped node is a nemesis at work.
func (d *diagnoser) observe(n *Node, ready bool) {
	if d == nil {
		return
	}
	now := d.h.Now()
	d.mu.Lock()
	defer d.mu.Unlock()
	if ready || !n.Running() || n.Paused() {
		delete(d.since, n.ID)
		delete(d.taken, n.ID)
		return
	}
	start, ok := d.since[n.ID]
	if !ok {
		d.since[n.ID] = now
		return
	}
	k := d.taken[n.ID]
	if k >= 2 || time.Duration(now-start) < time.Duration(k+1)*d.after {
		return
	}
	d.taken[n.ID] = k + 1
	d.pending.Add(1)
	go func() {
		defer d.pending.Done()
		dg := d.capture(n, now, time.Duration(now-start))
		d.mu.Lock()
		d.diags = append(d.diags, dg)
		d.mu.Unlock()
	}()
}

// Diags waits for captures in progress and returns them all.
func (d *diagnoser) Diags() []Diag {
	if d == nil {
		return nil
	}
	d.pending.Wait()
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]Diag(nil), d.diags...)
}

// capture writes every running node's state into a new directory.
func (d *diagnoser) capture(stuck *Node, at int64, unready time.Duration) Diag {
	dir := filepath.Join(d.dir, fmt.Sprintf("%06.1fs-%s", float64(at)/1e9, stuck.ID))
	dg := Diag{Node: stuck.ID, At: at, Dir: dir, Unready: unready}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		dg.Note = err.Error()
		return dg
	}
	var notes []string
	var mu sync.Mutex
	var wg sync.WaitGroup
	gotStuck := false
	for _, n := range d.cl.Nodes {
		if !n.Running() {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			var failed []string
			for _, f := range []struct{ path, file string }{
				{"/debug/pprof/goroutine?debug=2", "goroutines.txt"},
				{"/v1/cluster", "cluster.json"},
				{"/metrics", "metrics.txt"},
				{"/readyz", "readyz.json"},
			} {
				if err := d.cl.fetch(n, f.path, filepath.Join(dir, n.ID+"-"+f.file)); err != nil {
					failed = append(failed, fmt.Sprintf("%s %s: %v", n.ID, f.path, err))
					continue
				}
				if n == stuck && f.file == "goroutines.txt" {
					mu.Lock()
					gotStuck = true
					mu.Unlock()
				}
			}
			mu.Lock()
			notes = append(notes, failed...)
			mu.Unlock()
		}()
	}
	wg.Wait()
	if !gotStuck && stuck.Running() && !stuck.Paused() {
		// Last resort: the runtime's own dump, into the node's log.
		if err := d.cl.sigquit(stuck); err != nil {
			notes = append(notes, fmt.Sprintf("SIGQUIT %s: %v", stuck.ID, err))
		} else {
			notes = append(notes, fmt.Sprintf("%s did not answer: sent SIGQUIT, its goroutines are at the end of %s, and started it again", stuck.ID, stuck.LogPath))
		}
	}
	dg.Note = strings.Join(notes, "; ")
	summary := fmt.Sprintf("%s unready for %s (running, not paused) at %s into the run\n%s\n",
		stuck.ID, unready.Round(100*time.Millisecond), strings.TrimSpace(secs(at)), dg.Note)
	os.WriteFile(filepath.Join(dir, "README.txt"), []byte(summary), 0o644)
	return dg
}

// fetch GETs path from n and writes the body to file.
func (c *Cluster) fetch(n *Node, path, file string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.scheme+n.HTTPAddr+path, nil)
	if err != nil {
		return err
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK && path != "/readyz" {
		return fmt.Errorf("status %d: %s", resp.StatusCode, lastLine(body))
	}
	return os.WriteFile(file, body, 0o644)
}

// sigquit makes a wedged node's runtime write its goroutines to its log
// (it then exits), waits for it to exit and starts it again.
func (c *Cluster) sigquit(n *Node) error {
	n.mu.Lock()
	if !n.runningLocked() {
		n.mu.Unlock()
		return fmt.Errorf("not running")
	}
	cmd, done := n.cmd, n.done
	n.mu.Unlock()
	if err := cmd.Process.Signal(syscall.SIGQUIT); err != nil {
		return err
	}
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		c.Kill(n)
	}
	return c.Start(n)
}

// diagsFor returns the captures taken while node was stuck around a
// violation at `at` (within bound either side of its stretch).
func diagsFor(diags []Diag, node string, at int64, bound time.Duration) []string {
	var out []string
	for _, dg := range diags {
		if dg.Node == node && dg.At <= at+int64(bound) && dg.At >= at-3*int64(bound) {
			out = append(out, dg.Dir)
		}
	}
	return out
}
