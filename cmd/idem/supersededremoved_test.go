package main

import (
	"path/filepath"
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
	ip := testIP("127.0.0.9")
	root := t.TempDir()
	h1, r1, h2, r2 := freePortOn(t, ip), freePortOn(t, ip), freePortOn(t, ip), freePortOn(t, ip)
	d1, d2 := filepath.Join(root, "n1"), filepath.Join(root, "n2")
	args1 := []string{"--node-id", "n1", "--min-free-disk", "0"}
	args2 := []string{"--node-id", "n2", "--join", h1, "--min-free-disk", "0"}
	n1 := &cnode{id: "n1", p: start(t, d1, h1, r1, args1...)}
	n2 := &cnode{id: "n2", p: start(t, d2, h2, r2, args2...)}
	waitFor(t, 30*time.Second, "n2 a voter", func() (bool, string) {
		v, st := memberAt(t, h1, "n2")
		return v.Suffrage == "voter" && v.Healthy, st.Leader.ID
	})
	claimOK(t, h1, "before")
	n2.kill(t)
	n1.kill(t)
	out, err := idemCmd(t, "recover", "--data-dir", d1, "--node-id", "n1", "--peers", "n1="+r1, "--yes")
	require.NoError(t, err, "%s", out)
	n1.p = start(t, d1, h1, r1, args1...)

	n2.p = launch(t, d2, h2, r2, args2...)
	waitForLine(t, n2.p.logs, "left out of a recovery")
	// The removed line came about 5 s after, once the node had heard from
	// no leader for that long and asked n1.
	time.Sleep(12 * time.Second)
	logs := n2.p.logs.String()
	require.NotContains(t, logs, "(removed?)")
	require.NotContains(t, logs, "add-back=")
	require.True(t, strings.Contains(logs, "start this node with an empty data dir and --join"), "%s", logs)
}
