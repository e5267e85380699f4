package chaos

import (
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestParseNemeses(t *testing.T) {
	all, err := ParseNemeses("all")
	require.NoError(t, err)
	require.Equal(t, NemesisKinds, all)
	for _, k := range []string{"pause", "fsm-loss", "quiet-restart", "membership", "rejoin"} {
		require.Contains(t, all, k, "--nemesis all must include %s", k)
	}

	for _, k := range OptInKinds {
		require.NotContains(t, all, k, "--nemesis all leaves out %s", k)
		got, err := ParseNemeses("kill," + k)
		require.NoError(t, err)
		require.Equal(t, []string{"kill", k}, got)
		got, err = ParseNemeses("all," + k)
		require.NoError(t, err)
		require.Equal(t, append(slices.Clone(NemesisKinds), k), got)
	}

	got, err := ParseNemeses(" kill, fsm-loss ,quiet-restart")
	require.NoError(t, err)
	require.Equal(t, []string{"kill", "fsm-loss", "quiet-restart"}, got)

	for _, s := range []string{"", "none"} {
		got, err := ParseNemeses(s)
		require.NoError(t, err)
		require.Empty(t, got)
	}

	_, err = ParseNemeses("kill,fsmloss")
	require.ErrorContains(t, err, `unknown nemesis "fsmloss"`)
	require.ErrorContains(t, err, "quiet-restart", "the error lists the kinds there are")
	_, err = ParseNemeses("kill,kill")
	require.ErrorContains(t, err, `"kill" is listed twice`)
}

// Every kind runs something and is documented; nothing runs that --nemesis
// all leaves out.
func TestEveryNemesisKindIsWiredAndDocumented(t *testing.T) {
	kinds := AllKinds()
	require.Len(t, nemeses, len(kinds))
	require.Len(t, NemesisHelp, len(kinds))
	for _, k := range kinds {
		require.NotNil(t, nemeses[k], k)
		require.NotEmpty(t, NemesisHelp[k], k)
	}
}

// The schedule runs every kind once per cycle, so a run with as many
// events as kinds has run each; the order depends on the seed only.
func TestPickerRunsEveryKindOncePerCycle(t *testing.T) {
	seq := func(seed uint64, n int) []string {
		p := &picker{rnd: rand.New(rand.NewPCG(seed, 0x6e656d)), kinds: NemesisKinds}
		var out []string
		for range n {
			out = append(out, p.next())
		}
		return out
	}
	k := len(NemesisKinds)
	s := seq(42, 3*k)
	for c := 0; c < 3; c++ {
		cycle := slices.Clone(s[c*k : (c+1)*k])
		slices.Sort(cycle)
		want := slices.Clone(NemesisKinds)
		slices.Sort(want)
		require.Equal(t, want, cycle, "cycle %d", c)
	}
	require.Equal(t, s, seq(42, 3*k), "the same seed gives the same schedule")
	differs := false
	for seed := uint64(1); seed < 10 && !differs; seed++ {
		differs = !slices.Equal(s[:k], seq(seed+100, k))
	}
	require.True(t, differs, "the order depends on the seed")

	p := &picker{rnd: rand.New(rand.NewPCG(1, 2)), kinds: []string{"pause"}}
	require.Equal(t, "pause", p.next())
	require.Equal(t, "pause", p.next())
}

// Nothing may expire within a run (the checker has no clock), and the
// fsm-loss skew must be more than the retention, or a cluster time that
// followed the skewed clock would expire nothing and go unnoticed.
func TestRetentionOutlastsTheRunAndTheSkewExceedsIt(t *testing.T) {
	for _, d := range []time.Duration{5 * time.Second, time.Minute, 150 * time.Second, 30 * time.Minute, 2 * time.Hour} {
		r := RetentionFor(d)
		require.GreaterOrEqual(t, r, d+9*time.Minute+30*time.Second, "duration %s", d)
		require.GreaterOrEqual(t, r, 10*time.Minute)
		require.Greater(t, SkewFor(r), r, "duration %s", d)
		cfg := Config{Nodes: 3, Duration: d, Clients: 1, Rate: 1, Binary: "/bin/sh", InjectInto: "n1", Out: "x", ReadyBound: 30 * time.Second, HTTPPort: 17070, RaftPort: 17071, Timeout: 2 * time.Second, CheckTimeout: time.Minute}
		require.NoError(t, cfg.Validate())
		cfg.Retention = d
		require.ErrorContains(t, cfg.Validate(), "--retention")
	}
	require.Equal(t, time.Hour, SkewFor(11*time.Minute), "issue 9's bug 2 was found with an hour")

	cfg := Config{Nodes: 3, Duration: time.Minute, Clients: 1, Rate: 1, Binary: "/bin/sh", InjectInto: "n1", Out: "x", ReadyBound: time.Second, HTTPPort: 17070, RaftPort: 17071, Timeout: 2 * time.Second, CheckTimeout: time.Minute}
	require.ErrorContains(t, cfg.Validate(), "--ready-bound 1s must be at least 5s")
}

// TestValidateRefusesWhatOnlyTheRunFoundWrong: --http-port 0 or 99999, the
// same port for HTTP and raft, --request-timeout 0, --check-timeout 0 and
// --inject-into a node the cluster does not have passed Validate; the run
// then failed to form its cluster (exit 3), answered nothing, or broke no
// node.
func TestValidateRefusesWhatOnlyTheRunFoundWrong(t *testing.T) {
	good := Config{Nodes: 3, Duration: time.Minute, Clients: 1, Rate: 1, Binary: "/bin/sh", InjectInto: "n1", Out: "x",
		ReadyBound: 30 * time.Second, HTTPPort: 17070, RaftPort: 17071, Timeout: 2 * time.Second, CheckTimeout: time.Minute}
	require.NoError(t, good.Validate())
	for _, tc := range []struct {
		change func(*Config)
		want   string
	}{
		{func(c *Config) { c.HTTPPort = 0 }, "--http-port 0 must be a port from 1 to 65535"},
		{func(c *Config) { c.HTTPPort = 99999 }, "--http-port 99999 must be a port from 1 to 65535"},
		{func(c *Config) { c.RaftPort = -1 }, "--raft-port -1 must be a port from 1 to 65535"},
		{func(c *Config) { c.RaftPort = c.HTTPPort }, "--http-port and --raft-port are both 17070"},
		{func(c *Config) { c.HTTPPort = c.RaftPort + ProxyRaftOffset }, "which is --http-port"},
		{func(c *Config) { c.Timeout = 0 }, "--request-timeout 0s must be positive"},
		{func(c *Config) { c.CheckTimeout = 0 }, "--check-timeout 0s must be positive"},
		{func(c *Config) { c.InjectBug, c.InjectInto = "local-reads", "n9" }, `--inject-into "n9" must be all or a node id (n1..n3)`},
	} {
		c := good
		tc.change(&c)
		require.ErrorContains(t, c.Validate(), tc.want)
	}
	c := good
	c.InjectBug, c.InjectInto = "local-reads", "n3"
	require.NoError(t, c.Validate())
}

// TestValidateRefusesAnUnusableBinaryOrOut: a --binary without execute
// bits and an --out that is an existing file (or inside one) passed
// Validate; the run found them only after its setup (the first node's
// start failed, MkdirAll failed), exit 3 for a usage error.
func TestValidateRefusesAnUnusableBinaryOrOut(t *testing.T) {
	dir := t.TempDir()
	noExec, file := filepath.Join(dir, "idem"), filepath.Join(dir, "file")
	require.NoError(t, os.WriteFile(noExec, []byte("#!/bin/sh\n"), 0o644))
	require.NoError(t, os.WriteFile(file, nil, 0o644))
	good := Config{Nodes: 3, Duration: time.Minute, Clients: 1, Rate: 1, Binary: "/bin/sh", InjectInto: "n1", Out: filepath.Join(dir, "new", "out"),
		ReadyBound: 30 * time.Second, HTTPPort: 17070, RaftPort: 17071, Timeout: 2 * time.Second, CheckTimeout: time.Minute}
	require.NoError(t, good.Validate(), "an --out to be made")
	for _, tc := range []struct {
		change func(*Config)
		want   string
	}{
		{func(c *Config) { c.Binary = noExec }, "--binary " + noExec + " is not executable (mode -rw-r--r--)"},
		{func(c *Config) { c.Out = file }, "--out " + file + " is an existing file, not a directory"},
		{func(c *Config) { c.Out = filepath.Join(file, "out") }, "is inside " + file + ", which is a file"},
	} {
		c := good
		tc.change(&c)
		require.ErrorContains(t, c.Validate(), tc.want)
	}
	c := good
	c.Out = dir
	require.NoError(t, c.Validate(), "an existing directory")
}

// --nodes 1 runs the nemeses that need no follower: a one-node store
// paused is its whole cluster paused with its leader staying leader.
func TestValidateOneNodeRunsOnlyItsNemeses(t *testing.T) {
	good := Config{Nodes: 1, Duration: time.Minute, Clients: 1, Rate: 1, Binary: "/bin/sh", InjectInto: "n1", Out: "x",
		ReadyBound: 30 * time.Second, HTTPPort: 17070, RaftPort: 17071, Timeout: 2 * time.Second, CheckTimeout: time.Minute,
		Nemeses: []string{"kill", "pause", "clock"}}
	require.NoError(t, good.Validate())
	c := good
	c.Nemeses = []string{"pause", "partition", "rejoin"}
	require.ErrorContains(t, c.Validate(), "--nodes 1 runs only the nemeses kill,pause,clock,disk (the others need followers): not partition,rejoin")
	c = good
	c.Nodes = 2
	require.ErrorContains(t, c.Validate(), "--nodes 2 must be 1, 3 or 5")
	for _, k := range OneNodeKinds {
		require.Contains(t, AllKinds(), k)
	}
}
