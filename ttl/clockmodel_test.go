package ttl

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"
)

// A model of how raftfsm drives the clocks of three nodes: the leader
// stamps each entry with its Clock (StampMs), at least every second (a
// tick), and applies it within 50 ms, every other node applies the
// committed entries in batches, late, and observes the state's time after
// each batch (Step over the stamps, as FSM.ApplyBatch and Restore do), a
// restarted node starts a new Clock anchored at its stored state time (as
// NewFSM does), and a new leader applies every committed entry (its term's
// barrier) and then follows the log (FollowLog) before it stamps. Nodes
// stop and start, alone or two at once, for short and long gaps; the
// leadership moves to any node that is up, as a transfer, a crash or a
// slow node's election makes it; a leader without a quorum steps down;
// the whole cluster is paused, its leader staying leader.
// No record may be judged at a cluster time further on than the real time
// since it was created.
type modelNode struct {
	c       *Clock
	ft      *fakeTicks
	up      bool
	applied int   // entries applied (kept across a restart: Pebble)
	stateMs int64 // the state's cluster time after them
}

type modelEntry struct {
	at      time.Duration // real time of its stamp
	stateMs int64         // the state's time once it is applied
}

type clockModel struct {
	t      *testing.T
	rng    *rand.Rand
	now    time.Duration // real time
	nodes  []*modelNode
	leader int // -1 when none
	log    []modelEntry
	// minOff is the least stateMs - at (in ms) of the entries so far: an
	// entry's state time must not exceed it plus its own real time, or a
	// record created by an earlier entry is judged at a time further on
	// than the real time since it was asked for (expired early).
	minOff int64
	trace  []string
}

const modelT0 = 1_700_000_000_000

func (m *clockModel) newClock(n *modelNode) {
	c, _ := clockWithWall(0, wall0)
	ft := &fakeTicks{mono: time.Duration(m.rng.IntN(1000)) * time.Hour, raw: time.Duration(m.rng.IntN(1000)) * time.Hour}
	c.mono, c.raw = ft.readMono, ft.readRaw
	n.c, n.ft = c, ft
	if n.stateMs > 0 {
		n.c.Observe(n.stateMs) // NewFSM
	}
}

func (m *clockModel) upCount() int {
	k := 0
	for _, n := range m.nodes {
		if n.up {
			k++
		}
	}
	return k
}

// advance lets real time pass: an idle leader with a quorum stamps a tick
// every second (and applies its entries within 50 ms of their stamps).
func (m *clockModel) advance(d time.Duration) {
	for d > 0 {
		step := min(d, time.Second)
		d -= step
		m.now += step
		for _, n := range m.nodes {
			if n.up {
				n.ft.advance(step, step)
			}
		}
		if m.leader >= 0 && step >= 50*time.Millisecond {
			m.apply(m.leader, len(m.log))
		}
		if m.leader >= 0 && step == time.Second {
			m.stamp()
		}
	}
}

// apply applies the committed entries node i lacks, up to upto, as one
// batch, and observes the state's time (FSM.ApplyBatch, or a snapshot's
// Restore: the same for the clock).
func (m *clockModel) apply(i, upto int) {
	n := m.nodes[i]
	if upto <= n.applied {
		return
	}
	n.applied = upto
	n.stateMs = m.log[upto-1].stateMs
	if d := n.c.Observe(n.stateMs); d > 0 {
		m.note("n%d rewound %s", i, d)
	}
}

func (m *clockModel) note(format string, args ...any) {
	m.trace = append(m.trace, fmt.Sprintf("%8dms ", m.now.Milliseconds())+fmt.Sprintf(format, args...))
	if len(m.trace) > 40 {
		m.trace = m.trace[1:]
	}
}

func (m *clockModel) stamp() {
	l := m.nodes[m.leader]
	s, _ := l.c.StampMs()
	prev := int64(0)
	if len(m.log) > 0 {
		prev = m.log[len(m.log)-1].stateMs
	}
	state := Step(prev, s)
	e := modelEntry{at: m.now, stateMs: state}
	m.log = append(m.log, e)
	m.note("n%d stamps %d (state %d)", m.leader, s-modelT0, state-modelT0)
	if len(m.log) > 1 {
		// A few ms: readings truncate to ms, and between raw clock reads
		// (rawEvery) the estimate lags it by up to 10%, then catches up.
		if over := state - (m.minOff + m.now.Milliseconds()); over > 5 {
			m.t.Fatalf("entry %d: cluster time %d ran %d ms past the real time since an earlier entry: records expire that much early\n%s",
				len(m.log), state-modelT0, over, joinLines(m.trace))
		}
	}
	m.minOff = min(m.minOff, state-m.now.Milliseconds())
}

func joinLines(s []string) string {
	out := ""
	for _, l := range s {
		out += l + "\n"
	}
	return out
}

func (m *clockModel) elect(i int) {
	m.leader = i
	m.apply(i, len(m.log)) // the term's barrier
	if d := m.nodes[i].c.FollowLog(); d > 0 {
		m.note("n%d leads, follows the log back %s", i, d)
	} else {
		m.note("n%d leads", i)
	}
}

func (m *clockModel) step() {
	switch r := m.rng.IntN(100); {
	case r < 2: // the whole cluster is paused (docker pause, a VM's): every
		// clock counts it, nothing is stamped or applied, and on resume
		// the leader stamps twice (its tick, a claim) before it applies
		d := time.Duration(5000+m.rng.IntN(25000)) * time.Millisecond
		m.now += d
		for _, n := range m.nodes {
			if n.up {
				n.ft.advance(d, d)
			}
		}
		m.note("paused %s", d)
		if m.leader >= 0 {
			m.stamp()
			m.stamp()
		}
	case r < 40: // time passes: mostly within an entry's way, sometimes a restart's
		switch {
		case m.rng.IntN(10) < 8:
			m.advance(time.Duration(1+m.rng.IntN(300)) * time.Millisecond)
		case m.rng.IntN(2) == 0:
			m.advance(time.Duration(1+m.rng.IntN(4900)) * time.Millisecond)
		default:
			m.advance(time.Duration(5+m.rng.IntN(20)) * time.Second)
		}
	case r < 65: // the leader stamps (a claim)
		if m.leader >= 0 {
			m.stamp()
		}
	case r < 85: // nodes apply what is committed, late and in batches
		i := m.rng.IntN(len(m.nodes))
		if n := m.nodes[i]; n.up && n.applied < len(m.log) {
			m.apply(i, n.applied+1+m.rng.IntN(len(m.log)-n.applied))
		}
	case r < 90: // a node stops (kill -9): it keeps its state, loses its clock
		i := m.rng.IntN(len(m.nodes))
		if m.nodes[i].up {
			m.nodes[i].up = false
			m.note("n%d stops", i)
			if m.leader == i || m.upCount() < 2 {
				m.leader = -1 // gone, or steps down without a quorum
			}
		}
	case r < 95: // a node starts
		i := m.rng.IntN(len(m.nodes))
		if n := m.nodes[i]; !n.up {
			n.up = true
			m.newClock(n)
			m.note("n%d starts at %d", i, n.stateMs-modelT0)
		}
	default: // an election: any node up (a transfer, a slow node's)
		if m.upCount() >= 2 {
			i := m.rng.IntN(len(m.nodes))
			if m.nodes[i].up {
				m.elect(i)
			}
		}
	}
	if m.leader < 0 && m.upCount() >= 2 && m.rng.IntN(4) == 0 {
		for i, n := range m.nodes {
			if n.up {
				m.elect(i)
				break
			}
		}
	}
}

func TestClockModelNeverRunsAheadOfRealTime(t *testing.T) {
	for seed := range uint64(300) {
		m := &clockModel{t: t, rng: rand.New(rand.NewPCG(seed, 7)), leader: -1, minOff: 1 << 62}
		for range 3 {
			n := &modelNode{up: true}
			m.newClock(n)
			m.nodes = append(m.nodes, n)
		}
		// The first entry of a new cluster: the bootstrap node's time.
		m.nodes[0].c.Observe(modelT0)
		m.leader = 0
		m.stamp()
		for range 4000 {
			m.step()
		}
	}
}
