package main

import (
	"bytes"
	"context"
	"errors"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Trips of a new user following the README, each a CLI answer that did
// not say what was wrong.

// TestClusterJoinNamesTheBadFlag: a join with a flag missing named all
// three, and one with --raft-addr "nonsense" was sent and recorded.
func TestClusterJoinNamesTheBadFlag(t *testing.T) {
	// Nothing listens on --addr: every case must be refused before a call.
	addr := freePort(t)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--id", "n7", "--raft-addr", "127.0.0.9:7071"}, "--node-http-addr required"},
		{[]string{"--raft-addr", "127.0.0.9:7071", "--node-http-addr", "127.0.0.9:7070"}, "--id required"},
		{[]string{"--id", "n7", "--raft-addr", "nonsense", "--node-http-addr", "127.0.0.9:7070"}, `--raft-addr "nonsense" must be host:port`},
		{[]string{"--id", "n7", "--raft-addr", "127.0.0.9:7071", "--node-http-addr", "https://127.0.0.9:7070"}, `--node-http-addr "https://127.0.0.9:7070" must be host:port`},
		{[]string{"--id", "n7", "--raft-addr", "127.0.0.9:0", "--node-http-addr", "127.0.0.9:7070"}, `--raft-addr "127.0.0.9:0" must be host:port`},
	} {
		var stdout, stderr bytes.Buffer
		code := runCluster(context.Background(), append([]string{"join", "--addr", addr, "--timeout", "2s"}, tc.args...), &stdout, &stderr)
		require.Equal(t, 2, code, "%v: %s", tc.args, stderr.String())
		require.Contains(t, stderr.String(), tc.want, "%v", tc.args)
		require.NotContains(t, stderr.String(), "unreachable", "%v: refused before any call", tc.args)
	}
}

// TestHelpIsPrintedOnce: `idem token new --help` and `idem recover --help`
// printed their usage twice (the flag package's copy on stderr, then
// parseArgs's on stdout).
func TestHelpIsPrintedOnce(t *testing.T) {
	for _, run := range []struct {
		name string
		f    func(args []string, stdout, stderr *bytes.Buffer) int
	}{
		{"token new", func(a []string, o, e *bytes.Buffer) int { return runTokenNew(a, o, e) }},
		{"recover", func(a []string, o, e *bytes.Buffer) int { return runRecover(context.Background(), a, o, e) }},
	} {
		var stdout, stderr bytes.Buffer
		require.Equal(t, 0, run.f([]string{"--help"}, &stdout, &stderr), run.name)
		require.Equal(t, 1, strings.Count(stdout.String()+stderr.String(), "Usage"), "%s --help:\n%s%s", run.name, stdout.String(), stderr.String())
		stdout.Reset()
		stderr.Reset()
		require.Equal(t, 2, run.f([]string{"--bogus"}, &stdout, &stderr), run.name)
		require.Contains(t, stderr.String(), "-bogus", run.name)
		require.Equal(t, 1, strings.Count(stderr.String(), "-bogus"), "%s --bogus:\n%s", run.name, stderr.String())
	}
}

// TestJoinToAnUnreachableMemberIsLogged: a node whose --join address does
// not answer (a typo, nothing listening) waited forever and logged nothing
// above debug level.
func TestJoinToAnUnreachableMemberIsLogged(t *testing.T) {
	nobody := freePort(t) // nothing listens here
	p := launch(t, filepath.Join(t.TempDir(), "d"), freePort(t), freePort(t), "--join", nobody)
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) && !strings.Contains(p.logs.String(), "did not answer") {
		time.Sleep(100 * time.Millisecond)
	}
	logs := p.logs.String()
	require.Contains(t, logs, "join: this --join address did not answer", logs)
	require.Contains(t, logs, nobody, logs)
	// Retried every second, logged once while the error stays the same.
	time.Sleep(2500 * time.Millisecond)
	require.Equal(t, 1, strings.Count(p.logs.String(), "did not answer"), p.logs.String())
}

// TestAddBackCommandPastes: the command a removed node logs ended with
// "--addr <a member's HTTP address>", which a shell reads as a redirection
// from a file and an unterminated quote.
func TestAddBackCommandPastes(t *testing.T) {
	c := &serveConfig{nodeID: "n3", raftAdvertise: "127.0.0.3:7071", httpAdvertise: "127.0.0.3:7070",
		join: "127.0.0.3:7070,127.0.0.1:7070,127.0.0.2:7070"}
	require.Equal(t, "idem cluster join --id n3 --raft-addr 127.0.0.3:7071 --node-http-addr 127.0.0.3:7070 --addr 127.0.0.1:7070", addBackCommand(c))
	c.join = ""
	cmd := addBackCommand(c)
	require.NotContains(t, cmd, "<")
	require.NotContains(t, cmd, "'")
	require.Contains(t, cmd, "--addr MEMBER_HTTP_ADDR")
	// Without --join (removed soon after a start by --bootstrap-expect),
	// a member the node knows is named rather than the placeholder.
	require.Contains(t, addBackCommand(c, "127.0.0.3:7070", "127.0.0.2:7070"), "--addr 127.0.0.2:7070")
}

// TestHelpPrintsFlagsAlike: `idem cluster --help` printed its flags as
// -addr (flag.PrintDefaults) while `idem claim --help` printed --addr;
// every command's help now writes them as --name, as its errors do.
func TestHelpPrintsFlagsAlike(t *testing.T) {
	cmds := [][]string{{"serve"}, {"token", "new"}, {"tls", "ca"}, {"tls", "cert"}}
	for n := range clientCommands {
		cmds = append(cmds, []string{n})
	}
	for n := range extraCommands {
		if n != "token" && n != "tls" {
			cmds = append(cmds, []string{n})
		}
	}
	single := regexp.MustCompile(`(?m)^  -[^-]`)
	for _, c := range cmds {
		out, err := exec.Command(binary, append(c, "--help")...).CombinedOutput()
		require.NoError(t, err, "%v --help:\n%s", c, out)
		require.Contains(t, string(out), "\n  --", "%v --help lists no flag", c)
		require.False(t, single.Match(out), "%v --help prints a flag as -name:\n%s", c, out)
	}
}

// TestCommandForPastes: restore, recover and a removed node print a
// command to paste, which named "idem" even when it was run as ./bin/idem
// (the README's way), and a shell without idem on its PATH refused it.
func TestCommandForPastes(t *testing.T) {
	for arg0, want := range map[string]string{
		"idem":                            "idem",
		"./bin/idem":                      "./bin/idem",
		"/usr/local/bin/idem":             "/usr/local/bin/idem",
		"/tmp/go-build1234/b001/exe/idem": "go run ./cmd/idem",
		"/opt/my idem/idem":               "'/opt/my idem/idem'",
		"/opt/it's/idem":                  `'/opt/it'\''s/idem'`,
	} {
		require.Equal(t, want, commandFor(arg0), arg0)
	}
}

// --join given a member's raft address (a copy of the wrong column) logged
// one warning with a bare EOF and retried for ever; `idem cluster join
// --addr` says what is wrong with the same mistake. The warning does too.
func TestJoinAtARaftAddressSaysSo(t *testing.T) {
	dir := t.TempDir()
	n1raft := freePort(t)
	start(t, filepath.Join(dir, "n1"), freePort(t), n1raft, "--node-id", "n1")
	p := launch(t, filepath.Join(dir, "n2"), freePort(t), freePort(t), "--node-id", "n2", "--join", n1raft)
	waitFor(t, 20*time.Second, "the join warning naming the raft address mistake", func() (bool, string) {
		return strings.Contains(p.logs.String(), "--join takes members' HTTP addresses"), ""
	})
	require.Empty(t, notHTTPHint(errors.New("dial tcp 127.0.0.1:1: connect: connection refused")), "nothing listening is another mistake")
}
