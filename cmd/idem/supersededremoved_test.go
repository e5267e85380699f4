package main

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A member that a recovery left out, started again on its old data dir
// (the mv of the runbook skipped), logged at ERROR to start empty with
// --join, then a few seconds later at WARN "this node is not in the
// cluster's configuration (removed?) ... until an operator adds it back,
// which needs no restart", with an add-back command the survivor refuses
// (409 foreign_cluster): two ways out, one of them wrong. It says only the
// first.
func TestLeftOutMemberIsNotToldToBeAddedBack(t *testing.T) {
	l := recoverWithoutN2(t, func(h1 string) { claimOK(t, h1, "before") })
	l.n2.p = launch(t, l.d2, l.h2, l.r2, l.args2...)
	waitForLine(t, l.n2.p.logs, "left out of a recovery")
	// The removed line came about 5 s after, once the node had heard from
	// no leader for that long and asked n1.
	time.Sleep(12 * time.Second)
	logs := l.n2.p.logs.String()
	require.NotContains(t, logs, "(removed?)")
	require.NotContains(t, logs, "add-back=")
	require.True(t, strings.Contains(logs, "start this node with an empty data dir and --join"), "%s", logs)
}
