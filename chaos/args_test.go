package chaos

import (
	"slices"
	"testing"
	"time"
)

// TestNodeArgsGiveEachFlagOnce: idem serve refuses a flag given twice, and
// the harness gave --snapshot-threshold and --snapshot-interval twice to
// the node that takes no snapshots, and --retention twice (the cluster's,
// then the node's) after the retention nemesis: those nodes could not
// start. A later setting replaces the earlier one.
func TestNodeArgsGiveEachFlagOnce(t *testing.T) {
	c, err := NewCluster(ClusterConfig{Binary: "idem", Nodes: 3, Dir: t.TempDir(), HTTPPort: 1, RaftPort: 2,
		NoSnapshots: "n2", ExtraArgs: []string{"--retention", "1h", "--pprof"}})
	if err != nil {
		t.Fatal(err)
	}
	n2 := c.Node("n2")
	c.SetRetention(n2, 2*time.Hour)
	args := c.args(n2)
	seen := map[string]bool{}
	for _, a := range args {
		if len(a) > 2 && a[:2] == "--" {
			if seen[a] {
				t.Errorf("%s given twice: %v", a, args)
			}
			seen[a] = true
		}
	}
	for flag, want := range map[string]string{"--retention": "2h0m0s", "--snapshot-interval": "24h", "--snapshot-threshold": "4611686018427387904"} {
		if i := slices.Index(args, flag); i < 0 || args[i+1] != want {
			t.Errorf("%s: want %s in %v", flag, want, args)
		}
	}
	if i := slices.Index(c.args(c.Node("n1")), "--retention"); i < 0 || c.args(c.Node("n1"))[i+1] != "1h" {
		t.Errorf("n1 lost the cluster's --retention: %v", c.args(c.Node("n1")))
	}
}

// A one-node store forms its cluster alone: idem serve refuses
// --bootstrap-expect 1 with --join, so the harness gives neither.
func TestOneNodeArgsFormAClusterAlone(t *testing.T) {
	c, err := NewCluster(ClusterConfig{Binary: "idem", Nodes: 1, Dir: t.TempDir(), HTTPPort: 1, RaftPort: 2})
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"--join", "--bootstrap-expect"} {
		if slices.Contains(c.args(c.Node("n1")), f) {
			t.Errorf("%s given to a one-node cluster: %v", f, c.args(c.Node("n1")))
		}
	}
	c3, err := NewCluster(ClusterConfig{Binary: "idem", Nodes: 3, Dir: t.TempDir(), HTTPPort: 1, RaftPort: 2})
	if err != nil {
		t.Fatal(err)
	}
	if a := c3.args(c3.Node("n2")); !slices.Contains(a, "--join") || a[slices.Index(a, "--bootstrap-expect")+1] != "3" {
		t.Errorf("three nodes: want --join and --bootstrap-expect 3 in %v", a)
	}
}
