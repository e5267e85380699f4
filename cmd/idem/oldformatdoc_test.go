package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idem-store/idem/api"
)

// docs/SECURITY.md's move from the old auth file format, steps 1 and 2 run
// as written: step 1 appends the node token to the old file, and step 2's
// loop hashed every line of that file, the node token too, beside its
// nodes.entry, so the auth.json it built listed the node token twice and
// `idem token check auth.json` refused it (a walk of the page).
func TestOldFormatMoveOfSecurityDocBuildsAValidAuthFile(t *testing.T) {
	for _, tool := range []string{"bash", "jq", "grep", "cut"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s not found", tool)
		}
	}
	doc, err := os.ReadFile("../../docs/SECURITY.md")
	require.NoError(t, err)
	sec := string(doc)
	i := strings.Index(sec, "### Moving from the old format")
	require.GreaterOrEqual(t, i, 0)
	sec = sec[i:]
	start := strings.Index(sec, "```sh\n")
	require.GreaterOrEqual(t, start, 0)
	sec = sec[start+len("```sh\n"):]
	end := strings.Index(sec, "```")
	require.GreaterOrEqual(t, end, 0)
	var script strings.Builder
	for _, l := range strings.Split(sec[:end], "\n") {
		script.WriteString(strings.TrimPrefix(l, "   ") + "\n")
	}
	require.Contains(t, script.String(), "old.entries")

	dir := t.TempDir()
	require.NoError(t, os.Mkdir(filepath.Join(dir, "bin"), 0o700))
	require.NoError(t, os.Symlink(binary, filepath.Join(dir, "bin", "idem")))
	run := func(name string, args ...string) string {
		t.Helper()
		cmd := exec.Command(name, args...)
		cmd.Dir = dir
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "%s %v: %s", name, args, out)
		return string(out)
	}
	old := []string{"legacy-admin-token-0123456789abcdef", "second-legacy-token-abcdefghijklmnop"}
	// An old file whose last line has no line end, as the page allows for.
	require.NoError(t, os.WriteFile(filepath.Join(dir, "OLD-FILE"), []byte("# the old tokens\n"+old[0]+"\n"+old[1]), 0o600))
	// Step 1, as written.
	run("bash", "-c", "umask 077; ./bin/idem token new --name nodes --role admin --token-file node.token > nodes.entry && { echo; cat node.token; } >> OLD-FILE")
	// Step 2, the page's script.
	run("bash", "-e", "-c", script.String())
	out := run("./bin/idem", "token", "check", "auth.json")
	require.Contains(t, out, "3 tokens", out)

	b, err := os.ReadFile(filepath.Join(dir, "auth.json"))
	require.NoError(t, err)
	creds, err := api.ParseAuthFile(b)
	require.NoError(t, err)
	nodeTok, err := os.ReadFile(filepath.Join(dir, "node.token"))
	require.NoError(t, err)
	for _, tok := range append(old, strings.TrimSpace(string(nodeTok))) {
		_, ok := creds.Authenticate(tok)
		require.True(t, ok, "a token of the old file is not in auth.json")
	}
	// The node token's entry is "nodes", not an old- entry step 4 removes.
	require.Contains(t, string(b), `"nodes"`)
}
