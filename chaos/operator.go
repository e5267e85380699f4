package chaos

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/idem-store/idem/client"
)

// The nemeses of this file are what operators and ordinary events do to a
// cluster, rather than the network and the kernel: a lost fsm directory, a
// clean restart of the whole cluster, membership changes done carelessly.
// Each was written after a bug it would have found (issue 9).

// fsmLossNemesis: one node loses its fsm directory (its raft log is kept)
// and restarts with its wall clock an hour ahead, while the rest of the
// cluster is down, so it can win the election before its state machine
// has applied anything. The node is the one that takes no snapshots of its
// own (its log goes back to index 1, which is what makes the loss
// recoverable: with a snapshot marker there is nothing to replay onto).
// The other nodes stop in two groups: a minority first, then the rest
// with the victim once more entries committed, so the victim's log is
// ahead of the first group's and only it can be elected when it restarts
// with them.
//
// Bug 2 of issue 9: a leader with an unanchored clock stamped commands
// with its own wall clock, cluster time jumped an hour, and records with a
// shorter retention were claimed again seconds after their first claim.
func fsmLossNemesis(ctx context.Context, e *env) (string, error) {
	v := e.cl.Node(e.cl.cfg.NoSnapshots)
	if v == nil {
		return "fsm-loss: no node runs without snapshots of its own", errors.New("chaos: fsm-loss needs ClusterConfig.NoSnapshots")
	}
	if _, err := e.cl.WaitLeader(ctx, 10*time.Second); err != nil {
		return "fsm-loss: no leader", err
	}
	others := without(e.cl.Nodes, v)
	e.rnd.Shuffle(len(others), func(i, j int) { others[i], others[j] = others[j], others[i] })
	quorum := len(e.cl.Nodes)/2 + 1
	first, rest := others[:quorum-1], others[quorum-1:]

	e.cl.StopNodes(first)
	// The victim and rest are a bare quorum: every entry they commit now
	// is in the victim's log and not in first's.
	var more uint64
	if c0, err := e.cl.CommitIndex(ctx); err == nil {
		deadline := time.Now().Add(5 * time.Second)
		for time.Now().Before(deadline) && ctx.Err() == nil {
			sleep(ctx, 200*time.Millisecond)
			if c, err := e.cl.CommitIndex(ctx); err == nil && c >= c0+5 {
				more = c - c0
				break
			}
		}
	}
	e.cl.StopNodes(append(append([]*Node(nil), rest...), v))

	snaps := e.cl.Snapshots(v)
	lost := filepath.Join(v.DataDir, "fsm")
	if err := os.RemoveAll(lost); err != nil {
		e.cl.StartNodes(e.cl.Nodes)
		e.healed()
		return "fsm-loss: delete " + lost, err
	}
	e.cl.SetClockOffset(v, e.skew)
	detail := fmt.Sprintf("stop %s, then %s and %s (%d entries later); delete %s/fsm (raft log kept, %s); start %s with --clock-offset %s and %s",
		ids(first), ids(rest), v.ID, more, v.ID, describeSnapshots(snaps), v.ID, e.skew, ids(first))
	err := errors.Join(e.cl.Start(v), e.cl.StartNodes(first))
	l, lerr := e.cl.WaitLeader(ctx, e.bound)
	if lerr == nil {
		detail += fmt.Sprintf(": %s led first", l.ID)
		switch {
		case l == v && len(snaps) == 0:
			detail += " (its state empty: nothing applied yet)"
		case l == v:
			detail += " (its state restored from that snapshot first)"
		}
	}
	detail += fmt.Sprintf("; start %s", ids(rest))
	err = errors.Join(err, lerr, e.cl.StartNodes(rest))
	// Under load with the skewed clock for a while, then back to a true
	// clock (a clean restart: the rebuilt state is kept).
	sleep(ctx, 3*time.Second)
	e.cl.Stop(v)
	e.cl.SetClockOffset(v, 0)
	err = errors.Join(err, e.cl.Start(v))
	detail += fmt.Sprintf("; 3s later restart %s without the offset", v.ID)
	e.healed()
	return detail, errors.Join(err, e.cl.WaitReady(ctx, e.cl.Nodes, e.bound))
}

func describeSnapshots(s []SnapshotInfo) string {
	if len(s) == 0 {
		return "no snapshot"
	}
	kind := "received from a leader"
	if s[0].Marker {
		kind = "a marker of its own state"
	}
	return fmt.Sprintf("newest snapshot at index %d, %s", s[0].Index, kind)
}

// quietRestartNemesis stops the whole cluster cleanly at a quiet moment
// and starts it again, the way a careful operator does maintenance: no
// traffic, leadership handed over, linearizable reads to check the state
// (each term's first one commits a Barrier entry), the followers stopped
// first, the leader last once it has taken a snapshot, then every node
// started. There is no way to force a snapshot from outside, so the nodes
// run with --snapshot-threshold 1 and the nemesis waits for one.
//
// Bug 1 of issue 9: raft counts no-op and Barrier entries in a snapshot's
// index but the state machine never sees them, so a snapshot taken right
// after them was above the state's applied index and the clean restart
// was refused ("Remove the whole data dir...").
func quietRestartNemesis(ctx context.Context, e *env) (string, error) {
	resume := func() {}
	if e.w != nil {
		e.w.Pause()
		resumed := false
		resume = func() {
			if !resumed {
				resumed = true
				e.w.Resume()
			}
		}
		defer resume()
	}
	var notes []string
	note := func(f string, a ...any) { notes = append(notes, fmt.Sprintf(f, a...)) }
	detail := func() string { return "clients paused; " + strings.Join(notes, "; ") }

	l, err := e.cl.WaitLeader(ctx, 10*time.Second)
	if err != nil {
		return "quiet-restart: no leader", err
	}
	if err := e.cl.WaitSettled(ctx, 10*time.Second); err != nil {
		note("not settled: %v", err)
	}
	// A new term, whose no-op and Barrier come after every command.
	// The node without snapshots of its own cannot be the last one up:
	// hand leadership on until another node has it.
	l2 := l
	for try := 0; try < 4 && (try == 0 || l2.noSnapshots); try++ {
		if err := e.cl.Transfer(ctx, l2); err != nil {
			note("transfer from %s refused: %v", l2.ID, err)
			break
		}
		from := l2
		if nl, err := e.cl.WaitNewLeader(ctx, from, 10*time.Second); err == nil {
			l2 = nl
			note("leadership %s -> %s", from.ID, l2.ID)
		} else {
			note("no new leader after transfer: %v", err)
			break
		}
	}
	// Let the new leader's first command of its term (its address record,
	// at its first tick) apply, so the reads' Barrier is the last entry.
	if a0, err := e.cl.AppliedIndex(ctx, l2); err == nil {
		deadline := time.Now().Add(3 * time.Second)
		for time.Now().Before(deadline) && ctx.Err() == nil {
			if a, err := e.cl.AppliedIndex(ctx, l2); err == nil && a > a0 {
				break
			}
			sleep(ctx, 20*time.Millisecond)
		}
	}
	reads := 0
	for _, n := range e.cl.Nodes {
		rctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		_, err := n.Client.Get(rctx, "chaos", "quiet-restart", "probe", "linearizable")
		cancel()
		var p *client.Problem
		if err == nil || (errors.As(err, &p) && p.Status == http.StatusNotFound) {
			reads++
		}
	}
	note("%d/%d linearizable reads", reads, len(e.cl.Nodes))
	// Followers first: nothing can commit after them, so the leader's
	// log ends at the Barrier while it snapshots.
	fs := without(e.cl.Nodes, l2)
	e.cl.StopNodes(fs)
	note("SIGTERM %s", ids(fs))
	st, serr := e.cl.Status(ctx, l2)
	if serr == nil {
		deadline := time.Now().Add(10 * time.Second)
		for time.Now().Before(deadline) && ctx.Err() == nil {
			if s := e.cl.Snapshots(l2); len(s) > 0 && s[0].Index >= st.AppliedIndex {
				break
			}
			sleep(ctx, 100*time.Millisecond)
		}
	}
	applied, _ := e.cl.AppliedIndex(ctx, l2)
	if s := e.cl.Snapshots(l2); len(s) > 0 {
		note("%s snapshot at raft index %d, state applied %d", l2.ID, s[0].Index, applied)
	} else {
		note("%s took no snapshot", l2.ID)
	}
	e.cl.Stop(l2)
	note("SIGTERM %s; start all", l2.ID)
	err = e.cl.StartNodes(e.cl.Nodes)
	e.healed()
	resume() // the clients meet the cluster while it starts
	return detail(), errors.Join(err, e.cl.WaitReady(ctx, e.cl.Nodes, e.bound))
}

// membershipNemesis changes membership the way the README's first reader
// did: it joins a node that does not exist (an id whose addresses nobody
// listens on), removes the leader and adds it back with the same id and
// addresses as its log advises, then removes the absent node. Refusals
// (4xx problems) are fine answers; what must not happen is a cluster that
// stops serving, or a node that never becomes ready again: the liveness
// check reports those.
func membershipNemesis(ctx context.Context, e *env) (string, error) {
	l, err := e.cl.WaitLeader(ctx, 10*time.Second)
	if err != nil {
		return "membership: no leader", err
	}
	ghost, err := e.cl.absentNode()
	if err != nil {
		return "membership: no free address for an absent node", err
	}
	var steps []string
	var errs []error
	step := func(what string, raw []byte, err error) bool {
		var p *client.Problem
		switch {
		case err == nil:
			steps = append(steps, what+": "+outcome(raw))
			return true
		case errors.As(err, &p) && p.Status < 500:
			steps = append(steps, fmt.Sprintf("%s: refused %d %s", what, p.Status, p.Code))
			return false
		default:
			steps = append(steps, what+": failed")
			errs = append(errs, fmt.Errorf("%s: %w", what, err))
			return false
		}
	}
	detail := func() string { return strings.Join(steps, "; ") }
	call := func(n *Node, f func(context.Context, *client.Client) ([]byte, error)) ([]byte, error) {
		rctx, cancel := context.WithTimeout(ctx, 15*time.Second)
		defer cancel()
		return f(rctx, n.Client)
	}

	via := pick(e.rnd, e.cl.Live())
	raw, err := call(via, func(c context.Context, cl *client.Client) ([]byte, error) { return cl.Join(c, ghost) })
	step(fmt.Sprintf("join absent %s (raft %s) via %s", ghost.ID, ghost.RaftAddr, via.ID), raw, err)
	sleep(ctx, 3*time.Second)

	raw, err = call(l, func(c context.Context, cl *client.Client) ([]byte, error) { return cl.Remove(c, l.ID) })
	if step(fmt.Sprintf("remove the leader %s", l.ID), raw, err) {
		if nl, err := e.cl.WaitNewLeader(ctx, l, e.bound); err != nil {
			errs = append(errs, err)
		} else {
			raw, err = call(nl, func(c context.Context, cl *client.Client) ([]byte, error) {
				return cl.Join(c, client.JoinRequest{ID: l.ID, RaftAddr: l.RaftAddr, HTTPAddr: l.HTTPAddr})
			})
			if step(fmt.Sprintf("re-add %s with the same id and addresses via %s", l.ID, nl.ID), raw, err) {
				if err := e.cl.WaitMember(ctx, l, e.bound); err != nil {
					errs = append(errs, err)
				}
			}
		}
	}

	if ll, err := e.cl.WaitLeader(ctx, 10*time.Second); err != nil {
		errs = append(errs, err)
	} else {
		raw, err = call(ll, func(c context.Context, cl *client.Client) ([]byte, error) { return cl.Remove(c, ghost.ID) })
		step(fmt.Sprintf("remove %s", ghost.ID), raw, err)
	}
	e.healed()
	errs = append(errs, e.cl.WaitReady(ctx, e.cl.Nodes, e.bound))
	return detail(), errors.Join(errs...)
}

// outcome is the "outcome" (and "suffrage") of a membership answer.
func outcome(raw []byte) string {
	var a struct {
		Outcome  string `json:"outcome"`
		Suffrage string `json:"suffrage"`
	}
	if jsonUnmarshal(raw, &a) != nil || a.Outcome == "" {
		return "ok"
	}
	if a.Suffrage != "" {
		return a.Outcome + " as " + a.Suffrage
	}
	return a.Outcome
}

// absentNode is a node id and addresses nobody serves: the next loopback
// IPs after the cluster's whose ports do not answer.
func (c *Cluster) absentNode() (client.JoinRequest, error) {
	for i := len(c.Nodes) + 1; i < 250; i++ {
		ip := fmt.Sprintf("127.0.0.%d", i)
		req := client.JoinRequest{ID: fmt.Sprintf("n%d", i),
			RaftAddr: fmt.Sprintf("%s:%d", ip, c.cfg.RaftPort), HTTPAddr: fmt.Sprintf("%s:%d", ip, c.cfg.HTTPPort)}
		if !answers(req.RaftAddr) && !answers(req.HTTPAddr) {
			return req, nil
		}
	}
	return client.JoinRequest{}, errors.New("chaos: every candidate address answers")
}

func answers(addr string) bool {
	conn, err := net.DialTimeout("tcp", addr, 300*time.Millisecond)
	if err != nil {
		return false
	}
	conn.Close()
	return true
}

// CommitIndex is the leader's commit index.
func (c *Cluster) CommitIndex(ctx context.Context) (uint64, error) {
	l, err := c.Leader(ctx)
	if err != nil {
		return 0, err
	}
	st, err := c.Status(ctx, l)
	if err != nil {
		return 0, err
	}
	return st.CommitIndex, nil
}

// WaitNewLeader waits for a leader other than old.
func (c *Cluster) WaitNewLeader(ctx context.Context, old *Node, timeout time.Duration) (*Node, error) {
	deadline := time.Now().Add(timeout)
	for {
		if l, err := c.WaitLeader(ctx, time.Second); err == nil && l != old {
			return l, nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return nil, fmt.Errorf("chaos: no leader other than %s within %s", old.ID, timeout)
		}
		sleep(ctx, 100*time.Millisecond)
	}
}

// WaitSettled waits until every live node has applied (in raft's sense)
// the leader's commit index.
func (c *Cluster) WaitSettled(ctx context.Context, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		commit, err := c.CommitIndex(ctx)
		if err == nil {
			var mu sync.Mutex
			behind := 0
			var wg sync.WaitGroup
			for _, n := range c.Live() {
				wg.Add(1)
				go func() {
					defer wg.Done()
					st, err := c.Status(ctx, n)
					if err != nil || st.AppliedIndex < commit {
						mu.Lock()
						behind++
						mu.Unlock()
					}
				}()
			}
			wg.Wait()
			if behind == 0 {
				return nil
			}
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("chaos: the nodes did not all apply the leader's commit index within %s", timeout)
		}
		sleep(ctx, 100*time.Millisecond)
	}
}
