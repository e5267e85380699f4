package raftfsm

import (
	"time"
)

// Cluster time runs at the rate of real time (at most, with a slewed
// clock, NTP's 500 ppm faster: ttl.Clock) but need not read as this
// node's wall clock does: a cluster formed by nodes whose clocks were off
// alike starts off by as much (the median of three, two of them skewed),
// and time while the whole cluster was down is not counted. Windows are
// unaffected either way (a record lives its retention of real time), but
// the timestamps in answers (created_at, expires_at, lease_expires_at)
// read that far from the clients' clocks, and nothing said so. The node
// says it clockWatchFirst after it starts and every clockWatchEvery while
// it lasts: a cluster time ahead of this node's clock at WARN, one behind
// at INFO.

// clockWatchFirst is a variable for tests.
var clockWatchFirst = 30 * time.Second

const (
	clockWatchEvery = 10 * time.Minute
	clockOffBy      = time.Minute
)

// watchClock compares cluster time with this node's wall clock until the
// node stops.
func (n *Node) watchClock() {
	defer n.wg.Done()
	wait := clockWatchFirst // a member that restarts reads its stored time until it hears the leader
	for {
		select {
		case <-n.stop:
			return
		case <-time.After(wait):
		}
		n.sayClockOff()
		wait = clockWatchEvery
	}
}

// sayClockOff logs how far cluster time reads from this node's wall clock,
// when that is more than clockOffBy.
func (n *Node) sayClockOff() {
	if !n.clock.Anchored() {
		return
	}
	d := time.Duration(n.clock.NowMs()-n.clock.WallMs()) * time.Millisecond
	switch {
	case d > clockOffBy:
		n.log.Warn("cluster time reads ahead of this node's wall clock: the cluster started from clocks that were ahead, or this node's clock is behind (check its NTP sync), or a leader of an earlier release ran its time fast while NTP slewed its clock; "+
			"records still live their whole retention, but created_at and expires_at in answers read that far in the future", "ahead-by", d.Round(time.Second))
	case d < -clockOffBy:
		n.log.Info("cluster time reads behind this node's wall clock: time while the whole cluster was down is not counted (windows only lengthen), or the cluster started from clocks that were behind, or this node's clock is ahead (check its NTP sync); "+
			"created_at and expires_at in answers read that far in the past", "behind-by", (-d).Round(time.Second))
	}
}
