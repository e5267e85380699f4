package main

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/stretchr/testify/require"

	"github.com/idem-store/idem/client"
)

// The attack suite of issue 10 for the transport: real idem serve
// processes with TLS, certificates made by idem tls itself.

// pki is a CA made with `idem tls ca` in its own directory.
type pki struct {
	t   *testing.T
	dir string
}

func newPKI(t *testing.T) *pki {
	t.Helper()
	p := &pki{t: t, dir: t.TempDir()}
	out, err := exec.Command(binary, "tls", "ca", "--dir", p.dir).CombinedOutput()
	require.NoError(t, err, "%s", out)
	return p
}

func (p *pki) ca() string { return filepath.Join(p.dir, "idem-ca.pem") }

// cert makes NAME.pem and NAME-key.pem with `idem tls cert`.
func (p *pki) cert(name string, args ...string) (cert, key string) {
	p.t.Helper()
	out, err := exec.Command(binary, append([]string{"tls", "cert", "--dir", p.dir, "--name", name}, args...)...).CombinedOutput()
	require.NoError(p.t, err, "%s", out)
	return filepath.Join(p.dir, name+".pem"), filepath.Join(p.dir, name+"-key.pem")
}

// serveArgs are the --tls-* flags of node name (its certificate for
// 127.0.0.9, or IDEM_TEST_IP, where freePort puts every test node).
func (p *pki) serveArgs(name string) []string {
	c, k := p.cert(name, "--ip", testIP("127.0.0.9"))
	return []string{"--tls-cert-file", c, "--tls-key-file", k, "--tls-ca-file", p.ca()}
}

// httpsClient trusts the CA and presents cert when given.
func (p *pki) httpsClient(cert, key string) *http.Client {
	p.t.Helper()
	cfg, err := client.LoadTLSConfig(p.ca(), cert, key)
	require.NoError(p.t, err)
	return &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: cfg}}
}

func getJSON(t *testing.T, hc *http.Client, url string, out any) int {
	t.Helper()
	resp, err := hc.Get(url)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if out != nil && resp.StatusCode == http.StatusOK {
		require.NoError(t, json.Unmarshal(b, out), "%s", b)
	}
	return resp.StatusCode
}

func waitReadyTLS(t *testing.T, hc *http.Client, p *proc) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		if resp, err := hc.Get("https://" + p.http + "/readyz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("node on %s never became ready over HTTPS; logs:\n%s", p.http, p.logs)
}

type clusterFacts struct {
	Term   uint64 `json:"term"`
	Leader *struct {
		ID       string `json:"id"`
		RaftAddr string `json:"raft_addr"`
	} `json:"leader"`
	Self struct {
		ID       string `json:"id"`
		RaftAddr string `json:"raft_addr"`
	} `json:"self"`
}

// A TLS cluster of three processes: a rogue raft peer — plain TCP, TLS
// without a certificate, a node certificate from another CA — reaches
// neither the leader nor a follower: every RPC fails, and the term, the
// leader and the records stay as they were. Over HTTPS the API works with
// the CA, not without it, not in plain HTTP, and joining a node needs a
// client certificate from the CA.
func TestTLSClusterRefusesRogueRaftPeer(t *testing.T) {
	t.Parallel()
	ca, other := newPKI(t), newPKI(t)
	hc := ca.httpsClient("", "")
	var nodes []*proc
	var https []string
	for range 3 {
		https = append(https, freePort(t))
	}
	for i, h := range https {
		id := fmt.Sprintf("n%d", i+1)
		args := append([]string{"--node-id", id, "--bootstrap-expect", "3", "--join", strings.Join(https, ",")}, ca.serveArgs(id)...)
		nodes = append(nodes, launch(t, t.TempDir(), h, freePort(t), args...))
	}
	for _, n := range nodes {
		waitReadyTLS(t, hc, n)
	}

	// Clients: plain HTTP and a client without the CA fail, with the CA it works.
	claimArgs := []string{"claim", "--addr", nodes[1].http, "--principal", "p", "--endpoint", "e", "--key", "before", "--fingerprint", "aa", "--lease", "1h"}
	out, err := exec.Command(binary, claimArgs...).CombinedOutput()
	require.Error(t, err, "plain HTTP to a TLS node must fail: %s", out)
	require.Contains(t, string(out), "speaks HTTPS")
	out, err = exec.Command(binary, append(claimArgs[:2:2], append([]string{"https://" + nodes[1].http}, claimArgs[3:]...)...)...).CombinedOutput()
	require.Error(t, err, "a client without the CA must not trust the node: %s", out)
	require.Contains(t, string(out), "certificate signed by unknown authority")
	out, err = exec.Command(binary, append(claimArgs, "--ca-file", ca.ca())...).CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.Contains(t, string(out), `"outcome": "claimed"`)
	resp, err := http.Get("http://" + nodes[0].http + "/v1/records?principal=p&endpoint=e&key=before")
	require.NoError(t, err)
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Equal(t, http.StatusBadRequest, resp.StatusCode)
	require.NotContains(t, string(b), "in_progress", "plain HTTP must not reach the API")

	// Joining a node: refused without a client certificate, let through
	// (to the handler, which refuses the empty id) with one.
	joinBody := `{"id":"","raft_addr":"127.0.0.9:1","http_addr":"127.0.0.9:2"}`
	post := func(c *http.Client) int {
		resp, err := c.Post("https://"+nodes[2].http+"/v1/cluster/join", "application/json", strings.NewReader(joinBody))
		require.NoError(t, err)
		resp.Body.Close()
		return resp.StatusCode
	}
	require.Equal(t, http.StatusForbidden, post(hc))
	require.Equal(t, http.StatusBadRequest, post(ca.httpsClient(ca.cert("ops", "--client"))))

	facts := func() (before []clusterFacts) {
		for _, n := range nodes {
			var f clusterFacts
			require.Equal(t, http.StatusOK, getJSON(t, hc, "https://"+n.http+"/v1/cluster", &f))
			before = append(before, f)
		}
		return before
	}
	before := facts()
	require.NotNil(t, before[0].Leader)

	// Every member's certificate and CA expiry shows in the status, as the
	// leader measured them: cluster status warns of one about to expire
	// (a node with an expired one looks healthy while its connections last).
	waitFor(t, 10*time.Second, "every member's cert_not_after and ca_not_after in the status", func() (bool, string) {
		var st struct {
			Nodes []struct {
				ID           string     `json:"id"`
				CertNotAfter *time.Time `json:"cert_not_after"`
				CANotAfter   *time.Time `json:"ca_not_after"`
			} `json:"nodes"`
		}
		if getJSON(t, hc, "https://"+nodes[1].http+"/v1/cluster", &st) != http.StatusOK || len(st.Nodes) != 3 {
			return false, fmt.Sprintf("%+v", st)
		}
		for _, m := range st.Nodes {
			if m.CertNotAfter == nil || m.CANotAfter == nil || time.Until(*m.CertNotAfter) < 24*time.Hour || m.CANotAfter.Before(*m.CertNotAfter) {
				return false, fmt.Sprintf("%s: %v %v", m.ID, m.CertNotAfter, m.CANotAfter)
			}
		}
		return true, ""
	})
	record := func() map[string]any {
		var rec map[string]any
		require.Equal(t, http.StatusOK, getJSON(t, hc, "https://"+nodes[0].http+"/v1/records?principal=p&endpoint=e&key=before", &rec))
		return rec
	}
	recBefore := record()
	require.Equal(t, "in_progress", recBefore["record"].(map[string]any)["state"], "%v", recBefore)

	// The rogue peers, each against every node.
	rc, rk := other.cert("rogue", "--ip", "127.0.0.9")
	rogueCert, err := tls.LoadX509KeyPair(rc, rk)
	require.NoError(t, err)
	dialers := map[string]func(addr string, timeout time.Duration) (net.Conn, error){
		"plain tcp": func(addr string, timeout time.Duration) (net.Conn, error) {
			return net.DialTimeout("tcp", addr, timeout)
		},
		"tls without a certificate": func(addr string, timeout time.Duration) (net.Conn, error) {
			return tls.DialWithDialer(&net.Dialer{Timeout: timeout}, "tcp", addr, &tls.Config{InsecureSkipVerify: true})
		},
		"node certificate from another CA": func(addr string, timeout time.Duration) (net.Conn, error) {
			return tls.DialWithDialer(&net.Dialer{Timeout: timeout}, "tcp", addr, &tls.Config{InsecureSkipVerify: true, Certificates: []tls.Certificate{rogueCert}})
		},
	}
	for name, dial := range dialers {
		for _, f := range before {
			voteErr, appendErr := rogueRaft(t, dial, f.Self.ID, f.Self.RaftAddr, f.Term+100)
			require.Error(t, voteErr, "%s: %s answered a RequestVote", name, f.Self.ID)
			require.Error(t, appendErr, "%s: %s answered an AppendEntries", name, f.Self.ID)
		}
	}
	time.Sleep(time.Second) // whatever the attacks set off has happened
	after := facts()
	for i := range nodes {
		require.Equal(t, before[i].Term, after[i].Term, "%s: the term moved", before[i].Self.ID)
		require.NotNil(t, after[i].Leader)
		require.Equal(t, before[0].Leader.ID, after[i].Leader.ID, "%s: the leader changed", before[i].Self.ID)
	}
	require.Equal(t, recBefore, record(), "the record claimed before the attacks changed")
	// Logged by the raft listener's goroutine, whenever it gets to it.
	waitForLine(t, nodes[0].logs, "refused a raft connection")
}

// rogueRaft speaks hashicorp/raft's transport to the node at addr as a
// peer claiming leadership with term: a vote request, then an entry.
func rogueRaft(t *testing.T, dial func(string, time.Duration) (net.Conn, error), id, addr string, term uint64) (voteErr, appendErr error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	tr := raft.NewNetworkTransport(&rogueStream{Listener: ln, dial: dial}, 1, 2*time.Second, io.Discard)
	defer tr.Close()
	hdr := raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte("rogue"), Addr: []byte(tr.LocalAddr())}
	var vr raft.RequestVoteResponse
	voteErr = tr.RequestVote(raft.ServerID(id), raft.ServerAddress(addr),
		&raft.RequestVoteRequest{RPCHeader: hdr, Term: term, LastLogIndex: 1 << 40, LastLogTerm: term}, &vr)
	var ar raft.AppendEntriesResponse
	appendErr = tr.AppendEntries(raft.ServerID(id), raft.ServerAddress(addr), &raft.AppendEntriesRequest{
		RPCHeader: hdr, Term: term + 1, LeaderCommitIndex: 1 << 40,
		Entries: []*raft.Log{{Index: 1 << 39, Term: term + 1, Type: raft.LogCommand, Data: []byte("rogue")}},
	}, &ar)
	return voteErr, appendErr
}

type rogueStream struct {
	net.Listener
	dial func(string, time.Duration) (net.Conn, error)
}

func (r *rogueStream) Dial(a raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	return r.dial(string(a), timeout)
}

// A renewed certificate is served after SIGHUP without a restart; a bad
// file on a later SIGHUP keeps the renewed one. With --tls-client-auth
// require, a client without a certificate is refused and one with an
// operator's certificate served.
func TestTLSReloadOnSIGHUPAndRequiredClientCerts(t *testing.T) {
	t.Parallel()
	ca := newPKI(t)
	args := append(ca.serveArgs("n1"), "--tls-client-auth", "require")
	n := launch(t, t.TempDir(), freePort(t), freePort(t), args...)
	ops := ca.httpsClient(ca.cert("ops", "--client"))
	waitReadyTLS(t, ops, n)

	_, err := ca.httpsClient("", "").Get("https://" + n.http + "/healthz")
	require.Error(t, err, "--tls-client-auth require must refuse a client without a certificate")

	served := func() time.Time {
		t.Helper()
		conn, err := tls.Dial("tcp", n.http, ops.Transport.(*http.Transport).TLSClientConfig.Clone())
		require.NoError(t, err)
		defer conn.Close()
		return conn.ConnectionState().PeerCertificates[0].NotAfter
	}
	first := served()
	ca.cert("n1", "--ip", testIP("127.0.0.9"), "--days", "30", "--force")
	require.NoError(t, n.cmd.Process.Signal(syscall.SIGHUP))
	require.Eventually(t, func() bool { return served().Before(first.Add(-24 * time.Hour)) }, 5*time.Second, 50*time.Millisecond,
		"the renewed certificate is not served after SIGHUP; logs:\n%s", n.logs)
	renewed := served()

	require.NoError(t, os.WriteFile(filepath.Join(ca.dir, "n1.pem"), []byte("not a certificate"), 0o600))
	require.NoError(t, n.cmd.Process.Signal(syscall.SIGHUP))
	require.Eventually(t, func() bool { return strings.Contains(n.logs.String(), "TLS reload failed") }, 5*time.Second, 50*time.Millisecond)
	require.Equal(t, renewed, served(), "a bad file replaced the certificate in use")
	require.Equal(t, http.StatusOK, getJSON(t, ops, "https://"+n.http+"/readyz", nil), "the node stopped serving")
}

// Half the TLS flags, a bad --tls-client-auth, files that do not verify,
// and plaintext raft off loopback are refused at start, naming the flag;
// --insecure lets plaintext raft through with a warning.
func TestServeTLSFlagsRefused(t *testing.T) {
	t.Parallel()
	ca, other := newPKI(t), newPKI(t)
	c, k := ca.cert("n1", "--ip", "127.0.0.9")
	oc, ok := other.cert("n1", "--ip", "127.0.0.9")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--tls-cert-file", c}, "--tls-cert-file given without --tls-key-file and --tls-ca-file"},
		{[]string{"--tls-cert-file", c, "--tls-key-file", k}, "without --tls-ca-file"},
		{[]string{"--tls-cert-file", c, "--tls-key-file", k, "--tls-ca-file", ca.ca(), "--tls-client-auth", "maybe"}, "--tls-client-auth \"maybe\" must be request or require"},
		{[]string{"--tls-cert-file", oc, "--tls-key-file", ok, "--tls-ca-file", ca.ca()}, "does not verify against --tls-ca-file"},
		{[]string{"--tls-cert-file", c, "--tls-key-file", ok, "--tls-ca-file", ca.ca()}, "private key does not match"},
		// The CA's key given as the CA (its name is one letter off):
		// named under --tls-cert-file, the node's certificate was blamed.
		{[]string{"--tls-cert-file", c, "--tls-key-file", k, "--tls-ca-file", filepath.Join(ca.dir, "idem-ca-key.pem")}, "idem serve: --tls-ca-file " + filepath.Join(ca.dir, "idem-ca-key.pem") + " holds no PEM certificate"},
		{[]string{"--tls-cert-file", c, "--tls-key-file", k, "--tls-ca-file", filepath.Join(ca.dir, "absent.pem")}, "idem serve: --tls-ca-file: open " + filepath.Join(ca.dir, "absent.pem") + ": no such file or directory"},
		{[]string{"--raft-addr", "0.0.0.0:" + strings.Split(freePort(t), ":")[1], "--raft-advertise", freePort(t)}, "refusing plaintext raft on non-loopback --raft-addr"},
		{[]string{"--raft-advertise", "10.1.2.3:7071"}, "refusing plaintext raft on non-loopback --raft-advertise"},
		{[]string{"--http-addr", "0.0.0.0:" + strings.Split(freePort(t), ":")[1]}, "refusing to listen on non-loopback --http-addr 0.0.0.0:"},
	} {
		args := withFlags([]string{"serve", "--data-dir", t.TempDir(), "--http-addr", freePort(t), "--raft-addr", freePort(t)}, tc.args...)
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		out, err := exec.CommandContext(ctx, binary, args...).CombinedOutput()
		cancel()
		require.Error(t, err, "idem %v must refuse", tc.args)
		require.Contains(t, string(out), tc.want)
		var ee *exec.ExitError
		require.ErrorAs(t, err, &ee)
		require.Equal(t, 2, ee.ExitCode(), "a flag's error exits 2: %v", tc.args)
	}
	p := launch(t, t.TempDir(), freePort(t), "0.0.0.0:"+strings.Split(freePort(t), ":")[1], "--insecure", "--raft-advertise", freePort(t))
	require.Eventually(t, func() bool { return strings.Contains(p.logs.String(), "raft is plaintext and unauthenticated") }, 10*time.Second, 50*time.Millisecond)
}

// The Go client's own transport over HTTPS against a real node that
// requires client certificates: one TLS connection carries claim after
// claim (TLS 1.3 session tickets and all); the node's --idle-timeout
// closing it while idle (close_notify, then FIN) sends the next claim on
// a new connection, never onto the closed one. A client without a
// certificate, or trusting another CA, gets an error that says so.
func TestTLSGoClientReusesConnectionsToANode(t *testing.T) {
	t.Parallel()
	ca := newPKI(t)
	args := append(ca.serveArgs("n1"), "--tls-client-auth", "require", "--idle-timeout", "300ms")
	n := launch(t, t.TempDir(), freePort(t), freePort(t), args...)
	opsCert, opsKey := ca.cert("ops", "--client")
	waitReadyTLS(t, ca.httpsClient(opsCert, opsKey), n)

	// Every connection to the node goes through here, counted.
	ln, err := net.Listen("tcp", testIP("127.0.0.9")+":0") // the node certificate's IP
	require.NoError(t, err)
	t.Cleanup(func() { ln.Close() })
	var conns atomic.Int64
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns.Add(1)
			go func() {
				defer c.Close()
				up, err := net.Dial("tcp", n.http)
				if err != nil {
					return
				}
				defer up.Close()
				go func() { io.Copy(up, c); up.(*net.TCPConn).CloseWrite() }()
				io.Copy(c, up)
			}()
		}
	}()
	addr := "https://" + ln.Addr().String()

	cfg, err := client.LoadTLSConfig(ca.ca(), opsCert, opsKey)
	require.NoError(t, err)
	c, err := client.New(addr, client.WithTLS(cfg))
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	claim := func(key string) {
		t.Helper()
		res, err := c.Claim(ctx, client.ClaimRequest{Principal: "p", Endpoint: "POST /e", Key: key, Fingerprint: "9f86d081"})
		require.NoError(t, err, "claim %s", key)
		require.Equal(t, client.OutcomeClaimed, res.Outcome, "claim %s", key)
	}
	for i := 0; i < 50; i++ {
		claim(fmt.Sprintf("k%d", i))
	}
	require.Equal(t, int64(1), conns.Load(), "50 claims one after the other must share one TLS connection")

	for i := 0; i < 3; i++ {
		time.Sleep(700 * time.Millisecond) // past the node's --idle-timeout: it closes the connection
		claim(fmt.Sprintf("after-idle-%d", i))
	}
	require.Equal(t, int64(4), conns.Load(), "each claim after the node closed the idle connection takes a new one")

	noCert, err := client.LoadTLSConfig(ca.ca(), "", "")
	require.NoError(t, err)
	c2, err := client.New(addr, client.WithTLS(noCert))
	require.NoError(t, err)
	_, err = c2.Claim(ctx, client.ClaimRequest{Principal: "p", Endpoint: "POST /e", Key: "no-cert", Fingerprint: "9f86d081"})
	require.ErrorContains(t, err, "certificate", "a client without a certificate")
	t.Logf("without a client certificate: %v", err)

	otherCA, err := client.LoadTLSConfig(newPKI(t).ca(), opsCert, opsKey)
	require.NoError(t, err)
	c3, err := client.New(addr, client.WithTLS(otherCA))
	require.NoError(t, err)
	_, err = c3.Claim(ctx, client.ClaimRequest{Principal: "p", Endpoint: "POST /e", Key: "other-ca", Fingerprint: "9f86d081"})
	require.ErrorContains(t, err, "certificate signed by unknown authority", "a client trusting another CA")
	t.Logf("trusting another CA: %v", err)
}

// POST /v1/cluster/join with TLS on needs an admin token and a client
// certificate from the CA. The token is checked first, as on every route:
// without one the answer is 401 (it was a 403 about the certificate, an
// about:blank problem sent before authentication, which told a caller with
// no credentials what the node asks of an admin). Without the certificate
// an admin gets idem's forbidden problem naming it.
func TestJoinChecksTheTokenBeforeTheClientCertificate(t *testing.T) {
	t.Parallel()
	ca := newPKI(t)
	dir := t.TempDir()
	auth := filepath.Join(dir, "auth.json")
	writeAuth(t, auth, entry("ops", "admin-1", "admin"), entry("shop", "app-1", "app", "p"))
	n := launch(t, filepath.Join(dir, "data"), freePort(t), freePort(t), append([]string{"--auth-file", auth}, ca.serveArgs("n1")...)...)
	hc := ca.httpsClient("", "")
	waitReadyTLS(t, hc, n)
	withCert := ca.httpsClient(ca.cert("ops", "--client"))

	post := func(c *http.Client, token string) (int, string) {
		req, err := http.NewRequest("POST", "https://"+n.http+"/v1/cluster/join",
			strings.NewReader(`{"id":"","raft_addr":"127.0.0.9:1","http_addr":"127.0.0.9:2"}`))
		require.NoError(t, err)
		req.Header.Set("Content-Type", "application/json")
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := c.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	code, body := post(hc, "")
	require.Equal(t, http.StatusUnauthorized, code, "%s", body)
	require.Contains(t, body, "https://idem.dev/problems/unauthorized")
	require.NotContains(t, body, "certificate", "a caller without a token is told what an admin needs")
	code, body = post(withCert, "")
	require.Equal(t, http.StatusUnauthorized, code, "the certificate alone is no credential: %s", body)
	code, body = post(hc, "app-1")
	require.Equal(t, http.StatusForbidden, code, "%s", body)
	require.Contains(t, body, "it needs an admin token")
	code, body = post(hc, "admin-1")
	require.Equal(t, http.StatusForbidden, code, "%s", body)
	require.Contains(t, body, `"type":"https://idem.dev/problems/forbidden"`)
	require.Contains(t, body, "joining a node needs a client certificate from the cluster's CA")
	// Both: the handler decides (and refuses the empty id).
	code, body = post(withCert, "admin-1")
	require.Equal(t, http.StatusBadRequest, code, "%s", body)
	require.Contains(t, body, "id, raft_addr and http_addr are required")
}

// With --tls-client-auth require, a command without a client certificate
// failed with crypto/tls's "remote error: tls: certificate required",
// naming no flag, and idem bench, every operation failed, printed
// "correctness: ok" and exited 0 (an operator walk). Both name the flags;
// bench exits 1 when nothing was measured.
func TestCommandsWithoutAClientCertificateNameTheFlags(t *testing.T) {
	t.Parallel()
	ca := newPKI(t)
	health := freePort(t)
	n := launch(t, t.TempDir(), freePort(t), freePort(t), append(ca.serveArgs("n1"), "--tls-client-auth", "require", "--health-addr", health)...)
	opsCert, opsKey := ca.cert("ops", "--client")
	waitReadyTLS(t, ca.httpsClient(opsCert, opsKey), n)
	// Probes present no certificate: --health-addr asks for none, or a
	// load balancer would take every node out once require is on.
	require.Equal(t, http.StatusOK, getJSON(t, ca.httpsClient("", ""), "https://"+health+"/readyz", nil))
	_, err := ca.httpsClient("", "").Get("https://" + n.http + "/readyz")
	require.Error(t, err, "the API's own listener requires a certificate")

	out, err := exec.Command(binary, "get", "--addr", n.http, "--ca-file", ca.ca(), "--principal", "p", "--endpoint", "e", "--key", "k").CombinedOutput()
	require.Error(t, err, "%s", out)
	require.Contains(t, string(out), "certificate required")
	require.Contains(t, string(out), "give one from the nodes' CA with --cert-file and --key-file")

	out, err = exec.Command(binary, "bench", "--addr", n.http, "--ca-file", ca.ca(), "--ops", "10", "--concurrency", "2").CombinedOutput()
	require.Error(t, err, "a bench that measured nothing must fail: %s", out)
	require.Equal(t, 1, exitCode(err))
	require.Contains(t, string(out), "the node's /healthz failed")
	require.Contains(t, string(out), "--cert-file and --key-file")
	require.Contains(t, string(out), "nothing was run")
	// The node logs these at debug only; the metric shows who is shut out.
	resp, err := ca.httpsClient(opsCert, opsKey).Get("https://" + n.http + "/metrics")
	require.NoError(t, err)
	metrics, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	m := regexp.MustCompile(`idem_http_tls_handshake_failures_total\{reason="no_client_certificate"\} (\d+)`).FindSubmatch(metrics)
	require.NotNil(t, m, "%s", metrics)
	require.NotEqual(t, "0", string(m[1]), "the refused handshakes are not counted")

	out, err = exec.Command(binary, "bench", "--addr", n.http, "--ca-file", ca.ca(), "--cert-file", opsCert, "--key-file", opsKey, "--ops", "10", "--concurrency", "2").CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.Contains(t, string(out), "correctness: ok")
}
