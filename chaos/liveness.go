package chaos

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/idem-store/idem/client"
)

// Liveness is checked like safety: from a record. A monitor polls every
// node's /readyz through the whole run and records each change; after the
// run, Liveness reads that record against the nemesis windows. A node may be
// unready while a fault is in place (from a nemesis's start until it heals)
// and for a bound after; unready time outside the windows beyond the bound
// is a violation. Counting only time outside the windows (instead of
// restarting the count at every new nemesis) keeps a node that never comes
// back from being excused for ever by a schedule that always has the next
// fault running.

// ReadySample is a change in one node's readiness as the monitor saw it.
// Detail says why it was not ready (the last answer while unready).
type ReadySample struct {
	Node   string `json:"node"`
	At     int64  `json:"at_ns"`
	Ready  bool   `json:"ready"`
	Detail string `json:"detail,omitempty"`
}

// Window is a span during which no node has to be ready: a nemesis from
// its start until it healed, or the harness's own healing at the end.
type Window struct {
	Label      string
	Start, End int64
}

// Windows are the nemesis windows of events, start to heal.
func Windows(events []Event) []Window {
	var out []Window
	for _, e := range events {
		end := e.Healed
		if end == 0 || end > e.End {
			end = e.End
		}
		out = append(out, Window{Label: e.Kind, Start: e.Start, End: end})
	}
	return out
}

// Liveness returns a violation for every stretch in which a node was not
// ready for longer than bound, not counting time inside windows. end is
// when monitoring stopped: a stretch still open then is counted up to it.
func Liveness(samples []ReadySample, windows []Window, bound time.Duration, end int64) []Violation {
	merged := mergeWindows(windows)
	byNode := map[string][]ReadySample{}
	var nodes []string
	for _, s := range samples {
		if _, ok := byNode[s.Node]; !ok {
			nodes = append(nodes, s.Node)
		}
		byNode[s.Node] = append(byNode[s.Node], s)
	}
	sort.Strings(nodes)
	var out []Violation
	for _, node := range nodes {
		ss := byNode[node]
		sort.SliceStable(ss, func(i, j int) bool { return ss[i].At < ss[j].At })
		for i := 0; i < len(ss); i++ {
			if ss[i].Ready {
				continue
			}
			// A stretch: from this unready sample to the next ready one.
			start, detail := ss[i].At, ss[i].Detail
			stop := end
			var down []string // spans of the stretch its process was not running
			for {
				if notRunning(ss[i].Detail) {
					to := "the end"
					if i+1 < len(ss) {
						to = strings.TrimSpace(secs(ss[i+1].At))
					}
					down = append(down, fmt.Sprintf("from %s to %s (%s)", strings.TrimSpace(secs(ss[i].At)), to, strings.TrimPrefix(ss[i].Detail, notRunningPrefix)))
				}
				if i+1 >= len(ss) || ss[i+1].Ready {
					break
				}
				i++
				if ss[i].Detail != "" {
					detail = ss[i].Detail
				}
			}
			if i+1 < len(ss) {
				stop = ss[i+1].At
			}
			at, ok := overBound(start, stop, merged, int64(bound))
			if !ok {
				continue
			}
			healed, latest := "no nemesis had run", int64(-1)
			for _, w := range windows {
				if w.End <= at && w.End > latest {
					latest = w.End
					healed = fmt.Sprintf("last heal: %s at %s", w.Label, strings.TrimSpace(secs(w.End)))
				}
			}
			still := "ready again at " + strings.TrimSpace(secs(stop))
			if stop >= end {
				still = "still not ready when the run ended"
			}
			d := fmt.Sprintf("%s not ready (GET /readyz) for more than %s outside nemesis windows: unready from %s (%s), %s; last answer: %s",
				node, bound, strings.TrimSpace(secs(start)), healed, still, orNone(detail))
			if len(down) > 0 && !notRunning(detail) {
				d += "; its process was not running " + strings.Join(down, ", ")
			}
			out = append(out, Violation{Kind: VNotReady, Scope: node, At: at, Detail: d})
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].At < out[j].At })
	return out
}

// overBound finds the first instant in [start, stop) at which the time
// spent outside windows exceeds bound.
func overBound(start, stop int64, windows []Window, bound int64) (int64, bool) {
	cursor, acc := start, int64(0)
	for _, w := range windows {
		if w.End <= cursor {
			continue
		}
		if w.Start >= stop {
			break
		}
		if w.Start > cursor {
			gap := w.Start - cursor
			if acc+gap > bound {
				return cursor + bound - acc, true
			}
			acc += gap
		}
		cursor = max(cursor, w.End)
		if cursor >= stop {
			return 0, false
		}
	}
	if gap := stop - cursor; gap > 0 && acc+gap > bound {
		return cursor + bound - acc, true
	}
	return 0, false
}

// mergeWindows sorts windows and joins overlapping ones.
func mergeWindows(ws []Window) []Window {
	s := append([]Window(nil), ws...)
	sort.Slice(s, func(i, j int) bool { return s[i].Start < s[j].Start })
	var out []Window
	for _, w := range s {
		if n := len(out); n > 0 && w.Start <= out[n-1].End {
			out[n-1].End = max(out[n-1].End, w.End)
			continue
		}
		out = append(out, w)
	}
	return out
}

// Monitor polls /readyz of every node and records each change.
type Monitor struct {
	cl    *Cluster
	h     *History
	every time.Duration

	mu      sync.Mutex
	samples []ReadySample
	last    map[string]int // node -> index of its latest sample

	// diag, when set, captures a node that stays unready (diag.go).
	diag *diagnoser
}

// NewMonitor prepares a monitor of cl's nodes on h's clock.
func NewMonitor(cl *Cluster, h *History, every time.Duration) *Monitor {
	return &Monitor{cl: cl, h: h, every: every, last: map[string]int{}}
}

// Run polls until ctx ends.
func (m *Monitor) Run(ctx context.Context) {
	var wg sync.WaitGroup
	for _, n := range m.cl.Nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				m.Probe(ctx, n)
				if !sleep(ctx, m.every) {
					return
				}
			}
		}()
	}
	wg.Wait()
}

// Probe asks one node once and records the answer if it changed.
func (m *Monitor) Probe(ctx context.Context, n *Node) bool {
	ready, detail := m.ask(ctx, n)
	if ctx.Err() != nil {
		return ready
	}
	m.record(n.ID, m.h.Now(), ready, detail)
	m.diag.observe(n, ready)
	return ready
}

func (m *Monitor) ask(ctx context.Context, n *Node) (bool, string) {
	if !n.Running() {
		return false, notRunningPrefix + n.exitTail()
	}
	if n.Paused() {
		return false, "process paused (SIGSTOP)"
	}
	rctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	err := n.Client.Readyz(rctx)
	if err == nil {
		return true, ""
	}
	var p *client.Problem
	if errors.As(err, &p) {
		return false, fmt.Sprintf("%d %s", p.Status, p.Detail)
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return false, "no answer within 1s"
	}
	return false, err.Error()
}

func (m *Monitor) record(node string, at int64, ready bool, detail string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if i, ok := m.last[node]; ok && m.samples[i].Ready == ready {
		// The latest reason, but a process that exits, or is started
		// again, while unready starts a sample of its own: the reason a
		// node was down the longest (its process gone for minutes) was
		// replaced by its probe's answer after the final healing started
		// it ("503 no leader").
		if ready || detail == "" || notRunning(m.samples[i].Detail) == notRunning(detail) {
			if !ready && detail != "" {
				m.samples[i].Detail = detail
			}
			return
		}
	}
	m.last[node] = len(m.samples)
	m.samples = append(m.samples, ReadySample{Node: node, At: at, Ready: ready, Detail: detail})
}

const notRunningPrefix = "process not running: "

func notRunning(detail string) bool { return strings.HasPrefix(detail, notRunningPrefix) }

// Samples returns the record so far.
func (m *Monitor) Samples() []ReadySample {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]ReadySample(nil), m.samples...)
}

// Settle polls until every node is ready or bound has passed since
// `since` (then the record already holds the violation).
func (m *Monitor) Settle(ctx context.Context, since int64, bound time.Duration) {
	for ctx.Err() == nil {
		all := true
		for _, n := range m.cl.Nodes {
			all = m.Probe(ctx, n) && all
		}
		if all || m.h.Now()-since > int64(bound)+int64(time.Second) {
			return
		}
		sleep(ctx, m.every)
	}
}

// exitTail is what the node's process said last and how it exited, on one
// line: the warnings and errors of its latest run (read from the end of
// its log, which can be large) and the harness's "exited" line.
func (n *Node) exitTail() string {
	f, err := os.Open(n.LogPath)
	if err != nil {
		return "no log"
	}
	defer f.Close()
	const tail = 16 << 10
	if st, err := f.Stat(); err == nil && st.Size() > tail {
		f.Seek(st.Size()-tail, io.SeekStart)
	}
	b, _ := io.ReadAll(f)
	return lastWords(string(b))
}

// harnessWarnings are the warnings a node gives of the flags the harness
// sets on purpose (a low --trailing-logs, so snapshots are sent often; a
// retention of the run's length, shorter than the default bucket width):
// every run starts with them, and they never say why one ended.
var harnessWarnings = []string{`msg="--trailing-logs `, `msg="the bucket width `}

// lastWords picks from a node's log the lines that say why its latest run
// ended: after the harness's last start line, no info, debug or raft
// chatter nor the harness's own warnings, at most two of them, then how
// the process exited.
func lastWords(log string) string {
	ls := strings.Split(strings.TrimSpace(log), "\n")
	for i := len(ls) - 1; i >= 0; i-- {
		if strings.HasPrefix(ls[i], "=== chaos ") && strings.Contains(ls[i], ": start ") {
			ls = ls[i+1:]
			break
		}
	}
	var said []string
	exited := ""
	for _, l := range ls {
		l = strings.TrimSpace(l)
		switch {
		case l == "", strings.Contains(l, "level=INFO"), strings.Contains(l, "level=DEBUG"),
			strings.Contains(l, "component=raft"), harnessWarned(l):
		case strings.HasPrefix(l, "=== chaos ") && strings.Contains(l, ": exited: "):
			exited = "exited: " + l[strings.Index(l, ": exited: ")+len(": exited: "):]
		default:
			said = append(said, l)
		}
	}
	if len(said) > 2 {
		said = said[len(said)-2:]
	}
	if exited != "" {
		said = append(said, exited)
	}
	s := strings.Join(said, " | ")
	if len(s) > 700 {
		s = "…" + s[len(s)-700:]
	}
	if s == "" {
		return "nothing in its log"
	}
	return s
}

func harnessWarned(l string) bool {
	for _, w := range harnessWarnings {
		if strings.Contains(l, w) {
			return true
		}
	}
	return false
}

// Progress is liveness of the whole cluster, for when /readyz is not
// enough (a leader stuck with a configuration whose quorum is gone still
// answers ready): while the clients run, some operation must succeed at
// least every bound, not counting time inside windows. start and end are
// when the clients started and stopped.
func Progress(ops []*Op, windows []Window, bound time.Duration, start, end int64) []Violation {
	var done []int64
	for _, o := range ops {
		if o.Outcome == OK && !o.Final && o.Return <= end {
			done = append(done, o.Return)
		}
	}
	sort.Slice(done, func(i, j int) bool { return done[i] < done[j] })
	merged := mergeWindows(windows)
	var out []Violation
	last := start
	for _, t := range append(done, end) {
		if t <= last {
			continue
		}
		if at, ok := overBound(last, t, merged, int64(bound)); ok {
			still := "the next one at " + strings.TrimSpace(secs(t))
			if t == end {
				still = "none until the clients stopped at " + strings.TrimSpace(secs(end))
			}
			out = append(out, Violation{Kind: VNoProgress, At: at,
				Detail: fmt.Sprintf("no operation succeeded for more than %s outside nemesis windows: the last success at %s, %s",
					bound, strings.TrimSpace(secs(last)), still)})
		}
		last = t
	}
	return out
}
