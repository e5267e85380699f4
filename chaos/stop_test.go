package chaos

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A node that does not exit on SIGTERM is killed after the grace, and the
// run says so: SIGKILL alone hid three hung stops of a 20-minute soak
// (raft's Shutdown waiting for ever on a wedged replication goroutine).
func TestStopThatNeedsSIGKILLIsReported(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "fake-idem")
	// n1 ignores SIGTERM (an ignored signal stays ignored across exec);
	// n2 dies of it.
	script := "#!/bin/sh\ncase \"$*\" in *'--node-id n1 '*) trap '' TERM;; esac\nexec sleep 30\n"
	require.NoError(t, os.WriteFile(bin, []byte(script), 0o755))
	cl, err := NewCluster(ClusterConfig{Binary: bin, Nodes: 3, Dir: filepath.Join(dir, "data"), HTTPPort: 27990, RaftPort: 27991})
	require.NoError(t, err)
	// Long enough for n2's SIGTERM to end it on a loaded machine (a
	// stop past the grace would be counted as forced).
	cl.stopGrace = 2 * time.Second
	h := NewHistory()
	cl.clock = h.Now
	n1, n2 := cl.Node("n1"), cl.Node("n2")
	require.NoError(t, cl.Start(n1))
	require.NoError(t, cl.Start(n2))
	time.Sleep(100 * time.Millisecond) // the trap is set

	cl.Stop(n2)
	require.False(t, n2.Running())
	require.Empty(t, cl.ForcedStops(), "n2 exits on SIGTERM, within the grace")

	cl.Stop(n1)
	require.False(t, n1.Running())
	f := cl.ForcedStops()
	require.Len(t, f, 1)
	require.Equal(t, "n1", f[0].Node)
	require.Equal(t, 2*time.Second, f[0].Grace)
	require.Positive(t, f[0].At)

	rep := &Report{ForcedStops: f, Check: &CheckResult{}}
	var out bytes.Buffer
	rep.Summary(&out)
	require.Contains(t, out.String(), "graceful stops: 1 did not end within their grace after SIGTERM")
	require.True(t, strings.Contains(out.String(), "  n1: SIGTERM at "), out.String())
}

// A node that ends without the harness stopping it is listed with its
// last words: in a 10-minute soak two of three nodes got SIGTERMs from
// outside the harness and stayed down for six minutes, and the run said
// only that they had no leader.
func TestExitTheHarnessDidNotCauseIsReported(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "fake-idem")
	// n1 says why and ends on its own; n2 runs until stopped.
	script := "#!/bin/sh\ncase \"$*\" in *'--node-id n1 '*) echo 'level=ERROR msg=\"gave up\"'; exit 1;; esac\nexec sleep 30\n"
	require.NoError(t, os.WriteFile(bin, []byte(script), 0o755))
	cl, err := NewCluster(ClusterConfig{Binary: bin, Nodes: 3, Dir: filepath.Join(dir, "data"), HTTPPort: 27990, RaftPort: 27991})
	require.NoError(t, err)
	h := NewHistory()
	cl.clock = h.Now
	n1, n2 := cl.Node("n1"), cl.Node("n2")
	require.NoError(t, cl.Start(n1))
	require.NoError(t, cl.Start(n2))
	require.Eventually(t, func() bool { return !n1.Running() }, 5*time.Second, 10*time.Millisecond)
	cl.Stop(n2)
	require.NoError(t, cl.Start(n2))
	cl.Kill(n2)

	x := cl.Exits()
	require.Len(t, x, 1, "the harness stopped and killed n2")
	require.Equal(t, "n1", x[0].Node)
	require.Contains(t, x[0].Said, `msg="gave up"`)
	require.Contains(t, x[0].Said, "exited: exit status 1")

	rep := &Report{Exits: x, Check: &CheckResult{}}
	var out bytes.Buffer
	rep.Summary(&out)
	require.Contains(t, out.String(), "exits: 1 node processes ended without the harness stopping them")
	require.Contains(t, out.String(), "  n1 at ")
}
