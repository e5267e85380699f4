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
