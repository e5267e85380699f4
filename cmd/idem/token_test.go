package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idem-store/idem/api"
	"github.com/idem-store/idem/raftfsm"
)

// ---- idem token ----------------------------------------------------------

func runTokenCmd(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := runToken(context.Background(), args, &out, &errb)
	return code, out.String(), errb.String()
}

func TestTokenNewHashCheck(t *testing.T) {
	dir := t.TempDir()
	code, out, stderr := runTokenCmd(t, "new", "--name", "payments-api", "--role", "app", "--principals", "cus_*, acme")
	require.Equal(t, 0, code, stderr)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	token := lines[1]
	require.Regexp(t, `^idem_[A-Za-z0-9_-]{43}$`, token)
	var e authEntry
	require.NoError(t, json.Unmarshal([]byte(lines[len(lines)-1]), &e))
	require.Equal(t, authEntry{Name: "payments-api", SHA256: api.HashToken(token), Role: "app", Principals: []string{"cus_*", "acme"}}, e)

	// The entry, once in a file, authenticates the token with its role.
	file := filepath.Join(dir, "auth.json")
	require.NoError(t, os.WriteFile(file, []byte(`{"tokens":[`+lines[len(lines)-1]+`]}`), 0o600))
	creds, err := api.LoadAuthFile(file)
	require.NoError(t, err)
	c, ok := creds.Authenticate(token)
	require.True(t, ok)
	require.Equal(t, api.RoleApp, c.Role)
	code, out, _ = runTokenCmd(t, "check", file)
	require.Equal(t, 0, code)
	require.Contains(t, out, "1 tokens")
	require.Contains(t, out, "payments-api")

	// --max-principals: the entry's max_principals, listed by check.
	code, out, stderr = runTokenCmd(t, "new", "--name", "tenant", "--role", "app", "--principals", "ta_*", "--max-principals", "500")
	require.Equal(t, 0, code, stderr)
	lines = strings.Split(strings.TrimSpace(out), "\n")
	require.Contains(t, lines[len(lines)-1], `"max_principals":500`)
	require.NoError(t, os.WriteFile(file, []byte(`{"tokens":[`+lines[len(lines)-1]+`]}`), 0o600))
	code, out, _ = runTokenCmd(t, "check", file)
	require.Equal(t, 0, code)
	require.Contains(t, out, "max_principals 500")

	// --token-file: the token goes to a new 0600 file, the entry to stdout.
	tf := filepath.Join(dir, "node.token")
	code, out, stderr = runTokenCmd(t, "new", "--name", "nodes", "--role", "admin", "--token-file", tf)
	require.Equal(t, 0, code, stderr)
	b, err := os.ReadFile(tf)
	require.NoError(t, err)
	fi, err := os.Stat(tf)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o600), fi.Mode().Perm())
	require.NoError(t, json.Unmarshal([]byte(out), &e))
	require.Equal(t, api.HashToken(strings.TrimSpace(string(b))), e.SHA256)
	code, _, stderr = runTokenCmd(t, "new", "--name", "nodes", "--role", "admin", "--token-file", tf)
	require.Equal(t, 1, code, "an existing token file is never overwritten")
	require.Contains(t, stderr, "--token-file")

	// hash reads stdin only.
	var hout, herr bytes.Buffer
	require.Equal(t, 0, runTokenHash(nil, strings.NewReader(" s3cret\n"), &hout, &herr))
	require.Equal(t, api.HashToken("s3cret")+"\n", hout.String())
	require.Equal(t, 2, runTokenHash([]string{"s3cret"}, strings.NewReader(""), &hout, &herr))
	require.Contains(t, herr.String(), "stdin")
	herr.Reset()
	require.Equal(t, 2, runTokenHash(nil, strings.NewReader("a\nb\n"), &hout, &herr))
	require.Contains(t, herr.String(), "one line")

	// Mistakes are named by their flag, and nothing is printed as a token.
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"new", "--name", "x", "--role", "app"}, "--principals"},
		{[]string{"new", "--name", "x", "--role", "root"}, "--role"},
		{[]string{"new", "--role", "admin"}, "--name"},
		{[]string{"new", "--name", "x", "--role", "operator", "--principals", "a"}, "--principals"},
		{[]string{"new", "--name", "x", "--role", "app", "--principals", "a*b"}, "'*' may only end"},
	} {
		code, out, stderr := runTokenCmd(t, c.args...)
		require.Equal(t, 2, code, "%v", c.args)
		require.Contains(t, stderr, c.want, "%v", c.args)
		require.Empty(t, out)
	}
	bad := filepath.Join(dir, "bad.json")
	require.NoError(t, os.WriteFile(bad, []byte(`{"tokens":[{"name":"ops","sha256":"abc","role":"operator"}]}`), 0o600))
	code, _, stderr = runTokenCmd(t, "check", bad)
	require.Equal(t, 1, code)
	require.Contains(t, stderr, `tokens[0] ("ops"): sha256 must be 64 hex digits`)
}

// ---- idem serve with an auth file --------------------------------------

// authCall is a request with a bearer token (none when token is "").
func authCall(method, addr, path, token, body string) answer {
	req, err := http.NewRequest(method, "http://"+addr+path, strings.NewReader(body))
	if err != nil {
		return answer{err: err}
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := clusterHTTP.Do(req)
	if err != nil {
		return answer{err: err}
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return answer{code: resp.StatusCode, hdr: resp.Header, body: b, err: err}
}

func entry(name, token, role string, principals ...string) string {
	b, _ := json.Marshal(authEntry{Name: name, SHA256: api.HashToken(token), Role: role, Principals: principals})
	return string(b)
}

func writeAuth(t *testing.T, path string, entries ...string) {
	t.Helper()
	tmp := path + ".tmp"
	require.NoError(t, os.WriteFile(tmp, []byte(`{"tokens":[`+strings.Join(entries, ",")+`]}`), 0o600))
	require.NoError(t, os.Rename(tmp, path))
}

func claimFor(principal, key string) string {
	return fmt.Sprintf(`{"principal":%q,"endpoint":"POST /payments","key":%q,"fingerprint":"aa"}`, principal, key)
}

// A hashed auth file with roles: app tokens act for their principals only,
// pprof is an admin's; SIGHUP swaps the tokens; a file that does not load
// on SIGHUP keeps the old tokens and says why.
func TestServeAuthFileRolesAndReload(t *testing.T) {
	dir := t.TempDir()
	auth := filepath.Join(dir, "auth.json")
	writeAuth(t, auth, entry("deploy", "admin-1", "admin"), entry("oncall", "operator-1", "operator"), entry("payments", "app-1", "app", "cus_a*"))
	httpAddr := freePort(t)
	p := start(t, filepath.Join(dir, "data"), httpAddr, freePort(t), "--auth-file", auth, "--pprof")
	require.Contains(t, waitForLine(t, p.logs, serving), "no --node-token-file", "a node without its own credential says what it cannot do")

	require.Equal(t, 201, authCall("POST", httpAddr, "/v1/claim", "app-1", claimFor("cus_a1", "k1")).code)
	a := authCall("POST", httpAddr, "/v1/claim", "app-1", claimFor("cus_b1", "k1"))
	require.Equal(t, 403, a.code, "%s", a)
	require.Equal(t, "forbidden", a.problemCode())
	require.Equal(t, 201, authCall("POST", httpAddr, "/v1/claim", "operator-1", claimFor("cus_b1", "k1")).code)
	for token, code := range map[string]int{"": 401, "app-1": 403, "operator-1": 403, "admin-1": 200} {
		a := authCall("GET", httpAddr, "/debug/pprof/", token, "")
		require.Equal(t, code, a.code, "pprof with %q: %s", token, a)
	}
	// With --pprof too, an unclean path is the API's 404 problem, not the
	// mux's redirect to the cleaned path.
	for _, p := range []string{"/v1//config", "/debug/pprof/../../v1/config"} {
		a := authCall("GET", httpAddr, p, "admin-1", "")
		require.Equal(t, 404, a.code, "%s: %s", p, a)
		require.Equal(t, "not_found", a.problemCode(), "%s: %s", p, a)
	}

	// Rotate the app token: the new one works once SIGHUP is handled, the
	// old one no longer does.
	writeAuth(t, auth, entry("deploy", "admin-1", "admin"), entry("payments", "app-2", "app", "cus_a*"))
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGHUP))
	waitFor(t, 10*time.Second, "the reloaded token accepted", func() (bool, string) {
		a := authCall("GET", httpAddr, "/v1/records?principal=cus_a1&endpoint=POST%20/payments&key=k1", "app-2", "")
		return a.code == 200, a.String()
	})
	require.Equal(t, 401, authCall("GET", httpAddr, "/v1/records?principal=cus_a1&endpoint=POST%20/payments&key=k1", "app-1", "").code)
	require.Equal(t, 401, authCall("GET", httpAddr, "/v1/config", "operator-1", "").code)
	// Logged after the new tokens are in force: it can come after the
	// answers above.
	waitForLine(t, p.logs, "auth file reloaded")

	// A broken file: refused with the entry named, the tokens stay.
	require.NoError(t, os.WriteFile(auth, []byte(`{"tokens":[{"name":"deploy","sha256":"`+api.HashToken("admin-1")+`","role":"root"}]}`), 0o600))
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGHUP))
	waitFor(t, 10*time.Second, "the bad file reported", func() (bool, string) {
		return strings.Contains(p.logs.String(), "auth file not reloaded"), ""
	})
	require.Contains(t, p.logs.String(), `tokens[0] (\"deploy\"): role \"root\"`)
	require.Equal(t, 200, authCall("GET", httpAddr, "/v1/records?principal=cus_a1&endpoint=POST%20/payments&key=k1", "app-2", "").code)
}

// The old format still works, every token an admin's, with a warning at
// start; the scheme is case-insensitive.
func TestServeOldAuthFileWarns(t *testing.T) {
	dir := t.TempDir()
	auth := filepath.Join(dir, "tokens")
	require.NoError(t, os.WriteFile(auth, []byte("# old\nplain-1\nplain-2\n"), 0o600))
	httpAddr := freePort(t)
	p := start(t, filepath.Join(dir, "data"), httpAddr, freePort(t), "--auth-file", auth)
	logs := waitForLine(t, p.logs, serving) // written after what loading --auth-file says
	require.Contains(t, logs, "old format")
	require.NotContains(t, logs, "no --node-token-file", "the old format's nodes use its first token")
	require.Equal(t, 200, authCall("GET", httpAddr, "/v1/admin/state", "plain-2", "").code)
	req, _ := http.NewRequest("GET", "http://"+httpAddr+"/v1/admin/state", nil)
	req.Header.Set("Authorization", "bearer plain-1")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, 200, resp.StatusCode, "lower-case bearer")
	require.Equal(t, 401, authCall("GET", httpAddr, "/v1/admin/state", "# old", "").code)
}

// A node token that is not an admin of the auth file is refused at start.
// One that is another role's token there is named as such (adding an
// admin entry for it would give the operators' token to the nodes); an
// unknown one names the entry to add (TestNodeTokenRefusalSaysToCheckTheTokenFileFirst).
func TestServeRefusesANodeTokenThatIsNotAdmin(t *testing.T) {
	dir := t.TempDir()
	auth, nodeToken := filepath.Join(dir, "auth.json"), filepath.Join(dir, "node.token")
	writeAuth(t, auth, entry("deploy", "admin-1", "admin"), entry("oncall", "operator-1", "operator"))
	require.NoError(t, os.WriteFile(nodeToken, []byte("operator-1\n"), 0o600))
	out, err := runServeOnce(t, dir, "--auth-file", auth, "--node-token-file", nodeToken)
	require.Error(t, err)
	require.Contains(t, out, "--node-token-file")
	require.Contains(t, out, `its token is the operator token "oncall"`)
	require.Contains(t, out, "idem token new --role admin")
	require.NotContains(t, out, api.HashToken("operator-1"), "advised to make the operators' token an admin's")
	out, err = runServeOnce(t, dir, "--auth-file", auth, "--node-token-file", filepath.Join(dir, "missing"))
	require.Error(t, err)
	require.Contains(t, out, "--node-token-file")
}

func runServeOnce(t *testing.T, dir string, args ...string) (string, error) {
	t.Helper()
	all := append([]string{"serve", "--data-dir", filepath.Join(dir, "data"), "--http-addr", freePort(t), "--raft-addr", freePort(t)}, args...)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, all...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// Three nodes with a hashed auth file: they join, measure each other and
// answer /readyz with their own admin credential (--node-token-file); a
// follower forwards an app's request with the app's token, and refuses
// another tenant's itself. A fourth node without a node token cannot join,
// and its log says what to configure.
func TestClusterWithNodeTokens(t *testing.T) {
	dir := t.TempDir()
	auth, nodeTok := filepath.Join(dir, "auth.json"), filepath.Join(dir, "node.token")
	writeAuth(t, auth, entry("nodes", "node-secret", "admin"), entry("oncall", "operator-1", "operator"), entry("payments", "app-1", "app", "cus_a*"))
	require.NoError(t, os.WriteFile(nodeTok, []byte("node-secret\n"), 0o600))
	common := []string{"--auth-file", auth, "--node-token-file", nodeTok}
	var nodes []*cnode
	for i := 1; i <= 3; i++ {
		ip := fmt.Sprintf("127.0.0.%d", 20+i)
		nodes = append(nodes, &cnode{id: fmt.Sprintf("n%d", i), ip: ip, dir: filepath.Join(dir, fmt.Sprintf("n%d", i)), http: freePortOn(t, ip), raft: freePortOn(t, ip)})
	}
	nodes[0].p = start(t, nodes[0].dir, nodes[0].http, nodes[0].raft, append([]string{"--node-id", "n1"}, common...)...)
	for _, n := range nodes[1:] {
		n.p = launch(t, n.dir, n.http, n.raft, append([]string{"--node-id", n.id, "--join", nodes[0].http}, common...)...)
	}
	waitFor(t, 60*time.Second, "three healthy voters", func() (bool, string) {
		a := authCall("GET", nodes[0].http, "/v1/cluster", "operator-1", "")
		var st raftfsm.Status
		if a.err != nil || a.code != 200 || json.Unmarshal(a.body, &st) != nil {
			return false, a.String()
		}
		voters := 0
		for _, m := range st.Nodes {
			if strings.EqualFold(m.Suffrage, "voter") && m.Healthy {
				voters++
			}
		}
		return voters == 3, a.String()
	})
	for _, n := range nodes {
		waitFor(t, 20*time.Second, n.id+" ready", func() (bool, string) {
			a := authCall("GET", n.http, "/readyz", "", "")
			return a.code == 200, a.String()
		})
	}
	leader := ""
	a := authCall("GET", nodes[0].http, "/v1/cluster", "operator-1", "")
	var st raftfsm.Status
	require.NoError(t, json.Unmarshal(a.body, &st))
	require.NotNil(t, st.Leader)
	leader = st.Leader.ID
	var followers []*cnode
	for _, n := range nodes {
		if n.id != leader {
			followers = append(followers, n)
		}
	}
	var claimed claimedAnswer
	waitFor(t, 20*time.Second, "claim through a follower", func() (bool, string) {
		a := authCall("POST", followers[0].http, "/v1/claim", "app-1", claimFor("cus_a1", "k1"))
		if a.code == 201 {
			require.NoError(t, json.Unmarshal(a.body, &claimed))
		}
		return a.code == 201, a.String()
	})
	require.Regexp(t, `^[0-9]{20}\.[0-9a-f]{32}$`, claimed.Token, "every member knows the cluster secret: tokens carry a MAC")
	body := fmt.Sprintf(`{"principal":"cus_a1","endpoint":"POST /payments","key":"k1","token":%q,"response":{"status":201,"body":""}}`, claimed.Token)
	require.Equal(t, 200, authCall("POST", followers[1].http, "/v1/complete", "app-1", body).code)
	a = authCall("POST", followers[1].http, "/v1/claim", "app-1", claimFor("cus_b1", "k1"))
	require.Equal(t, 403, a.code, "%s", a)
	require.Equal(t, 403, authCall("POST", followers[0].http, "/v1/cluster/transfer-leadership", "operator-1", "").code)

	// A member restarted without its node token still serves clients (a
	// follower forwards with the client's own token), and its /readyz says
	// what it lacks, to an operator (why a node is not ready names its
	// peers and data dir: anyone else reads only that it is not).
	f := followers[1]
	f.stop(t)
	f.p = launch(t, f.dir, f.http, f.raft, "--node-id", f.id, "--auth-file", auth)
	waitFor(t, 20*time.Second, f.id+" serves without a node token", func() (bool, string) {
		a := authCall("POST", f.http, "/v1/claim", "app-1", claimFor("cus_a2", "k2"))
		return a.code == 201, a.String()
	})
	a = authCall("GET", f.http, "/readyz", "operator-1", "")
	require.Equal(t, 503, a.code, "%s", a)
	require.Contains(t, string(a.body), "--node-token-file")
	a = authCall("GET", f.http, "/readyz", "", "")
	require.Equal(t, 503, a.code, "%s", a)
	require.NotContains(t, string(a.body), "--node-token-file")
	require.Contains(t, string(a.body), "operator or admin token")
	waitForLine(t, f.p.logs, "no --node-token-file") // a start line; the claim above says nothing of when it reaches the test

	// Restarted with an auth file and node token of its own that the
	// others' auth files do not list (rolled out to one node only), it
	// logged nothing itself; only the leader's health checks showed it.
	f.stop(t)
	auth2, nodeTok2 := filepath.Join(dir, "auth2.json"), filepath.Join(dir, "node2.token")
	writeAuth(t, auth2, entry("nodes-2", "node-secret-2", "admin"), entry("oncall", "operator-1", "operator"), entry("payments", "app-1", "app", "cus_a*"))
	require.NoError(t, os.WriteFile(nodeTok2, []byte("node-secret-2\n"), 0o600))
	f.p = launch(t, f.dir, f.http, f.raft, "--node-id", f.id, "--auth-file", auth2, "--node-token-file", nodeTok2)
	waitFor(t, 30*time.Second, f.id+" says the others refuse its node token", func() (bool, string) {
		return strings.Contains(f.p.logs.String(), "other members refuse this node's --node-token-file token"), ""
	})
	require.Contains(t, f.p.logs.String(), ": 401)")

	// A fourth node without --node-token-file cannot join.
	ip := "127.0.0.24"
	n4 := launch(t, filepath.Join(dir, "n4"), freePortOn(t, ip), freePortOn(t, ip), "--node-id", "n4", "--join", nodes[0].http, "--auth-file", auth)
	waitFor(t, 20*time.Second, "n4 says why it cannot join", func() (bool, string) {
		logs := n4.logs.String()
		return strings.Contains(logs, "no --node-token-file") && strings.Contains(logs, "join refused") && strings.Contains(logs, "unauthorized"), ""
	})
}

// TestTokenNewMessagesNameTheFlag: a bad `idem token new` printed a second
// problem as a line starting ": an app token needs --principals" (no
// command name) and the first as `("x"): --role "god" ...`, the auth
// file's entry name where the flag should be.
func TestTokenNewMessagesNameTheFlag(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want []string // one line each, in order
	}{
		{[]string{"--name", "x", "--role", "god"}, []string{`--role "god" is not app, operator or admin`}},
		{[]string{"--name", "x"}, []string{"--role is required"}},
		{[]string{"--name", "x", "--role", "app"}, []string{"an app token needs --principals"}},
		{[]string{"--role", "app"}, []string{"--name is required", "an app token needs --principals"}},
		{[]string{"--name", "x", "--role", "admin", "--principals", "a"}, []string{"--principals limit app tokens only", "(remove --principals,"}},
		{[]string{"--name", `x"y`, "--role", "app", "--principals", " "}, []string{"--principals: a principal pattern is empty"}},
		{[]string{"--name", "x", "--role", "app", "--principals", "a*b"}, []string{`--principals: principal pattern "a*b"`}},
		{[]string{"--name", "x", "--role", "operator", "--max-principals", "5"}, []string{"--max-principals bounds the principals an app token's prefix patterns create; an operator token has none (remove --max-principals)"}},
		{[]string{"--name", "x", "--role", "app", "--principals", "cus_*", "--max-principals", "0"}, []string{"--max-principals must be at least 1 (0)"}},
		{[]string{"--name", "x", "--role", "app", "--principals", "alice", "--max-principals", "3"}, []string{"--max-principals bounds the principals of prefix patterns ending in '*', and this token has only exact names"}},
	} {
		code, out, stderr := runTokenCmd(t, append([]string{"new"}, tc.args...)...)
		require.Equal(t, 2, code, "%v: %s", tc.args, stderr)
		require.Empty(t, out, "%v", tc.args)
		lines := strings.Split(strings.TrimSuffix(stderr, "\n"), "\n")
		for _, l := range lines {
			require.True(t, strings.HasPrefix(l, "idem token new: --") || strings.HasPrefix(l, "idem token new: an app token needs --principals"),
				"%v: every line names the command, then the flag:\n%s", tc.args, stderr)
			require.NotContains(t, l, `"):`, "%v: the entry name is not a flag:\n%s", tc.args, stderr)
			require.NotContains(t, l, "tokens[", "%v:\n%s", tc.args, stderr)
		}
		for _, w := range tc.want {
			require.Contains(t, stderr, w, "%v", tc.args)
		}
		if len(tc.want) == 1 {
			require.Len(t, lines, 1, "%v:\n%s", tc.args, stderr)
		}
	}
}

// A node token file readable by others is an admin token for any local
// user, and an auth file writable by others takes any admin entry at the
// next SIGHUP: the node started on either without a word (SECURITY.md asks
// for 0600). Both are named now, as the encryption key file was; 0600
// files say nothing.
func TestLooseSecretFilesAreNamed(t *testing.T) {
	dir := t.TempDir()
	auth, nodeToken := filepath.Join(dir, "auth.json"), filepath.Join(dir, "node.token")
	writeAuth(t, auth, entry("nodes", "admin-1", "admin"))
	require.NoError(t, os.WriteFile(nodeToken, []byte("admin-1\n"), 0o600))
	load := func() string {
		var logs bytes.Buffer
		_, tok, err := loadAuth(&serveConfig{authFile: auth, nodeTokenFile: nodeToken}, slog.New(slog.NewTextHandler(&logs, nil)))
		require.NoError(t, err)
		require.Equal(t, "admin-1", tok)
		return logs.String()
	}
	require.NotContains(t, load(), "by other users", "0600 files")

	require.NoError(t, os.Chmod(nodeToken, 0o644))
	require.NoError(t, os.Chmod(auth, 0o666))
	logs := load()
	require.Contains(t, logs, "--node-token-file is readable by other users")
	require.Contains(t, logs, "--auth-file is readable and writable by other users")
	require.Contains(t, logs, "chmod 600")

	require.NoError(t, os.Chmod(auth, 0o620))
	require.Contains(t, load(), "--auth-file is writable by other users")
}

// Two app tokens whose patterns meet see each other's records there; the
// check passed such a file without a word (cus_* beside cus_b*: the first
// token has all of the second's). It notes each pair now, and still passes:
// two tokens of one service are how a token is rotated.
func TestTokenCheckNotesSharedPrincipals(t *testing.T) {
	file := filepath.Join(t.TempDir(), "auth.json")
	writeAuth(t, file,
		entry("x", "t-x", "app", "cus_*"),
		entry("y", "t-y", "app", "cus_b*", "acme"),
		entry("z", "t-z", "app", "acme"),
		entry("w", "t-w", "app", "other"),
		entry("ops", "t-ops", "operator"))
	code, out, _ := runTokenCmd(t, "check", file)
	require.Equal(t, 0, code)
	require.Contains(t, out, `note: app tokens "x" and "y" may both act for the principals matching "cus_b*"`)
	require.Contains(t, out, `note: app tokens "y" and "z" may both act for the principal "acme"`)
	require.Equal(t, 2, strings.Count(out, "note: app tokens"), out)
	// x (cus_*) and y (cus_b*) have prefixes and no max_principals: either
	// can fill --max-principals for the others.
	require.Contains(t, out, `note: app token "x" has a prefix pattern and no max_principals`)
	require.Contains(t, out, `note: app token "y" has a prefix pattern and no max_principals`)
	require.Equal(t, 4, strings.Count(out, "note:"), out)

	for _, c := range []struct {
		a, b []string
		want string
	}{
		{[]string{"cus_a1"}, []string{"cus_*"}, `the principal "cus_a1"`},
		{[]string{"*"}, []string{"p"}, `the principal "p"`},
		{[]string{"cus_a*"}, []string{"cus_b*"}, ""},
		{[]string{"cus_a"}, []string{"cus_ab*"}, ""},
	} {
		got, ok := sharedPrincipals(c.a, c.b)
		require.Equal(t, c.want != "", ok, "%v %v", c.a, c.b)
		require.Equal(t, c.want, got)
	}
}

// SECURITY.md says to give each app token with a prefix pattern a
// max_principals when services share a cluster: without one, one token can
// fill --max-principals and every other's new principals are refused 429.
// Nothing checked it. The check notes each such token, and the node warns
// at start and on reload, when the file has more than one app token.
func TestPrefixTokensWithoutMaxPrincipalsAreNamed(t *testing.T) {
	dir := t.TempDir()
	shared := filepath.Join(dir, "shared.json")
	writeAuth(t, shared,
		entry("payments", "t-p", "app", "cus_*"),
		entry("refunds", "t-r", "app", "ref_1"),
		entry("ops", "t-ops", "operator"))
	code, out, _ := runTokenCmd(t, "check", shared)
	require.Equal(t, 0, code)
	require.Contains(t, out, `note: app token "payments" has a prefix pattern and no max_principals: it can create principals until the cluster's --max-principals is reached`)
	require.NotContains(t, out, `"refunds" has a prefix`)
	var logs bytes.Buffer
	creds, err := api.LoadAuthFile(shared)
	require.NoError(t, err)
	logAuth(slog.New(slog.NewTextHandler(&logs, nil)), "auth file loaded", shared, creds)
	require.Contains(t, logs.String(), "no max_principals beside other app tokens")
	require.Contains(t, logs.String(), "tokens=payments")

	// Bounded, or the only app token: nothing to say.
	bounded := strings.Replace(entry("payments", "t-p", "app", "cus_*"), `"role":"app"`, `"role":"app","max_principals":1000`, 1)
	for name, entries := range map[string][]string{
		"bounded.json": {bounded, entry("refunds", "t-r", "app", "ref_1")},
		"alone.json":   {entry("payments", "t-p", "app", "cus_*"), entry("ops", "t-ops", "operator")},
	} {
		file := filepath.Join(dir, name)
		writeAuth(t, file, entries...)
		code, out, _ := runTokenCmd(t, "check", file)
		require.Equal(t, 0, code, out)
		require.NotContains(t, out, "no max_principals", "%s: %s", name, out)
		logs.Reset()
		creds, err := api.LoadAuthFile(file)
		require.NoError(t, err)
		logAuth(slog.New(slog.NewTextHandler(&logs, nil)), "auth file loaded", file, creds)
		require.NotContains(t, logs.String(), "max_principals", name)
	}
}

// A node whose --node-token-file the auth file does not take as an admin's
// refuses to start, and the refusal says what to check. With the nodes'
// admin entry in the file, what changed is usually the token file (edited,
// another cluster's): it says to check that first, rather than only to
// add an entry for the token at hand to every node's file. An app token
// there is named as the wrong role.
func TestNodeTokenRefusalSaysToCheckTheTokenFileFirst(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	auth := filepath.Join(dir, "auth.json")
	tokenFile := filepath.Join(dir, "node.token")
	writeAuth(t, auth, entry("nodes", "node-secret-1", "admin"), entry("shop", "app-1", "app", "p"))
	run := func(token string) string {
		require.NoError(t, os.WriteFile(tokenFile, []byte(token+"\n"), 0o600))
		out, code := exited(t, launch(t, filepath.Join(dir, "data"), freePort(t), freePort(t),
			"--auth-file", auth, "--node-token-file", tokenFile))
		require.Equal(t, 2, code, "%s", out) // a value refused, as the --tls-* files
		return out
	}
	out := run("node-secret-1x") // edited by hand
	require.Contains(t, out, `its token is none of --auth-file `+auth+`'s admin tokens ("nodes")`)
	require.Contains(t, out, "Check the token file first")
	require.Contains(t, out, `"sha256":"`+api.HashToken("node-secret-1x")+`"`)

	out = run("app-1")
	require.Contains(t, out, `its token is the app token "shop" of --auth-file`)
	require.Contains(t, out, "not an admin token")

	writeAuth(t, auth, entry("shop", "app-1", "app", "p"))
	out = run("node-secret-1")
	require.Contains(t, out, "which has no admin entry; add the entry")
	require.NoDirExists(t, filepath.Join(dir, "data", "raft"), "a refused start wrote to the data dir")
}

// --node-token-file without --auth-file was taken without a word, as if
// it protected something: the node's own API takes every request without
// a token. It is not refused (peers that run with --auth-file still check
// the token it sends them, as in a rolling restart that turns tokens on),
// but the start says so, naming both flags.
func TestNodeTokenFileWithoutAuthFileIsNamed(t *testing.T) {
	nodeToken := filepath.Join(t.TempDir(), "node.token")
	require.NoError(t, os.WriteFile(nodeToken, []byte("admin-1\n"), 0o600))
	var logs bytes.Buffer
	auth, tok, err := loadAuth(&serveConfig{nodeTokenFile: nodeToken}, slog.New(slog.NewTextHandler(&logs, nil)))
	require.NoError(t, err)
	require.Nil(t, auth)
	require.Equal(t, "admin-1", tok, "the token is still sent to peers")
	require.Contains(t, logs.String(), "--node-token-file without --auth-file")
	require.Contains(t, logs.String(), "takes every request without a token")

	logs.Reset()
	_, _, err = loadAuth(&serveConfig{}, slog.New(slog.NewTextHandler(&logs, nil)))
	require.NoError(t, err)
	require.NotContains(t, logs.String(), "--node-token-file", "no flag, no word")
}

// --node-token-file refused a file with a # comment line ("holds more
// than one line"), which the client commands' --token-file and an
// old-format --auth-file skip, as they skip blank lines. It takes them
// now, and CR LF line ends; a file with no token, or two, is refused,
// naming the flag and the lines. idem token hash reads alike.
func TestNodeTokenFileSkipsCommentsAndBlankLines(t *testing.T) {
	dir := t.TempDir()
	load := func(body string) (string, error) {
		path := filepath.Join(dir, "node.token")
		require.NoError(t, os.WriteFile(path, []byte(body), 0o600))
		_, tok, err := loadAuth(&serveConfig{nodeTokenFile: path}, slog.New(slog.DiscardHandler))
		return tok, err
	}
	for _, body := range []string{
		"admin-1\n",
		"# node token of cluster prod (idem token new --role admin)\nadmin-1\n",
		"\n  # comment\r\n\r\n  admin-1  \r\n\n# trailing comment\n",
		"\ufeffadmin-1",
	} {
		tok, err := load(body)
		require.NoError(t, err, "%q", body)
		require.Equal(t, "admin-1", tok, "%q", body)
	}
	for body, want := range map[string]string{
		"":                         "holds no token",
		"# only a comment\n\n":     "holds no token",
		"admin-1\n# old:\nadmin-2": "holds two tokens (lines 1 and 3)",
		"admin 1\n":                "the token on line 1 contains a blank",
	} {
		_, err := load(body)
		require.Error(t, err, "%q", body)
		require.Contains(t, err.Error(), "--node-token-file "+filepath.Join(dir, "node.token")+": "+want, "%q", body)
	}
	// idem token hash < node.token hashes what the node sends.
	tok, err := readOneToken(strings.NewReader("# comment\r\nadmin-1\r\n"))
	require.NoError(t, err)
	require.Equal(t, "admin-1", tok)
}

// A token file whose lines end in a bare CR (an editor's old Mac line
// ends, or a token pasted after another) was refused as "more than one
// line"; read line by line on LF it became one token with a CR inside,
// which net/http refuses to send in a header: idem token hash printed an
// entry no request could match, and a node started with it failed every
// call to its peers. Such a file is refused again, naming the line.
func TestReadOneTokenRefusesACarriageReturnInsideALine(t *testing.T) {
	for _, body := range []string{"admin-1\radmin-2\n", "admin-1\radmin-2", "adm\x00in-1\n"} {
		_, err := readOneToken(strings.NewReader(body))
		require.Error(t, err, "%q", body)
		require.Contains(t, err.Error(), "the token on line 1 contains a control character", "%q", body)
	}
	tok, err := readOneToken(strings.NewReader("admin-1\r\n"))
	require.NoError(t, err)
	require.Equal(t, "admin-1", tok)
}
