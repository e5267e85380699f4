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
