package main

import (
	"encoding/json"
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

const module = "github.com/idem-store/idem/"

// TestImportsPointDown keeps docs/DESIGN.md's layout: cmd -> api -> raftfsm ->
// engine -> (partition, ttl), with partition and ttl on the standard
// library only, and every package documented.
func TestImportsPointDown(t *testing.T) {
	out, err := exec.Command("go", "list", "-json", "../../...").Output()
	require.NoError(t, err)
	forbidden := map[string][]string{
		"partition": {"*"},
		"ttl":       {"*"},
		// Development certificates: a leaf any package may use.
		"certgen": {"*"},
		// The API's bodies, shared by server and client: nothing of the module.
		"wire":    {"*"},
		"engine":  {"raftfsm", "api", "client", "bench", "chaos", "cmd/idem"},
		"raftfsm": {"api", "client", "bench", "chaos", "cmd/idem"},
		"api":     {"client", "bench", "chaos", "cmd/idem"},
		"client":  {"engine", "raftfsm", "api", "partition", "ttl", "bench", "chaos", "cmd/idem"},
		// The application side links the client only, never the server.
		"middleware": {"engine", "raftfsm", "api", "partition", "ttl", "bench", "chaos", "cmd/idem", "conformance", "internal/idemtest"},
		// Tests that need a store, kept out of client/ and middleware/.
		"internal/e2e/client":     {"*"},
		"internal/e2e/middleware": {"*"},
		// Black-box tests over HTTP, run against the middleware and idem proxy.
		"conformance": {"engine", "raftfsm", "api", "partition", "ttl", "bench", "chaos", "cmd/idem", "middleware", "internal/idemtest"},
		"bench":       {"engine", "raftfsm", "api", "partition", "ttl", "chaos", "cmd/idem"},
		"chaos":       {"engine", "raftfsm", "api", "partition", "ttl", "bench", "cmd/idem"},
		// The scale benchmark loads stores with the engine and drives a
		// server process over HTTP: never the server packages.
		"bench/scale": {"api", "raftfsm", "chaos", "cmd/idem"},
	}
	dec := json.NewDecoder(strings.NewReader(string(out)))
	seen := 0
	for dec.More() {
		var p struct {
			ImportPath string
			Doc        string
			Imports    []string
		}
		require.NoError(t, dec.Decode(&p))
		name := strings.TrimPrefix(p.ImportPath, module)
		require.NotEmpty(t, p.Doc, "package %s has no package comment saying what it owns", name)
		rules, ok := forbidden[name]
		if !ok {
			continue
		}
		seen++
		for _, imp := range p.Imports {
			if !strings.HasPrefix(imp, module) {
				if rules[0] == "*" && strings.Contains(strings.Split(imp, "/")[0], ".") {
					t.Errorf("%s must import the standard library only, imports %s", name, imp)
				}
				continue
			}
			dep := strings.TrimPrefix(imp, module)
			for _, f := range rules {
				if f == "*" || f == dep {
					t.Errorf("%s must not import %s (imports point down: cmd -> api -> raftfsm -> engine -> partition, ttl)", name, dep)
				}
			}
		}
	}
	require.Equal(t, len(forbidden), seen, "a package of the layout is missing")
}

// Bug: an application's `go mod tidy` failed on a module that imported
// the client or the middleware: it loads the tests of the packages it
// imports, and theirs started a real store (internal/idemtest), bringing
// raft-wal and the go-metrics version only idem's own go.mod replaces.
// The tests of the packages an application imports reach nothing of the
// store.
func TestApplicationPackagesTestsNeedNoStore(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "-test", "../../client", "../../middleware", "../../wire").Output()
	require.NoError(t, err)
	for _, dep := range strings.Fields(string(out)) {
		for _, store := range []string{module + "raftfsm", module + "engine", module + "api", module + "internal/idemtest", "github.com/hashicorp/raft", "github.com/cockroachdb/pebble"} {
			if dep == store || strings.HasPrefix(dep, store+"/") {
				t.Errorf("the tests of client, middleware or wire reach %s: an application that imports them would need it", dep)
			}
		}
	}
}
