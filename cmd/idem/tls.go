package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	stdlog "log"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/idem-store/idem/certgen"
	"github.com/idem-store/idem/client"
	"github.com/idem-store/idem/raftfsm"
)

func init() {
	extraCommands["tls"] = command{Run: runTLS, Summary: "make a development CA and node or client certificates for --tls-* flags"}
}

// ---- idem serve: --tls-cert-file, --tls-key-file, --tls-ca-file, --tls-client-auth

// serveTLSFlags are idem serve's TLS flags; loaded is set by load.
type serveTLSFlags struct {
	certFile, keyFile, caFile string
	clientAuth                string
	loaded                    *raftfsm.TLS
	// reloadErr is why the last SIGHUP did not reload the files (with
	// when), nil when it did: GET /v1/config publishes it and idem
	// cluster status warns of it, as of an auth file not reloaded.
	// A pointer, made by load: serveConfig is copied (tests).
	reloadErr *atomic.Pointer[string]
	// plainOnLoopback: load found no TLS and every raft address on
	// loopback, which serve says once its ports are its own.
	plainOnLoopback bool
}

func (f *serveTLSFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.certFile, "tls-cert-file", "", "PEM certificate of this node (idem tls cert): with --tls-key-file and --tls-ca-file, the API is HTTPS, nodes call each other over HTTPS and raft is mutual TLS. Reloaded on SIGHUP")
	fs.StringVar(&f.keyFile, "tls-key-file", "", "PEM private key of --tls-cert-file")
	fs.StringVar(&f.caFile, "tls-ca-file", "", "PEM CA that signed every node's certificate: the only CA whose certificates may speak raft or join")
	fs.StringVar(&f.clientAuth, "tls-client-auth", "request", "client certificates on the API: request (verified against --tls-ca-file when presented; joining a node needs one) or require (every connection must present one)")
}

// validate names the missing flag when only some of the three are given.
func (f *serveTLSFlags) validate() []error {
	var errs []error
	given := map[string]string{"--tls-cert-file": f.certFile, "--tls-key-file": f.keyFile, "--tls-ca-file": f.caFile}
	var have, missing []string
	for _, name := range []string{"--tls-cert-file", "--tls-key-file", "--tls-ca-file"} {
		if given[name] != "" {
			have = append(have, name)
		} else {
			missing = append(missing, name)
		}
	}
	if len(have) > 0 && len(missing) > 0 {
		errs = append(errs, fmt.Errorf("%s given without %s: TLS needs all three of --tls-cert-file, --tls-key-file and --tls-ca-file", strings.Join(have, " and "), strings.Join(missing, " and ")))
	}
	if _, err := clientAuthType(f.clientAuth); err != nil {
		errs = append(errs, err)
	} else if f.clientAuth == "require" && len(have) == 0 {
		// Taken without TLS, it changed nothing: the API was plain HTTP
		// and answered callers without any certificate, while the
		// operator's configuration said every one must present one.
		errs = append(errs, errors.New("--tls-client-auth require without --tls-cert-file, --tls-key-file and --tls-ca-file: the API would be plain HTTP, which asks no caller for a certificate; give the three TLS flags, or leave --tls-client-auth out"))
	}
	return errs
}

func clientAuthType(s string) (tls.ClientAuthType, error) {
	switch s {
	case "request":
		return tls.VerifyClientCertIfGiven, nil
	case "require":
		return tls.RequireAndVerifyClientCert, nil
	}
	return 0, fmt.Errorf("--tls-client-auth %q must be request or require", s)
}

func (f *serveTLSFlags) on() bool { return f.certFile != "" }

// load reads the files (nil without TLS) and checks the raft address:
// raft without TLS is a port anyone who reaches it can take the cluster
// over with (issue 10), so it must be loopback unless --insecure.
func (f *serveTLSFlags) load(c *serveConfig, log *slog.Logger) (*raftfsm.TLS, error) {
	if !f.on() {
		for _, a := range []struct{ flag, addr string }{{"--raft-addr", c.raftAddr}, {"--raft-advertise", c.raftAdvertise}} {
			if a.addr == "" || isLoopback(a.addr) {
				continue
			}
			if !c.insecure {
				return nil, fmt.Errorf("refusing plaintext raft on non-loopback %s %s: anyone who reaches it can send raft messages and rewrite the cluster's state; give --tls-cert-file, --tls-key-file and --tls-ca-file (idem tls --help), or pass --insecure to do it anyway", a.flag, a.addr)
			}
			log.Warn("raft is plaintext and unauthenticated on a non-loopback address (--insecure): anyone who reaches it can rewrite the cluster's state", a.flag[2:], a.addr)
			return nil, nil
		}
		f.plainOnLoopback = true
		return nil, nil
	}
	t, err := raftfsm.LoadTLS(f.certFile, f.keyFile, f.caFile, log, advertisedHosts(c)...)
	if err != nil {
		return nil, tlsFlagError(err)
	}
	f.loaded = t
	f.reloadErr = new(atomic.Pointer[string])
	// As for the other secret files (SECURITY.md): a private key others can
	// read was loaded without a word.
	warnOpenFile(log, "--tls-key-file", f.keyFile, "it is this node's private key: whoever reads it can speak raft to the cluster as this node")
	log.Info("TLS on: the API is HTTPS, nodes call each other over HTTPS, raft is mutual TLS against --tls-ca-file",
		"tls-cert-file", f.certFile, "not-after", t.NotAfter().UTC().Format(time.RFC3339), "tls-client-auth", f.clientAuth)
	warnExpiry(t, log)
	return t, nil
}

// advertisedHosts are the hosts of the addresses other nodes reach this
// one at (its advertised raft and HTTP addresses, else the listen ones),
// which they check its certificate against; an unspecified address
// (0.0.0.0, ::) names no host to check.
func advertisedHosts(c *serveConfig) []string {
	var hosts []string
	for _, pair := range [][2]string{{c.raftAdvertise, c.raftAddr}, {c.httpAdvertise, c.httpAddr}} {
		a := pair[0]
		if a == "" {
			a = pair[1]
		}
		h, _, err := net.SplitHostPort(a)
		if err != nil || h == "" {
			continue
		}
		if ip := net.ParseIP(h); ip != nil && ip.IsUnspecified() {
			continue
		}
		if !slices.Contains(hosts, h) {
			hosts = append(hosts, h)
		}
	}
	return hosts
}

// expiryWarning is how long before a certificate expires the node warns
// (the contrib alert IdemTLSCertExpiresSoon fires at 14 days).
const expiryWarning = 30 * 24 * time.Hour

// expiryCheckEvery is how often a running node checks its certificates'
// expiry, besides at start and on SIGHUP: a node can run for longer than
// its certificate lasts.
const expiryCheckEvery = 24 * time.Hour

// warnExpiry warns when the node's certificate (served on HTTPS and raft)
// or the first of its CAs expires within expiryWarning.
func warnExpiry(t *raftfsm.TLS, log *slog.Logger) {
	_, _, caFile := t.Files()
	switch left := time.Until(t.NotAfter()); {
	case left <= 0:
		log.Error("this node's certificate has expired: other nodes and clients refuse new connections to it; renew it (idem tls cert) and send SIGHUP", "not-after", t.NotAfter().UTC().Format(time.RFC3339))
	case left < expiryWarning:
		log.Warn("this node's certificate expires soon: renew it (idem tls cert) and send SIGHUP", "not-after", t.NotAfter().UTC().Format(time.RFC3339), "hours-left", int(left.Hours()))
	}
	switch left := time.Until(t.CANotAfter()); {
	case left <= 0:
		log.Error("a CA in --tls-ca-file has expired: every certificate it signed is refused now; rotate the CA (docs/SECURITY.md)", "tls-ca-file", caFile, "not-after", t.CANotAfter().UTC().Format(time.RFC3339))
	case left < expiryWarning:
		log.Warn("a CA in --tls-ca-file expires soon: every certificate it signed stops working then; rotate the CA (docs/SECURITY.md)", "tls-ca-file", caFile, "not-after", t.CANotAfter().UTC().Format(time.RFC3339), "hours-left", int(left.Hours()))
	}
}

// watchExpiry runs warnExpiry every period until ctx ends (load has
// already checked once at start), and once more just after the
// certificate or a CA in use expires: a certificate that expired while
// the node ran was said nowhere, while every new connection to the node
// failed (an attack on TLS).
func (f *serveTLSFlags) watchExpiry(ctx context.Context, log *slog.Logger, every time.Duration) {
	if f.loaded == nil {
		return
	}
	go func() {
		for {
			next := every
			for _, at := range []time.Time{f.loaded.NotAfter(), f.loaded.CANotAfter()} {
				if d := time.Until(at); d > 0 && d+time.Second < next {
					next = d + time.Second
				}
			}
			t := time.NewTimer(next)
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C:
				warnExpiry(f.loaded, log)
			}
		}
	}()
}

// listener wraps the API listener in TLS when TLS is on.
func (f *serveTLSFlags) listener(ln net.Listener) net.Listener {
	if f.loaded == nil {
		return ln
	}
	ca, _ := clientAuthType(f.clientAuth)
	return tls.NewListener(ln, f.loaded.ServerConfig(ca))
}

// probeListener is --health-addr's: HTTPS as the API, but it never asks a
// client for a certificate, whatever --tls-client-auth says. It serves only
// /healthz and /readyz, to load balancers and orchestrators that present
// none: with require there, turning it on for the API took every node out
// of its load balancer.
func (f *serveTLSFlags) probeListener(ln net.Listener) net.Listener {
	if f.loaded == nil {
		return ln
	}
	return tls.NewListener(ln, f.loaded.ServerConfig(tls.NoClientCert))
}

// httpsConns are the API's open connections whose client presented a
// certificate. http.Server keeps a keep-alive connection as long as its
// client uses it, so after a CA rotation a client certificate of the old
// CA (a leaked key) would keep the connection it had, and with it what
// the certificate gives (the API under --tls-client-auth require, joins).
// A reload that changes the CAs closes those the new ones do not verify.
type httpsConns struct {
	t    *raftfsm.TLS
	log  *slog.Logger
	mu   sync.Mutex
	live map[*tls.Conn]bool // true: presented a client certificate
}

// trackConns adds to hs.ConnState (the listener's, which it keeps) to
// follow the API's connections (nothing without TLS).
func (f *serveTLSFlags) trackConns(hs *http.Server, log *slog.Logger) (stop func()) {
	if f.loaded == nil {
		return func() {}
	}
	h := &httpsConns{t: f.loaded, log: log, live: map[*tls.Conn]bool{}}
	if prev := hs.ConnState; prev != nil {
		hs.ConnState = func(c net.Conn, st http.ConnState) {
			prev(c, st)
			h.connState(c, st)
		}
	} else {
		hs.ConnState = h.connState
	}
	return f.loaded.OnCAChange(h.cut)
}

func (h *httpsConns) connState(c net.Conn, st http.ConnState) {
	tc, ok := c.(*tls.Conn)
	if !ok {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	switch st {
	case http.StateActive: // a request has begun: the handshake is done
		if _, seen := h.live[tc]; seen {
			return
		}
		certs := tc.ConnectionState().PeerCertificates
		// The handshake may have used the CAs a reload has just replaced
		// (after cut ran): check against those in use now.
		if len(certs) > 0 && !h.t.Trusts(certs) {
			h.log.Warn("closed an HTTPS connection: its client certificate is not trusted by the reloaded --tls-ca-file", "remote-addr", tc.RemoteAddr().String())
			tc.NetConn().Close() // the server's goroutine ends it
			return
		}
		h.live[tc] = len(certs) > 0
	case http.StateClosed, http.StateHijacked:
		delete(h.live, tc)
	}
}

// cut closes the connections whose client certificate the CAs in use do
// not verify.
// It closes the TCP connection under each, at once (a TLS close would
// first send an alert, which can wait on a client that does not read);
// the server's goroutine for the connection then ends it.
func (h *httpsConns) cut() {
	var cut []*tls.Conn
	h.mu.Lock()
	for tc, hasCert := range h.live {
		if hasCert && !h.t.Trusts(tc.ConnectionState().PeerCertificates) {
			delete(h.live, tc)
			cut = append(cut, tc)
		}
	}
	h.mu.Unlock()
	for _, tc := range cut {
		tc.NetConn().Close()
	}
	if len(cut) > 0 {
		h.log.Warn("closed HTTPS connections whose client certificate the reloaded --tls-ca-file no longer trusts", "connections", len(cut))
	}
}

// reload reads the certificate files again (on SIGHUP: reloadOnHUP);
// running listeners and dialers use them from their next handshake. Files
// that do not verify keep the previous ones in use, and the log says why.
func (f *serveTLSFlags) reload(log *slog.Logger) {
	if f.loaded == nil {
		return
	}
	if err := f.loaded.Reload(); err != nil {
		log.Error("TLS reload failed: keeping the certificates in use", "error", err)
		why := time.Now().UTC().Format(time.RFC3339) + ": " + strings.ReplaceAll(err.Error(), "raftfsm: ", "")
		f.reloadErr.Store(&why)
		return
	}
	f.reloadErr.Store(nil)
	log.Info("TLS certificates reloaded", "not-after", f.loaded.NotAfter().UTC().Format(time.RFC3339))
	warnExpiry(f.loaded, log)
}

// reloadError is why the last SIGHUP did not reload the TLS files, "" when
// it did (or none came).
func (f *serveTLSFlags) reloadError() string {
	if f.reloadErr == nil {
		return ""
	}
	if p := f.reloadErr.Load(); p != nil {
		return *p
	}
	return ""
}

// scheme is the scheme of calls between nodes.
func (f *serveTLSFlags) scheme() string {
	if f.loaded != nil {
		return "https"
	}
	return "http"
}

// httpClient is a client for calls between nodes (join, bootstrap). It
// never goes through HTTP_PROXY, with or without TLS, as no other call
// between nodes does: these calls carry the node token, an admin token,
// which a proxy of the environment (set machine-wide, for the egress of
// other programs) would otherwise receive in plaintext on every join.
func (f *serveTLSFlags) httpClient(timeout time.Duration) *http.Client {
	d := &net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}
	tr := &http.Transport{
		Proxy: nil, DialContext: d.DialContext,
		MaxIdleConnsPerHost: 2, IdleConnTimeout: 90 * time.Second,
	}
	if f.loaded != nil {
		tr.DialTLSContext = f.loaded.DialTLSContext(d)
	}
	return &http.Client{Timeout: timeout, Transport: tr}
}

// httpErrorLog gives net/http's own messages to the node's logger: a
// failed TLS handshake (a port scanner, a load balancer's TCP check, a
// client without the CA) at debug, since anyone can cause one; the rest,
// rare, as warnings.
func httpErrorLog(log *slog.Logger, failed *prometheus.CounterVec) *stdlog.Logger {
	return stdlog.New(httpLogWriter{log, failed}, "", 0)
}

type httpLogWriter struct {
	log *slog.Logger
	// failed counts the failed handshakes by handshakeReason: the log has
	// them at debug only, and an operator turning --tls-client-auth
	// require on must see the clients it shuts out.
	failed *prometheus.CounterVec
}

// handshakeReason sorts a failed handshake by net/http's message.
func handshakeReason(msg string) string {
	switch {
	case strings.Contains(msg, "didn't provide a certificate"):
		return "no_client_certificate"
	case strings.Contains(msg, "failed to verify certificate"), strings.Contains(msg, "client certificate"):
		return "client_certificate_refused"
	case strings.Contains(msg, "remote error: tls: unknown certificate authority"), strings.Contains(msg, "remote error: tls: bad certificate"):
		return "client_refused_ours"
	}
	return "other"
}

func (w httpLogWriter) Write(p []byte) (int, error) {
	msg := strings.TrimSpace(strings.TrimPrefix(string(p), "http: "))
	if strings.Contains(msg, "TLS handshake error") {
		w.log.Debug("tls handshake failed", "detail", msg)
		if w.failed != nil {
			w.failed.WithLabelValues(handshakeReason(msg)).Inc()
		}
	} else {
		w.log.Warn("http server", "detail", msg)
	}
	return len(p), nil
}

// ---- clients: --ca-file, --cert-file, --key-file

// clientTLSFlags are the TLS flags of every command that calls a node.
type clientTLSFlags struct {
	caFile, certFile, keyFile string
	fs                        *flag.FlagSet // says which flags their IDEM_* variable set
}

// addrFlag is the command's flag of node addresses (--addr, or the proxy's
// --store), which --ca-file turns to https:// by default.
func addClientTLSFlags(fs *flag.FlagSet, addrFlag string) *clientTLSFlags {
	f := &clientTLSFlags{fs: fs}
	fs.StringVar(&f.caFile, "ca-file", os.Getenv("IDEM_CA_FILE"), "PEM CA to verify the nodes' certificates with (their --tls-ca-file); with it --"+addrFlag+" defaults to https:// (env IDEM_CA_FILE)")
	fs.StringVar(&f.certFile, "cert-file", os.Getenv("IDEM_CERT_FILE"), "PEM client certificate, for nodes that ask for one (--tls-client-auth require, or joining a node) (env IDEM_CERT_FILE)")
	fs.StringVar(&f.keyFile, "key-file", os.Getenv("IDEM_KEY_FILE"), "PEM private key of --cert-file (env IDEM_KEY_FILE)")
	return f
}

// config is the TLS configuration the flags ask for: nil when none is
// given (https:// in --addr then verifies against the system's CAs).
func (f *clientTLSFlags) config() (*tls.Config, error) {
	if f.caFile == "" && f.certFile == "" && f.keyFile == "" {
		return nil, nil
	}
	cfg, err := client.LoadTLSConfig(f.caFile, f.certFile, f.keyFile)
	if err != nil {
		// IDEM_CA_FILE=/nonexistent said "--ca-file: open /nonexistent",
		// a flag the command line did not hold.
		return nil, errors.New(withVariables(strings.TrimPrefix(err.Error(), "client: "), variablesUsed(f.fs, clientVariables)))
	}
	return cfg, nil
}

// options are the client options of the flags.
func (f *clientTLSFlags) options() ([]client.Option, error) {
	cfg, err := f.config()
	if err != nil || cfg == nil {
		return nil, err
	}
	return []client.Option{client.WithTLS(cfg)}, nil
}

// ---- idem tls ca | cert

const tlsUsage = `Usage: idem tls ca   [flags]   make a development CA
       idem tls cert [flags]   make a node (or --client) certificate signed by it

A CA and certificates for idem serve's --tls-* flags, as 'consul tls' makes
them: ECDSA P-256, PEM, every file mode 0600, existing files never replaced
without --force. Keep idem-ca-key.pem off the nodes: whoever holds it can
make certificates that speak raft to the cluster.

  idem tls ca --dir certs
  idem tls cert --dir certs --name n1 --ip 10.0.0.1 --dns n1.example.com
  idem tls cert --dir certs --name ops --client

A node certificate must name, as --ip or --dns, every address other nodes
and clients use to reach it (its --raft-advertise and --http-advertise).
`

func runTLS(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "--help" || args[0] == "-h" || args[0] == "help" {
		w := stderr
		if len(args) > 0 {
			w = stdout
		}
		fmt.Fprint(w, tlsUsage)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	switch args[0] {
	case "ca":
		return runTLSCA(args[1:], stdout, stderr)
	case "cert":
		return runTLSCert(args[1:], stdout, stderr)
	}
	fmt.Fprintf(stderr, "idem tls: unknown subcommand %q: ca or cert (see idem tls --help)\n", args[0])
	return 2
}

func runTLSCA(args []string, stdout, stderr io.Writer) int {
	const name = "idem tls ca"
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	dir := fs.String("dir", ".", "directory to write idem-ca.pem and idem-ca-key.pem to (created if missing)")
	cn := fs.String("name", "idem development CA", "common name of the CA")
	days := fs.Int("days", int(certgen.DefaultCALifetime/(24*time.Hour)), "days the CA is valid")
	force := fs.Bool("force", false, "replace existing files (every certificate the old CA signed stops being trusted)")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), "Usage: idem tls ca [flags]\n\nMakes a development CA: idem-ca.pem (give it to nodes as --tls-ca-file and to\nclients as --ca-file) and idem-ca-key.pem (keep it off the nodes).\n\nFlags:\n")
		printFlags(fs.Output(), fs)
	}
	if code, done := parseArgs(fs, args, name, stdout, stderr); done {
		return code
	}
	if *days < 1 {
		fmt.Fprintf(stderr, "%s: --days %d must be at least 1\n", name, *days)
		return 2
	}
	if err := os.MkdirAll(*dir, 0o700); err != nil {
		fmt.Fprintf(stderr, "%s: --dir: %v\n", name, err)
		return 1
	}
	if !*force {
		// "pass --force to replace it" alone led an operator who ran the
		// command again to replace the CA the nodes trust: no certificate
		// the new one signs is accepted until every node and client has it.
		for _, f := range []string{"idem-ca.pem", "idem-ca-key.pem"} {
			if _, err := os.Lstat(filepath.Join(*dir, f)); err == nil {
				fmt.Fprintf(stderr, "%s: %s exists, nothing was written: it may be the CA the nodes trust. To make a certificate with it: idem tls cert --dir %s. "+
					"--force replaces it, and no node or client then accepts a certificate the new CA signs until it is given the new idem-ca.pem; to rotate a cluster's CA make the new one in another --dir (docs/SECURITY.md, \"Rotate the CA\")\n",
					name, filepath.Join(*dir, f), *dir)
				return 1
			}
		}
	}
	ca, err := certgen.NewCA(*cn, time.Duration(*days)*24*time.Hour)
	if err == nil {
		err = ca.WriteFiles(filepath.Join(*dir, "idem-ca.pem"), filepath.Join(*dir, "idem-ca-key.pem"), *force)
	}
	if err != nil {
		fmt.Fprintf(stderr, "%s: %s\n", name, strings.TrimPrefix(err.Error(), "raftfsm: "))
		return 1
	}
	fmt.Fprintf(stdout, "wrote %s and %s (valid %d days)\n", filepath.Join(*dir, "idem-ca.pem"), filepath.Join(*dir, "idem-ca-key.pem"), *days)
	return 0
}

func runTLSCert(args []string, stdout, stderr io.Writer) int {
	const name = "idem tls cert"
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	dir := fs.String("dir", ".", "directory to write NAME.pem and NAME-key.pem to, where --ca and --ca-key are looked for by default")
	cn := fs.String("name", "", "name of the holder (node id, or operator): the common name and the file names (required)")
	ips := fs.String("ip", "", "comma-separated IP addresses the certificate is valid for (the node's raft and HTTP addresses)")
	dns := fs.String("dns", "", "comma-separated DNS names the certificate is valid for")
	clientOnly := fs.Bool("client", false, "a client certificate (operator, application): reaches an API that asks for one, never the raft port")
	caFile := fs.String("ca", "", "CA certificate (default DIR/idem-ca.pem)")
	caKey := fs.String("ca-key", "", "CA private key (default DIR/idem-ca-key.pem)")
	days := fs.Int("days", int(certgen.DefaultCertLifetime/(24*time.Hour)), "days the certificate is valid (at most the CA's remaining life)")
	force := fs.Bool("force", false, "replace existing files (renewal: then send SIGHUP to the node)")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), "Usage: idem tls cert --name NAME [flags]\n\nMakes a certificate signed by the CA of idem tls ca: for a node (server and\nclient use; give it as --tls-cert-file and --tls-key-file) or, with --client,\nfor an operator or application (--cert-file and --key-file).\nWithout --ip and --dns a node certificate is valid for 127.0.0.1 and localhost.\n\nFlags:\n")
		printFlags(fs.Output(), fs)
	}
	if code, done := parseArgs(fs, args, name, stdout, stderr); done {
		return code
	}
	var problems []string
	if *cn == "" {
		problems = append(problems, "--name is required")
	} else if !nodeIDPattern.MatchString(*cn) {
		problems = append(problems, fmt.Sprintf("--name %q must be 1-64 letters, digits, '.', '_' or '-' (it names the files)", *cn))
	}
	var ipList []net.IP
	for _, s := range splitList(*ips) {
		ip := net.ParseIP(s)
		if ip == nil {
			if h, _, err := net.SplitHostPort(s); err == nil && net.ParseIP(h) != nil {
				problems = append(problems, fmt.Sprintf("--ip %q is not an IP address: give the address alone, without a port or brackets (--ip %s)", s, h))
			} else if t := strings.TrimSuffix(strings.TrimPrefix(s, "["), "]"); t != s && net.ParseIP(t) != nil {
				problems = append(problems, fmt.Sprintf("--ip %q is not an IP address: give it without brackets (--ip %s)", s, t))
			} else {
				problems = append(problems, fmt.Sprintf("--ip %q is not an IP address", s))
			}
			continue
		}
		ipList = append(ipList, ip)
	}
	dnsList := splitList(*dns)
	for _, d := range dnsList {
		if net.ParseIP(d) != nil || strings.ContainsAny(d, " /:") {
			problems = append(problems, fmt.Sprintf("--dns %q is not a DNS name (IPs go in --ip)", d))
		}
	}
	if *days < 1 {
		problems = append(problems, fmt.Sprintf("--days %d must be at least 1", *days))
	}
	if len(problems) > 0 {
		for _, p := range problems {
			fmt.Fprintf(stderr, "%s: %s\n", name, p)
		}
		return 2
	}
	if *caFile == "" {
		*caFile = filepath.Join(*dir, "idem-ca.pem")
	}
	if *caKey == "" {
		*caKey = filepath.Join(*dir, "idem-ca-key.pem")
	}
	ca, err := certgen.ReadPEMPair(*caFile, *caKey)
	if err != nil {
		// Not "make a CA with idem tls ca" alone: an operator renewing a
		// node's certificate from another directory than the CA's (the
		// renewal line of docs/SECURITY.md had no --dir) was told to make
		// a new CA, whose certificates no node of the cluster accepts.
		hint := "make a CA with idem tls ca"
		if errors.Is(err, os.ErrNotExist) {
			hint = "give --dir, the directory idem tls ca wrote the cluster's CA to, or --ca and --ca-key; to renew or add a certificate use the CA the nodes trust: one from a new idem tls ca is accepted by no node of an existing cluster"
		}
		fmt.Fprintf(stderr, "%s: --ca/--ca-key: %s (%s)\n", name, strings.TrimPrefix(err.Error(), "raftfsm: "), hint)
		return 1
	}
	if !*clientOnly && len(ipList) == 0 && len(dnsList) == 0 {
		ipList, dnsList = []net.IP{net.IPv4(127, 0, 0, 1)}, []string{"localhost"}
		fmt.Fprintf(stderr, "%s: no --ip or --dns: the certificate is valid for 127.0.0.1 and localhost only\n", name)
	}
	pair, err := certgen.NewCert(ca, certgen.CertRequest{
		CommonName: *cn, IPs: ipList, DNSNames: dnsList, Client: *clientOnly, Lifetime: time.Duration(*days) * 24 * time.Hour,
	})
	certFile, keyFile := filepath.Join(*dir, *cn+".pem"), filepath.Join(*dir, *cn+"-key.pem")
	if err == nil {
		err = pair.WriteFiles(certFile, keyFile, *force)
	}
	if err != nil {
		fmt.Fprintf(stderr, "%s: %s\n", name, strings.TrimPrefix(err.Error(), "raftfsm: "))
		return 1
	}
	kind := "node certificate (server and client use)"
	if *clientOnly {
		kind = "client certificate"
	}
	var sans []string
	for _, ip := range ipList {
		sans = append(sans, ip.String())
	}
	sans = append(sans, dnsList...)
	fmt.Fprintf(stdout, "wrote %s and %s: %s for %s", certFile, keyFile, kind, *cn)
	if len(sans) > 0 {
		fmt.Fprintf(stdout, ", valid for %s", strings.Join(sans, ", "))
	}
	fmt.Fprintln(stdout)
	return 0
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// tlsFlagError names the flag of a file LoadTLS refused: --tls-ca-file
// for the CA file, --tls-cert-file otherwise (a certificate, or a
// certificate and its key, each file named). Every error said
// --tls-cert-file, so a CA file that held no certificate (the CA's key
// given as --tls-ca-file) was reported under the node certificate's flag.
func tlsFlagError(err error) error {
	msg := strings.TrimPrefix(err.Error(), "raftfsm: tls: ")
	if rest, ok := strings.CutPrefix(msg, "CA file"); ok {
		if r, colon := strings.CutPrefix(rest, ":"); colon {
			return fmt.Errorf("--tls-ca-file:%s", r)
		}
		return fmt.Errorf("--tls-ca-file%s", rest)
	}
	return fmt.Errorf("--tls-cert-file: %s", msg)
}
